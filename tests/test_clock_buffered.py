"""The clock part in buffered mode (FedBuff, `clock.buffer_size`) and on
device traces (`clock.device_trace`): the synchronous special case bit for
bit, the hand-written event schedule of `test_buffered.py` through FedAvg,
a client offline mid-round, resume, the summary and bad options.

The hand schedule (C = 3, K = 2, τ_max = 1, lowest eligible client first,
`test_buffered.test_hand_written_event_schedule`) gives, per server step q,
the arrivals (client, version trained from) below; client 0's update of
version 0 arrives at step 2 with τ = 2 > 1, is dropped, and 0 is dispatched
again with version 2 within step 2 (so its start model is w_2, not w_3).
"""
import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine_utils import checkpoint_round_trip, tiny_config, tiny_data
from fedjax_het import models, run
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.methods import ALGORITHMS
from fedjax_het.options import ConfigError
from fedjax_het.parts import clock as clock_part
from fedjax_het.systems import buffered, traces
from test_buffered import HAND, LowestFirst, _availability
from test_clock_part import reference
from test_run import quick_config

HAND_ARRIVALS = [[(1, 0), (2, 0)], [(1, 1), (3, 0)], [(1, 2), (2, 1)],
                 [(0, 2), (3, 2)], [(1, 3), (2, 3)]]


def build(config):
  data = tiny_data(num_clients=config.num_clients)
  model = models.create_model('mlp', 3, **config.model_options.to_dict())
  params = models.init_params(model, jax.random.PRNGKey(0), data.x.shape[2:])
  algorithm = ALGORITHMS[config.algorithm](config, model, data)
  return algorithm, algorithm.init(params, jax.random.PRNGKey(1)), data


def clock_config(name, num_clients, rounds, **clock):
  """A tiny run on the clock: clients_per_round = K in buffered mode (a
  server step's slots), N otherwise."""
  config = tiny_config(algorithm=name, num_clients=num_clients,
                       clients_per_round=clock.get('buffer_size') or
                       num_clients, rounds=rounds)
  if name == 'fedrolex':
    config.capacities = (0.5, 1.0)
  config.clock.update(clock)
  return config


@pytest.mark.parametrize('name', ['fedavg', 'fedrolex'])
def test_c_equal_k_equal_n_is_todays_clock_bit_for_bit(name):
  """C = K = N with the constant weight: the same round inputs (slot n is
  client n; the step's totals in slot 0) and the same final params as
  Alg. 1 at μ = 1 (unequal jittered round times), from a version table of
  τ_max + 1 = 1 rows instead of N."""
  clock = dict(client_seconds=(1.0, 1.5, 2.5), jitter=0.3)
  alg1, state, data = build(clock_config(name, 3, 3, **clock))
  buffered_, state_b, _ = build(clock_config(name, 3, 3, buffer_size=3,
                                             concurrency=3, tau_max=0,
                                             **clock))
  expected = alg1.round_inputs(0, 3)['clock']
  got = buffered_.round_inputs(0, 3)['clock']
  np.testing.assert_array_equal(got['client_id'], [[0, 1, 2]] * 3)
  for key in ('arrives', 'staleness', 'dispatch_round', 'window_seconds'):
    np.testing.assert_array_equal(got[key], expected[key], err_msg=key)
  for key in ('busy_seconds', 'dropped', 'lost'):
    np.testing.assert_allclose(got[key][:, 0], expected[key].sum(1),
                               rtol=1e-6, err_msg=key)
    assert not got[key][:, 1:].any()
  assert jax.tree.leaves(state_b.extras['start'])[0].shape[0] == 1
  a, _ = RoundRunner(alg1, 'map').run(state, data, 3)
  b, _ = RoundRunner(buffered_, 'map').run(state_b, data, 3)
  chex.assert_trees_all_equal(jax.device_get(a.params),
                              jax.device_get(b.params))


def hand_run(monkeypatch, **weight):
  """FedAvg on the hand schedule, by default FedScale's 1/√(1 + τ)
  normalised by the buffer's sum (`weight`: other clock keys):
  (algorithm, state, data)."""
  weight = weight or dict(staleness_weight='fedscale')
  config = clock_config('fedavg', 5, 5, buffer_size=2, concurrency=3,
                        tau_max=1, jitter=0.0, staleness_normalisation='sum',
                        **weight)
  algorithm, state, data = build(config)
  monkeypatch.setattr(buffered, 'UniformPool', LowestFirst)
  clock = algorithm.parts['clock'].clock
  clock.duration = HAND
  clock.simulate()
  return algorithm, state, data


def test_the_hand_schedule_through_fedavg_is_the_sequential_reference(
    monkeypatch, tmp_path):
  """Each step's K = 2 slots hold its arrivals (client, version); params
  after 5 server steps equal the arrivals applied by hand; after 3 steps
  the version table has τ_max + 1 = 2 rows, row v mod 2 = w_v (w_2, w_3:
  the models clients 0 and 3, and 1 and 2, were dispatched with); a run resumed from a
  checkpoint after step 3 (its version table read from the file; step 3's
  arrivals train from w_2) equals the uninterrupted run bit for bit."""
  algorithm, state, data = hand_run(monkeypatch)
  inputs = algorithm.round_inputs(0, 5)['clock']
  for key in ('client_id', 'dispatch_round', 'arrives'):
    assert inputs[key].shape == (5, 2), key   # K slots, not N
  for q, arriving in enumerate(HAND_ARRIVALS):
    assert sorted(zip(inputs['client_id'][q], inputs['dispatch_round'][q])
                  ) == sorted(arriving)
  assert inputs['arrives'].all()
  expected = reference(algorithm, jax.device_get(state.params), state.key,
                       data, 'polynomial', 0.5, HAND_ARRIVALS, 'sum')
  runner = RoundRunner(algorithm, 'map')
  copy = jax.tree.map(jnp.copy, state)   # the runner donates its state
  fresh = jax.tree.map(jnp.copy, state)  # version table: every row w_0
  whole, metrics = runner.run(state, data, 5)
  chex.assert_trees_all_close(jax.device_get(whole.params), expected[5],
                              rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(metrics['arrivals'], [2] * 5)
  np.testing.assert_array_equal(metrics['dropped_updates'], [0, 0, 1, 0, 0])
  np.testing.assert_array_equal(metrics['staleness'], [0, 1, 1, 2, 2])
  np.testing.assert_array_equal(metrics['virtual_seconds'], [2, 3, 5, 1, 1])

  part, _ = runner.run(copy, data, 3)
  table = jax.device_get(part.extras['start'])
  assert jax.tree.leaves(table)[0].shape[0] == 2   # τ_max + 1 versions
  for row, version in ((0, 2), (1, 3)):             # row v mod 2 = w_v
    chex.assert_trees_all_close(jax.tree.map(lambda t, r=row: t[r], table),
                                expected[version], rtol=1e-5, atol=1e-6)
  # Read back onto a round-0 state: the version table comes from the file.
  part, _ = checkpoint_round_trip(str(tmp_path), 3, part, fresh)
  chex.assert_trees_all_equal(jax.device_get(part.extras['start']), table)
  resumed, _ = runner.run(part, data, 2)
  chex.assert_trees_all_equal(jax.device_get(resumed.params),
                              jax.device_get(whole.params))
  facts = algorithm.summary_facts()
  assert (facts['virtual_time_s'], facts['server_steps'],
          facts['dropped_updates'], facts['lost_updates']) == (12.0, 5, 1, 0)


def test_flsims_threshold_weight_through_fedavg(monkeypatch):
  """FLSim's threshold weight, cutoff 0 and c = ¼, over the buffer's sum:
  on the hand schedule (τ ∈ {0, 1}) an update of τ = 1 weighs ¼ of one of
  τ = 0, which is (1 + τ)^−2: the params after 5 steps are the sequential
  reference with that polynomial weight."""
  algorithm, state, data = hand_run(monkeypatch, staleness_weight='threshold',
                                    staleness_cutoff=0, staleness_value=0.25)
  expected = reference(algorithm, jax.device_get(state.params), state.key,
                       data, 'polynomial', 2.0, HAND_ARRIVALS, 'sum')
  state, _ = RoundRunner(algorithm, 'map').run(state, data, 5)
  chex.assert_trees_all_close(jax.device_get(state.params), expected[5],
                              rtol=1e-5, atol=1e-6)


def test_threshold_weight_by_hand():
  """w(τ) = 1 up to the cutoff b = 1, c = ¼ after; FLSim's normalisation
  divides by w(1) (= c with b = 0: a fresh update's delta times 4), the
  sum normalisation scales the weight."""
  options = clock_part.ClockOptions(buffer_size=2, tau_max=3,
                                    staleness_weight='threshold',
                                    staleness_cutoff=1, staleness_value=0.25)
  np.testing.assert_array_equal(
      options.staleness_function(jnp.asarray([0, 1, 2, 5])), [1, 1, .25, .25])
  delta, one = {'w': jnp.asarray([2.0, -4.0])}, jnp.float32(3.0)
  flsim = dataclasses.replace(options, staleness_cutoff=0,
                              staleness_normalisation='flsim')
  for tau, scale in ((0, 4.0), (1, 1.0), (3, 1.0)):
    got, weight = clock_part.weigh_arrival(flsim, jnp.int32(tau), delta, one,
                                           None, None)
    np.testing.assert_array_equal(got['w'], [2 * scale, -4 * scale])
    assert weight == 3.0
  by_sum = dataclasses.replace(options, staleness_normalisation='sum')
  got, weight = clock_part.weigh_arrival(by_sum, jnp.int32(2), delta, one,
                                         None, None)
  np.testing.assert_array_equal(got['w'], [2.0, -4.0])
  assert weight == 0.75


def write_trace(path, ms_per_sample, rows, period):
  """A .npz of `fedjax-het traces`: devices of `ms_per_sample` (a fast link)
  and clients online over `rows` of each period."""
  count = len(ms_per_sample)
  capacity = traces.DeviceCapacity(
      ids=np.arange(count), ms_per_sample=np.asarray(ms_per_sample, float),
      kbps=np.full(count, 1e12))
  traces.save_npz(path, capacity, _availability(rows, period))
  return str(path)


def test_a_client_offline_mid_round_uploads_nothing(tmp_path):
  """Device trace, K = 1, C = 2, period 10: client 0 takes about 5 s
  (3 · 12 samples · 5000/36 ms) but is online over [0, 3) only, so its
  update is lost at t = 3 (counted) and again after its dispatch at t = 10;
  client 1 (about 4 s, always online) closes steps 0–2 at t ≈ 4, 8, 12 alone.
  The params are FedAvg applied to client 1's updates only."""
  path = write_trace(tmp_path / 'trace.npz', (5000 / 36, 4000 / 36),
                     [[(0, 3)], [(0, 10)]], 10)
  config = clock_config('fedavg', 2, 3, buffer_size=1, concurrency=2,
                        tau_max=2, jitter=0.0, device_trace=path)
  algorithm, state, data = build(config)
  schedule = algorithm.parts['clock'].clock.schedule
  np.testing.assert_allclose(schedule.end_time, [4, 8, 12], rtol=1e-9)
  assert schedule.dispatched[:, 0].sum() == 2   # at t = 0 and t = 10
  state, metrics = RoundRunner(algorithm, 'map').run(state, data, 3)
  np.testing.assert_array_equal(metrics['lost_updates'], [1, 0, 0])
  np.testing.assert_array_equal(metrics['arrivals'], [1, 1, 1])
  expected = reference(algorithm, jax.device_get(build(config)[1].params),
                       state.key, data, arrivals=[[(1, 0)], [(1, 1)],
                                                  [(1, 2)]])
  chex.assert_trees_all_close(jax.device_get(state.params), expected[3],
                              rtol=1e-5, atol=1e-6)
  assert algorithm.summary_facts()['lost_updates'] == 1


def test_the_summary_reports_virtual_time_to_accuracy_and_wall_time(
    tmp_path):
  """summary.json of a buffered run: the server steps, dropped and lost
  updates, the virtual time, and the first row reaching the target with
  its virtual seconds and wall time."""
  config = quick_config(rounds=4, target_accuracy=1e-6,
                        clients_per_round=5)
  config.clock.update(buffer_size=5, concurrency=8, tau_max=1,
                      staleness_weight='fedscale')
  summary = run.train(config, str(tmp_path))
  assert summary['server_steps'] == 4 and summary['lost_updates'] == 0
  reached = summary['to_target']
  assert reached['round'] == 2 and reached['arrivals'] == 10
  assert 0 < reached['virtual_seconds'] < summary['virtual_time_s']
  assert summary['totals']['dropped_updates'] == summary['dropped_updates']
  assert reached['wall_time'] > 0 and summary['wall_time_s'] > 0


@pytest.mark.parametrize('clock,message', [
    (dict(concurrency=2), r'clock.concurrency = 2 is read only with '
     r'clock.buffer_size > 0'),
    (dict(buffer_size=2, mu=0.5), r'clock.mu = 0.5 is read only with '
     r'clock.buffer_size = 0'),
    (dict(buffer_size=2, staleness_weight='polynomial',
          staleness_slope=2.0), 'clock.staleness_slope = 2.0 is read only '
     "with clock.staleness_weight='hinge'"),
    (dict(buffer_size=2, tau_max=1, staleness_weight='hinge',
          staleness_value=0.1), 'clock.staleness_value = 0.1 is read only '
     "with clock.staleness_weight='threshold'"),
    (dict(buffer_size=2, tau_max=1, staleness_weight='threshold',
          staleness_value=1.0), r'clock.staleness_value must be in \(0, 1\)'),
    (dict(buffer_size=2, staleness_normalisation='sum'),
     'clock.staleness_normalisation = .sum. is read only with '
     'clock.staleness_weight polynomial, fedscale, hinge or threshold'),
    (dict(buffer_size=2, tau_max=-1), r'clock.buffer_size > 0 needs a '
     r'staleness bound clock.tau_max ≥ 0'),
    (dict(buffer_size=4, tau_max=1),
     r'clock.buffer_size = 4 exceeds num_clients = 3'),
    (dict(buffer_size=2, tau_max=1, device_trace='/nonexistent.npz'),
     'cannot read the traces file'),
])
def test_bad_buffered_options_fail_in_one_line(clock, message):
  with pytest.raises(ConfigError, match=message) as raised:
    build(clock_config('fedavg', 3, 2, **clock))
  assert '\n' not in str(raised.value)


@pytest.mark.parametrize('buffer_size,cohort', [(2, 3), (0, 2)])
def test_clients_per_round_must_be_the_slots(buffer_size, cohort):
  """A server step's cohort is its K slots in buffered mode, every client
  under Alg. 1; any other clients_per_round is refused in one line."""
  config = clock_config('fedavg', 3, 2, jitter=0.1)
  config.clients_per_round = cohort
  if buffer_size:
    config.clock.update(buffer_size=buffer_size, tau_max=1)
  slots = f'clock.buffer_size \\({buffer_size}\\)' if buffer_size else (
      r'num_clients \(3\)')
  with pytest.raises(ConfigError, match=f'needs clients_per_round = {slots} '
                     f'and uniform client_sampling, got {cohort}') as raised:
    build(config)
  assert '\n' not in str(raised.value)


@pytest.mark.parametrize('buffered_mode,extra,message', [
    (True, dict(client_seconds=(1.0,)), 'clock.client_seconds and '
     'clock.device_trace both set'),
    (False, {}, 'holds online intervals in virtual time, which only buffered '
     'mode dispatches by'),
    (True, 'availability', 'systems.availability draws who is online per '
     'round'),
])
def test_what_a_device_trace_does_not_combine_with_is_refused(
    tmp_path, buffered_mode, extra, message):
  path = write_trace(tmp_path / 'trace.npz', (100.0,), [[(0, 5)]], 10)
  config = clock_config('fedavg', 3, 2, device_trace=path, jitter=0.0)
  if buffered_mode:
    config.clock.update(buffer_size=2, tau_max=1)
    config.clients_per_round = 2
  if extra == 'availability':
    config.systems.update(availability='bernoulli', available_p=(0.5,))
  else:
    config.clock.update(extra)
  with pytest.raises(ConfigError, match=message) as raised:
    build(config)
  assert '\n' not in str(raised.value)


def hand_steps():
  """A `BufferedSchedule` written by hand, N = 3, K = 2, 4 steps: steps
  0–3 take clients {0}, {0, 1 (version 0, τ = 1)}, {0}, {0, 1, 2}; one
  update dropped in step 1 and two lost in step 2; busy seconds (float32
  sums) 1, 2, 3, 4."""
  ints = lambda *x: np.asarray(x, np.int32)
  floats = lambda *x: np.asarray(x, np.float64)
  return buffered.BufferedSchedule(
      num_clients=3, offsets=np.asarray([0, 1, 3, 4, 7]),
      client=ints(0, 0, 1, 0, 0, 1, 2), version=ints(0, 1, 0, 2, 3, 3, 3),
      update_seconds=floats(1, 1, 2, 1, 1, 2, 4),
      start_time=floats(0, 1, 2, 3), end_time=floats(1, 2, 3, 7),
      busy=floats(1, 2, 3, 4), busy_float32=floats(1, 2, 3, 4),
      busy_total=10.0, dropped_step=ints(1), dropped_client=ints(2),
      lost_step=ints(2, 2), lost_client=ints(1, 2), lost_time=floats(2.5, 3),
      dispatch_client=ints(), dispatch_version=ints(),
      dispatch_time=floats(), dispatch_end=floats())


def test_slot_inputs_lay_each_steps_arrivals_on_its_slots():
  """`slot_inputs` of `hand_steps` with S = 2 slots: slot j holds the j-th
  arriving client in client order, its staleness and dispatch round; a step
  of fewer arrivals than slots leaves an idle slot of the lowest
  non-arriving client; the step's busy seconds, dropped and lost updates
  sit in slot 0; a step of more arrivals than slots is refused."""
  slots = clock_part.slot_inputs(hand_steps(), 0, 3, 2)
  np.testing.assert_array_equal(slots['client_id'], [[0, 1], [0, 1], [0, 1]])
  np.testing.assert_array_equal(slots['arrives'],
                                [[True, False], [True, True], [True, False]])
  np.testing.assert_array_equal(slots['staleness'], [[0, 0], [0, 1], [0, 0]])
  np.testing.assert_array_equal(slots['dispatch_round'],
                                [[0, 0], [1, 0], [2, 0]])
  np.testing.assert_array_equal(slots['window_seconds'], [[1, 1]] * 3)
  np.testing.assert_array_equal(slots['busy_seconds'], [[1, 0], [2, 0],
                                                        [3, 0]])
  np.testing.assert_array_equal(slots['dropped'], [[0, 0], [1, 0], [0, 0]])
  np.testing.assert_array_equal(slots['lost'], [[0, 0], [0, 0], [2, 0]])
  later = clock_part.slot_inputs(hand_steps(), 2, 1, 3)   # idle slots: 1, 2
  np.testing.assert_array_equal(later['client_id'], [[0, 1, 2]])
  with pytest.raises(ConfigError, match='has 3 arrivals, more than its 2 '
                     'slots'):
    clock_part.slot_inputs(hand_steps(), 0, 4, 2)
