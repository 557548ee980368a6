"""The dp part (DP-FedAvg): clipped uploads, the noise on the cohort sum,
adaptive clipping, the accountant's ε and its refusal to claim amplification,
the neutral setting and the one-line refusals."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine_utils import cohort_outputs, tiny_config, tiny_method
from fedjax_het import config as config_lib
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.core.state import ClientOutput, ClientPlan
from fedjax_het.options import ConfigError
from fedjax_het.parts import dp as dp_lib
from fedjax_het.privacy import accounting


def build(name='fedavg', **dp):
  config = tiny_config(algorithm=name, aggregation_weights='uniform')
  if name in ('heterofl', 'fiarse'):
    config.capacities = (0.5, 1.0)
  config.dp.update(dp)
  return tiny_method(config)


@pytest.mark.parametrize('name', ['fedavg', 'heterofl', 'fiarse',
                                  'fedavg_het', 'fedacs'])
def test_every_upload_is_clipped_to_s_in_the_full_model(name):
  clip = 0.05
  algorithm, state, data = build(name, clip_norm=clip)
  _, outputs = cohort_outputs(algorithm, state, data)
  norms = jax.vmap(lambda d: jnp.sqrt(sum(
      jnp.sum(jnp.square(x)) for x in jax.tree.leaves(d))))(outputs.delta)
  before = np.asarray(outputs.parts['dp'])
  assert np.all(np.asarray(norms) <= clip * (1 + 1e-5))
  # The clip bites (the updates were longer) and keeps the direction's norm
  # at exactly S.
  assert np.all(before > clip)
  np.testing.assert_allclose(norms, clip, rtol=1e-5)


def test_the_noise_on_the_sum_has_std_sigma_s():
  sigma, clip = 1.5, 0.3
  algorithm, state, _ = build(clip_norm=clip, noise_multiplier=sigma)
  part = algorithm.parts.parts[0]
  zeros = jax.tree.map(lambda p: jnp.zeros((1,) + p.shape), state.params)
  weights = jnp.asarray([1.0, 1.0, 0.0, 1.0])

  def noise(r):
    numerator, _ = part.release_sums(state.replace(round=r), weights,
                                     (zeros, None))
    return jnp.concatenate([x.ravel() for x in jax.tree.leaves(numerator)])

  draws = np.asarray(jax.jit(jax.vmap(noise))(jnp.arange(200)))
  # 200 rounds × the model's coordinates: the std within 2 % of σS, mean 0.
  assert draws.size > 10_000
  np.testing.assert_allclose(draws.std(), sigma * clip, rtol=0.02)
  assert abs(draws.mean()) < 0.02 * sigma * clip
  # Rounds draw independent noise.
  assert not np.allclose(draws[0], draws[1])


def test_noise_cohort_scales_the_noise_by_k_over_c():
  algorithm, state, _ = build(clip_norm=0.3, noise_multiplier=1.5,
                              noise_cohort_size=40)
  part = algorithm.parts.parts[0]
  std = part.noise_std(state, jnp.ones(4))
  np.testing.assert_allclose(std, 1.5 * 0.3 * 4 / 40, rtol=1e-6)
  with pytest.raises(ConfigError, match='at least the cohort'):
    build(clip_norm=0.3, noise_multiplier=1.5, noise_cohort_size=2)


def fake_round(norms, clip):
  """Plans and outputs of a cohort whose updates have `norms` (all
  delivered), the round's clip norm `clip`."""
  k = len(norms)
  plans = ClientPlan(client_id=jnp.arange(k), key=None,
                     num_steps=jnp.ones(k, jnp.int32), lr=jnp.ones(k),
                     weight=jnp.ones(k), group=jnp.zeros(k, jnp.int32),
                     parts={'dp': jnp.full(k, clip, jnp.float32)})
  outputs = ClientOutput(delta=None, loss=jnp.zeros(k),
                         num_examples=jnp.zeros(k),
                         parts={'dp': jnp.asarray(norms, jnp.float32)})
  return plans, outputs


@pytest.mark.parametrize('start', [0.1, 10.0])
def test_adaptive_clipping_moves_s_toward_the_target_quantile(start):
  """A constructed federation: 100 clients with update norms 1..100; the
  median is ≈ 50. From S far below or above, 150 rounds of the geometric
  update (noiseless count) bring S to the median."""
  algorithm, state, _ = build(clip_norm=start, adaptive_quantile=0.5,
                              adaptive_lr=0.2)
  part = algorithm.parts.parts[0]
  norms = np.arange(1, 101, dtype=np.float32)

  def step(state, _):
    plans, outputs = fake_round(norms, part.clip_norm(state))
    after = part.finish(state, state, plans, outputs)
    return after.replace(round=state.round + 1), part.clip_norm(after)

  _, path = jax.lax.scan(step, state, None, length=150)
  path = np.asarray(path)
  # Monotone toward the median while far from it, and ends within ±5 of it.
  distance = np.abs(np.log(path) - np.log(50.5))
  assert distance[10] < distance[0] < abs(math.log(start / 50.5))
  assert 45 <= path[-1] <= 56


def test_adaptive_clip_norm_is_server_state_updated_by_the_run():
  algorithm, state, data = build(clip_norm=1e-4, adaptive_quantile=0.9,
                                 adaptive_lr=0.5)
  state, metrics = RoundRunner(algorithm, 'vmap').run(state, data, 2)
  # Every update is longer than 1e-4: all clipped, so b̄ = 0 and S grows by
  # exp(0.5·0.9) each round.
  np.testing.assert_array_equal(metrics['dp_clipped'], [4, 4])
  np.testing.assert_allclose(state.extras['dp']['clip_norm'],
                             1e-4 * math.exp(0.45)**2, rtol=1e-5)


def test_neutral_setting_is_the_run_without_the_part():
  runs = []
  for dp in ({}, {'clip_norm': math.inf}):
    algorithm, state, data = build('heterofl', **dp)
    state, _ = RoundRunner(algorithm, 'vmap').run(state, data, 2)
    runs.append(jax.device_get(state.params))
  assert algorithm.parts.names == ('dp',)
  jax.tree.map(np.testing.assert_array_equal, *runs)


def test_the_noise_changes_the_model():
  runs = []
  for sigma in (0.0, 1.0):
    algorithm, state, data = build(clip_norm=0.5, noise_multiplier=sigma)
    state, _ = RoundRunner(algorithm, 'vmap').run(state, data, 1)
    runs.append(np.concatenate([np.ravel(x) for x in
                                jax.tree.leaves(jax.device_get(state.params))]))
  assert not np.allclose(*runs)


@pytest.mark.parametrize('kind', ['rdp', 'pld'])
def test_epsilon_equals_dp_accountings_for_the_same_sigma_q_t_delta(kind):
  dp = pytest.importorskip('dp_accounting')
  config = tiny_config(algorithm='fedavg', rounds=30)
  config.dp.update(clip_norm=1.0, noise_multiplier=1.1, delta=1e-3,
                   accountant=kind)
  algorithm, _, _ = tiny_method(config)
  facts = algorithm.summary_facts()
  # Computed here independently: q = K/N = 4/6, T = 30, σ = 1.1.
  event = dp.SelfComposedDpEvent(
      dp.PoissonSampledDpEvent(4 / 6, dp.GaussianDpEvent(1.1)), 30)
  accountant = (dp.rdp.RdpAccountant() if kind == 'rdp' else
                dp.pld.PLDAccountant())
  expected = accountant.compose(event).get_epsilon(1e-3)
  assert facts['epsilon'] == pytest.approx(expected, rel=1e-9)
  assert facts['dp']['amplification_by_sampling']


@pytest.mark.parametrize('name,systems', [
    ('fedavg', {'availability': 'bernoulli', 'available_p': (0.5,)}),
    ('fedacs', {})])
def test_non_uniform_participation_reports_the_no_amplification_epsilon(
    name, systems):
  dp = pytest.importorskip('dp_accounting')
  config = tiny_config(algorithm=name, rounds=30)
  config.systems.update(systems)
  config.dp.update(clip_norm=1.0, noise_multiplier=1.1, delta=1e-3)
  algorithm, _, _ = tiny_method(config)
  facts = algorithm.summary_facts()
  unsampled = dp.rdp.RdpAccountant().compose(dp.SelfComposedDpEvent(
      dp.GaussianDpEvent(1.1), 30)).get_epsilon(1e-3)
  assert facts['epsilon'] == pytest.approx(unsampled, rel=1e-9)
  assert not facts['dp']['amplification_by_sampling']
  assert facts['dp']['no_amplification_because']


def test_sigma_calibrated_from_a_target_epsilon_reaches_it():
  pytest.importorskip('dp_accounting')
  config = tiny_config(algorithm='fedavg', rounds=20)
  config.dp.update(clip_norm=1.0, target_epsilon=4.0, delta=1e-3)
  algorithm, _, _ = tiny_method(config)
  facts = algorithm.summary_facts()
  assert facts['epsilon'] == pytest.approx(4.0, rel=1e-2)
  assert facts['epsilon'] <= 4.0
  sigma = facts['dp']['noise_multiplier']
  looser = accounting.Mechanism(0.9 * sigma, 4 / 6, 20, True)
  assert accounting.epsilon(looser, 1e-3) > 4.0


def test_without_dp_accounting_a_run_asking_for_epsilon_gets_one_line(
    monkeypatch):
  import builtins  # pylint: disable=g-import-not-at-top
  real = builtins.__import__

  def no_dp_accounting(name, *args, **kwargs):
    if name == 'dp_accounting':
      raise ImportError(name)
    return real(name, *args, **kwargs)

  monkeypatch.setattr(builtins, '__import__', no_dp_accounting)
  with pytest.raises(ConfigError, match=r'pip install -e "\.\[dp\]"'):
    build(clip_norm=1.0, noise_multiplier=1.0)
  # σ = 0 (ε = ∞) and accountant 'none' need no accountant.
  assert build(clip_norm=1.0)[0].summary_facts()['epsilon'] == math.inf
  facts = build(clip_norm=1.0, noise_multiplier=1.0,
                accountant='none')[0].summary_facts()
  assert facts['epsilon'] is None


@pytest.mark.parametrize('name,dp,systems,match', [
    ('fedvarp', {'clip_norm': 1.0}, {}, 'fedvarp does not read the dp section'),
    ('hist', {'clip_norm': 1.0}, {}, 'hist does not read the dp section'),
    ('fedavg', {'noise_multiplier': 1.0}, {}, 'dp.clip_norm = 0 leaves'),
    ('fedavg', {'clip_norm': math.inf, 'noise_multiplier': 1.0}, {},
     'sensitivity unbounded'),
    ('fedavg', {'clip_norm': 1.0, 'count_noise': 1.0}, {},
     'read by adaptive clipping only'),
    ('fedavg', {'clip_norm': 1.0, 'noise_multiplier': 1.0,
                'adaptive_quantile': 0.5}, {}, 'dp.count_noise > 0'),
    ('fedavg', {'clip_norm': 1.0, 'noise_multiplier': 1.0,
                'target_epsilon': 2.0}, {}, 'both set'),
])
def test_bad_dp_settings_are_refused_in_one_line(name, dp, systems, match):
  config = tiny_config(algorithm=name)
  config.dp.update(dp)
  with pytest.raises(ConfigError, match=match) as info:
    config_lib.validate(config)
  assert '\n' not in str(info.value)


@pytest.mark.parametrize('section,values,match', [
    ('clock', {'mu': 0.5}, 'stale'),
    ('hierarchy', {'num_cells': 2}, 'edge rounds')])
def test_the_clock_and_cells_are_refused_beside_dp(section, values, match):
  config = tiny_config(algorithm='fedavg', clients_per_round=6)
  config[section].update(values)
  config.dp.clip_norm = 1.0
  with pytest.raises(ConfigError,
                     match=rf'^{section}\.\* and dp\.\* are both set .*{match}'):
    tiny_method(config)


def test_dp_options_describe_the_section():
  assert set(dp_lib.DPOptions.describe()) >= {
      'dp.clip_norm', 'dp.noise_multiplier', 'dp.target_epsilon', 'dp.delta',
      'dp.adaptive_quantile', 'dp.noise_cohort_size'}
