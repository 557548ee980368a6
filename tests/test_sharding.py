"""The cohort sharded over a device mesh gives the one-device results.

Four CPU devices are emulated in a subprocess
(`--xla_force_host_platform_device_count=4` must be set before JAX starts);
the rest runs in-process on the single CPU device.
"""
import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from fedjax_het import run
from fedjax_het.config import ConfigError, validate
from fedjax_het.core import backends, sharding
from fedjax_het.core.rounds import RoundRunner
from engine_utils import tiny_config, tiny_fedavg
from script_utils import child_report


@pytest.fixture(scope='session')
def four_device_report(tmp_path_factory, worker_id):
  """The subprocess's JSON report, computed once per test session."""
  return child_report(tmp_path_factory, worker_id, 'four_device_report')


def test_four_devices_are_emulated(four_device_report):
  assert four_device_report['devices'] == 4


@pytest.mark.parametrize('case', ['fedavg/vmap', 'fedavg/map', 'fiarse/vmap',
                                  'heterofl/map', 'fedacs/vmap', 'hist/vmap'])
def test_sharded_rounds_equal_one_device(four_device_report, case):
  # Per-client work is identical; only the cross-device sum of the
  # aggregation is ordered differently, so equality is to float32 rounding.
  diff = four_device_report['cases'][case]
  assert diff['params'] <= 4 * np.finfo(np.float32).eps * diff['scale']
  assert diff['metrics'] <= 1e-5


def test_sharded_trainer_equals_one_device(four_device_report):
  for one, sharded in four_device_report['trainer'].values():
    assert sharded == pytest.approx(one, rel=1e-5)


def test_a_cohort_that_does_not_split_evenly_is_refused(four_device_report):
  assert 'cannot be split evenly over 4 devices' in four_device_report[
      'indivisible_cohort']


def test_the_mesh_splits_the_methods_cohort(four_device_report):
  """`run.make_runner` sizes the mesh from the cohort the method maps over
  (`cohort_size`), not from clients_per_round: OS and fedavg_het's full
  participation run all 8 clients whatever clients_per_round (3) says."""
  assert four_device_report['mesh_devices'] == {
      'fedavg': 3, 'os': 4, 'fedavg_het full': 4,
      'fedavg on 4': 'fedavg runs a cohort of 6 clients per round, which '
                     'cannot be split evenly over 4 devices; use a multiple '
                     'of 4 or set client_devices.'}


def test_one_device_needs_no_mesh_and_too_many_devices_fail_clearly():
  assert sharding.client_mesh(0) is None
  assert sharding.client_mesh(1) is None
  with pytest.raises(ValueError, match='device'):
    sharding.client_mesh(jax.device_count() + 1)


def test_sequential_backend_refuses_a_mesh():
  algorithm, _, _ = tiny_fedavg()
  mesh = Mesh(np.asarray(jax.devices()[:1]), (sharding.CLIENT_AXIS,))
  with pytest.raises(ValueError, match='one device'):
    RoundRunner(algorithm, 'sequential', mesh=mesh)


@pytest.mark.parametrize('overrides, message', [
    ({'client_devices': -1}, 'client_devices must be a non-negative integer'),
    ({'client_devices': 99}, 'client_devices=99'),
    ({'backend': 'sequential', 'client_devices': 2}, 'runs on one device'),
])
def test_bad_device_configs_fail_clearly(overrides, message):
  config = tiny_config(**overrides)
  algorithm, _, _ = tiny_fedavg()
  with pytest.raises(ConfigError, match=message):
    validate(config)
    run.make_runner(config, algorithm)


def test_auto_backend_maps_one_client_on_cpu_and_chunks_on_accelerators():
  """'auto' is map everywhere: one client at a time on CPU, chunks of
  ACCELERATOR_CHUNK on a GPU or TPU (an H200 ran W-PFL's cohort of 500 4×
  faster in chunks of 125 than vmapped at once); a map_chunk_size set wins."""
  assert backends.resolve_backend('auto') == 'map'
  assert backends.auto_chunk_size('cpu') == 0
  assert backends.auto_chunk_size('gpu') == backends.auto_chunk_size(
      'tpu') == backends.ACCELERATOR_CHUNK == 128
  assert backends.resolve_backend('sequential') == 'sequential'
  with pytest.raises(ValueError, match='unknown backend'):
    backends.resolve_backend('gpu_magic')
