"""Client-axis backends: how the selected clients' programs are run.

Every backend is a client driver (`Clients`): `map(fn, shared, per_client)`
runs the same pure per-client function over a leading cohort axis,
`map_sum` does the same and also sums a part of each client's result over the
cohort (the aggregation's segment sums: the [K, ...] client deltas are then
never stacked), and `scan(fn, carry, xs)` loops between such maps. Only the
driver differs, so results agree across backends. `map_sum` adds the clients'
summands in cohort order on every backend; where a summand is computed in the
same loop body as the add (map, sequential), XLA:CPU may contract a product
and the add into one fused multiply-add, so vmap's sums can differ from
theirs in the last bit.

- `vmap`: all clients in one vectorised computation (best on GPU/TPU for dense
  models; convolutions become grouped convolutions, see the README's Speed section).
- `map`: `lax.map` over clients, optionally `chunk_size` clients vmapped at a
  time (lower memory; avoids grouped convolutions when chunk_size is 1).

A client's local steps are a loop of its own step count (`core.program`):
one at a time, it computes only those; vmapped clients run to the most steps
among them. The chunked `map` therefore orders the cohort by the steps its
plans ask for before cutting it into chunks (`planned_steps`, a stable sort)
and restores cohort order after, so a chunk's padding is bounded by the
spread of step counts inside it; its `map_sum` then adds the summands in that
order, not in cohort order (equal step counts keep cohort order). Every
driver counts the steps it computes for a map (`computed_steps`), the
denominator of the round's `useful_step_fraction` (`core.rounds`).
- `sequential`: a host loop of one jitted call per client. It is the
  debugging backend (like FedJAX's): a failure or a non-finite loss names the
  client and round. It cannot run inside an outer jit.
- `auto`: the fastest measured backend of the platform (`resolve_backend`).
"""
import dataclasses
from typing import Any, Callable, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_het.core.state import ClientOutput, ClientPlan

PyTree = Any

BACKENDS = ('auto', 'vmap', 'map', 'sequential')
COMPILED_BACKENDS = ('vmap', 'map')


# Clients vmapped together per `lax.map` step when 'auto' runs on an
# accelerator and no map_chunk_size is set (see `resolve_backend`).
ACCELERATOR_CHUNK = 128


def resolve_backend(backend: str) -> str:
  """The concrete backend for `backend`; 'auto' is `map` on every platform.

  The rule comes from `fedjax-het bench` (README "Speed"). On CPU (2-core
  EPYC) `map` with one client at a time was fastest on W-MLP (0.065 s/round
  on one device vs vmap 0.087 and sequential 0.082); on W-PFL with im2col
  convolutions it tied with sequential (3.16 vs 3.00; vmap 3.70), and unlike
  sequential it shards over devices. On an H200, vmapping W-PFL's whole
  cohort of 500 took 0.93 s/round, `map` with chunks of 125 or 250 clients
  0.23 s (chunks of 50: 0.25 s), while a cohort of 50 vmapped at once took
  0.027 s: on accelerators 'auto' maps chunks of `auto_chunk_size` clients,
  one vmapped chunk when the cohort is smaller (TPUs: by analogy, not
  measured).

  Args:
    backend: one of BACKENDS.
  """
  if backend not in BACKENDS:
    raise ValueError(f'unknown backend {backend!r}; choose one of '
                     f'{", ".join(BACKENDS)}.')
  return 'map' if backend == 'auto' else backend


def auto_chunk_size(platform: str | None = None) -> int:
  """Clients per `lax.map` step of backend 'auto' when map_chunk_size is not
  set: one at a time on CPU (cache-resident parameters), ACCELERATOR_CHUNK
  on a GPU or TPU (`resolve_backend`)."""
  platform = platform or jax.default_backend()
  return 0 if platform == 'cpu' else ACCELERATOR_CHUNK


class ClientError(RuntimeError):
  """A client's update failed or diverged (raised by the sequential backend)."""


class Clients(Protocol):
  """The client driver an algorithm's `local_phase` runs its clients with.

  `map(fn, shared, per_client)` computes `fn(shared, one_client)` for every
  slice of `per_client` along its leading cohort axis and stacks the results;
  `scan(fn, carry, xs)` is `lax.scan`'s contract (a loop between client maps,
  e.g. HIST's edge rounds). Each backend implements both, so an algorithm never
  looks at the backend or at tracers.
  """

  def map(self, fn: Callable, shared: PyTree, per_client: PyTree) -> PyTree:
    ...

  def map_sum(self, fn: Callable, shared: PyTree, per_client: PyTree
              ) -> tuple[PyTree, PyTree]:
    """`fn(shared, one) -> (out, summand)`: (outs stacked, Σ summands)."""
    ...

  def scan(self, fn: Callable, carry: PyTree, xs: PyTree
           ) -> tuple[PyTree, PyTree]:
    ...

  def computed_steps(self, steps: jax.Array) -> jax.Array:
    """int scalar: the local steps a map of clients asking for `steps`
    (int [K], `planned_steps`) computes, padding included."""
    ...


def planned_steps(plans: ClientPlan) -> jax.Array:
  """int32 [K]: the steps each slot's plan asks for, 0 on an idle slot."""
  return jnp.where(plans.is_active(), plans.num_steps, 0)


def _chunk_maxima(steps: jax.Array, chunk: int) -> jax.Array:
  """int: Σ over chunks of `chunk` consecutive slots (the last may be
  partial) of the chunk's size × its most steps; `steps` int [K]."""
  size = steps.shape[0]
  full = size // chunk * chunk
  total = chunk * jnp.sum(jnp.max(steps[:full].reshape(-1, chunk), axis=1))
  if full < size:
    total = total + (size - full) * jnp.max(steps[full:])
  return total


def _take(tree: PyTree, order: jax.Array | None) -> PyTree:
  """`tree`'s leaves' rows in `order` (leading axis); None: unchanged."""
  if order is None:
    return tree
  return jax.tree.map(lambda x: x[order], tree)


def sum_in_order(stacked: PyTree, total: PyTree = None) -> PyTree:
  """total + stacked[0] + stacked[1] + …, left to right (leaves [K, ...]).

  The summation order of `Clients.map_sum` on every backend; None `total`
  starts from zeros (0 + x is exact, so the first row is kept as is).
  """
  if total is None:
    total = jax.tree.map(lambda x: jnp.zeros(x.shape[1:], x.dtype), stacked)
  total, _ = jax.lax.scan(lambda acc, row: (_add(acc, row), None), total,
                          stacked)
  return total


def _add(total: PyTree, summand: PyTree) -> PyTree:
  return jax.tree.map(jnp.add, total, summand)


def _zero_total(fn: Callable, shared: PyTree, per_client: PyTree) -> PyTree:
  """Zeros shaped like one client's summand of `fn` (traced, not run)."""
  one_client = jax.tree.map(lambda x: x[0], per_client)
  shapes = jax.eval_shape(fn, shared, one_client)[1]
  return jax.tree.map(lambda t: jnp.zeros(t.shape, t.dtype), shapes)


class VmapClients:
  """All clients in one vectorised computation."""

  def map(self, fn, shared, per_client):
    return jax.vmap(fn, in_axes=(None, 0))(shared, per_client)

  def map_sum(self, fn, shared, per_client):
    outs, summands = self.map(fn, shared, per_client)
    return outs, sum_in_order(summands)

  def scan(self, fn, carry, xs):
    return jax.lax.scan(fn, carry, xs)

  def computed_steps(self, steps):
    """One vmapped computation: every client runs to the cohort's most."""
    return _chunk_maxima(steps, steps.shape[0])


@dataclasses.dataclass(frozen=True)
class MapClients(VmapClients):
  """Clients one after another (`lax.map`), `chunk_size` vmapped at a time,
  the cohort ordered by planned steps into the chunks (module docstring)."""
  chunk_size: int | None = None

  def map(self, fn, shared, per_client):
    order = self._bucket_order(per_client)
    outs = jax.lax.map(lambda one: fn(shared, one), _take(per_client, order),
                       batch_size=self.chunk_size or None)
    return _take(outs, _inverse(order))

  def map_sum(self, fn, shared, per_client):
    """A scan over the clients (or chunks of them) that carries the sum."""
    order = self._bucket_order(per_client)
    outs, total = self._map_sum(fn, shared, _take(per_client, order))
    return _take(outs, _inverse(order)), total

  def computed_steps(self, steps):
    """One at a time: the clients' own steps; in chunks: each chunk of the
    ordered cohort runs to its most."""
    if (self.chunk_size or 1) == 1:
      return jnp.sum(steps)
    return _chunk_maxima(jnp.sort(steps), min(self.chunk_size, steps.shape[0]))

  def _bucket_order(self, per_client) -> jax.Array | None:
    """The slots in order of their planned steps (stable), or None: one
    client at a time, or no `ClientPlan` in `per_client`."""
    plans = _plans_of(per_client)
    if (self.chunk_size or 1) == 1 or plans is None:
      return None
    return jnp.argsort(planned_steps(plans), stable=True)

  def _map_sum(self, fn, shared, per_client):
    """`map_sum` of clients in the order given."""
    size = jax.tree.leaves(per_client)[0].shape[0]
    chunk = min(self.chunk_size or 1, size)
    full = size // chunk * chunk
    total = _zero_total(fn, shared, per_client)

    def run_chunk(total, clients):
      outs, summands = jax.vmap(fn, in_axes=(None, 0))(shared, clients)
      return sum_in_order(summands, total), outs

    def run_one(total, client):
      out, summand = fn(shared, client)
      return _add(total, summand), out

    if chunk == 1:
      return jax.lax.scan(run_one, total, per_client)[::-1]
    chunks = jax.tree.map(
        lambda x: x[:full].reshape((full // chunk, chunk) + x.shape[1:]),
        per_client)
    total, outs = jax.lax.scan(run_chunk, total, chunks)
    outs = jax.tree.map(lambda x: x.reshape((full,) + x.shape[2:]), outs)
    if full < size:  # the last, partial chunk
      rest = jax.tree.map(lambda x: x[full:], per_client)
      total, rest_outs = run_chunk(total, rest)
      outs = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), outs,
                          rest_outs)
    return outs, total


def _inverse(order: jax.Array | None) -> jax.Array | None:
  """The permutation that undoes `order` (None: none)."""
  return None if order is None else jnp.argsort(order)


def _plans_of(per_client: PyTree) -> ClientPlan | None:
  """The `ClientPlan` inside a per-client pytree, if there is one."""
  for node in jax.tree.leaves(per_client,
                              is_leaf=lambda x: isinstance(x, ClientPlan)):
    if isinstance(node, ClientPlan):
      return node
  return None


class SequentialClients:
  """A host loop of one jitted call per client; errors name the client.

  Args:
    round_index: used in error messages.
  """

  def __init__(self, round_index: int | None = None):
    self.round_index = round_index
    self._jitted = {}

  def _compiled(self, fn, summed: bool = False):
    """jit of `(shared, one, total) -> (fn's out, total)`, or with `summed`
    (`fn` returns (out, summand)) of `-> (out, total + summand)`: the summand
    is added in the client's compiled call, as in the compiled backends."""
    if (fn, summed) not in self._jitted:
      def step(shared, one, total):
        if not summed:
          return fn(shared, one), total
        out, summand = fn(shared, one)
        return out, _add(total, summand)
      self._jitted[fn, summed] = jax.jit(step)
    return self._jitted[fn, summed]

  def map(self, fn, shared, per_client):
    return self._loop(self._compiled(fn), shared, per_client, None)[0]

  def map_sum(self, fn, shared, per_client):
    return self._loop(self._compiled(fn, summed=True), shared, per_client,
                      _zero_total(fn, shared, per_client))

  def _loop(self, update, shared, per_client, total):
    """(stacked outputs, total) of `update(shared, one, total)` per client."""
    host = jax.device_get(per_client)  # slice on the host, not per-op on device
    size = jax.tree.leaves(host)[0].shape[0]
    plans = _plans_of(host)
    client_ids = (plans.client_id.tolist() if plans is not None
                  else list(range(size)))
    where = '' if self.round_index is None else f' in round {self.round_index}'
    outputs = []
    for slot, client_id in enumerate(client_ids):
      one = jax.tree.map(lambda x, i=slot: x[i], host)
      try:
        output, total = update(shared, one, total)
        outputs.append(output)
      except Exception as e:  # re-raised with the client named, cause kept.
        raise ClientError(f'client {client_id} (cohort slot {slot}){where} '
                          f'failed: {e}') from e
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *outputs)
    self._check_losses(stacked, client_ids, where)
    return stacked, total

  @staticmethod
  def _check_losses(stacked, client_ids, where):
    """A non-finite training loss names its client (one host sync)."""
    if isinstance(stacked, ClientOutput):
      losses = np.asarray(stacked.loss)  # one host sync per map
      if not np.all(np.isfinite(losses)):
        slot = int(np.argmin(np.isfinite(losses)))
        raise ClientError(
            f'client {client_ids[slot]} (cohort slot {slot}){where} produced '
            f'a non-finite training loss ({losses[slot]}).')

  def computed_steps(self, steps):
    """One client per call: the clients' own steps."""
    return jnp.sum(steps)

  def scan(self, fn, carry, xs):
    length = jax.tree.leaves(xs)[0].shape[0]
    history = []
    for i in range(length):
      carry, ys = fn(carry, jax.tree.map(lambda x, i=i: x[i], xs))
      history.append(ys)
    return carry, jax.tree.map(lambda *ys: jnp.stack(ys), *history)


def make_clients(backend: str, map_chunk_size: int | None = None,
                 round_index: int | None = None) -> Clients:
  """The driver of a concrete backend ('vmap', 'map' or 'sequential')."""
  if backend == 'vmap':
    return VmapClients()
  if backend == 'map':
    return MapClients(map_chunk_size)
  if backend == 'sequential':
    return SequentialClients(round_index)
  raise ValueError(f'no client driver for backend {backend!r}.')
