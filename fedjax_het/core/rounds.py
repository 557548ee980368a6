"""The round compiler: one federated round as one pure, compiled function.

A round has three pure phases, all defined by the algorithm:

    plans          = algorithm.plan_round(state, data)          # sample + per-client plans
    outputs        = backend(client_update)(params, plans, data) # local training
    state, metrics = algorithm.finish_round(state, plans, outputs)  # aggregate + server step

An algorithm whose local phase is more than one call of the clients (HIST's E
edge rounds with edge aggregation in between) defines
`local_phase(params, plans, data, run_clients) -> ClientOutput`, which the
runner calls in place of the single `run_clients(params, plans, data)`; it
works under every backend because `run_clients` is the backend's driver.

With a compiled backend (`vmap`, `map`) the three phases trace into one
`jax.jit` and a chunk of rounds runs in `lax.scan` with the state buffers
donated. With `sequential` the middle phase is a host loop of per-client jitted
calls (for debugging and for CPU, where it can be fastest; PERF_NOTES.md).
The federated data is always an argument, never a closure, so it is not
compiled into the program as a constant and stays on device between rounds.
With a device `mesh` (`sharding.client_mesh`) the compiled backends split the
cohort over the devices (`sharding.shard_clients`); state and data are
replicated on the mesh once, on the first call.
"""
import functools
from typing import Any, Protocol

import jax
import jax.numpy as jnp

from fedjax_het.core import backends, sharding
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState

Metrics = dict[str, jax.Array]
PyTree = Any


class RoundAlgorithm(Protocol):
  """What the round compiler needs from an algorithm."""

  def plan_round(self, state: ServerState, data: Any) -> ClientPlan:
    ...

  def client_update(self, params: Any, plan: ClientPlan,
                    data: Any) -> ClientOutput:
    ...

  def finish_round(self, state: ServerState, plans: ClientPlan,
                   outputs: ClientOutput) -> tuple[ServerState, Metrics]:
    ...


def run_local_phase(algorithm, params, plans: ClientPlan, data,
                    run_clients) -> ClientOutput:
  """`algorithm.local_phase` if it has one, else one `run_clients` call."""
  local_phase = getattr(algorithm, 'local_phase', None)
  if local_phase is None:
    return run_clients(params, plans, data)
  return local_phase(params, plans, data, run_clients)


class RoundRunner:
  """Runs rounds of an algorithm on a client-axis backend.

  Args:
    algorithm: a `RoundAlgorithm`.
    backend: one of `backends.BACKENDS` ('auto' is resolved here).
    map_chunk_size: clients vmapped together inside `lax.map` (backend 'map');
      0 or None maps one client at a time.
    mesh: a one-axis device mesh to shard the cohort over (compiled backends
      only), or None for one device.
  """

  def __init__(self, algorithm: RoundAlgorithm, backend: str = 'vmap',
               map_chunk_size: int | None = None,
               mesh: jax.sharding.Mesh | None = None):
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
    self._client = jax.jit(algorithm.client_update)
    self._finish = jax.jit(algorithm.finish_round, donate_argnums=0)
    self._chunks = {}

  def place(self, tree: PyTree) -> PyTree:
    """`tree` (state or federated data) placed for this runner: replicated on
    the mesh, or unchanged on one device. Place the data once, not per call."""
    return tree if self.mesh is None else sharding.replicate(tree, self.mesh)

  def round(self, state: ServerState, data) -> tuple[ServerState, Metrics]:
    """One round as a pure traceable function (compiled backends only)."""
    plans = self.algorithm.plan_round(state, data)
    update = self.algorithm.client_update
    if self.backend == 'vmap':
      run_clients = functools.partial(backends.run_vmap, update)
    else:
      run_clients = functools.partial(backends.run_map, update,
                                      chunk_size=self.map_chunk_size)
    if self.mesh is not None:
      run_clients = sharding.shard_clients(run_clients, self.mesh)
    outputs = run_local_phase(self.algorithm, state.params, plans, data,
                              run_clients)
    return self.algorithm.finish_round(state, plans, outputs)

  def _compiled_chunk(self, num_rounds: int):
    if num_rounds not in self._chunks:

      def chunk(state, data):
        return jax.lax.scan(lambda s, _: self.round(s, data), state, None,
                            length=num_rounds)

      self._chunks[num_rounds] = jax.jit(chunk, donate_argnums=0)
    return self._chunks[num_rounds]

  def run(self, state: ServerState, data,
          num_rounds: int) -> tuple[ServerState, Metrics]:
    """Runs `num_rounds` rounds; metrics get a leading round axis.

    The input state's buffers are donated: use the returned state.
    """
    state, data = self.place((state, data))
    if self.backend in backends.COMPILED_BACKENDS:
      return self._compiled_chunk(num_rounds)(state, data)
    history = []
    for _ in range(num_rounds):
      plans = self._plan(state, data)
      run_clients = functools.partial(
          backends.run_sequential, self.algorithm.client_update,
          round_index=int(state.round), jitted_update=self._client)
      outputs = run_local_phase(self.algorithm, state.params, plans, data,
                                run_clients)
      state, metrics = self._finish(state, plans, outputs)
      history.append(metrics)
    return state, jax.tree.map(lambda *xs: jnp.stack(xs), *history)
