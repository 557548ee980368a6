"""Client-axis backends: how the selected clients' programs are run.

Every backend is a client driver (`Clients`): `map(fn, shared, per_client)`
runs the same pure per-client function over a leading cohort axis and
`scan(fn, carry, xs)` loops between such maps. Only the driver differs, so
results agree across backends.

- `vmap`: all clients in one vectorised computation (best on GPU/TPU for dense
  models; convolutions become grouped convolutions, see the README's Speed section).
- `map`: `lax.map` over clients, optionally `chunk_size` clients vmapped at a
  time (lower memory; avoids grouped convolutions when chunk_size is 1).
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


def resolve_backend(backend: str, platform: str | None = None) -> str:
  """The concrete backend for `backend`; 'auto' picks by platform.

  The rule comes from `fedjax-het bench` (README "Speed", 2-core EPYC). On
  CPU `map` (clients one after another inside the compiled round, each
  client's parameters cache-resident) was fastest on W-MLP (0.065 s/round on
  one device vs vmap 0.087 and sequential 0.082); on W-PFL with im2col
  convolutions it tied with sequential (3.16 vs 3.00; vmap 3.70), and unlike
  sequential it shards over devices (2 CPU devices: 0.028 and 2.85). On GPU
  and TPU one vmapped computation fills the device, and a per-client loop
  pays kernel launches per operation, so 'auto' is `vmap` there.

  Args:
    backend: one of BACKENDS.
    platform: 'cpu', 'gpu', 'tpu', ...; default `jax.default_backend()`.
  """
  if backend not in BACKENDS:
    raise ValueError(f'unknown backend {backend!r}; choose one of '
                     f'{", ".join(BACKENDS)}.')
  if backend != 'auto':
    return backend
  platform = platform or jax.default_backend()
  return 'map' if platform == 'cpu' else 'vmap'


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

  def scan(self, fn: Callable, carry: PyTree, xs: PyTree
           ) -> tuple[PyTree, PyTree]:
    ...


class VmapClients:
  """All clients in one vectorised computation."""

  def map(self, fn, shared, per_client):
    return jax.vmap(fn, in_axes=(None, 0))(shared, per_client)

  def scan(self, fn, carry, xs):
    return jax.lax.scan(fn, carry, xs)


@dataclasses.dataclass(frozen=True)
class MapClients(VmapClients):
  """Clients one after another (`lax.map`), `chunk_size` vmapped at a time."""
  chunk_size: int | None = None

  def map(self, fn, shared, per_client):
    return jax.lax.map(lambda one: fn(shared, one), per_client,
                       batch_size=self.chunk_size or None)


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

  def _compiled(self, fn):
    if fn not in self._jitted:
      self._jitted[fn] = jax.jit(fn)
    return self._jitted[fn]

  def map(self, fn, shared, per_client):
    update = self._compiled(fn)
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
        outputs.append(update(shared, one))
      except Exception as e:  # re-raised with the client named, cause kept.
        raise ClientError(f'client {client_id} (cohort slot {slot}){where} '
                          f'failed: {e}') from e
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *outputs)
    if isinstance(stacked, ClientOutput):
      losses = np.asarray(stacked.loss)  # one host sync per map
      if not np.all(np.isfinite(losses)):
        slot = int(np.argmin(np.isfinite(losses)))
        raise ClientError(
            f'client {client_ids[slot]} (cohort slot {slot}){where} produced '
            f'a non-finite training loss ({losses[slot]}).')
    return stacked

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
