"""Co-S²P's semi-asynchronous round clock (Alg. 1) and its RU forms (Eq. 17)."""
import numpy as np
import pytest

from fedjax_het.options import ConfigError
from fedjax_het.systems import clock

# Four clients: client 2's first update takes 16 s and spans rounds 0–3.
HAND = clock.fixed_durations([[3] * 5, [4] * 5, [16, 2], [4.5] * 5])


def hand_schedule(**kwargs):
  return clock.simulate(HAND, num_clients=4, rounds=5, mu=0.5, t_clk=1.0,
                        **kwargs)


def test_hand_written_schedule_with_a_straggler_and_window_arrivals():
  """⌈0.5·4⌉ = 2 updates, then 1 s more.

  Round 0 [0, 5]: clients 0 (t=3) and 1 (t=4) fill the buffer, client 3
  (t=4.5) arrives in the window; client 2 runs on until t=16. Rounds 1 and 2
  ([5, 10], [10, 15]) repeat that. Round 3 [15, 19]: client 2 arrives at 16
  with τ = 3, client 0 at 18, client 1 exactly at t_end = 19 (accepted);
  client 3 (due at 19.5) straggles into round 4 [19, 22], which also gets
  client 2's second (2 s) update at 21 and client 0 at 22.
  """
  s = hand_schedule()
  np.testing.assert_array_equal(s.arrivals.astype(int),
                                [[1, 1, 0, 1], [1, 1, 0, 1], [1, 1, 0, 1],
                                 [1, 1, 1, 0], [1, 0, 1, 1]])
  np.testing.assert_array_equal(s.dispatch_round,
                                [[0, 0, -1, 0], [1, 1, -1, 1], [2, 2, -1, 2],
                                 [3, 3, 0, -1], [4, -1, 4, 3]])
  np.testing.assert_array_equal(s.dispatched.astype(int),
                                [[1, 1, 1, 1], [1, 1, 0, 1], [1, 1, 0, 1],
                                 [1, 1, 0, 1], [1, 1, 1, 0]])
  expected_staleness = np.zeros((5, 4), int)
  expected_staleness[3, 2], expected_staleness[4, 3] = 3, 1
  np.testing.assert_array_equal(s.staleness, expected_staleness)
  assert s.staleness.dtype == np.int32 and s.max_staleness == 3
  np.testing.assert_array_equal(s.start_time, [0, 5, 10, 15, 19])
  np.testing.assert_array_equal(s.end_time, [5, 10, 15, 19, 22])
  assert not s.dropped.any()
  np.testing.assert_array_equal(s.update_seconds[3], [3, 4, 16, 0])
  np.testing.assert_array_equal(s.update_seconds[4], [3, 0, 2, 4.5])

  eq17 = [11.5 / 13.5] * 3 + [23 / 48, 9.5 / 13.5]
  np.testing.assert_allclose(s.ru_eq17_per_round(), eq17)
  assert s.ru_eq17() == pytest.approx(np.mean(eq17))
  np.testing.assert_array_equal(s.busy[3], [3, 4, 1, 4])
  np.testing.assert_array_equal(s.busy[4], [3, 3, 2, 0.5])
  busy = [16.5 / 20] * 3 + [12 / 16, 8.5 / 12]
  np.testing.assert_allclose(s.ru_busy_per_round(), busy)
  assert s.ru_busy() == pytest.approx(np.mean(busy))
  assert s.ru_time_weighted() == pytest.approx(70 / 88)

  inputs = s.round_inputs(3, 2)
  assert set(inputs) == {'arrives', 'staleness', 'dispatch_round'}
  np.testing.assert_array_equal(inputs['dispatch_round'],
                                [[3, 3, 0, 0], [4, 0, 4, 3]])
  np.testing.assert_array_equal(inputs['staleness'], [[0, 0, 3, 0],
                                                      [0, 0, 0, 1]])
  assert inputs['arrives'].dtype == bool
  assert inputs['dispatch_round'].dtype == np.int32


def test_tau_max_drops_stale_updates_and_frees_the_client():
  s = hand_schedule(tau_max=0)
  # Round 3: client 2's τ = 3 update is dropped at 16 and does not count;
  # clients 0 (18) and 1 (19) fill the buffer, client 3 arrives at 19.5.
  assert s.dropped[3, 2] and s.dropped.sum() == 1 and not s.arrivals[3, 2]
  np.testing.assert_array_equal(s.arrivals[3], [1, 1, 0, 1])
  # Round 4 dispatches everyone at t = 20, client 2 with its 2 s update.
  assert s.dispatched[4].all()
  np.testing.assert_array_equal(s.end_time, [5, 10, 15, 20, 24])
  assert s.max_staleness == 0
  loose = hand_schedule(tau_max=3)
  np.testing.assert_array_equal(loose.arrivals, hand_schedule().arrivals)
  assert not loose.dropped.any()


def test_synchronous_fedavg_busy_ru_equals_eq17():
  duration = clock.with_jitter(lambda n, q, j: 1.0 + n, 0.3, seed=1)
  s = clock.simulate(duration, num_clients=5, rounds=6, mu=1.0, t_clk=0.0)
  assert s.arrivals.all() and s.dispatched.all()
  assert (s.staleness == 0).all()
  np.testing.assert_allclose(s.ru_busy_per_round(), s.ru_eq17_per_round())
  assert s.ru_busy() < 1


def test_fully_asynchronous_clock_is_always_busy():
  duration = clock.with_jitter(lambda n, q, j: 1.0 + n, 0.2, seed=2)
  s = clock.simulate(duration, num_clients=4, rounds=30, mu=0.25, t_clk=0.0)
  np.testing.assert_array_equal(s.arrivals.sum(axis=1), 1)
  assert s.ru_busy() == pytest.approx(1.0)
  assert s.ru_time_weighted() == pytest.approx(1.0)
  assert s.max_staleness > 0


def test_waiting_longer_lowers_busy_ru():
  duration = lambda n, q, j: [1.0, 1.7, 2.9, 4.3, 7.1, 11.3][n]
  def ru(mu, t_clk):
    return clock.simulate(duration, num_clients=6, rounds=40, mu=mu,
                          t_clk=t_clk).ru_busy()
  by_mu = [ru(mu, 0.0) for mu in (1 / 6, 2 / 6, 3 / 6, 4 / 6, 5 / 6, 1.0)]
  by_clk = [ru(0.5, t_clk) for t_clk in (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)]
  assert by_mu[0] == pytest.approx(1.0)
  assert all(np.diff(by_mu) < 0), by_mu
  assert all(np.diff(by_clk) < 0), by_clk


def test_jitter_is_deterministic_and_order_free():
  jittered = clock.with_jitter(lambda n, q, j: 10.0, 0.05, seed=7)
  forward = [jittered(n, 0, j) for n in range(3) for j in range(3)]
  backward = [jittered(n, 5, j) for n in reversed(range(3))
              for j in reversed(range(3))][::-1]
  assert forward == backward
  assert len(set(forward)) == 9
  assert all(abs(np.log(v / 10.0)) < 0.3 for v in forward)
  other = clock.with_jitter(lambda n, q, j: 10.0, 0.05, seed=8)
  assert other(0, 0, 0) != jittered(0, 0, 0)
  assert clock.with_jitter(lambda n, q, j: 3.0, 0.0, seed=0)(1, 2, 3) == 3.0


@pytest.mark.parametrize('kwargs, message', [
    (dict(mu=0.0), 'mu must be in'),
    (dict(mu=1.5), 'mu must be in'),
    (dict(t_clk=-1.0), 't_clk must be ≥ 0, got -1.0'),
    (dict(t_clk=float('inf')), 't_clk must be a finite number'),
    (dict(tau_max=-1), 'tau_max must be a non-negative integer, got -1'),
    (dict(rounds=0), 'rounds must be a positive integer, got 0'),
    (dict(num_clients=0), 'num_clients must be a positive integer, got 0'),
])
def test_bad_options_fail_clearly(kwargs, message):
  options = dict(num_clients=2, rounds=2, mu=0.5, t_clk=0.0)
  options.update(kwargs)
  with pytest.raises(ConfigError, match=message):
    clock.simulate(lambda n, q, j: 1.0, **options)


@pytest.mark.parametrize('bad', [-1.0, float('nan'), float('inf')])
def test_bad_durations_fail_clearly(bad):
  with pytest.raises(ConfigError, match='duration of client 1 dispatched in '
                     'round 0 must be finite'):
    clock.simulate(lambda n, q, j: bad if n == 1 else 1.0, num_clients=2,
                   rounds=1, mu=1.0, t_clk=0.0)


def test_fixed_durations_and_jitter_check_their_inputs():
  short = clock.fixed_durations([[1.0, 1.0], [1.0]])
  with pytest.raises(ConfigError, match='client 1 has 1 fixed durations but '
                     'was dispatched 2 times'):
    clock.simulate(short, num_clients=2, rounds=3, mu=1.0, t_clk=0.0)
  with pytest.raises(ConfigError, match='cover 2 clients, not client 2'):
    clock.simulate(short, num_clients=3, rounds=1, mu=1.0, t_clk=0.0)
  with pytest.raises(ConfigError, match='sigma must be ≥ 0'):
    clock.with_jitter(short, -0.1, seed=0)
  with pytest.raises(ConfigError, match='seed must be a non-negative integer'):
    clock.with_jitter(short, 0.1, seed=-3)
  with pytest.raises(ConfigError, match=r'rounds \[4, 6\) run past the 5'):
    hand_schedule().round_inputs(4, 2)


def test_only_online_clients_are_dispatched_and_rounds_wait_for_the_running():
  """Seconds 1, 2, 3, μ = 1; online rows [1 1 0], [0 1 1], [0 0 0], [1 1 1].
  Round 0 dispatches clients 0 and 1 and waits for those two (not ⌈μN⌉ =
  3): t = 2. Round 1 dispatches 1 (t = 4) and 2 (t = 5): t = 5. Round 2 has
  nobody online: it closes at once with no arrival. Round 3 dispatches all:
  t = 8."""
  online = np.array([[1, 1, 0], [0, 1, 1], [0, 0, 0], [1, 1, 1]], bool)
  s = clock.simulate(clock.fixed_durations([[1] * 4, [2] * 4, [3] * 4]),
                     num_clients=3, rounds=4, mu=1.0, t_clk=0.0,
                     online=online)
  np.testing.assert_array_equal(s.dispatched, online)
  np.testing.assert_array_equal(s.arrivals, online)
  np.testing.assert_array_equal(s.end_time, [2, 5, 5, 8])
  np.testing.assert_array_equal(s.start_time, [0, 2, 5, 5])
  assert s.max_staleness == 0


def test_an_offline_idle_client_waits_while_stragglers_train_on():
  """μ = 1/3, seconds 1, 2, 3, online [1 1 1], [1 0 1], [0 1 1]: round 0
  closes on client 0 (t = 1); round 1 dispatches 0 again (2 would be, but
  it is still training) and closes on it at t = 2, taking client 1's update
  (k = 0) finishing at the window's end; round 2 dispatches client 1 only
  (client 0 is offline) and closes on client 2 (k = 0, τ = 2) at t = 3."""
  online = np.array([[1, 1, 1], [1, 0, 1], [0, 1, 1]], bool)
  s = clock.simulate(clock.fixed_durations([[1] * 3, [2] * 3, [3] * 3]),
                     num_clients=3, rounds=3, mu=1 / 3, t_clk=0.0,
                     online=online)
  np.testing.assert_array_equal(
      s.dispatched, [[1, 1, 1], [1, 0, 0], [0, 1, 0]])
  np.testing.assert_array_equal(
      s.arrivals, [[1, 0, 0], [1, 1, 0], [0, 0, 1]])
  np.testing.assert_array_equal(s.staleness, [[0, 0, 0], [0, 1, 0],
                                              [0, 0, 2]])
  np.testing.assert_array_equal(s.end_time, [1, 2, 3])


def test_every_client_online_is_the_schedule_without_availability():
  plain = hand_schedule()
  online = hand_schedule(online=np.ones((5, 4), bool))
  for field in ('arrivals', 'dispatch_round', 'dispatched', 'end_time',
                'busy'):
    np.testing.assert_array_equal(getattr(online, field),
                                  getattr(plain, field))
