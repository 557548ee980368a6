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
  valid = jnp.arange(15) < 12  # three padded clients are ignored
  a, gain, initial = beamformer(h, valid)
  assert float(gain) >= float(initial)
  assert float(gain) > 2 * float(initial)  # it actually optimises
  np.testing.assert_allclose(jnp.linalg.norm(a), 1.0, rtol=1e-5)
  np.testing.assert_allclose(gain, aircomp.min_gain(a, h, valid), rtol=1e-6)
  # No unit vector beats the upper bound min_i ||h_i||² (Cauchy-Schwarz).
  bound = jnp.min(jnp.where(valid, jnp.sum(jnp.abs(h)**2, -1), jnp.inf))
  assert float(gain) <= float(bound) * (1 + 1e-5)


def test_beamformer_of_one_client_is_matched_filter():
  h = channels(7, num_clients=15)
  valid = jnp.arange(15) == 1
  _, gain, initial = beamformer(h, valid)
  norm2 = float(jnp.sum(jnp.abs(h[1])**2))
  np.testing.assert_allclose([gain, initial], [norm2, norm2], rtol=1e-5)


def random_values(seed, num_clients=9):
  keys = jax.random.split(jax.random.PRNGKey(seed), 2)
  values = {'w': jax.random.normal(keys[0], (num_clients, 4, 3)),
            'b': jax.random.normal(keys[1], (num_clients, 5))}
  masks = {'w': (jnp.arange(12).reshape(4, 3) % 3 != 0)[None].repeat(
               num_clients, 0),
           'b': (jnp.arange(5) < 2 + SEGMENTS[:, None])}
  return values, masks


@pytest.mark.parametrize('use_masks', [True, False])
def test_noiseless_aircomp_equals_exact_segment_mean(use_masks):
  values, masks = random_values(0)
  masks = masks if use_masks else None
  means, _, stats = over_the_air_mean(
      jax.random.PRNGKey(1), values, WEIGHTS, SEGMENTS, num_segments=3,
      channels=channels(2), masks=masks, snr=100.0, noise='none')
  exact, _ = aggregation.masked_segment_mean(values, WEIGHTS, SEGMENTS, 3,
                                             masks)
  chex.assert_trees_all_close(means, exact, rtol=1e-5, atol=1e-6)
  # Channel-inversion precoders respect |α_i|² ≤ P, with equality for the
  # weakest client of each cell (scaled by its squared normalised weight).
  cell_total = jax.ops.segment_sum(WEIGHTS, SEGMENTS, 3)[SEGMENTS]
  ratio = stats.tx_power / (WEIGHTS / cell_total)**2
  assert float(jnp.max(ratio)) <= 1.0 + 1e-4
  np.testing.assert_allclose(jax.ops.segment_max(ratio, SEGMENTS, 3), 1.0,
                             rtol=1e-4)


@pytest.mark.parametrize('noise,factor', [('real', 1.0), ('complex', 0.5)])
def test_empirical_noise_variance_matches_the_mse_formula(noise, factor):
  """Var of the estimate = 1/(SNR·g) per element (real), half for complex."""
  dim = 40_000
  values = {'x': jnp.zeros((9, dim))}
  masks = {'x': jnp.broadcast_to(jnp.arange(dim) < 30_000, (9, dim))}
  snr = jnp.asarray([10.0, 1.0, 0.1])  # 10, 0 and −10 dB
  means, _, stats = over_the_air_mean(
      jax.random.PRNGKey(3), values, WEIGHTS, SEGMENTS, num_segments=3,
      channels=channels(4), masks=masks, snr=snr, power=2.0, noise=noise)
  np.testing.assert_allclose(stats.mse, 1 / (snr * stats.gain), rtol=1e-6)
  sent = means['x'][:, :30_000]
  # 30,000 draws per cell: the variance estimate is within 2.5% w.p. ≫ 0.999.
  np.testing.assert_allclose(jnp.mean(sent, axis=1), 0.0,
                             atol=float(4 * jnp.sqrt(stats.mse.max() / 3e4)))
  np.testing.assert_allclose(jnp.var(sent, axis=1), factor * stats.mse,
                             rtol=0.025)
  # Coordinates nobody sends stay exactly zero.
  np.testing.assert_array_equal(means['x'][:, 30_000:], 0.0)


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
