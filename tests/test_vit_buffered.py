"""The ViT methods (Co-S²P and its baselines) in the clock's buffered mode
(FedBuff, `clock.buffer_size`) and on device traces (`clock.device_trace`):
the synchronous special case bit for bit, a K < N run against its host
schedule with Co-S²P's charged clock, resume, and a trace's round times."""
import json

import chex
import jax
import numpy as np
import pytest

from engine_utils import checkpoint_round_trip, committed, tiny_vit_config, \
    vit_experiment
from fedjax_het import config as config_lib
from fedjax_het import run
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.methods import ALGORITHMS
from fedjax_het.parts import clock as clock_part
from fedjax_het.systems import traces
from script_utils import child_report
from test_pinned import params_hash


def vit_run(algorithm, num_clients, rounds, cos2p=(), **clock):
  """(algorithm, state, data) of a tiny ViT run on the clock:
  clients_per_round = K in buffered mode, N otherwise."""
  config = tiny_vit_config(algorithm=algorithm, num_clients=num_clients,
                           rounds=rounds)
  config.clients_per_round = clock.get('buffer_size') or num_clients
  config.clock.update(clock)
  config.cos2p.update(dict(cos2p))
  algorithm, state, split = vit_experiment(config_lib.resolve(config))
  return algorithm, state, split.train.to_device()


def synchronous_pair(name):
  """(Alg. 1 at μ = 1, buffered C = K = N = 3) of `name` on unequal round
  times, 2 rounds; Co-S²P without a mask phase (compile time), its Eq. 4
  reading the start model from the version table. τ_max = N − 1 = 2 (no
  update is stale): both tables have N rows (a 1-row table lets XLA fold
  its gather away and fuse Eq. 4's sums otherwise, which moves last bits)."""
  clock = dict(client_seconds=(1.0, 1.5, 2.5))
  cos2p = dict(mask_rounds=0) if name == 'cos2p' else {}
  return (vit_run(name, 3, 2, cos2p, mu=1.0, **clock),
          vit_run(name, 3, 2, cos2p, buffer_size=3, concurrency=3,
                  tau_max=2, **clock))


def comparisons() -> dict:
  """{name: {mode: params hash}} of `synchronous_pair`'s runs, with the
  buffered run's slot clients and version-table rows."""
  out = {}
  for name in ('vit_fedavg', 'cos2p'):
    report = {}
    for mode, (algorithm, state, data) in zip(('alg1', 'buffered'),
                                              synchronous_pair(name)):
      state, _ = RoundRunner(algorithm, 'map').run(state, data, 2)
      report[mode] = params_hash(state.params)
    inputs = algorithm.round_inputs(0, 2)['clock']
    report['client_id'] = inputs['client_id'].tolist()
    report['arrives'] = bool(inputs['arrives'].all())
    report['table_rows'] = jax.tree.leaves(state.extras['start'])[0].shape[0]
    out[name] = report
  return out


@pytest.fixture(scope='session')
def vit_buffered_report(tmp_path_factory, worker_id):
  """`comparisons()` from a child at the fusion emitters (as
  test_vit_systems.py compares its runs: under the suite's elemental
  emitters two programs that compute the same may fuse differently)."""
  return child_report(tmp_path_factory, worker_id, 'vit_buffered_report')


@pytest.mark.parametrize('name', ['vit_fedavg', 'cos2p'])
def test_c_equal_k_equal_n_is_alg1_at_mu_one_bit_for_bit(vit_buffered_report,
                                                         name):
  """C = K = N = 3 with the constant weight (`synchronous_pair`): every
  client arrives in every step, slot n is client n, and the params equal
  Alg. 1's at μ = 1 (unequal round times) bit for bit."""
  report = vit_buffered_report[name]
  assert report['client_id'] == [[0, 1, 2]] * 2 and report['arrives']
  assert report['table_rows'] == 3
  assert report['buffered'] == report['alg1']


def test_k_below_n_follows_its_host_schedule_and_resumes_exactly(tmp_path):
  """Co-S²P with N = 6, K = 2, C = 3, τ_max = 1 on the analytic clock,
  which charges the masks clients learn (mask round 0): each step's two
  slots hold its arrivals (by client id), whose start model is their
  version's row of the τ_max + 1 = 2-row table; the logged arrivals,
  staleness and dropped updates are the host schedule's; the model moves;
  a run checkpointed after step 2 and resumed by a fresh algorithm (which
  replays the recorded charges) equals the uninterrupted run bit for bit,
  its clock included."""
  run = lambda: vit_run('cos2p', 6, 4, cos2p=dict(mask_rounds=1,
                                                  budgets=(0.25, 1.0) * 3),
                        buffer_size=2, concurrency=3, tau_max=1,
                        client_seconds=(), jitter=0.3)
  algorithm, state, data = run()
  assert algorithm.charges_realised_masks
  w0 = jax.device_get(state.params)   # the runner donates its state
  runner = RoundRunner(algorithm, 'map')
  state, first = runner.run(committed(state), data, 2)
  restored, _ = checkpoint_round_trip(str(tmp_path), 2, state, run()[1])
  full, rest = runner.run(state, data, 2)
  s = algorithm.schedule
  inputs = algorithm.round_inputs(0, 4)['clock']
  assert inputs['client_id'].shape == (4, 2)
  for q in range(4):
    arriving = np.flatnonzero(s.arrivals[q])
    np.testing.assert_array_equal(np.sort(inputs['client_id'][q]), arriving)
  logged = {k: np.concatenate([first[k], rest[k]]) for k in first}
  np.testing.assert_array_equal(logged['arrivals'], s.arrivals[:4].sum(1))
  np.testing.assert_array_equal(logged['dropped_updates'],
                                s.dropped[:4].sum(1))
  np.testing.assert_array_equal(
      logged['staleness'], np.where(s.arrivals, s.staleness, 0)[:4].sum(1))
  assert s.max_staleness == 1 and s.dropped[:4].any()
  moved = [np.max(np.abs(a - b)) for a, b in zip(
      jax.tree.leaves(w0), jax.tree.leaves(jax.device_get(full.params)))]
  assert np.isfinite(logged['train_loss']).all() and max(moved) > 1e-4
  assert jax.tree.leaves(full.extras['start'])[0].shape[0] == 2

  fresh, _, _ = run()
  resumed, _ = RoundRunner(fresh, 'map').run(restored, data, 2)
  chex.assert_trees_all_equal(jax.device_get(resumed.params),
                              jax.device_get(full.params))
  chex.assert_trees_all_equal(jax.device_get(resumed.clients),
                              jax.device_get(full.clients))
  np.testing.assert_array_equal(resumed.extras['charged_seconds'],
                                full.extras['charged_seconds'])
  np.testing.assert_array_equal(fresh.schedule.end_time, s.end_time)


VIT_METHODS = sorted(name for name, cls in ALGORITHMS.items()
                     if getattr(cls, 'always_on_clock', False))


@pytest.mark.parametrize('name', VIT_METHODS)
def test_every_vit_method_plans_a_step_of_k_slots(name):
  """Each of the 9 ViT methods in buffered mode (N = 6, K = 2, C = 3,
  τ_max = 1), its round traced (shapes only, nothing compiled): the plans
  hold K slots, the step's arriving clients, every per-client fact of the
  method gathered to them (a fact left [N] fails to trace), and the round
  returns the state it was given, shapes and types."""
  config = tiny_vit_config(algorithm=name, num_clients=6, clients_per_round=2)
  config.clock.update(buffer_size=2, concurrency=3, tau_max=1,
                      client_seconds=(1.0, 1.3, 2.1, 0.7, 1.9, 1.1))
  if 'optimizer' not in ALGORITHMS[name].reads_keys:
    config.cos2p.optimizer = 'adan'
  config.model_options['decisions'] = ALGORITHMS[name].reads_decisions
  split, _, params, algorithm = run.build_experiment(
      config_lib.resolve(config))
  state = jax.eval_shape(algorithm.init, params, jax.random.PRNGKey(0))
  inputs = algorithm.round_inputs(0, 1)
  row = jax.tree.map(lambda x: x[0], inputs)
  runner = RoundRunner(algorithm, 'map')
  plans = jax.eval_shape(algorithm.plan_round, state, None, row)
  after, metrics = jax.eval_shape(runner.round, state,
                                  split.train.to_device(), row)
  assert plans.client_id.shape == (2,)
  assert sorted(inputs['clock']['client_id'][0]) == sorted(
      np.flatnonzero(algorithm.schedule.arrivals[0]))
  assert jax.tree.structure(after) == jax.tree.structure(state)
  chex.assert_trees_all_equal_shapes_and_dtypes(after, state)
  assert all(m.shape == () for m in jax.tree.leaves(metrics))


def test_a_device_trace_times_a_vit_round_by_its_samples(tmp_path):
  """On a device trace a ViT client's round is FedScale's completion time
  of its S_n·B samples on its device (3 · ms per sample each) plus the
  float32 ViT down and its update up, not the analytic model: Alg. 1 at
  μ = 1 (no behaviour trace) closes each round when the slowest client
  arrives, and Co-S²P's clock then charges no masks."""
  ms, kbps = np.array([2.0, 5.0, 3.0]), np.array([8e3, 4e3, 1.6e4])
  path = str(tmp_path / 'trace.npz')
  traces.save_npz(path, traces.DeviceCapacity(ids=np.arange(3),
                                              ms_per_sample=ms, kbps=kbps),
                  None)
  algorithm, _, _ = vit_run('cos2p', 3, 2, client_seconds=(), jitter=0.0,
                            device_trace=path)
  assert not algorithm.charges_realised_masks
  samples = algorithm.round_steps * algorithm.config.batch_size
  size = 4.0 * sum(x.size for x in jax.tree.leaves(algorithm.template))
  seconds = 3 * ms * samples / 1e3 + 2 * size * 8 / 1024 / kbps
  s = algorithm.schedule
  np.testing.assert_allclose(s.update_seconds[0], seconds, rtol=1e-6)
  np.testing.assert_allclose(s.end_time, [seconds.max(), 2 * seconds.max()],
                             rtol=1e-6)
  assert clock_part.ClockOptions.from_config(
      algorithm.config).device_trace == path


if __name__ == '__main__':
  # The child of `vit_buffered_report`: its report as JSON on the last line.
  print(json.dumps(comparisons()))
