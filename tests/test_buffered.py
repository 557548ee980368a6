"""FedBuff's buffered asynchronous clock (`systems.buffered`): hand-written
event schedules, the synchronous special case, availability, the samplers
and the staleness weights."""
import math

import numpy as np
import pytest

from fedjax_het.options import ConfigError
from fedjax_het.systems import buffered, clock, traces

SCHEDULE_FIELDS = ('arrivals', 'dispatch_round', 'dispatched', 'dropped',
                   'start_time', 'end_time', 'busy', 'update_seconds')


class LowestFirst:
  """A fixed sampling order: the eligible client of lowest index."""

  def __init__(self, num_clients):
    self.num_clients = num_clients
    self.pool = set(range(num_clients))

  def add(self, client):
    self.pool.add(client)

  def remove(self, client):
    self.pool.remove(client)

  def draw(self, rng):
    del rng
    return min(self.pool) if self.pool else None


# Client n's j-th dispatch takes HAND[n][j] seconds; client 4 is never drawn.
HAND = clock.fixed_durations([[10, 1, 2], [2, 1, 5, 2], [2, 4, 1], [3, 3, 5],
                              []])


def hand_schedule():
  return buffered.simulate(HAND, num_clients=5, steps=5, concurrency=3,
                           buffer_size=2, tau_max=1, seed=0,
                           sampler=LowestFirst(5))


def test_hand_written_event_schedule():
  """C = 3, K = 2, τ_max = 1, lowest eligible client first.

  t=0: 0, 1, 2 dispatched (version 0). t=2: 1 and 2 finish together, 1
  first: buffer [1], 3 dispatched (v0); then 2: step 0, v1, 1 dispatched
  (v1). t=3: 1 → buffer; 2 dispatched (v1). t=5: 3 (τ=1) → step 1, v2; 1
  dispatched (v2). t=7: 2 (τ=1) → buffer; 3 dispatched (v2). t=10: 0, 1, 3
  finish together: 0 trained from v0, τ = 2 > 1, dropped and dispatched again
  (v2); 1 (τ=0) → step 2, v3, 1 dispatched (v3); 3 (τ=1) → buffer, 2
  dispatched (v3). t=11: 0 (τ=1) → step 3, v4, 0 dispatched (v4); 2 (τ=1) →
  buffer, 3 dispatched (v4). t=12: 1 (τ=1) → step 4.
  """
  result = hand_schedule()
  s = result.schedule
  np.testing.assert_array_equal(s.arrivals.astype(int),
                                [[0, 1, 1, 0, 0], [0, 1, 0, 1, 0],
                                 [0, 1, 1, 0, 0], [1, 0, 0, 1, 0],
                                 [0, 1, 1, 0, 0]])
  np.testing.assert_array_equal(s.dispatch_round,
                                [[-1, 0, 0, -1, -1], [-1, 1, -1, 0, -1],
                                 [-1, 2, 1, -1, -1], [2, -1, -1, 2, -1],
                                 [-1, 3, 3, -1, -1]])
  np.testing.assert_array_equal(s.staleness,
                                [[0, 0, 0, 0, 0], [0, 0, 0, 1, 0],
                                 [0, 0, 1, 0, 0], [1, 0, 0, 1, 0],
                                 [0, 1, 1, 0, 0]])
  np.testing.assert_array_equal(s.dispatched.astype(int),
                                [[1, 1, 1, 1, 0], [0, 1, 1, 0, 0],
                                 [1, 1, 0, 1, 0], [0, 1, 1, 0, 0],
                                 [1, 0, 0, 1, 0]])
  expected_dropped = np.zeros((5, 5), bool)
  expected_dropped[2, 0] = True
  np.testing.assert_array_equal(s.dropped, expected_dropped)
  assert result.num_dropped == 1 and result.num_lost == 0
  np.testing.assert_array_equal(s.start_time, [0, 2, 5, 10, 11])
  np.testing.assert_array_equal(s.end_time, [2, 5, 10, 11, 12])
  np.testing.assert_array_equal(s.update_seconds,
                                [[0, 2, 2, 0, 0], [0, 1, 0, 3, 0],
                                 [0, 5, 4, 0, 0], [1, 0, 0, 3, 0],
                                 [0, 2, 1, 0, 0]])
  # Window [5, 10]: 0 busy since 0, 1 from 5, 2 until 7, 3 from 7.
  np.testing.assert_array_equal(s.busy[2], [5, 5, 2, 3, 0])
  assert s.max_staleness == 1


def test_hand_schedule_buffer_aggregates():
  """Step 3's buffer, clients 0 and 3 at τ = 1, and step 2's, client 2 at
  τ = 1 and client 1 at τ = 0, under FedScale's and FLSim's rules."""
  s = hand_schedule().schedule
  tau = s.staleness[2]
  in_buffer = s.arrivals[2]
  w = buffered.fedscale_weight(tau)
  by_sum = np.asarray(buffered.normalised_by_sum(w, in_buffer))
  r = 1 / math.sqrt(2)
  np.testing.assert_allclose(by_sum, [0, 1 / (1 + r), r / (1 + r), 0, 0],
                             rtol=1e-6)
  at = np.asarray(buffered.normalised_at(w, buffered.fedscale_weight(1),
                                         in_buffer))
  # w(τ)/w(1) over K = 2: τ = 0 → √2 / 2, τ = 1 → ½.
  np.testing.assert_allclose(at, [0, math.sqrt(2) / 2, 0.5, 0, 0], rtol=1e-6)
  deltas = np.array([7.0, 1.0, 3.0, 5.0, 11.0])  # scalar Δ per client
  assert float(by_sum @ deltas) == pytest.approx((1 + 3 * r) / (1 + r),
                                                 rel=1e-6)
  step3 = np.asarray(buffered.normalised_by_sum(
      buffered.fedscale_weight(s.staleness[3]), s.arrivals[3]))
  np.testing.assert_allclose(step3, [0.5, 0, 0, 0.5, 0])


@pytest.mark.parametrize('num_clients,steps,tau_max', [(1, 3, None),
                                                        (4, 6, None),
                                                        (7, 5, 0)])
def test_c_equal_k_equal_n_is_the_synchronous_clock(num_clients, steps,
                                                     tau_max):
  """C = K = N is `clock.simulate(mu=1, t_clk=0)`, array by array."""
  seconds = [[1.0 + n % 3] * steps for n in range(num_clients)]
  duration = clock.with_jitter(clock.fixed_durations(seconds), 0.4, seed=5)
  expected = clock.simulate(duration, num_clients=num_clients, rounds=steps,
                            mu=1, t_clk=0, tau_max=tau_max)
  result = buffered.simulate(duration, num_clients=num_clients, steps=steps,
                             concurrency=num_clients, buffer_size=num_clients,
                             tau_max=tau_max, seed=3)
  for field in SCHEDULE_FIELDS:
    got, want = getattr(result.schedule, field), getattr(expected, field)
    assert got.dtype == want.dtype, field
    np.testing.assert_array_equal(got, want, err_msg=field)
  assert result.num_lost == 0


@pytest.mark.parametrize('length,chunk', [(5, None), (300, None),
                                          (20_011, None), (20_011, 8192)])
def test_numpy_sum_is_numpys_sum_bit_for_bit(length, chunk):
  """`numpy_sum` of a sparse vector equals numpy's sum of the dense one (of
  its float32 values summed in float64 with `chunk`), for 1, a few and many
  non-zeros of spread magnitudes."""
  rng = np.random.default_rng(length)
  for count in (1, min(7, length), length // 3 + 1):
    positions = np.sort(rng.choice(length, count, replace=False))
    values = rng.random(count) * 10.0 ** rng.uniform(-4, 4, count)
    dense = np.zeros(length)
    dense[positions] = values
    if chunk is None:
      expected = dense.sum()
    else:
      values = values.astype(np.float32).astype(np.float64)
      expected = dense.astype(np.float32).sum(dtype=np.float64)
    assert buffered.numpy_sum(length, positions, values, chunk) == expected


def test_the_events_give_the_schedules_sums_bit_for_bit():
  """9,000 clients (a row longer than numpy's 8192-element buffer), C = 40,
  K = 20, jittered times, drops and clients going offline: the RU forms,
  the mean update seconds and the busy sums computed from the events equal
  those of the [Q, N] `Schedule` built from them, bit for bit."""
  num_clients = 9000
  availability = _availability([[(0, 2 + n % 5)] for n in range(40)],
                               period=7)
  duration = clock.with_jitter(lambda n, q, i: 1.0 + n % 4, 0.5, seed=2)
  result = buffered.simulate(duration, num_clients=num_clients, steps=30,
                             concurrency=40, buffer_size=20, tau_max=1,
                             seed=4, availability=availability)
  s = result.schedule
  assert result.num_lost > 0 and result.num_dropped > 0
  for form in ('ru_eq17', 'ru_busy', 'ru_time_weighted'):
    assert getattr(result, form)() == getattr(s, form)(), form
  np.testing.assert_array_equal(result.mean_update_seconds(),
                                s.mean_update_seconds())
  np.testing.assert_array_equal(result.busy, s.busy.sum(1))
  np.testing.assert_array_equal(
      result.busy_float32, s.busy.astype(np.float32).sum(1, dtype=np.float64))
  assert result.busy_total == s.busy.sum()
  assert result.max_staleness == s.max_staleness == 1


def _availability(rows, period):
  """Availability of clients whose online intervals are `rows`."""
  starts = [np.asarray([a for a, _ in r], float) for r in rows]
  ends = [np.asarray([b for _, b in r], float) for r in rows]
  return traces.Availability(
      ids=np.arange(len(rows)), period=np.full(len(rows), float(period)),
      duration=np.full(len(rows), np.nan), model=np.full(len(rows), ''),
      offsets=np.cumsum([0] + [len(r) for r in rows]),
      starts=np.concatenate(starts), ends=np.concatenate(ends))


def test_client_offline_mid_round_uploads_nothing():
  """K = 1, C = 2, period 10. Client 0 is online over [0, 3) of each period,
  client 1 always. t=0: both dispatched; t=3: 0 goes offline 2 s before its
  finish: its update is lost, and it is back at t=10. t=4, 8: 1 arrives
  (steps 0, 1). t=10: 0 dispatched (v2, 2 s, online until 13). t=12: 0
  (τ=0) → step 2; 0 dispatched again (v3, online until 13, 5 s: it will be
  lost); 1 (τ=1) → step 3."""
  availability = _availability([[(0, 3)], [(0, 10)]], period=10)
  duration = clock.fixed_durations([[5, 2, 5], [4, 4, 4]])
  result = buffered.simulate(duration, num_clients=2, steps=4, concurrency=2,
                             buffer_size=1, seed=0, availability=availability)
  s = result.schedule
  np.testing.assert_array_equal(result.lost_client, [0])
  np.testing.assert_array_equal(result.lost_step, [0])
  np.testing.assert_array_equal(result.lost_time, [3.0])
  assert result.num_lost == 1 and result.num_dropped == 0
  np.testing.assert_array_equal(s.arrivals.astype(int),
                                [[0, 1], [0, 1], [1, 0], [0, 1]])
  np.testing.assert_array_equal(s.dispatch_round,
                                [[-1, 0], [-1, 1], [2, -1], [-1, 2]])
  np.testing.assert_array_equal(s.dispatched.astype(int),
                                [[1, 1], [0, 1], [1, 1], [1, 0]])
  np.testing.assert_array_equal(s.end_time, [4, 8, 12, 12])
  np.testing.assert_array_equal(s.busy[0], [3, 4])  # 0 busy until it left


def test_offline_clients_are_not_dispatched_until_online():
  """Client 0, offline over [0, 4) of a period of 100, is drawn at t=0 and
  comes back at t=4, after client 1's update of that time (step 3): it
  starts from version 4 and fills step 4 at t=5."""
  availability = _availability([[(4, 100)], [(0, 100)]], period=100)
  duration = clock.fixed_durations([[1], [1, 1, 1, 1, 1, 1]])
  result = buffered.simulate(duration, num_clients=2, steps=5, concurrency=2,
                             buffer_size=1, seed=0, availability=availability)
  s = result.schedule
  np.testing.assert_array_equal(s.arrivals[:, 0], [0, 0, 0, 0, 1])
  np.testing.assert_array_equal(s.dispatch_round[4], [4, -1])
  np.testing.assert_array_equal(s.end_time, [1, 2, 3, 4, 5])
  assert result.num_lost == 0


def test_stall_is_one_line():
  """A client never online ends the run with one line, not a hang."""
  availability = _availability([[]], period=10)
  with pytest.raises(ConfigError, match='stalls after 0 of 2 server steps'):
    buffered.simulate(clock.fixed_durations([[5]]), num_clients=1, steps=2,
                      concurrency=1, buffer_size=1, seed=0,
                      availability=availability)


def test_stall_on_zero_weights_is_one_line():
  """The only client of positive weight sits in the buffer (K = 2)."""
  with pytest.raises(ConfigError, match='stalls after 0 of 1 server steps'):
    buffered.simulate(lambda n, q, i: 1.0, num_clients=3, steps=1,
                      concurrency=1, buffer_size=2, seed=0,
                      sampler=buffered.WeightedPool([0, 1, 0]))


def test_the_schedule_is_a_function_of_the_seed():
  """Same seed, same schedule; another seed samples other clients."""
  duration = clock.with_jitter(lambda n, q, i: 1.0 + n % 5, 0.3, seed=1)

  def run(seed):
    return buffered.simulate(duration, num_clients=30, steps=20,
                             concurrency=6, buffer_size=3, tau_max=2,
                             seed=seed).schedule

  a, b, c = run(0), run(0), run(1)
  for field in SCHEDULE_FIELDS:
    np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
  assert not np.array_equal(a.dispatched, c.dispatched)
  assert a.arrivals.sum(1).tolist() == [3] * 20
  assert a.staleness.max() <= 2


@pytest.mark.parametrize('make', [buffered.UniformPool,
                                  lambda n: buffered.WeightedPool(
                                      np.arange(1.0, n + 1))])
def test_pools_draw_only_members(make):
  pool = make(6)
  rng = np.random.default_rng(0)
  for n in (0, 2, 3, 5):
    pool.remove(n)
  draws = {pool.draw(rng) for _ in range(200)}
  assert draws == {1, 4}
  pool.remove(1)
  pool.remove(4)
  assert pool.draw(rng) is None
  pool.add(3)
  assert pool.draw(rng) == 3


def test_weighted_pool_follows_p():
  """Draw frequencies match p_n / Σ p over the pool (20,000 draws, fixed
  seed, within 0.015); a zero weight is never drawn."""
  pool = buffered.WeightedPool([0.0, 1.0, 2.0, 3.0, 4.0])
  pool.remove(4)
  rng = np.random.default_rng(0)
  counts = np.bincount([pool.draw(rng) for _ in range(20_000)], minlength=5)
  np.testing.assert_allclose(counts / 20_000, [0, 1 / 6, 2 / 6, 3 / 6, 0],
                             atol=0.015)
  assert counts[0] == 0 and counts[4] == 0


def test_weighted_sampler_steers_dispatches():
  """With p = 0 outside clients 0–2, only they are ever dispatched."""
  result = buffered.simulate(
      lambda n, q, i: 1.0 + 0.1 * n, num_clients=8, steps=6, concurrency=2,
      buffer_size=2, seed=0,
      sampler=buffered.WeightedPool([1, 1, 1, 0, 0, 0, 0, 0]))
  dispatched = result.schedule.dispatched
  assert dispatched[:, :3].any() and not dispatched[:, 3:].any()


@pytest.mark.parametrize('kwargs,match', [
    ({'concurrency': 6}, 'concurrency = 6 exceeds num_clients = 5'),
    ({'buffer_size': 0}, 'buffer_size must be a positive integer'),
    ({'tau_max': -1}, 'tau_max must be a non-negative integer'),
    ({'sampler': buffered.UniformPool(4)}, 'sampler holds 4 clients'),
    ({'seed': -1}, 'seed must be a non-negative integer'),
])
def test_bad_options_are_one_line(kwargs, match):
  options = dict(num_clients=5, steps=2, concurrency=2, buffer_size=2, seed=0)
  with pytest.raises(ConfigError, match=match):
    buffered.simulate(lambda n, q, i: 1.0, **{**options, **kwargs})


def test_bad_duration_is_one_line():
  with pytest.raises(ConfigError, match='duration of client 0 dispatched at '
                     'version 0 must be finite'):
    buffered.simulate(lambda n, q, i: math.nan, num_clients=2, steps=1,
                      concurrency=1, buffer_size=1, seed=0,
                      sampler=LowestFirst(2))


def test_staleness_weights_by_hand():
  tau = np.array([0, 1, 3, 8])
  np.testing.assert_array_equal(buffered.constant_weight(tau), [1, 1, 1, 1])
  np.testing.assert_allclose(buffered.polynomial_weight(tau, 1.0),
                             [1, 1 / 2, 1 / 4, 1 / 9], rtol=1e-6)
  np.testing.assert_allclose(buffered.fedscale_weight(tau),
                             [1, 1 / math.sqrt(2), 1 / 2, 1 / 3], rtol=1e-6)
  # Hinge a = 0.5, b = 1: 1, 1, 1/(0.5·2 + 1), 1/(0.5·7 + 1).
  np.testing.assert_allclose(buffered.hinge_weight(tau, 0.5, 1),
                             [1, 1, 1 / 2, 1 / 4.5], rtol=1e-6)
  np.testing.assert_allclose(buffered.threshold_weight(tau, 1, 0.25),
                             [1, 1, 0.25, 0.25])
  in_buffer = np.array([True, True, False, True])
  w = np.array([1.0, 0.5, 9.0, 0.5])
  np.testing.assert_allclose(buffered.normalised_by_sum(w, in_buffer),
                             [0.5, 0.25, 0, 0.25])
  np.testing.assert_allclose(buffered.normalised_at(w, 0.5, in_buffer),
                             [2 / 3, 1 / 3, 0, 1 / 3])
