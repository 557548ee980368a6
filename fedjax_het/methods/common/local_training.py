"""Round phase 2: the clients' local training (the client program, its loss
and optimiser, the start models and per-client state it reads)."""
import functools
from typing import Any

import jax
import jax.numpy as jnp

from fedjax_het import evaluation
from fedjax_het.core import aggregation, client_state, program
from fedjax_het.core.backends import Clients
from fedjax_het.core.state import (ClientOutput, ClientPlan, ServerState,
                                   StepContext)
from fedjax_het.data import augment
from fedjax_het.parts import clock as clock_part
from fedjax_het.systems import clock

PyTree = Any


class LocalTraining:
  """Every planned client's program from its start model (`run_clients`),
  default: `loss` minimised by optax SGD for its planned steps."""

  def max_local_steps(self) -> int:
    """Static length of the local-training loop: `local_steps`, or the most
    steps a part can give a client."""
    return self.parts.max_steps(int(self.config.local_steps))

  def clock_default_steps(self) -> int | tuple:
    """The local steps of a client round, for the clock's default round
    times (one second per step): `local_steps`, every client alike."""
    return int(self.config.local_steps)

  def round_durations(self) -> clock.Duration:
    """The clock's round-time model (`parts.clock.OnClock`): by default
    `clock.client_seconds`, or one second per local step
    (`clock_default_steps`), times the lognormal jitter
    (`parts.clock.step_durations`)."""
    return clock_part.step_durations(
        clock_part.ClockOptions.from_config(self.config),
        num_clients=self.num_clients, rounds=self.config.rounds,
        local_steps=self.clock_default_steps(), seed=self.config.seed)

  def client_optimizer(self) -> program.OptimizerFactory:
    """The clients' optax optimiser as a function of their lr."""
    return program.sgd_factory(self.config.client_momentum,
                               self.config.client_weight_decay)

  def client_program(self) -> program.ClientProgram:
    """What every client runs: `loss` minimised by `client_optimizer`."""
    return program.sgd_program(
        self.program_loss, self.client_optimizer(),
        num_steps=self.max_local_steps(), batch_size=self.config.batch_size,
        augment=augment.get_augmentation(self.config.augment),
        scan_unroll=self.config.scan_unroll,
        step_mask=lambda local, plan: self.step_mask(local.params, plan))

  def step_mask(self, params: PyTree, plan: ClientPlan) -> PyTree:
    """The mask of a local step's gradient and update, given the params
    before it (default: the plan's round-start mask)."""
    del params
    return plan.mask

  @functools.cached_property
  def local_program(self) -> program.ClientProgram | program.ProgramSequence:
    """`client_program()`, built once."""
    return self.client_program()

  def init_clients(self, params: PyTree) -> PyTree:
    """Per-client persistent state, leaves [num_clients, ...] (None by default)."""
    del params
    return None

  def program_client_state(self, state: ServerState,
                           plans: ClientPlan) -> PyTree:
    """The cohort's rows of `state.clients` the programs see and return.

    Default: all of them. A method whose per-client state is the server's
    own memory returns None (nothing gathered, nothing written back).
    """
    return client_state.gather_rows(state.clients, plans.client_id)

  def start_models(self, state: ServerState, plans: ClientPlan) -> PyTree:
    """A table of start models (leaves [T, ...]) that `plan.start_model`
    indexes, or None: every client starts from the global params. A part's
    (the clock's start table, row n = w_{k_n})."""
    del plans
    return self.parts.start_models(state)

  def run_clients(self, clients: Clients, plans: ClientPlan, data, *,
                  params: PyTree = None, table: PyTree = None,
                  client_states: PyTree = None) -> ClientOutput:
    """The program of every planned client, from its start model.

    Args:
      clients: the round's client driver.
      plans: batched plans [K].
      data: the federated data.
      params: the start model of every client (used when `table` is None).
      table: start models, leaves [T, ...]; client k starts from row
        `plans.start_model[k]`.
      client_states: the cohort's state rows [K, ...], or None.
    """
    # A mask table goes to every client whole; each takes its row in the map.
    shared = (params, table, data, plans.mask_table)
    per_client = (plans.replace(mask_table=None), client_states)
    if not self.sums_in_map:
      return clients.map(self.run_client, shared, per_client)
    outputs, sums = clients.map_sum(self._run_client_summed, shared,
                                    per_client)
    return outputs.replace(delta_sums=sums)

  def _run_client_summed(self, shared, per_client):
    """`run_client`, its delta replaced by its term of the segment sums."""
    params, table, data, mask_table = shared
    plan = per_client[0].with_row_mask(mask_table)
    output = self.run_client((params, table, data, None),
                             (plan, per_client[1]))
    delta, weight = self.parts.weigh(self, plan, output.delta,
                                     plan.active_weight(), table, params)
    one = lambda x: jnp.expand_dims(x, 0)  # a cohort of one
    sums = aggregation.segment_sums(
        jax.tree.map(one, delta), one(weight),
        one(plan.group), self.segments,
        jax.tree.map(one, self.coverage_masks(plan.mask, delta)),
        values_masked=True)
    return output.replace(delta=None), sums

  def run_client(self, shared, per_client) -> ClientOutput:
    """One client's program (`clients.map`'s function), its output as the
    parts upload it (`Parts.upload`: DP's clipped update)."""
    params, table, data, mask_table = shared
    plan, state_row = per_client
    plan = plan.with_row_mask(mask_table)
    if table is not None:
      params = jax.tree.map(lambda t: t[plan.start_model], table)
    output = program.run_program(self.local_program,
                                 program.LocalModel(params, state_row), plan,
                                 data, min_count=self.min_client_count)
    return self.parts.upload(self, plan, output)

  def client_update(self, params: PyTree, plan: ClientPlan,
                    data) -> ClientOutput:
    """One client's program from `params`, no client state (an unbatched plan)."""
    return self.run_client((params, None, data, plan.mask_table),
                           (plan.replace(mask_table=None), None))

  def forward_params(self, params: PyTree, plan: ClientPlan,
                     ctx: StepContext) -> PyTree:
    del ctx
    return program.apply_mask(params, plan.mask)

  def loss(self, params: PyTree, x: jax.Array, y: jax.Array,
           plan: ClientPlan, ctx: StepContext) -> jax.Array:
    """Mean softmax cross-entropy of a batch under the client's forward
    (next-token targets: PAD left out, `evaluation.cross_entropy`)."""
    logits = self.model.apply(
        {'params': self.forward_params(params, plan, ctx)}, x, train=True)
    return evaluation.cross_entropy(logits, y)

  def program_loss(self, local: program.LocalModel, x: jax.Array,
                   y: jax.Array, plan: ClientPlan, ctx: StepContext):
    """`loss` on the params of the client's `LocalModel` (the program's loss)."""
    return self.loss(local.params, x, y, plan, ctx)
