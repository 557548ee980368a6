"""The cohort axis sharded over a device mesh (several GPUs/TPUs, hosts, or CPU devices).

With a one-axis mesh ('clients') of n devices, each device runs the clients of
its slice of the cohort with the inner backend (vmap or lax.map) through
`jax.shard_map`; plans and client outputs are split on their leading cohort
axis, while the global parameters and the federated data are replicated. The
aggregation that follows (`aggregation.segment_sum`, a contraction over the
client axis) is partitioned by XLA into per-device partial sums and one
all-reduce, so only [S, ...]-sized sums cross devices, never client deltas.

Multi-host or multi-process: call `initialize_distributed()` first (the
CLI's `--distributed`); `jax.devices()` then lists every process's devices,
the same program runs in every process and `replicate` builds global arrays
from each process's identical host copy. On CPU the processes' collectives
go through gloo (tests/test_multiprocess.py runs two on localhost).

On CPU, `XLA_FLAGS=--xla_force_host_platform_device_count=n` makes n CPU
devices: the tests use it to check that a sharded round equals a one-device
round, and on a multi-core CPU it runs clients on separate cores.
"""
import os
import re
import sys
import threading
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from fedjax_het.options import ConfigError

PyTree = Any
CLIENT_AXIS = 'clients'
_CPU_DEVICE_COUNT_FLAG = '--xla_force_host_platform_device_count'


def set_cpu_device_count(count: int, environ=None) -> None:
  """Makes XLA split the CPU into `count` devices (replacing any count in XLA_FLAGS).

  XLA reads the flag when JAX creates its CPU client, on first use of a
  device (imports do not): call this before anything touches devices. With
  `environ` (a child process's environment) the flag is set there instead of
  in this process's; its other XLA flags are kept either way.
  """
  environ = os.environ if environ is None else environ
  flags = re.sub(_CPU_DEVICE_COUNT_FLAG + r'=\d+', '', environ.get('XLA_FLAGS', ''))
  environ['XLA_FLAGS'] = f'{flags.strip()} {_CPU_DEVICE_COUNT_FLAG}={count}'.strip()


# Seconds `initialize_distributed` waits for every process to join, by default (JAX's own).
DISTRIBUTED_TIMEOUT_S = 300
_PROCESS_ENV = {'JAX_NUM_PROCESSES': 'num_processes', 'JAX_PROCESS_ID': 'process_id'}


def _process_env() -> dict[str, int]:
  """jax.distributed.initialize's process count and index from JAX_NUM_PROCESSES
  and JAX_PROCESS_ID, where set; ConfigError for a value that is not an integer."""
  values = {}
  for env, arg in _PROCESS_ENV.items():
    if env in os.environ:
      if not os.environ[env].strip().isdigit():
        raise ConfigError(f'{env} must be a non-negative integer, got '
                          f'{os.environ[env]!r}.')
      values[arg] = int(os.environ[env])
  return values


def _missing_peers(process: dict[str, int], timeout_s: float) -> str:
  """The sentence for a group of processes that did not form in `timeout_s`."""
  retry = '--distributed-timeout SECONDS waits longer.'
  if len(process) < 2:  # a cluster's own environment
    return (f'--distributed: not every process joined within {timeout_s:g} s: '
            f'start the same command in every process; {retry}')
  others = [i for i in range(process['num_processes']) if i != process['process_id']]
  missing = (f'process {others[0]}, which never joined: start the same command '
             f'with JAX_PROCESS_ID={others[0]}' if len(others) == 1 else
             f'processes {", ".join(map(str, others))}, not all of which '
             'joined: start the same command with each missing JAX_PROCESS_ID')
  return (f'--distributed: process {process["process_id"]} of '
          f'{process["num_processes"]} waited {timeout_s:g} s at '
          f'{os.environ.get("JAX_COORDINATOR_ADDRESS")} for {missing}, or set '
          f'JAX_NUM_PROCESSES to the number of processes started; {retry}')


def initialize_distributed(timeout_s: float = DISTRIBUTED_TIMEOUT_S,
                           prog: str = 'fedjax-het') -> None:
  """`jax.distributed.initialize()`, taking the process count and index from
  JAX_NUM_PROCESSES and JAX_PROCESS_ID when they are set (processes on one
  machine, or a cluster JAX does not detect; JAX reads the coordinator's
  host:port from JAX_COORDINATOR_ADDRESS). Without them JAX detects Cloud
  TPU slices, SLURM, Open MPI and Kubernetes.

  Raises ConfigError when there is neither a cluster nor these variables.
  When the processes have not all joined after `timeout_s` seconds (one was
  never started), prints one line `<prog>: ...` on stderr naming the missing
  processes and what to set, and ends this process with status 1: JAX's
  connection cannot be abandoned (its thread would abort the process later
  with a stack dump).
  """
  process = _process_env()

  def give_up():
    print(f'{prog}: {_missing_peers(process, timeout_s)}', file=sys.stderr,
          flush=True)
    os._exit(1)  # pylint: disable=protected-access

  watchdog = threading.Timer(timeout_s, give_up)
  watchdog.daemon = True
  watchdog.start()
  try:
    # JAX's own deadline comes later: the watchdog speaks first.
    jax.distributed.initialize(**process,
                               initialization_timeout=int(2 * timeout_s) + 10)
  except ValueError as e:  # no coordinator, process count or index
    raise ConfigError(
        f'--distributed found no cluster to join ({e}): set '
        'JAX_COORDINATOR_ADDRESS=host:port, JAX_NUM_PROCESSES and '
        'JAX_PROCESS_ID in every process (or run under Cloud TPU, SLURM, Open '
        'MPI or Kubernetes).') from e
  finally:
    watchdog.cancel()


def barrier(name: str, timeout_s: float = 3600) -> None:
  """Every process waits here until all have arrived (the coordination
  service's barrier, orbax's `get_barrier_sync_fn`; nothing with one
  process). Call it before the processes' first collective: gloo, the CPU
  collectives, gives up when it connects the processes on the first one and
  a peer arrives more than 30 s later (`DEADLINE_EXCEEDED: GetKeyValue()
  timed out`), and the compiles before it can differ by more than that on a
  loaded machine; this barrier waits `timeout_s`. Later collectives wait for
  a late peer."""
  if jax.process_count() > 1:
    import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
    ocp.multihost.get_barrier_sync_fn()(key=name, timeout_ms=int(timeout_s * 1000))


def client_mesh(num_devices: int = 0) -> Mesh | None:
  """A one-axis mesh of the first `num_devices` devices (0: all), or None for one device."""
  devices = jax.devices()
  if num_devices < 0 or num_devices > len(devices):
    raise ValueError(f'client_devices={num_devices} but {len(devices)} '
                     f'device(s) are visible ({jax.default_backend()}); '
                     'ask for 0 (all) up to that number.')
  devices = devices[:num_devices or len(devices)]
  if len(devices) == 1:
    return None
  return Mesh(np.asarray(devices), (CLIENT_AXIS,))


def replicate(tree: PyTree, mesh: Mesh) -> PyTree:
  """`tree` as global arrays with a full copy on every device of `mesh`.

  Works across hosts: every process passes the same values (built from the
  same seed), and each device's copy comes from its own process's host copy.
  Arrays already placed this way are returned unchanged.
  """
  sharding = NamedSharding(mesh, PartitionSpec())

  def place(x):
    if isinstance(x, jax.Array) and x.sharding == sharding:
      return x
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding,
                                        lambda index: host[index])

  return jax.tree.map(place, tree)


class ShardedClients:
  """A client driver whose `map` splits the cohort over `mesh`.

  Each device runs its slice of the cohort with the inner driver (vmap or
  lax.map) through `jax.shard_map`: per-client inputs and outputs are split on
  their leading cohort axis, shared inputs (global params, start models, the
  federated data) are replicated. `scan` runs on every device alike.

  Args:
    inner: `backends.VmapClients` or `backends.MapClients`.
    mesh: from `client_mesh`.
  """

  def __init__(self, inner, mesh: Mesh):
    self.inner = inner
    self.mesh = mesh

  def _check_cohort(self, per_client: PyTree) -> None:
    num_devices = self.mesh.devices.size
    cohort = jax.tree.leaves(per_client)[0].shape[0]
    if cohort % num_devices:
      raise ValueError(
          f'a cohort of {cohort} clients cannot be split evenly over '
          f'{num_devices} devices; use a multiple of {num_devices} clients '
          'per round (HIST: per round in all cells) or set client_devices.')

  def map(self, fn: Callable, shared: PyTree, per_client: PyTree) -> PyTree:
    self._check_cohort(per_client)
    clients = PartitionSpec(CLIENT_AXIS)
    return jax.shard_map(
        lambda s, c: self.inner.map(fn, s, c), mesh=self.mesh,
        in_specs=(PartitionSpec(), clients), out_specs=clients,
        check_vma=False)(shared, per_client)

  def map_sum(self, fn: Callable, shared: PyTree, per_client: PyTree
              ) -> tuple[PyTree, PyTree]:
    """Each device sums its slice in order; one all-reduce (`psum`) adds the
    devices' sums, so only [S, ...]-sized sums cross devices."""
    self._check_cohort(per_client)
    clients = PartitionSpec(CLIENT_AXIS)

    def local(s, c):
      outs, total = self.inner.map_sum(fn, s, c)
      return outs, jax.lax.psum(total, CLIENT_AXIS)

    return jax.shard_map(
        local, mesh=self.mesh, in_specs=(PartitionSpec(), clients),
        out_specs=(clients, PartitionSpec()), check_vma=False)(shared,
                                                               per_client)

  def scan(self, fn: Callable, carry: PyTree, xs: PyTree):
    return self.inner.scan(fn, carry, xs)

  def computed_steps(self, steps: jax.Array) -> jax.Array:
    """The inner driver's count on each device's slice of the cohort, summed."""
    slices = steps.reshape(self.mesh.devices.size, -1)
    return jnp.sum(jax.vmap(self.inner.computed_steps)(slices))
