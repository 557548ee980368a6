"""The base of every federated method: a bundle of pure functions on the engine.

A method subclasses `FederatedAlgorithm` and overrides only what it changes:

- `sample_clients(state, key)`: who takes part (default: K clients uniformly
  without replacement, or K draws with replacement ∝ examples held).
- `plan_clients(state, client_ids, keys)`: per-client arrays — steps, lr,
  weight, group, mask (default: full model, config's steps and lr, weights by
  `aggregation_weights`; under the systems part, below, each client's steps
  T_m and its weight times its link outcome Z_m).
- `forward_params(params, plan, ctx)`: the parameters the client's forward
  pass sees at a local step (default: the params times the plan's mask, i.e.
  the submodel).
- `loss(params, x, y, plan, ctx)`: the local objective of a batch (default:
  cross-entropy of the forward with `forward_params`).
- `client_optimizer()`, `client_program()`: the local solver (default: optax
  SGD steps on the loss, `core.program.sgd_program`, its gradients and
  updates masked by `step_mask(params, plan)`, default the plan's mask); a
  method with two phases or step outputs returns its own program.
- `init_clients(params)`, `program_client_state(state, plans)`: per-client
  persistent state (`ServerState.clients`) and the rows the clients see.
- `start_models(state, plans)`: a table of start models clients pick rows of
  by `plan.start_model` (default none: everyone starts at the global model).
- `local_phase(state, plans, data, clients)`: the local phase (default: one
  `clients.map` of the program over the cohort).
- `aggregate(state, plans, outputs)`: the next server state (default: the
  masked weighted mean of the deltas as the server optimiser's
  pseudo-gradient; the clients' returned state rows written back).

Parts (`fedjax_het.core.parts`): a method lists the system parts it runs
under in `part_types`; `compose` builds those its config turns on, and the
methods here call the composed `self.parts` at fixed points of the round
(plans, start models, the local phase, each arrival's weight, the cloud, the
state after the server step, the accounting), never a part by name:
- links and work (`parts.links_work.LinksWork`, `config.systems`): each
  client's T_m local steps and weight w_m·Z_m (a dropped update adds nothing
  to any segment sum and is not counted in `bytes_up`);
- availability (`parts.availability.OnlineClients`): the sampler draws among
  the online clients, and a slot whose client is offline is idle;
- the virtual clock (`parts.clock.OnClock`, `config.clock`): Co-S²P's Alg. 1
  for any method. Our reading of FedAvg on the clock: every idle client is
  dispatched at a round's start with the global model w_q (so
  clients_per_round must be N); the clients whose updates arrive in round q
  form its cohort; a client trains from the global model of its dispatch
  round k_n, planned by `plan_clients` as in that round, and its delta is
  averaged as in a synchronous round, weighed by its staleness τ = q − k_n.
  With μ = 1, T_clk = 0 and no staleness weight every round is FedAvg's with
  K = N, the same program bit for bit;
- cells (`parts.cells.Cells`, `config.hierarchy`): HIST's E edge rounds per
  global round and the cloud's Eq. (7); the cells are the aggregation
  segments.
A part at its defaults is off: the round is the same program as without it.

The round compiler (`fedjax_het.core.rounds`) calls `plan_round`,
`local_phase` and `finish_round`; all are pure and jit-able. The federated
data (`FederatedData`) is passed to them as an argument on every call; the
algorithm only reads static facts (sizes, counts) from the data it is built
with.
"""
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from fedjax_het import evaluation, models, optim
from fedjax_het.data import augment
from fedjax_het.core import aggregation, client_state, program, sampling
from fedjax_het.core.backends import Clients
from fedjax_het.core.key_streams import Stream
from fedjax_het.core.state import (ClientOutput, ClientPlan, ServerState,
                                   StepContext, round_key)
from fedjax_het.core import parts as parts_lib
from fedjax_het.parts import cells as cells_lib

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


def mean_over_active(values: jax.Array, active: jax.Array) -> jax.Array:
  """Mean of per-slot `values` [K] over the active slots (0 if none)."""
  count = jnp.sum(active)
  return jnp.sum(jnp.where(active, values, 0.0)) / jnp.maximum(count, 1)


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
  # The method's own aggregation segments (a part may make others: cells).
  num_segments = 1
  # Whether the loss and evaluation read a multi-exit model's stacked logits.
  reads_exits = False
  # Whether its losses read next-token targets y [N, L] (PAD left out, through
  # `loss` / `evaluation.cross_entropy`); methods with losses of their own on
  # class labels say False and refuse text data.
  supports_token_labels = True
  # The config sections (`fedjax_het.options.OptionGroup`) the method reads.
  option_groups = ()
  # Whether its schedule reads `rounds` (then a resume may not change it).
  schedule_depends_on_rounds = False
  # Round metrics that are a round's value, not a count to add up: the
  # trainer logs the last round's (summary.json: `last_round`), not a total.
  per_round_metrics = ()
  # Whether the round needs the client deltas only through `aggregate`'s
  # segment sums: they are then summed inside the client map
  # (`Clients.map_sum`, `ClientOutput.delta_sums`) and the cohort's [K, ...]
  # deltas are never stacked, the round's largest memory traffic. A method
  # that reads `outputs.delta` itself keeps False.
  sums_deltas_in_map = False
  # What the method declares to the parts (`core.parts`; each part reads
  # what it needs): whether its own rule reads the links-and-work draws (the
  # FedACS family's sampling and calibration read q and T, so the part is on
  # at its defaults too) and divides by the success probability 1 − q;
  # whether `sample_clients` draws among the clients online in the round;
  # whether it is defined in cells, how its edge servers combine their
  # clients' deltas (`parts.cells.EDGE_RULES`) and its own N and E
  # (`hierarchy.num_cells` / `edge_rounds` left at 0); the parts of the model
  # it averages (None: all of it; a stale arrival is weighed on those).
  reads_draws = False
  divides_by_success = False
  samples_available_clients = True
  always_in_cells = False
  edge_rule = 'mean'
  cell_defaults = cells_lib.FLAT
  averaged_parts = None
  # {section key: why the method does not read that section}, for the
  # one-line refusal of a value set there (`config.check_sections_in_use`).
  unread_sections = {}
  # Its server rule, in a few words, where `aggregate` takes no step of the
  # server optimiser (`server_step`); such a method refuses the server keys
  # (`optim.refuse_server_keys`). None: the server optimiser's step.
  own_server_rule = None

  @classmethod
  def part_types(cls) -> tuple[type, ...]:
    """The parts the method runs under, in the order they act (the parts of
    the config sections it reads)."""
    return parts_lib.registered(cls.option_groups)

  @classmethod
  def fix_options(cls, config: ml_collections.ConfigDict
                  ) -> ml_collections.ConfigDict:
    """`config` with the options the method fixes written in, i.e. what it
    trains with; raises ConfigError where `config` sets one of them to
    another value. Default: the method fixes none; each of its parts checks
    the config against the method (`check`) and writes in the method's own
    defaults of its section."""
    for part_type in cls.part_types():
      config = part_type.check(cls, config)
    return config

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
    if data.label_shape and not self.supports_token_labels:
      raise ValueError(
          f'{self.name} trains on class labels; next-token data (text sets) '
          'run with the FedAvg, FedACS and submodel families.')
    self.config = config
    self.model = model
    self.num_clients = int(data.counts.shape[0])
    self.client_counts = jnp.asarray(data.counts, jnp.int32)
    self.cohort_size = int(config.clients_per_round)
    # Static facts of the data the client programs read (batch sampling).
    self.min_client_count = int(jnp.min(self.client_counts))
    self.parts = parts_lib.compose(self, self.part_types(), config, data)
    # Aggregation segments, `plan.group` in [0, segments).
    self.segments = self.parts.segments(self.num_segments)
    self.sums_in_map = self.parts.sums_in_map(self.sums_deltas_in_map)

  def clock_default_steps(self) -> int | tuple:
    """The local steps of a client round, for the clock's default round
    times (one second per step): `local_steps`, every client alike."""
    return int(self.config.local_steps)

  # ---- configuration hooks -------------------------------------------------
  def max_local_steps(self) -> int:
    """Static length of the local-training loop: `local_steps`, or the most
    steps a part can give a client."""
    return self.parts.max_steps(int(self.config.local_steps))

  def server_optimizer(self) -> optax.GradientTransformation:
    """The `server_optimizer` of the config on the pseudo-gradient: SGD
    (momentum), FedAdam, FedYogi or FedAdagrad (`fedjax_het.optim`)."""
    return optim.server_optimizer(self.config)

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

  def init_extras(self, params: PyTree) -> PyTree:
    """Algorithm-specific server state (None by default)."""
    del params
    return None

  def init_clients(self, params: PyTree) -> PyTree:
    """Per-client persistent state, leaves [num_clients, ...] (None by default)."""
    del params
    return None

  # ---- state ---------------------------------------------------------------
  def init(self, params: PyTree, key: jax.Array) -> ServerState:
    """The round-0 server state: `initial_state` compiled as one program (op by
    op, its many small ops would each compile on their own)."""
    return self._compiled_initial_state(params, key)

  @functools.cached_property
  def _compiled_initial_state(self):
    return jax.jit(self.initial_state)

  def initial_state(self, params: PyTree, key: jax.Array) -> ServerState:
    """The round-0 server state from the initial `params` (traced: pure jax),
    the parts' state in `extras` (e.g. the clock's start table)."""
    extras = self.parts.init_extras(params, self.init_extras(params))
    return ServerState(
        params=params,
        opt_state=self.server_optimizer().init(params),
        round=jnp.zeros((), jnp.int32),
        key=key,
        extras=extras,
        clients=self.init_clients(params))

  # ---- round phase 1: plans ------------------------------------------------
  def sample_clients(self, state: ServerState, key: jax.Array) -> jax.Array:
    online = self.parts.online(state)
    if self.config.client_sampling == 'proportional':
      counts = self.client_counts
      if online is not None:  # nobody online: all-zero probabilities, whose
        counts = jnp.where(online, counts, 0)  # draws are offline (idle)
      probs = counts / jnp.maximum(jnp.sum(counts), 1)
      return sampling.with_replacement(key, probs, self.cohort_size)
    if online is not None:
      return sampling.uniform_among(key, online, self.cohort_size)
    return sampling.uniform_without_replacement(key, self.num_clients,
                                                self.cohort_size)

  def client_weights(self, client_ids: jax.Array) -> jax.Array:
    """Aggregation weights: examples held, or 1 per client."""
    if self.config.aggregation_weights == 'examples':
      return self.client_counts[client_ids].astype(jnp.float32)
    return jnp.ones(client_ids.shape, jnp.float32)

  def new_plans(self, client_ids: jax.Array, keys: jax.Array,
                **fields) -> ClientPlan:
    """The plans [K] of `client_ids`, each client placed in its group before
    any method reads the plans: its cell as segment and start-model row in
    cells (`parts.cells.Cells.place`), else group 0. Every `plan_clients`
    builds its plans here, so none can read an unassigned group (HIST sizes
    its partitions from the cells' costs)."""
    return self.parts.place(ClientPlan(
        client_id=client_ids, key=keys,
        group=jnp.zeros(client_ids.shape, jnp.int32), **fields))

  def plan_clients(self, state: ServerState, client_ids: jax.Array,
                   keys: jax.Array) -> ClientPlan:
    k = client_ids.shape[0]
    plan = self.new_plans(
        client_ids, keys,
        num_steps=jnp.full((k,), self.config.local_steps, jnp.int32),
        lr=jnp.full((k,), self.config.client_lr, jnp.float32),
        weight=self.client_weights(client_ids))
    return self.parts.adjust(state, plan)

  def cohort_ids(self, state: ServerState) -> jax.Array:
    """The round's cohort, int32 [K]: `sample_clients` on the first half of
    the round key.

    Streaming (`core.stream`) calls it ahead of the rounds on a state that
    holds only `key` and `round` (the rest None), to fetch the cohorts' data;
    a method whose cohort depends on more of the state cannot be streamed.
    """
    sample_key, _ = jax.random.split(round_key(state))
    return self.sample_clients(state, sample_key)

  def plan_round(self, state: ServerState, data=None,
                 inputs: PyTree = None) -> ClientPlan:
    """Samples the cohort (`cohort_ids`) and plans every client. Keys:
    round ⊕ client id.

    `inputs` is the round's row of `RoundRunner.run`'s round inputs (the
    parts', by part name); a part that takes the plans over (the clock)
    plans the round instead. In cells each client's cell is its segment and
    start model, set by `new_plans` before the method plans anything else.
    """
    del data
    planner = self.parts.owner('plan_round')
    if planner is not None:
      return planner.plan_round(self, state, inputs)
    _, clients_key = jax.random.split(round_key(state))
    client_ids = self.cohort_ids(state)
    per_client = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(
        clients_key, client_ids)
    keys = jax.vmap(jax.random.fold_in)(per_client,
                                        occurrence_index(client_ids))
    return self.plan_clients(state, client_ids, keys)

  def round_inputs(self, first: int, count: int) -> PyTree:
    """Host-made inputs of rounds [first, first + count) (leaves [count, ...]),
    the `inputs` of `plan_round`: the parts' (e.g. the clock's schedule), or
    None."""
    return self.parts.round_inputs(first, count)

  def prepare_rounds(self, state: ServerState, first: int,
                     count: int) -> tuple[ServerState, PyTree]:
    """(state, inputs) of rounds [first, first + count), before they run:
    a method whose host-made inputs depend on the state so far (e.g. a
    clock charging the submodels clients have learned) reads it here and
    may record what it decided in the state; its inputs may cover fewer
    rounds, a prefix (the runner prepares the rest after it has run,
    `RoundRunner._in_parts`). Default: the state unchanged and
    `round_inputs(first, count)`."""
    return state, self.round_inputs(first, count)

  # ---- round phase 2: local training ---------------------------------------
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

  def local_phase(self, state: ServerState, plans: ClientPlan, data,
                  clients: Clients) -> ClientOutput:
    """Every planned client runs the program once (one `clients.map`), or a
    part takes the phase over (cells: E edge rounds of it)."""
    runner = self.parts.owner('local_phase')
    if runner is not None:
      return runner.local_phase(self.run_clients, state, plans, data, clients)
    return self.run_clients(
        clients, plans, data, params=state.params,
        table=self.start_models(state, plans),
        client_states=self.program_client_state(state, plans))

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

  def weigh_arrivals(self, state: ServerState, plans: ClientPlan,
                     outputs: ClientOutput) -> tuple[ClientPlan, ClientOutput]:
    """(plans, outputs) with every slot's weight and delta [K, ...] as the
    parts weigh them (the clock: by staleness), for a method that reads the
    stacked deltas (one that sums them in the map weighs there)."""
    table = self.start_models(state, plans)
    delta, weight = jax.vmap(
        lambda plan, d: self.parts.weigh(self, plan, d, plan.active_weight(),
                                         table, state.params))(plans,
                                                               outputs.delta)
    return plans.replace(weight=weight), outputs.replace(delta=delta)

  def run_client(self, shared, per_client) -> ClientOutput:
    """One client's program (`clients.map`'s function)."""
    params, table, data, mask_table = shared
    plan, state_row = per_client
    plan = plan.with_row_mask(mask_table)
    if table is not None:
      params = jax.tree.map(lambda t: t[plan.start_model], table)
    return program.run_program(self.local_program,
                               program.LocalModel(params, state_row), plan,
                               data, min_count=self.min_client_count)

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

  # ---- round phase 3: aggregation ------------------------------------------
  def combine_segments(self, means: PyTree, coverage: PyTree) -> PyTree:
    """The global pseudo-gradient from per-segment means ([S, ...] leaves).

    Default: one global segment, or a part's combination (cells: the cloud
    over the cells' edge models, HIST's Eq. (7)).
    """
    combiner = self.parts.owner('combine')
    if combiner is not None:
      return combiner.combine(means, coverage)
    return jax.tree.map(lambda m: m[0], means)

  def server_step(self, state: ServerState,
                  pseudo_grad: PyTree) -> tuple[PyTree, PyTree]:
    """(params, opt_state) after the server optimiser's step on the
    pseudo-gradient g = x − x̄ (SGD: x ← x − η_s·g; FedAdam, FedYogi,
    FedAdagrad: x ← x − η_s·m/(√v + τ), Reddi et al.'s Algorithm 2 with
    Δ = −g, `fedjax_het.optim`)."""
    updates, opt_state = self.server_optimizer().update(
        pseudo_grad, state.opt_state, state.params)
    return optax.apply_updates(state.params, updates), opt_state

  def next_clients(self, state: ServerState, plans: ClientPlan,
                   outputs: ClientOutput) -> PyTree:
    """`state.clients` with the rows the active clients returned written back."""
    if outputs.client_state is None:
      return state.clients
    return client_state.scatter_rows(state.clients, plans.client_id,
                                     outputs.client_state, plans.is_active())

  def aggregate(self, state: ServerState, plans: ClientPlan,
                outputs: ClientOutput) -> ServerState:
    """The server state after the round (the round counter is not advanced).

    The masked, weighted segment mean of the deltas (`plans.group` in
    [0, segments); idle slots weigh 0) is combined into a pseudo-gradient
    g for the server optimiser; the clients' state rows are written back.
    """
    params, opt_state = self.server_step(
        state, self.segment_pseudo_gradient(state, plans, outputs))
    return state.replace(params=params, opt_state=opt_state,
                         clients=self.next_clients(state, plans, outputs))

  def segment_pseudo_gradient(self, state: ServerState, plans: ClientPlan,
                              outputs: ClientOutput) -> PyTree:
    """g: the segments' masked weighted means of the deltas (the sums made
    in the map, `outputs.delta_sums`, or from `outputs.delta` [K, ...]),
    combined by `combine_segments`; leaves like `state.params`."""
    sums = outputs.delta_sums
    if sums is None:
      sums = aggregation.segment_sums(
          outputs.delta, plans.active_weight(), plans.group,
          self.segments,
          self.coverage_masks(plans.client_masks(), outputs.delta),
          values_masked=True)
    means, coverage = aggregation.mean_of_sums(sums, state.params)
    return self.combine_segments(means, coverage)

  def coverage_masks(self, mask: PyTree, delta: PyTree) -> PyTree:
    """The masks m of the mean Σ w m Δ / Σ w m: the plans' submodel masks
    (None: every coordinate), for one client or stacked [K, ...]."""
    del delta
    return mask

  def client_payload_bytes(self, state: ServerState,
                           plans: ClientPlan) -> jax.Array:
    """float [K]: bytes of the (sub)model each planned client exchanges."""
    if plans.mask_table is not None:  # counted once per row of the table
      return payload_bytes_per_client(state.params,
                                      plans.mask_table)[plans.mask_row]
    if plans.mask is None:
      return jnp.full(plans.weight.shape, payload_bytes(state.params))
    return payload_bytes_per_client(state.params, plans.mask)

  def round_metrics(self, state: ServerState, plans: ClientPlan,
                    outputs: ClientOutput) -> dict[str, jax.Array]:
    """Scalars logged per round: loss, examples and bytes exchanged.

    Idle slots exchange nothing and are left out of the mean loss.
    """
    active = plans.is_active()
    per_client_bytes = jnp.where(active,
                                 self.client_payload_bytes(state, plans), 0.0)
    uploaded = plans.delivers()
    return {
        'train_loss': mean_over_active(outputs.loss, active),
        'examples': jnp.sum(outputs.num_examples),
        'bytes_down': jnp.sum(per_client_bytes),
        'bytes_up': jnp.sum(jnp.where(uploaded, per_client_bytes, 0.0)),
    }

  def summary_facts(self) -> dict:
    """Facts of the run's model of the world for summary.json: the parts'
    (on the clock its virtual time and RU, `parts.clock.schedule_facts`; in
    cells the edge channel and its noise model)."""
    return self.parts.facts()

  # ---- evaluation (host loop, between rounds) ----------------------------
  def evaluator(self, split) -> Callable[[PyTree], dict[str, jax.Array]]:
    """`evaluate(params) -> scalars` logged in metrics.jsonl.

    Must return `accuracy` and `loss` (the headline test metrics); methods add
    their own protocol's scalars (e.g. accuracy per capacity). Default: the
    full model on the global test set (`split` is a `FederatedSplit`), through
    the augmentation's test-time transform (e.g. a centre crop).
    """
    transform = augment.test_transform(self.config.augment)
    return evaluation.make_evaluator(
        lambda p, x: self.model.apply({'params': p}, transform(x)), split.test_x,
        split.test_y, self.config.eval_batch_size)

  def state_evaluator(self, split) -> Callable[[ServerState], dict]:
    """`evaluate(state) -> scalars` the trainer logs: by default the
    `evaluator` on the global params; a method whose clients evaluate their
    own (personalised) models reads `state.clients` too."""
    evaluate = self.evaluator(split)
    return lambda state: evaluate(state.params)

  def finish_round(self, state: ServerState, plans: ClientPlan,
                   outputs: ClientOutput) -> tuple[ServerState, dict]:
    """The method's metrics with the parts' accounting, its aggregate (the
    arrivals weighed by the parts where the method reads stacked deltas),
    then the parts' state after the server step; the round advanced."""
    metrics = self.parts.metrics(self.round_metrics(state, plans, outputs),
                                 plans, outputs)
    if self.parts.weighs and not self.sums_in_map:
      plans, outputs = self.weigh_arrivals(state, plans, outputs)
    new_state = self.parts.finish(state, self.aggregate(state, plans, outputs),
                                  plans)
    return new_state.replace(round=state.round + 1), metrics
