"""The round compiler: one federated round as one pure, compiled function.

A round has three pure phases, all defined by the algorithm:

    plans          = algorithm.plan_round(state, data, inputs)         # who, how
    outputs        = algorithm.local_phase(state, plans, data, clients) # local training
    state, metrics = algorithm.finish_round(state, plans, outputs)     # aggregate + server step

`clients` is the backend's client driver (`backends.Clients`): the local phase
runs the clients' programs with `clients.map` and loops between maps (HIST's
E edge rounds) with `clients.scan`, the same code under every backend.
`inputs` is this round's row of host-made round inputs (e.g. a virtual
clock's schedule), or None.

With a compiled backend (`vmap`, `map`) the three phases trace into one
`jax.jit` and a chunk of rounds runs in `lax.scan` (inputs as its xs) with the
state buffers donated. With `sequential` the plan and finish phases are jitted
and the local phase runs on the host, one jitted call per client (for
debugging and for CPU, where it can be fastest; see the README's Speed
section). The federated data is always an argument, never a closure, so it is
not compiled into the program as a constant and stays on device between
rounds. With a device `mesh` (`sharding.client_mesh`) the compiled backends
split the cohort over the devices (`sharding.ShardedClients`); state and
data are replicated on the mesh once, on the first call.

`run_cohorts` runs a chunk of rounds on their cohorts' data only (a
`CohortData` per round, stacked into the scan's xs): the streamed layout of
a federation kept on the host (`core.stream.CohortStream`). Each round also
reports whether its cohort held every client its active plans read.
"""
from typing import Any, Protocol

import jax
import jax.numpy as jnp

from fedjax_het.core import backends, sharding
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState
from fedjax_het.data.federated import CohortData

Metrics = dict[str, jax.Array]
PyTree = Any

# Round metrics the runner adds: values of a round, not counts to add up.
PER_ROUND_METRICS = ('useful_step_fraction',)


class RoundAlgorithm(Protocol):
  """What the round compiler needs from an algorithm."""

  def plan_round(self, state: ServerState, data: Any,
                 inputs: PyTree = None) -> ClientPlan:
    ...

  def local_phase(self, state: ServerState, plans: ClientPlan, data: Any,
                  clients: backends.Clients) -> ClientOutput:
    ...

  def round_inputs(self, first: int, count: int) -> PyTree:
    ...

  def prepare_rounds(self, state: ServerState, first: int,
                     count: int) -> tuple[ServerState, PyTree]:
    ...

  def finish_round(self, state: ServerState, plans: ClientPlan,
                   outputs: ClientOutput) -> tuple[ServerState, Metrics]:
    ...


class RoundRunner:
  """Runs rounds of an algorithm on a client-axis backend.

  Args:
    algorithm: a `RoundAlgorithm`.
    backend: one of `backends.BACKENDS` ('auto' is resolved here).
    map_chunk_size: clients vmapped together inside `lax.map` (backend 'map');
      0 or None maps one client at a time, or, with backend 'auto',
      `backends.auto_chunk_size()` at a time (CPU: one; accelerators: 128).
    mesh: a one-axis device mesh to shard the cohort over (compiled backends
      only), or None for one device.
  """

  def __init__(self, algorithm: RoundAlgorithm, backend: str = 'vmap',
               map_chunk_size: int | None = None,
               mesh: jax.sharding.Mesh | None = None):
    if backend == 'auto' and not map_chunk_size:
      map_chunk_size = backends.auto_chunk_size()
    backend = backends.resolve_backend(backend)
    if mesh is not None and backend not in backends.COMPILED_BACKENDS:
      raise ValueError(
          f'backend {backend!r} runs on one device; shard the cohort over '
          f'{mesh.devices.size} devices with backend vmap or map, or set '
          'client_devices=1.')
    self.algorithm = algorithm
    self.backend = backend
    self.map_chunk_size = map_chunk_size or None
    self.mesh = mesh
    self._plan = jax.jit(algorithm.plan_round)
    self._finish = jax.jit(algorithm.finish_round, donate_argnums=0)
    self._sequential = backends.SequentialClients()
    self._chunks = {}

  def place(self, tree: PyTree) -> PyTree:
    """`tree` (state or federated data) placed for this runner: replicated on
    the mesh, or unchanged on one device. Place the data once, not per call."""
    return tree if self.mesh is None else sharding.replicate(tree, self.mesh)

  def clients(self) -> backends.Clients:
    """The client driver of a compiled round."""
    clients = backends.make_clients(self.backend, self.map_chunk_size)
    if self.mesh is not None:
      clients = sharding.ShardedClients(clients, self.mesh)
    return clients

  def round(self, state: ServerState, data,
            inputs: PyTree = None) -> tuple[ServerState, Metrics]:
    """One round as a pure traceable function (compiled backends only)."""
    state, metrics, _ = self._round(state, data, inputs)
    return state, metrics

  def _round(self, state, data, inputs):
    """`round`, and whether `data` held the rows its active plans read."""
    plans = self.algorithm.plan_round(state, data, inputs)
    clients = self.clients()
    outputs = self.algorithm.local_phase(state, plans, data, clients)
    held = cohort_held(data, plans)
    state, metrics = self.algorithm.finish_round(state, plans, outputs)
    return state, {**metrics, **step_metrics(plans, clients)}, held

  def _compiled_chunk(self, num_rounds: int):
    if num_rounds not in self._chunks:

      def chunk(state, data, inputs):
        return jax.lax.scan(lambda s, x: self.round(s, data, x), state,
                            inputs, length=num_rounds)

      self._chunks[num_rounds] = jax.jit(chunk, donate_argnums=0)
    return self._chunks[num_rounds]

  def _compiled_cohort_chunk(self, num_rounds: int):
    if ('cohorts', num_rounds) not in self._chunks:

      def chunk(state, cohorts, inputs):
        def one(s, xs):
          s, metrics, held = self._round(s, *xs)
          return s, (metrics, held)

        state, (metrics, held) = jax.lax.scan(one, state, (cohorts, inputs),
                                              length=num_rounds)
        return state, metrics, held

      self._chunks['cohorts', num_rounds] = jax.jit(chunk, donate_argnums=0)
    return self._chunks['cohorts', num_rounds]

  def run(self, state: ServerState, data, num_rounds: int,
          inputs: PyTree = None) -> tuple[ServerState, Metrics]:
    """Runs `num_rounds` rounds; metrics get a leading round axis.

    Args:
      state: the server state; its buffers are donated: use the returned one.
      data: the federated data.
      num_rounds: rounds to run (compiled into one scan).
      inputs: per-round inputs with a leading [num_rounds] axis (each round's
        `plan_round` gets its row); None: the algorithm's own
        (`prepare_rounds`, e.g. a virtual clock's schedule; None for most
        methods), in as many scans as it prepares prefixes (`_in_parts`).
    """
    placed = self.place(data)

    def run_part(state, first, count, inputs):
      del first
      state = self.place(state)
      if self.backend in backends.COMPILED_BACKENDS:
        state, metrics = self._compiled_chunk(count)(state, placed, inputs)
        return state, (metrics,)
      state, metrics, _ = self._run_sequential(state, lambda r: placed,
                                               count, inputs)
      return state, (metrics,)

    state, (metrics,) = self._in_parts(state, num_rounds, inputs, run_part)
    return state, metrics

  def run_cohorts(self, state: ServerState, cohorts: CohortData,
                  inputs: PyTree = None
                  ) -> tuple[ServerState, Metrics, jax.Array]:
    """Runs one round per cohort of `cohorts` (leaves [R, K, ...]: round r
    reads only `cohorts` row r, see `CohortData`).

    As `run`, plus bool [R]: whether round r's cohort held every client its
    active plans read (False: that round trained on other clients' rows; the
    caller must not use its results). Place `cohorts` on the device
    beforehand (the mesh: replicated) to overlap the transfer with compute.
    """
    num_rounds = int(cohorts.client_ids.shape[0])

    def run_part(state, first, count, inputs):
      part = cohorts if count == num_rounds else jax.tree.map(
          lambda x: x[first:first + count], cohorts)
      state = self.place(state)
      if self.backend in backends.COMPILED_BACKENDS:
        state, metrics, held = self._compiled_cohort_chunk(count)(
            state, part, inputs)
      else:
        state, metrics, held = self._run_sequential(
            state, lambda r: jax.tree.map(lambda x: x[r], part), count,
            inputs)
      return state, (metrics, held)

    state, (metrics, held) = self._in_parts(state, num_rounds, inputs,
                                            run_part)
    return state, metrics, held

  def _in_parts(self, state, num_rounds: int, inputs, run_part):
    """`num_rounds` rounds as `run_part(state, offset, count, inputs) ->
    (state, outputs)` calls, the outputs concatenated over rounds.

    Given `inputs`, one call. Otherwise the algorithm prepares the rounds
    (`prepare_rounds(state, first, rest)`), which may return inputs for a
    prefix of fewer rounds than asked, as many as the host can decide from
    the state so far (a clock charging masks that clients draw within the
    chunk: `methods.cos2p.cos2p`); the rest is prepared once the prefix has
    run, from its state."""
    if inputs is not None:
      return run_part(state, 0, num_rounds, inputs)
    parts, done = [], 0
    while done < num_rounds:
      state, inputs = self.algorithm.prepare_rounds(
          state, int(state.round), num_rounds - done)
      leaves = jax.tree.leaves(inputs)
      count = int(leaves[0].shape[0]) if leaves else num_rounds - done
      state, outputs = run_part(state, done, count, inputs)
      parts.append(outputs)
      done += count
    if len(parts) == 1:
      return state, parts[0]
    return state, jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)

  def _run_sequential(self, state, data_of, num_rounds, inputs):
    """The sequential backend's rounds; round r reads `data_of(r)`."""
    history, held = [], []
    for r in range(num_rounds):
      row = None if inputs is None else jax.tree.map(lambda x, r=r: x[r],
                                                     inputs)
      data = data_of(r)
      plans = self._plan(state, data, row)
      self._sequential.round_index = int(state.round)
      outputs = self.algorithm.local_phase(state, plans, data,
                                           self._sequential)
      held.append(cohort_held(data, plans))
      state, metrics = self._finish(state, plans, outputs)
      history.append({**metrics, **step_metrics(plans, self._sequential)})
    return (state, jax.tree.map(lambda *xs: jnp.stack(xs), *history),
            jnp.stack(held))


def step_metrics(plans: ClientPlan, clients: backends.Clients) -> Metrics:
  """`useful_step_fraction`: the local steps the round's plans ask for
  (`backends.planned_steps`) over those the client driver computes for them
  (`Clients.computed_steps`: a vmapped chunk runs to its most), float scalar;
  1 when no client runs a step. Counted per map of the plans, it is the
  same for every map of a round (cells' edge rounds)."""
  steps = backends.planned_steps(plans)
  computed = clients.computed_steps(steps)
  return {'useful_step_fraction': jnp.where(
      computed > 0, jnp.sum(steps) / jnp.maximum(computed, 1), 1.0)}


def cohort_held(data, plans) -> jax.Array:
  """bool scalar: whether `data` has the rows of every active planned client
  (always, for a whole `FederatedData`; a `CohortData` must hold them)."""
  if not isinstance(data, CohortData):
    return jnp.asarray(True)
  return jnp.all(data.holds(plans.client_id) | ~plans.is_active())
