"""The base of every federated method: a bundle of pure functions on the engine.

`FederatedAlgorithm` holds what the round runner calls (`init`, `plan_round`,
`round_inputs` / `prepare_rounds`, `local_phase`, `finish_round`) and is made
of the shared mechanism in `methods/common/` (`traits`, `planning`,
`local_training`, `server`, `accounting`). A method subclasses it and
overrides only what it changes:

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
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections

from fedjax_het.core import parts as parts_lib
from fedjax_het.core.backends import Clients
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState, \
    round_key
from fedjax_het.methods.common.accounting import Accounting
from fedjax_het.methods.common.local_training import LocalTraining
from fedjax_het.methods.common.planning import Planning, occurrence_index
from fedjax_het.methods.common.server import ServerRule
from fedjax_het.methods.common.traits import MethodTraits

PyTree = Any


class FederatedAlgorithm(MethodTraits, Planning, LocalTraining, ServerRule,
                         Accounting):
  """Shared mechanism of all methods; see the module docstring.

  Args:
    config: the run's `ConfigDict` (core keys in `fedjax_het.config`).
    model: a flax.linen module whose `apply({'params': p}, x, train=...)`
      returns logits.
    data: `FederatedData` of the clients' training sets.
  """

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

  def finish_round(self, state: ServerState, plans: ClientPlan,
                   outputs: ClientOutput) -> tuple[ServerState, dict]:
    """The method's metrics with the parts' accounting, its aggregate (the
    arrivals weighed by the parts where the method reads stacked deltas),
    then the parts' state after the server step and from the round's
    uploads; the round advanced."""
    metrics = self.parts.metrics(self.round_metrics(state, plans, outputs),
                                 plans, outputs)
    if self.parts.weighs and not self.sums_in_map:
      plans, outputs = self.weigh_arrivals(state, plans, outputs)
    new_state = self.parts.finish(state, self.aggregate(state, plans, outputs),
                                  plans, outputs)
    return new_state.replace(round=state.round + 1), metrics
