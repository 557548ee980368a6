"""Client-axis backends: how the selected clients' updates are computed.

Every backend runs the same pure `client_update(global_params, plan, data)` over a
batched `ClientPlan` (leading cohort axis) and returns a batched
`ClientOutput`; only the driver differs, so results agree across backends.

- `vmap`: all clients in one vectorised computation (best on GPU/TPU for dense
  models; convolutions become grouped convolutions, see PERF_NOTES.md).
- `map`: `lax.map` over clients, optionally `chunk_size` clients vmapped at a
  time (lower memory; avoids grouped convolutions when chunk_size is 1).
- `sequential`: a host loop of one jitted call per client. It is the
  debugging backend (like FedJAX's): a failure or a non-finite loss names the
  client and round. It cannot run inside an outer jit.
- `auto`: the fastest measured backend of the platform (`resolve_backend`).
"""
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_het.core.state import ClientOutput, ClientPlan

PyTree = Any
ClientUpdate = Callable[[PyTree, ClientPlan, Any], ClientOutput]

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


def run_vmap(client_update: ClientUpdate, params: PyTree, plans: ClientPlan,
             data) -> ClientOutput:
  return jax.vmap(client_update, in_axes=(None, 0, None))(params, plans, data)


def run_map(client_update: ClientUpdate, params: PyTree, plans: ClientPlan,
            data, chunk_size: int | None = None) -> ClientOutput:
  return jax.lax.map(lambda plan: client_update(params, plan, data), plans,
                     batch_size=chunk_size or None)


def run_sequential(client_update: ClientUpdate, params: PyTree,
                   plans: ClientPlan, data, round_index: int | None = None,
                   jitted_update: ClientUpdate | None = None) -> ClientOutput:
  """Runs clients one by one on the host; errors name the failing client.

  Args:
    client_update: the pure client update.
    params: global parameters.
    plans: batched plans (concrete arrays, not traced).
    data: the federated data.
    round_index: used in error messages.
    jitted_update: a cached `jax.jit(client_update)`, to avoid re-tracing.
  """
  update = jitted_update or jax.jit(client_update)
  host_plans = jax.device_get(plans)  # slice on the host, not per-op on device
  client_ids = host_plans.client_id.tolist()
  where = '' if round_index is None else f' in round {round_index}'
  outputs = []
  for slot, client_id in enumerate(client_ids):
    plan = jax.tree.map(lambda x, i=slot: x[i], host_plans)
    try:
      outputs.append(update(params, plan, data))
    except Exception as e:  # re-raised with the client named, cause kept.
      raise ClientError(
          f'client {client_id} (cohort slot {slot}){where} failed: {e}') from e
  stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *outputs)
  losses = np.asarray(stacked.loss)  # one host sync per round, not per client
  if not np.all(np.isfinite(losses)):
    slot = int(np.argmin(np.isfinite(losses)))
    raise ClientError(
        f'client {client_ids[slot]} (cohort slot {slot}){where} produced a '
        f'non-finite training loss ({losses[slot]}).')
  return stacked
