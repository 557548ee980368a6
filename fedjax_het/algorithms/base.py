"""The base of every federated method: a bundle of pure functions on the engine.

A method subclasses `FederatedAlgorithm` and overrides only what it changes:

- `sample_clients(state, key)`: who takes part (default: K clients uniformly
  without replacement, or K draws with replacement ∝ examples held).
- `plan_clients(state, client_ids, keys)`: per-client arrays — steps, lr,
  weight, segment, mask (default: full model, config's steps and lr, weights by
  `aggregation_weights`).
- `forward_params(params, plan, ctx)`: the parameters the client's forward
  pass sees at a local step (default: the params times the plan's mask, i.e.
  the submodel).
- `loss(params, x, y, plan, ctx)`: the local objective of a batch (default:
  cross-entropy of the forward with `forward_params`).
- `aggregate(state, plans, outputs)`: the new global parameters (default: the
  masked weighted mean of the deltas as the server optimiser's
  pseudo-gradient).

The round compiler (`fedjax_het.core.rounds`) calls `plan_round`,
`client_update` and `finish_round`; all are pure and jit-able. The federated
data (`FederatedData`) is passed to them as an argument on every call; the
algorithm only reads static facts (sizes, counts) from the data it is built
with.
"""
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import optax

from fedjax_het import eval as eval_lib
from fedjax_het.data import augment
from fedjax_het.core import aggregation, client, sampling
from fedjax_het.core.state import (ClientOutput, ClientPlan, ServerState,
                                   StepContext)

PyTree = Any


def payload_bytes(params: PyTree) -> jax.Array:
  """Bytes of the full model a client exchanges: Σ_leaves size · itemsize."""
  total = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params))
  return jnp.asarray(total, jnp.float32)


def payload_bytes_per_client(params: PyTree, masks: PyTree) -> jax.Array:
  """Bytes of each client's submodel: float [C], Σ_leaves |mask_c| · itemsize.

  Counts with one matrix-vector product per leaf ([C, size] @ 1 -> [C],
  exact in float32 below 2^24 entries per leaf); a vmapped per-client count
  lowered to a reduction several times slower on CPU.
  """
  def leaf_bytes(p, m):
    rows = (m != 0).reshape(m.shape[0], -1).astype(jnp.float32)
    return rows @ jnp.ones(rows.shape[1], jnp.float32) * p.dtype.itemsize

  return sum(jax.tree.leaves(jax.tree.map(leaf_bytes, params, masks)))


def occurrence_index(client_ids: jax.Array) -> jax.Array:
  """For each slot, how many earlier slots drew the same client. int32 [K]."""
  same = client_ids[:, None] == client_ids[None, :]
  earlier = jnp.tril(same, k=-1)
  return earlier.sum(axis=1).astype(jnp.int32)


class FederatedAlgorithm:
  """Shared mechanism of all methods; see the module docstring.

  Args:
    config: the run's `ConfigDict` (core keys in `fedjax_het.config`).
    model: a flax.linen module whose `apply({'params': p}, x, train=...)`
      returns logits.
    data: `FederatedData` of the clients' training sets.
  """

  name = 'base'
  # Whether the method trains submodels of the capacities in config.capacities.
  supports_capacities = False
  # Aggregation segments (capacity groups, cells); plans carry segment ids.
  num_segments = 1
  # Whether the loss and evaluation read a multi-exit model's stacked logits.
  reads_exits = False
  # Whether its schedule reads `rounds` (then a resume may not change it).
  schedule_depends_on_rounds = False

  def __init__(self, config: ml_collections.ConfigDict, model, data):
    if not self.supports_capacities and any(
        g != 1 for g in config.capacities):
      raise ValueError(
          f'{self.name} trains the full model on every client, so capacities '
          f'must be (1.0,), got {tuple(config.capacities)}; use a submodel '
          'method for heterogeneous capacities.')
    if config.model_options.get('exits') and not self.reads_exits:
      raise ValueError(
          f'{self.name} trains a single-output model; model_options.exits='
          'True (early exits) is for methods that read them, e.g. scalefl.')
    self.config = config
    self.model = model
    self.num_clients = int(data.counts.shape[0])
    self.client_counts = jnp.asarray(data.counts, jnp.int32)
    self.cohort_size = int(config.clients_per_round)
    self.client_update = client.make_client_update(
        self.loss, client.sgd_factory(config.client_momentum,
                                      config.client_weight_decay),
        data, max_steps=self.max_local_steps(), batch_size=config.batch_size,
        scan_unroll=config.scan_unroll,
        augment=augment.get_augmentation(config.augment))

  # ---- configuration hooks -------------------------------------------------
  def max_local_steps(self) -> int:
    """Static length of the local-training scan."""
    return int(self.config.local_steps)

  def server_optimizer(self) -> optax.GradientTransformation:
    momentum = self.config.server_momentum or None
    return optax.sgd(self.config.server_lr, momentum=momentum)

  def init_extras(self, params: PyTree) -> PyTree:
    """Algorithm-specific server state (None by default)."""
    del params
    return None

  # ---- state ---------------------------------------------------------------
  def init(self, params: PyTree, key: jax.Array) -> ServerState:
    return ServerState(
        params=params,
        opt_state=self.server_optimizer().init(params),
        round=jnp.zeros((), jnp.int32),
        key=key,
        extras=self.init_extras(params))

  # ---- round phase 1: plans ------------------------------------------------
  def sample_clients(self, state: ServerState, key: jax.Array) -> jax.Array:
    del state
    if self.config.client_sampling == 'proportional':
      probs = self.client_counts / jnp.sum(self.client_counts)
      return sampling.with_replacement(key, probs, self.cohort_size)
    return sampling.uniform_without_replacement(key, self.num_clients,
                                                self.cohort_size)

  def client_weights(self, client_ids: jax.Array) -> jax.Array:
    """Aggregation weights: examples held, or 1 per client."""
    if self.config.aggregation_weights == 'examples':
      return self.client_counts[client_ids].astype(jnp.float32)
    return jnp.ones(client_ids.shape, jnp.float32)

  def plan_clients(self, state: ServerState, client_ids: jax.Array,
                   keys: jax.Array) -> ClientPlan:
    del state
    k = client_ids.shape[0]
    return ClientPlan(
        client_id=client_ids,
        key=keys,
        num_steps=jnp.full((k,), self.config.local_steps, jnp.int32),
        lr=jnp.full((k,), self.config.client_lr, jnp.float32),
        weight=self.client_weights(client_ids),
        segment=jnp.zeros((k,), jnp.int32))

  def plan_round(self, state: ServerState, data=None) -> ClientPlan:
    """Samples the cohort and plans every client. Keys: round ⊕ client id."""
    del data  # plans depend on static client facts only, by default.
    round_key = jax.random.fold_in(state.key, state.round)
    sample_key, clients_key = jax.random.split(round_key)
    client_ids = self.sample_clients(state, sample_key)
    per_client = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(
        clients_key, client_ids)
    keys = jax.vmap(jax.random.fold_in)(per_client,
                                        occurrence_index(client_ids))
    return self.plan_clients(state, client_ids, keys)

  # ---- round phase 2: local training ---------------------------------------
  def forward_params(self, params: PyTree, plan: ClientPlan,
                     ctx: StepContext) -> PyTree:
    del ctx
    return client.apply_mask(params, plan.mask)

  def loss(self, params: PyTree, x: jax.Array, y: jax.Array,
           plan: ClientPlan, ctx: StepContext) -> jax.Array:
    """Mean softmax cross-entropy of a batch under the client's forward."""
    logits = self.model.apply(
        {'params': self.forward_params(params, plan, ctx)}, x, train=True)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

  # ---- round phase 3: aggregation ------------------------------------------
  def combine_segments(self, means: PyTree, coverage: PyTree) -> PyTree:
    """The global pseudo-gradient from per-segment means ([S, ...] leaves).

    Default: one global segment. Hierarchical methods override this (e.g. the
    cloud combining cells' edge models).
    """
    del coverage
    return jax.tree.map(lambda m: m[0], means)

  def aggregate(self, state: ServerState, plans: ClientPlan,
                outputs: ClientOutput) -> tuple[PyTree, PyTree, PyTree]:
    """New (params, opt_state, extras) from the clients' deltas.

    The masked, weighted segment mean of the deltas (`plans.segment` in
    [0, num_segments)) is combined into a pseudo-gradient g, and the server
    optimiser steps x ← x − η_s·g (for SGD).
    """
    means, coverage = aggregation.masked_segment_mean(
        outputs.delta, plans.weight, plans.segment, self.num_segments,
        plans.mask, values_masked=True)
    pseudo_grad = self.combine_segments(means, coverage)
    updates, opt_state = self.server_optimizer().update(
        pseudo_grad, state.opt_state, state.params)
    return optax.apply_updates(state.params, updates), opt_state, state.extras

  def client_payload_bytes(self, state: ServerState,
                           plans: ClientPlan) -> jax.Array:
    """float [K]: bytes of the (sub)model each planned client exchanges."""
    if plans.mask is None:
      return jnp.full(plans.weight.shape, payload_bytes(state.params))
    return payload_bytes_per_client(state.params, plans.mask)

  def round_metrics(self, state: ServerState, plans: ClientPlan,
                    outputs: ClientOutput) -> dict[str, jax.Array]:
    """Scalars logged per round: loss, examples and bytes exchanged."""
    per_client_bytes = self.client_payload_bytes(state, plans)
    uploaded = plans.weight > 0
    return {
        'train_loss': jnp.mean(outputs.loss),
        'examples': jnp.sum(outputs.num_examples),
        'bytes_down': jnp.sum(per_client_bytes),
        'bytes_up': jnp.sum(jnp.where(uploaded, per_client_bytes, 0.0)),
    }

  # ---- evaluation (host loop, between rounds) ----------------------------
  def evaluator(self, split) -> Callable[[PyTree], dict[str, jax.Array]]:
    """`evaluate(params) -> scalars` logged in metrics.jsonl.

    Must return `accuracy` and `loss` (the headline test metrics); methods add
    their own protocol's scalars (e.g. accuracy per capacity). Default: the
    full model on the global test set (`split` is a `FederatedSplit`).
    """
    return eval_lib.make_evaluator(
        lambda p, x: self.model.apply({'params': p}, x), split.test_x,
        split.test_y, self.config.eval_batch_size)

  def finish_round(self, state: ServerState, plans: ClientPlan,
                   outputs: ClientOutput) -> tuple[ServerState, dict]:
    metrics = self.round_metrics(state, plans, outputs)
    params, opt_state, extras = self.aggregate(state, plans, outputs)
    new_state = state.replace(params=params, opt_state=opt_state,
                              round=state.round + 1, extras=extras)
    return new_state, metrics
