"""AirComp: beamformer, precoders, noiseless exactness and the MSE of Eq. (25)."""
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het.channels import aircomp
from fedjax_het.core import aggregation

SEGMENTS = jnp.asarray([0, 0, 0, 1, 1, 2, 2, 2, 2])  # cells of 3, 2 and 4
WEIGHTS = jnp.asarray([1.0, 2.0, 1.0, 1.0, 1.0, 3.0, 1.0, 1.0, 2.0])
# Compiled once per static setting; a short beamformer solve keeps tests fast.
over_the_air_mean = jax.jit(
    functools.partial(aircomp.over_the_air_mean, sca_steps=3, inner_steps=20),
    static_argnames=('num_segments', 'noise'))
beamformer = jax.jit(aircomp.max_min_beamformer)
# References compiled as one program each; the tests' own arithmetic is numpy
# (op by op, jax would compile every op on its own).
min_gain = jax.jit(aircomp.min_gain)
exact_segment_mean = jax.jit(aggregation.masked_segment_mean, static_argnums=3)


def channels(seed, num_clients=9, antennas=10):
  return aircomp.rayleigh_channels(jax.random.PRNGKey(seed), num_clients,
                                   antennas)


def test_rayleigh_channels_have_unit_power_per_antenna():
  h = channels(0, num_clients=4000, antennas=10)
  assert h.dtype == jnp.complex64
  np.testing.assert_allclose(np.mean(np.abs(h)**2), 1.0, atol=0.02)
  np.testing.assert_allclose(np.mean(h), 0.0, atol=0.02)


@pytest.mark.parametrize('seed', range(4))
def test_beamformer_beats_its_initialiser_and_is_unit_norm(seed):
  h = channels(seed, num_clients=15)
  valid = np.arange(15) < 12  # three padded clients are ignored
  a, gain, initial = beamformer(h, valid)
  assert float(gain) >= float(initial)
  assert float(gain) > 2 * float(initial)  # it actually optimises
  np.testing.assert_allclose(np.linalg.norm(a), 1.0, rtol=1e-5)
  np.testing.assert_allclose(gain, min_gain(a, h, valid), rtol=1e-6)
  # No unit vector beats the upper bound min_i ||h_i||² (Cauchy-Schwarz).
  h = np.asarray(h)
  bound = np.min(np.where(valid, np.sum(np.abs(h)**2, -1), np.inf))
  assert float(gain) <= float(bound) * (1 + 1e-5)


def test_beamformer_of_one_client_is_matched_filter():
  h = channels(7, num_clients=15)
  valid = np.arange(15) == 1
  _, gain, initial = beamformer(h, valid)
  norm2 = float(np.sum(np.abs(np.asarray(h)[1])**2))
  np.testing.assert_allclose([gain, initial], [norm2, norm2], rtol=1e-5)


def random_values(seed, num_clients=9):
  rng = np.random.default_rng(seed)
  values = {'w': rng.standard_normal((num_clients, 4, 3)).astype(np.float32),
            'b': rng.standard_normal((num_clients, 5)).astype(np.float32)}
  masks = {'w': (np.arange(12).reshape(4, 3) % 3 != 0)[None].repeat(
               num_clients, 0),
           'b': (np.arange(5) < 2 + np.asarray(SEGMENTS)[:, None])}
  return values, masks


@pytest.mark.parametrize('use_masks', [True, False])
def test_noiseless_aircomp_equals_exact_segment_mean(use_masks):
  values, masks = random_values(0)
  masks = masks if use_masks else None
  means, _, stats = over_the_air_mean(
      jax.random.PRNGKey(1), values, WEIGHTS, SEGMENTS, num_segments=3,
      channels=channels(2), masks=masks, snr=100.0, noise='none')
  exact, _ = exact_segment_mean(values, WEIGHTS, SEGMENTS, 3, masks)
  chex.assert_trees_all_close(means, exact, rtol=1e-5, atol=1e-6)
  # Channel-inversion precoders respect |α_i|² ≤ P, with equality for the
  # weakest client of each cell (scaled by its squared normalised weight).
  segments, weights = np.asarray(SEGMENTS), np.asarray(WEIGHTS)
  cell_total = np.bincount(segments, weights).astype(np.float32)[segments]
  ratio = np.asarray(stats.tx_power) / (weights / cell_total)**2
  assert float(np.max(ratio)) <= 1.0 + 1e-4
  np.testing.assert_allclose([ratio[segments == s].max() for s in range(3)],
                             1.0, rtol=1e-4)


@pytest.mark.parametrize('noise,factor', [('real', 1.0), ('complex', 0.5)])
def test_empirical_noise_variance_matches_the_mse_formula(noise, factor):
  """Var of the estimate = 1/(SNR·g) per element (real), half for complex."""
  dim = 40_000
  values = {'x': np.zeros((9, dim), np.float32)}
  masks = {'x': np.broadcast_to(np.arange(dim) < 30_000, (9, dim))}
  snr = jnp.asarray([10.0, 1.0, 0.1])  # 10, 0 and −10 dB
  means, _, stats = over_the_air_mean(
      jax.random.PRNGKey(3), values, WEIGHTS, SEGMENTS, num_segments=3,
      channels=channels(4), masks=masks, snr=snr, power=2.0, noise=noise)
  np.testing.assert_allclose(stats.mse, 1 / (snr * stats.gain), rtol=1e-6)
  means, mse = np.asarray(means['x']), np.asarray(stats.mse)  # numpy stats
  sent = means[:, :30_000]
  # 30,000 draws per cell: the variance estimate is within 2.5% w.p. ≫ 0.999.
  np.testing.assert_allclose(np.mean(sent, axis=1), 0.0,
                             atol=float(4 * np.sqrt(mse.max() / 3e4)))
  np.testing.assert_allclose(np.var(sent, axis=1), factor * mse, rtol=0.025)
  # Coordinates nobody sends stay exactly zero.
  np.testing.assert_array_equal(means[:, 30_000:], 0.0)


def test_noise_is_deterministic_in_the_key():
  values, masks = random_values(1)
  run = lambda k: over_the_air_mean(
      jax.random.PRNGKey(k), values, WEIGHTS, SEGMENTS, num_segments=3,
      channels=channels(5), masks=masks, snr=1.0, noise='real')[0]
  chex.assert_trees_all_equal(run(0), run(0))
  assert not np.allclose(run(0)['w'], run(1)['w'])


@pytest.mark.parametrize('kwargs,message', [
    ({'snr': 0.0}, 'snr must be positive'),
    ({'snr': -3.0}, 'snr must be positive'),
    ({'snr': 1.0, 'power': 0.0}, 'power must be positive'),
    ({'snr': 1.0, 'noise': 'loud'}, "unknown AirComp noise 'loud'"),
])
def test_bad_channel_parameters_fail_clearly(kwargs, message):
  values, _ = random_values(0)
  with pytest.raises(ValueError, match=message):
    aircomp.over_the_air_mean(jax.random.PRNGKey(0), values, WEIGHTS,
                              SEGMENTS, 3, channels(0), **kwargs)
