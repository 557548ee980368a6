"""HIST's latency model (Eqs. (17), (18), (34), (35)) and partition-size optimiser (Eq. (19))."""
import itertools
import math

import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het.systems import latency, partition_sizing

SYSTEM = latency.WirelessSystem()  # the paper's constants


def test_aircomp_upload_of_the_full_fcnn_takes_28_ms():
  # 238,510 parameters on 9 MHz / 15 kHz = 600 subcarriers: 397.52 OFDM
  # symbols of 1/14 ms.
  assert latency.aircomp_upload_time(238_510) == pytest.approx(
      238_510 / 600 / 14e3)
  assert latency.aircomp_upload_time(238_510) == pytest.approx(0.02839, abs=1e-5)
  # An N = 4 HIST submodel (75 neurons × 795 + 10 shared biases).
  assert latency.aircomp_upload_time(59_635) == pytest.approx(7.10e-3, abs=1e-5)
  # Keyword arguments override the defaults: 20 MHz, 30 kHz, 1/28 ms.
  assert latency.aircomp_upload_time(
      1200, bandwidth_hz=20e6, subcarrier_hz=30e3,
      symbol_s=1 / 28e3) == pytest.approx(1200 / (20e6 / 30e3) / 28e3)


def test_oma_rate_is_shannon_with_log2():
  h = jnp.asarray([[1 + 1j, 0, 2j, 0, 0, 0, 0, 0, 0, 0]], jnp.complex64)  # ||h||² = 6
  rate = latency.oma_rates(h, jnp.asarray([1000.0]), 9e6)
  assert float(rate[0]) == pytest.approx(9e6 * math.log2(6001), rel=1e-6)


def test_oma_edge_round_matches_hand_computed_numbers():
  """Two cells; cell 0 holds two clients, cell 1 one (unequal cells)."""
  d, d_cell = 238_510, 59_635
  cpu = jnp.asarray([1e9, 2e9, 4e9])
  rate = jnp.asarray([100e6, 50e6, 200e6])
  latencies = latency.edge_round_latency(
      'oma', jnp.asarray([d_cell, d_cell, d]), d, jnp.asarray([20, 20, 20]),
      cpu, rate, jnp.asarray([0, 0, 1]), 2, SYSTEM)
  # Cell 0, client 1: 20 steps × 1e6 cycles × 1/4 of the model on 2 GHz
  # = 2.5 ms of compute, then 2 TDMA uploads of 59,635 × 32 bits at 50 Mbit/s.
  client0 = 20 * 1e6 * d_cell / d / 1e9 + 2 * d_cell * 32 / 100e6
  client1 = 20 * 1e6 * d_cell / d / 2e9 + 2 * d_cell * 32 / 50e6
  cell1 = 20 * 1e6 / 4e9 + 1 * d * 32 / 200e6
  np.testing.assert_allclose(latencies, [max(client0, client1), cell1],
                             rtol=1e-6)
  assert max(client0, client1) == pytest.approx(0.07883, abs=1e-5)
  assert float(latency.global_round_latency(latencies, 5)) == pytest.approx(
      5 * max(client0, client1, cell1), rel=1e-6)


def test_aircomp_edge_round_is_slowest_compute_plus_one_upload():
  d = 238_510
  latencies = latency.edge_round_latency(
      'aircomp', jnp.full((3,), float(d)), d, jnp.asarray([40, 40, 40]),
      jnp.asarray([1e9, 2e9, 3e9]), jnp.ones(3), jnp.asarray([0, 0, 1]), 2,
      SYSTEM)
  # n_j does not appear: 40 ms of compute at 1 GHz + 28.39 ms over the air.
  np.testing.assert_allclose(latencies, [0.040 + 0.0283940, 40e6 / 3e9 +
                                         0.0283940], rtol=1e-5)


def test_bad_system_constants_fail_clearly():
  with pytest.raises(ValueError, match='bandwidth_hz must be positive'):
    latency.WirelessSystem(bandwidth_hz=0.0)
  with pytest.raises(ValueError, match="unknown channel 'wifi'"):
    latency.edge_round_latency('wifi', jnp.ones(1), 1, jnp.ones(1),
                               jnp.ones(1), jnp.ones(1), jnp.zeros(1, int), 1,
                               SYSTEM)


def brute_force_unit_counts(cost, num_units, unit, shared, cap):
  """The best max_j cost_j (shared + k_j unit) over every integer split."""
  best = math.inf
  for counts in itertools.product(range(1, cap + 1), repeat=len(cost)):
    if sum(counts) == num_units:
      best = min(best, max(c * (shared + k * unit)
                           for c, k in zip(cost, counts)))
  return best


@pytest.mark.parametrize('trial', range(12))
def test_greedy_partition_sizes_match_brute_force(trial):
  rng = np.random.default_rng(trial)
  num_cells = int(rng.integers(2, 5))
  num_units = int(rng.integers(num_cells, 13))
  ratio = float(rng.choice([1.0, 1.5, 2.0, 10.0]))
  cap = partition_sizing.size_cap(num_units, num_cells, ratio) if (
      math.floor(ratio * num_units / num_cells) * num_cells >= num_units
  ) else None
  if cap is None:
    return
  cost = rng.uniform(0.1, 3.0, num_cells).astype(np.float32)
  unit, shared = int(rng.integers(1, 50)), int(rng.integers(0, 200))
  counts = np.asarray(partition_sizing.optimal_unit_counts(
      jnp.asarray(cost), num_units=num_units, unit_params=unit,
      shared_params=shared, max_units=cap))
  assert counts.sum() == num_units and counts.min() >= 1 and counts.max() <= cap
  achieved = max(c * (shared + k * unit) for c, k in zip(cost, counts))
  expected = brute_force_unit_counts(cost, num_units, unit, shared, cap)
  assert achieved == pytest.approx(expected, rel=1e-6)


def test_optimal_sizes_give_slow_cells_fewer_neurons_within_the_cap():
  # The paper's setting: 300 neurons, N = 4, slow cells cost twice as much.
  counts = partition_sizing.optimal_unit_counts(
      jnp.asarray([2.0, 2.0, 1.0, 1.0]), num_units=300, unit_params=795,
      shared_params=10, max_units=partition_sizing.size_cap(300, 4, 1.5))
  # Unconstrained water-filling would give 50/50/100/100; (19c) caps at 112.
  np.testing.assert_array_equal(counts, [50, 50, 100, 100])
  capped = partition_sizing.optimal_unit_counts(
      jnp.asarray([9.0, 9.0, 1.0, 1.0]), num_units=300, unit_params=795,
      shared_params=10, max_units=112)
  np.testing.assert_array_equal(capped, [38, 38, 112, 112])


def test_size_cap_is_one_and_a_half_times_the_uniform_share():
  assert partition_sizing.size_cap(300, 4, 1.5) == 112
  # (19c) counts parameters, shared ones included: d_j = s + k·u ≤ 1.5·(s + K·u)/N.
  cap = partition_sizing.size_cap(300, 4, 1.5, unit_params=795, shared_params=10)
  assert 10 + cap * 795 <= 1.5 * (10 + 300 * 795) / 4 < 10 + (cap + 1) * 795
  many_shared = partition_sizing.size_cap(300, 4, 1.5, unit_params=10, shared_params=500)
  assert many_shared == 81 < 112  # (1.5·3500/4 − 500)/10 = 81.25: shared params use the budget
  with pytest.raises(ValueError, match='no partition of 10 neurons into 4'):
    partition_sizing.size_cap(10, 4, 0.5)
  with pytest.raises(ValueError, match='cannot be split into 4 cells'):
    partition_sizing.optimal_unit_counts(jnp.ones(4), num_units=3,
                                         unit_params=1, shared_params=0,
                                         max_units=3)
