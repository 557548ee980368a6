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

The systems part (`config.systems`, `fedjax_het.parts.links_work`): a
method that lists `SystemsOptions` in its `option_groups` runs under lossy
uplinks and unequal local work. Each round draws q_m, T_m and the link
outcomes Z_m of all clients from the round key's `SYSTEMS` stream
(`round_systems`, `core.key_streams`); the default plans give client m T_m
local steps (the program freezes it after them) and weight w_m·Z_m, so a
dropped update adds nothing to any segment sum, numerator or denominator,
and its upload is not counted in `bytes_up`. With the section at its defaults (q = 0, every client
`local_steps`) the part is off and the round is the same program as without
it. The Markov model's link states are per-client state that only the
FedACS family keeps; another method refuses it in one line.

The availability part (`systems.availability`, `fedjax_het.parts.availability`):
each round draws who is online from the round key's `AVAILABILITY` stream
(`round_availability`); the default sampler draws the cohort among the online
clients, and a slot whose client is offline (fewer than K online) is idle:
no steps, weight 0, nothing exchanged. A method with a sampler of its own
(`samples_available_clients = False`, the FedACS family) refuses it in one
line. With `availability='always'` the part is off.

The clock part (`config.clock`, `fedjax_het.parts.clock`): a method that
lists `ClockOptions` in its `option_groups` (FedAvg, HeteroFL, FedRolex,
FjORD, ScaleFL, the FIARSE family; CSE-FSL, FSL_AN and FSL_MC, whose reading
`methods/split/split_learning.py` gives) runs on Co-S²P's semi-asynchronous
virtual clock when the section is not at its defaults. Our reading of FedAvg
on the clock (Co-S²P's Alg. 1): every idle client is dispatched at a round's
start with the global model w_q (so clients_per_round must be N); the
clients whose updates arrive in round q form its cohort; a client trains
from the global model of its dispatch round k_n (row n of the start table
`extras['start']`), planned by `plan_clients` as in that round (its key,
FedRolex's window, FIARSE's thresholds of w_{k_n}, the systems part's draws
of round k_n), and its delta is averaged as in a synchronous round, weighed
by its staleness τ = q − k_n (`clock.staleness_weight`,
`parts.clock.weigh_arrival`; in the client map, or by `weigh_arrivals`
before `aggregate` for a method that reads the stacked deltas). The plans
hold all N clients, in the order `cohort_ids` draws them (a permutation),
active where an update arrives; the clock's inputs of the slots ride in
`plan.extras['clock']`. With μ = 1, T_clk = 0 and no staleness weight every
round is FedAvg's with K = N, the same program bit for bit. The round
metrics add the virtual seconds, busy seconds, arrivals and staleness,
`summary_facts` the virtual time and RU. The ViT methods
(`methods/cos2p`) list `ClockOptions` too and read the same keys, but are
always on the clock and build their schedule themselves with the analytic
ViT cost model: `VitOnClock` overrides `_clock_part` to return None, so
this generic part is not built for them.

The cells part (`config.hierarchy`, `fedjax_het.parts.cells`): a method
that lists `HierarchyOptions` (FedAvg, the submodel methods, HIST and
HFedAvg, the FedACS family except FedVarp, FedAU and OS) runs in cells when
the section asks for them (`cells.is_on`; HIST and HFedAvg always,
`always_in_cells`): `self.cells` groups the planned cohort by cell
(`plan_round`), runs the E edge rounds with the method's `edge_rule`
(`local_phase`), combines the cells at the cloud (`combine_segments`) and
charges E exchanges (`round_metrics`). With one cell, one edge round and OMA
`self.cells` is None and the round is the same program as without it. The
virtual clock and client availability are refused in cells.

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
from fedjax_het.options import ConfigError, changed_key
from fedjax_het.parts import clock as clock_part
from fedjax_het.parts import availability, links_work
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
  # Aggregation segments (capacity groups, cells); `plan.group` is a client's.
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
  # Systems part (module docstring): whether the method draws the systems
  # every round even with `config.systems` at its defaults (the FedACS
  # family's sampling and calibration read q and T), and whether it keeps
  # the Markov model's per-client link states.
  always_draws_systems = False
  keeps_link_states = False
  # Availability part (module docstring): whether `sample_clients` draws
  # among the clients online in the round.
  samples_available_clients = True
  # Cells part (module docstring): whether the method runs in cells whatever
  # `config.hierarchy` says, and how its edge servers combine their clients'
  # deltas (`parts.cells.EDGE_RULES`).
  always_in_cells = False
  edge_rule = 'mean'
  # `hierarchy.num_cells` / `edge_rounds` when left at 0 (the method's own).
  cell_defaults = cells_lib.FLAT
  # Its server rule, in a few words, where `aggregate` takes no step of the
  # server optimiser (`server_step`); such a method refuses the server keys
  # (`optim.refuse_server_keys`). None: the server optimiser's step.
  own_server_rule = None

  @classmethod
  def fix_options(cls, config: ml_collections.ConfigDict
                  ) -> ml_collections.ConfigDict:
    """`config` with the options the method fixes written in, i.e. what it
    trains with; raises ConfigError where `config` sets one of them to
    another value. Default: the method fixes none (`config` itself); a
    method whose sampler is its own refuses client availability, and a
    method on the generic clock part equal client times at μ < 1."""
    cls._check_availability(config)
    if clock_part.ClockOptions in cls.option_groups:
      clock_part.refuse_equal_times(
          clock_part.ClockOptions.from_config(config), default_equal=True)
    if cells_lib.HierarchyOptions in cls.option_groups:
      config = cells_lib.with_method_defaults(config, cls.cell_defaults)
      cells_lib.refuse_unread_keys(config, cls.name, 'hist, hfedavg',
                                   cls.edge_rule, cls.cell_defaults)
    return config

  @classmethod
  def data_cells(cls, config: ml_collections.ConfigDict) -> int:
    """How many cells `config` runs the method in (1: none), known before
    the data are: a partition by cells (`partition='cell_shards'`) splits
    the data along them."""
    if cells_lib.HierarchyOptions not in cls.option_groups:
      return 1
    return cells_lib.with_method_defaults(
        config, cls.cell_defaults).hierarchy.num_cells

  @classmethod
  def _check_availability(cls, config: ml_collections.ConfigDict) -> None:
    """ConfigError where `config` sets client availability for a method
    whose sampler does not draw among the online clients."""
    if (links_work.SystemsOptions in cls.option_groups and
        not cls.samples_available_clients and
        config.systems.availability != 'always'):
      raise ConfigError(
          f'systems.availability = {config.systems.availability!r} is set, but '
          f'{cls.name} samples among all clients by its own rule; leave it '
          "'always' or choose fedavg or a submodel method, whose sampler "
          'draws among the online clients.')

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
    self.heterogeneity = self._systems_part(config, data)
    self.availability = self._availability_part(config)
    self.clock = self._clock_part(config)
    self.cells = self._cells_part(config, data)

  def _systems_part(self, config: ml_collections.ConfigDict,
                    data) -> links_work.Heterogeneity | None:
    """The systems model the method runs under, or None: the method does not
    read `config.systems`, or the section is at its defaults (no failures,
    equal work) and a method without its own use of it runs as without it."""
    if links_work.SystemsOptions not in self.option_groups:
      return None
    links_and_work = {key: default for key, default in
                      links_work.SystemsOptions.defaults().items()
                      if key not in availability.KEYS}
    if not self.always_draws_systems and changed_key(
        config.systems, links_and_work) is None:
      return None
    try:
      model = links_work.Heterogeneity.from_config(
          config.systems, client_counts=np.asarray(data.counts),
          batch_size=config.batch_size, default_work=config.local_steps,
          seed=config.seed)
    except ValueError as e:
      raise ConfigError(str(e)) from e
    if model.model == 'markov' and not self.keeps_link_states:
      raise ConfigError(
          f"systems.model='markov' keeps each client's link state between "
          f'rounds, which {self.name} does not carry; the FedACS family '
          "does (fedacs, fedavg_het, ...), or use systems.model='static', "
          "'dynamic' or 'trace'.")
    return model

  def _availability_part(self, config: ml_collections.ConfigDict
                         ) -> availability.Availability | None:
    """Who is online each round, or None: the method does not read
    `config.systems`, or `availability` is 'always'."""
    if links_work.SystemsOptions not in self.option_groups:
      return None
    self._check_availability(config)
    try:
      return availability.Availability.from_section(
          links_work.SystemsOptions.from_config(config), self.num_clients,
          config.seed)
    except ValueError as e:
      raise ConfigError(str(e)) from e

  def _clock_part(self, config: ml_collections.ConfigDict
                  ) -> clock_part.VirtualClock | None:
    """The virtual clock the method runs under, or None: the method does not
    read `config.clock`, or the section is at its defaults (a method that
    builds its own schedule, the ViT engine, overrides this hook)."""
    if clock_part.ClockOptions not in self.option_groups or changed_key(
        config.clock, clock_part.ClockOptions.defaults()) is None:
      return None
    if self.availability is not None:
      raise ConfigError(
          f'systems.availability = {config.systems.availability!r} and the '
          'virtual clock (clock.*) are both set, but the clock dispatches every '
          "idle client at a round's start (Alg. 1), so availability is not "
          'modelled on it; set one of them.')
    options = clock_part.ClockOptions.from_config(config)
    clock_part.refuse_equal_times(options, default_equal=True)
    if (self.cohort_size != self.num_clients or
        config.client_sampling != 'uniform'):
      raise ConfigError(
          f'on the virtual clock every idle client is dispatched (Alg. 1), so '
          f'{self.name} needs clients_per_round = num_clients '
          f'({self.num_clients}) and uniform client_sampling, got '
          f'{self.cohort_size} and {config.client_sampling}.')
    return clock_part.VirtualClock(
        options, num_clients=self.num_clients, rounds=config.rounds,
        local_steps=self.clock_default_steps(), seed=config.seed)

  def clock_default_steps(self) -> int | tuple:
    """The local steps of a client round, for the clock's default round
    times (one second per step): `local_steps`, every client alike."""
    return int(self.config.local_steps)

  def _cells_part(self, config: ml_collections.ConfigDict,
                  data) -> cells_lib.Cells | None:
    """The cells the method runs in, or None: the method does not read
    `config.hierarchy`, or the section asks for none. In cells the cells are
    the aggregation segments, and OMA's edge sums are added up in the map."""
    if cells_lib.HierarchyOptions not in self.option_groups:
      return None
    config = cells_lib.with_method_defaults(config, self.cell_defaults)
    if not (self.always_in_cells or cells_lib.is_on(config.hierarchy)):
      return None
    if self.clock is not None or self.availability is not None:
      raise ConfigError(
          f'{self.name} in cells (hierarchy.*) runs every sampled client of '
          'a cell through its E edge rounds; the virtual clock (clock.*) and '
          'client availability (systems.availability) are not modelled '
          'in cells: set one of them.')
    cells = cells_lib.Cells.from_config(
        config, models.parameter_shapes(self.model, data.feature_shape),
        self.edge_rule)
    self.num_segments = cells.num_cells
    self.sums_deltas_in_map = cells.sums_deltas_in_map
    return cells

  # ---- configuration hooks -------------------------------------------------
  def max_local_steps(self) -> int:
    """Static length of the local-training scan: `local_steps`, or the most
    steps the systems part can give a client."""
    if self.heterogeneity is not None:
      return self.heterogeneity.max_steps()
    return int(self.config.local_steps)

  def round_systems(self, state: ServerState) -> links_work.SystemsRound:
    """q, T, steps and link outcomes of all clients in round `state.round`.

    A pure function of the state (key, round, Markov link states), so the
    plan and aggregation phases of a round see the same draws.
    """
    links = (state.clients['links'] if self.heterogeneity.model == 'markov'
             else None)
    return self.heterogeneity.draw(round_key(state, Stream.SYSTEMS),
                                   state.round, links)

  def round_availability(self, state: ServerState) -> jax.Array:
    """bool [M]: the clients online in round `state.round` (a pure function
    of the state's key and round, so streaming can draw cohorts ahead)."""
    return self.availability.draw(round_key(state, Stream.AVAILABILITY),
                                  state.round)

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
    """The round-0 server state from the initial `params` (traced: pure jax);
    on the clock, `extras['start']` is the start table (every row w_0)."""
    extras = self.init_extras(params)
    if self.clock is not None:
      extras = {**(extras or {}),
                'start': clock_part.start_table(params, self.num_clients)}
    return ServerState(
        params=params,
        opt_state=self.server_optimizer().init(params),
        round=jnp.zeros((), jnp.int32),
        key=key,
        extras=extras,
        clients=self.init_clients(params))

  # ---- round phase 1: plans ------------------------------------------------
  def sample_clients(self, state: ServerState, key: jax.Array) -> jax.Array:
    online = (None if self.availability is None
              else self.round_availability(state))
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
    cells (`parts.cells.Cells.assign`), else group 0. Every `plan_clients`
    builds its plans here, so none can read an unassigned group (HIST sizes
    its partitions from the cells' costs)."""
    plans = ClientPlan(client_id=client_ids, key=keys,
                       group=jnp.zeros(client_ids.shape, jnp.int32), **fields)
    return plans if self.cells is None else self.cells.assign(plans)

  def plan_clients(self, state: ServerState, client_ids: jax.Array,
                   keys: jax.Array) -> ClientPlan:
    k = client_ids.shape[0]
    plan = self.new_plans(
        client_ids, keys,
        num_steps=jnp.full((k,), self.config.local_steps, jnp.int32),
        lr=jnp.full((k,), self.config.client_lr, jnp.float32),
        weight=self.client_weights(client_ids))
    if self.availability is not None:
      plan = plan.replace(active=self.round_availability(state)[client_ids])
    if self.heterogeneity is None:
      return plan
    rnd = self.round_systems(state)
    return plan.replace(
        num_steps=rnd.steps[client_ids],
        weight=plan.weight * rnd.link_up[client_ids].astype(jnp.float32))

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

    `inputs` is the round's row of `RoundRunner.run`'s round inputs (unused
    by default; plans depend on static client facts only); on the clock,
    `clock_plans`. In cells each client's cell is its segment and start
    model, set by `new_plans` before the method plans anything else.
    """
    del data
    if self.clock is not None:
      return self.clock_plans(state, inputs)
    _, clients_key = jax.random.split(round_key(state))
    client_ids = self.cohort_ids(state)
    per_client = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(
        clients_key, client_ids)
    keys = jax.vmap(jax.random.fold_in)(per_client,
                                        occurrence_index(client_ids))
    return self.plan_clients(state, client_ids, keys)

  def clock_plans(self, state: ServerState, inputs: dict) -> ClientPlan:
    """Plans of a round on the clock (module docstring): slot j is client
    `cohort_ids(state)[j]`, planned by `plan_clients` as in its dispatch
    round k (the state's round k and params w_k, its start-table row; the
    key of round k, `parts.clock.dispatch_key`), its mask gathered from the
    table (masks [N, ...]: slots differ in round), active when its update
    arrives; `inputs` is the round's row of the clock's inputs (leaves [N],
    by client)."""
    ids = self.cohort_ids(state)
    row = jax.tree.map(lambda x: jnp.asarray(x)[ids], inputs)
    keys = jax.vmap(clock_part.dispatch_key, in_axes=(None, 0, 0))(
        state.key, row['dispatch_round'], ids)

    def plan_at_dispatch(dispatch_round, client, key):
      start = jax.tree.map(lambda t: t[client], state.extras['start'])
      plan = self.plan_clients(
          state.replace(round=dispatch_round, params=start), client[None],
          key[None])
      plan = plan.replace(mask=plan.client_masks(), mask_table=None,
                          mask_row=None)
      return jax.tree.map(lambda x: x[0], plan)

    plans = jax.vmap(plan_at_dispatch)(row['dispatch_round'], ids, keys)
    return plans.replace(active=row['arrives'], start_model=ids,
                         extras={**(plans.extras or {}), 'clock': row})

  def round_inputs(self, first: int, count: int) -> PyTree:
    """Host-made inputs of rounds [first, first + count) (leaves [count, ...]),
    the `inputs` of `plan_round`; None (default): plans need none; on the
    clock, its schedule's (`parts.clock.schedule_inputs`)."""
    if self.clock is None:
      return None
    return self.clock.round_inputs(first, count)

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
    indexes, or None: every client starts from the global params. On the
    clock: the start table (row n = w_{k_n})."""
    del plans
    return None if self.clock is None else state.extras['start']

  def local_phase(self, state: ServerState, plans: ClientPlan, data,
                  clients: Clients) -> ClientOutput:
    """Every planned client runs the program once (one `clients.map`); in
    cells, E edge rounds of it (`parts.cells.Cells.local_phase`)."""
    if self.cells is not None:
      return self.cells.local_phase(self.run_clients, state, plans, data,
                                    clients)
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
    if not self.sums_deltas_in_map:
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
    delta, weight = output.delta, plan.active_weight()
    if self.clock is not None:
      delta, weight = self.clock_weighed(plan, delta, table, params)
    one = lambda x: jnp.expand_dims(x, 0)  # a cohort of one
    sums = aggregation.segment_sums(
        jax.tree.map(one, delta), one(weight),
        one(plan.group), self.num_segments,
        jax.tree.map(one, self.coverage_masks(plan.mask, delta)),
        values_masked=True)
    return output.replace(delta=None), sums

  def clock_weighed(self, plan: ClientPlan, delta: PyTree, table: PyTree,
                    params: PyTree) -> tuple[PyTree, jax.Array]:
    """(delta, weight) of one slot's update in the round's mean on the clock:
    `weigh_arrival` with its staleness τ and start model w_{k_n} (its row of
    the start table `table`, leaves [N, ...]); `params` is w_q."""
    start = jax.tree.map(lambda t: t[plan.start_model], table)
    return self.weigh_arrival(plan.extras['clock']['staleness'], delta,
                              plan.active_weight(), start, params)

  def weigh_arrival(self, staleness: jax.Array, delta: PyTree,
                    weight: jax.Array, start: PyTree,
                    params: PyTree) -> tuple[PyTree, jax.Array]:
    """`parts.clock.weigh_arrival` on the whole model (a method that
    averages only some parts of it weighs those)."""
    return clock_part.weigh_arrival(self.clock.options, staleness, delta,
                                    weight, start, params)

  def weigh_arrivals(self, state: ServerState, plans: ClientPlan,
                     outputs: ClientOutput) -> tuple[ClientPlan, ClientOutput]:
    """On the clock, (plans, outputs) with every slot's weight and delta
    [K, ...] as `clock_weighed` gives them, for a method that reads the
    stacked deltas (`sums_deltas_in_map` False; one that sums them in the
    map weighs there)."""
    delta, weight = jax.vmap(self.clock_weighed, in_axes=(0, 0, None, None))(
        plans, outputs.delta, state.extras['start'], state.params)
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

    Default: one global segment; in cells, the cloud combining the cells'
    edge models (`parts.cells.Cells.cloud`, HIST's Eq. (7)).
    """
    if self.cells is not None:
      return self.cells.cloud(means, coverage)
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
    [0, num_segments); idle slots weigh 0) is combined into a pseudo-gradient
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
          self.num_segments,
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
    return self.charge_cells({
        'train_loss': mean_over_active(outputs.loss, active),
        'examples': jnp.sum(outputs.num_examples),
        'bytes_down': jnp.sum(per_client_bytes),
        'bytes_up': jnp.sum(jnp.where(uploaded, per_client_bytes, 0.0)),
    }, plans, outputs)

  def charge_cells(self, metrics: dict[str, jax.Array], plans: ClientPlan,
                   outputs: ClientOutput) -> dict[str, jax.Array]:
    """A flat round's `metrics`, in cells with E exchanges per client and
    the AirComp statistics (`parts.cells.Cells.charge`)."""
    if self.cells is None:
      return metrics
    return self.cells.charge(metrics, plans, outputs)

  def summary_facts(self) -> dict:
    """Facts of the run's model of the world for summary.json (default none),
    e.g. the channel noise model a result depends on; on the clock, its
    virtual time and RU (`parts.clock.schedule_facts`); in cells, the edge
    channel and its noise model."""
    facts = {} if self.clock is None else self.clock.summary_facts()
    return facts if self.cells is None else {**facts, **self.cells.facts()}

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
    metrics = self.round_metrics(state, plans, outputs)
    if self.clock is not None and not self.sums_deltas_in_map:
      plans, outputs = self.weigh_arrivals(state, plans, outputs)
    new_state = self.aggregate(state, plans, outputs)
    if self.clock is not None:   # the clock's metrics; w_{q+1} dispatched
      inputs = plans.extras['clock']
      metrics.update(clock_part.round_metrics(inputs, plans.is_active()))
      new_state = new_state.replace(extras={
          **new_state.extras, 'start': clock_part.redispatch(
              new_state.extras['start'], plans.client_id,
              inputs['redispatch'], new_state.params)})
    return new_state.replace(round=state.round + 1), metrics
