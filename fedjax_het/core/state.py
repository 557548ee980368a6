"""Pytrees that flow through a compiled round.

Everything a round needs is an array inside one of these `flax.struct`
dataclasses, so a round is a pure function `ServerState -> ServerState` that
`jax.jit`, `lax.scan` and orbax handle without special cases.
"""
from typing import Any

import flax
import jax
import jax.numpy as jnp

from fedjax_het.core import key_streams

PyTree = Any


@flax.struct.dataclass
class ServerState:
  """The global state of a federated run.

  Attributes:
    params: global model parameters x̃ (a pytree of arrays).
    opt_state: state of the server optimiser (optax), applied to the
      aggregated pseudo-gradient.
    round: int32 scalar, number of finished rounds.
    key: root PRNG key (raw uint32[2]); every random draw of round r derives
      from `round_key(state)` = `fold_in(key, r)`, so resumed and
      uninterrupted runs agree.
    extras: algorithm-specific server state that is not per client, or None.
    clients: per-client persistent state, leaves [num_clients, ...] (e.g.
      FedVarp's memory of updates, FedAU's participation intervals, Markov
      link states, Co-S²P's mask logits), or None. The round gathers the
      cohort's rows into the local phase and scatters the rows the clients
      return back (`core.client_state`); checkpointed like the rest.
  """
  params: PyTree
  opt_state: PyTree
  round: jax.Array
  key: jax.Array
  extras: PyTree = None
  clients: PyTree = None


def round_key(state: ServerState,
              stream: key_streams.Stream | None = None) -> jax.Array:
  """Key of round `state.round`, or of one named `stream` of its draws.

  Every random draw of a round derives from `fold_in(state.key, round)`; an
  algorithm's independent streams (systems draws, partitions, channel noise)
  are named streams of it (`core.key_streams`, parent `round`).
  """
  key = jax.random.fold_in(state.key, state.round)
  return key if stream is None else key_streams.fold(key, stream)


@flax.struct.dataclass
class ClientPlan:
  """What one client does this round; batched plans carry a leading cohort axis.

  Heterogeneity is data (docs/design.md, principle 4): every per-client choice the
  papers vary is an array here, fed to the same compiled client update.

  Attributes:
    client_id: int32, index into the federated data.
    key: PRNG key of this client in this round.
    num_steps: int32, local optimiser steps to run (<= the static maximum);
      finished clients are frozen with `jnp.where`.
    lr: float32 client learning rate.
    weight: float32 aggregation weight (0 drops the client's update, e.g. a
      failed upload).
    group: int32 aggregation group in [0, num_segments): the client's segment
      id in the segment sums, its capacity level or cell (0 for a single
      global average). An id outside that
      range is dropped from the aggregate, as `jax.ops.segment_sum` does.
    mask: pytree like the params with 0/1 entries selecting the client's
      submodel, or None for the full model (or for masks in `mask_table`).
    extras: algorithm-specific per-client inputs (e.g. FIARSE's threshold).
    active: bool, or None for active; an idle slot (False) runs no step,
      contributes nothing to the aggregate and leaves its client's
      persistent state unchanged (e.g. a semi-asynchronous round's slot that
      nobody is dispatched to).
    start_model: int32 row of the round's table of start models the client
      trains from (`FederatedAlgorithm.start_models`: HIST's edge models,
      stale global versions), or None: the global model.
    mask_table: the round's distinct submodel masks, leaves [T, ...] (one
      per capacity level, one per HIST cell), shared by the cohort, not per
      client; or None. The client driver gives every client the table as a
      shared input and each client takes its row inside the client map, so
      the cohort's [K, ...] masks are never gathered (`client_masks`
      gathers them for code that needs them stacked).
    mask_row: int32 row of `mask_table` holding the client's mask (with
      `mask_table`; `mask` is then None).
    parts: the parts' per-client inputs, {part name: PyTree} (e.g. DP's
      clip norm of the round, `parts.dp`), or None.
  """
  client_id: jax.Array
  key: jax.Array
  num_steps: jax.Array
  lr: jax.Array
  weight: jax.Array
  group: jax.Array
  mask: PyTree = None
  extras: PyTree = None
  active: jax.Array | None = None
  start_model: jax.Array | None = None
  mask_table: PyTree = None
  mask_row: jax.Array | None = None
  parts: PyTree = None

  def client_masks(self) -> PyTree:
    """The clients' masks, [K, ...] leaves for batched plans: `mask`, or
    their rows of `mask_table` (None: the full model)."""
    if self.mask_table is None:
      return self.mask
    return jax.tree.map(lambda t: t[self.mask_row], self.mask_table)

  def with_row_mask(self, mask_table: PyTree) -> 'ClientPlan':
    """One client's plan with `mask` its row of `mask_table` (the table
    `run_clients` shares with every client; None: unchanged)."""
    if mask_table is None:
      return self
    return self.replace(mask=self.replace(mask_table=mask_table).client_masks())

  def cohort_axes(self) -> 'ClientPlan':
    """`jax.vmap`'s `in_axes` for these batched plans: axis 0 of every
    per-client field, none of the shared `mask_table` (whose leading axis
    is its rows, not the cohort; each client takes its row in the map):

        jax.vmap(algorithm.client_update, in_axes=(None, plans.cohort_axes(), None))
    """
    return jax.tree.map(lambda _: 0, self).replace(mask_table=None)

  def is_active(self) -> jax.Array:
    """`active` as a bool array (True where it is None), shaped like `weight`."""
    if self.active is None:
      return jnp.ones(jnp.shape(self.weight), bool)
    return self.active

  def active_weight(self) -> jax.Array:
    """The aggregation weight, 0 on idle slots."""
    return jnp.where(self.is_active(), self.weight, 0.0)

  def delivers(self) -> jax.Array:
    """bool, shaped like `weight`: whether the slot's uploads reach the
    server (active, with a weight the systems part's link outcome left > 0)."""
    return self.active_weight() > 0


@flax.struct.dataclass
class ClientOutput:
  """Result of one client's local training.

  Attributes:
    delta: x_start − x_local (the pseudo-gradient), zero outside the mask;
      None in a cohort's outputs whose deltas were summed in the client map.
    loss: mean training loss over the steps the client ran.
    num_examples: number of examples processed (Σ steps × batch size).
    extras: algorithm-specific per-client outputs, or None.
    emitted: the step outputs a program keeps (every `emit_every`-th step,
      e.g. CSE-FSL's smashed data), leaves [steps // emit_every, ...], or
      None.
    emitted_active: bool [steps // emit_every]: whether the step that
      emitted each output ran (a client with fewer steps emits less).
    client_state: the client's persistent state after the round (a row of
      `ServerState.clients`), or None.
    delta_sums: (numerator, denominator) of the cohort's masked, weighted
      segment sums of the deltas (`aggregation.segment_sums`, [S, ...]
      leaves), when a method sums them inside the client map
      (`FederatedAlgorithm.sums_deltas_in_map`); else None.
    parts: what the parts record of the client's upload, {part name:
      PyTree} (`core.parts.Part.upload`: DP's update norm), or None.
  """
  delta: PyTree
  loss: jax.Array
  num_examples: jax.Array
  extras: PyTree = None
  emitted: PyTree = None
  emitted_active: jax.Array | None = None
  client_state: PyTree = None
  delta_sums: PyTree = None
  parts: PyTree = None


@flax.struct.dataclass
class StepContext:
  """What a local step knows beyond its batch; the fifth argument of losses.

  Attributes:
    global_params: the parameters the client started this phase from: the
      round's global model x̃, or its row of the start-model table (e.g.
      FedProx's proximal term, self-distillation from the global model).
    step: int32 scalar, index of the local step in its phase (0-based).
    key: PRNG key of this step, independent of the minibatch draw (e.g.
      FjORD's per-step width, dropout).
    client_state: the client's persistent state at the start of the phase
      (read-only here; a program trains it through `trainable`), or None.
  """
  global_params: PyTree
  step: jax.Array
  key: jax.Array
  client_state: PyTree = None
