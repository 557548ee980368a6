"""Pytrees that flow through a compiled round.

Everything a round needs is an array inside one of these `flax.struct`
dataclasses, so a round is a pure function `ServerState -> ServerState` that
`jax.jit`, `lax.scan` and orbax handle without special cases.
"""
from typing import Any

import flax
import jax

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
      from `fold_in(key, r)`, so resumed and uninterrupted runs agree.
    extras: algorithm-specific state (e.g. per-client memories), or None.
  """
  params: PyTree
  opt_state: PyTree
  round: jax.Array
  key: jax.Array
  extras: PyTree = None


@flax.struct.dataclass
class ClientPlan:
  """What one client does this round; batched plans carry a leading cohort axis.

  Heterogeneity is data (DESIGN.md principle 4): every per-client choice the
  papers vary is an array here, fed to the same compiled client update.

  Attributes:
    client_id: int32, index into the federated data.
    key: PRNG key of this client in this round.
    num_steps: int32, local optimiser steps to run (<= the static maximum);
      finished clients are frozen with `jnp.where`.
    lr: float32 client learning rate.
    weight: float32 aggregation weight (0 drops the client's update, e.g. a
      failed upload).
    segment: int32 aggregation segment in [0, num_segments) (0 for a single
      global average; capacity group or cell otherwise). An id outside that
      range is dropped from the aggregate, as `jax.ops.segment_sum` does.
    mask: pytree like the params with 0/1 entries selecting the client's
      submodel, or None for the full model.
    extras: algorithm-specific per-client inputs (e.g. FIARSE's threshold).
  """
  client_id: jax.Array
  key: jax.Array
  num_steps: jax.Array
  lr: jax.Array
  weight: jax.Array
  segment: jax.Array
  mask: PyTree = None
  extras: PyTree = None


@flax.struct.dataclass
class ClientOutput:
  """Result of one client's local training.

  Attributes:
    delta: x_global − x_local (the pseudo-gradient), zero outside the mask.
    loss: mean training loss over the steps the client ran.
    num_examples: number of examples processed (steps × batch size).
    extras: algorithm-specific per-client outputs, or None.
  """
  delta: PyTree
  loss: jax.Array
  num_examples: jax.Array
  extras: PyTree = None


@flax.struct.dataclass
class StepContext:
  """What a local step knows beyond its batch; the fifth argument of losses.

  Attributes:
    global_params: the round's global parameters x̃ (e.g. FedProx's proximal
      term, self-distillation from the global model).
    step: int32 scalar, index of the local step (0-based).
    key: PRNG key of this step, independent of the minibatch draw (e.g.
      FjORD's per-step width, dropout).
  """
  global_params: PyTree
  step: jax.Array
  key: jax.Array
