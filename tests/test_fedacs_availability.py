"""The FedACS family under client availability: each method draws among the
clients online, P(online) = 1 is the run without the part bit for bit, and
rule (3) is unbiased given who is online for Σ_{A} ω_m (1 − q_m) U_m / Σ_{A} ω_m
(`methods.fedacs.systems_aware`); FedAU counts an offline round as one
without participation.

Expected values are written out here from the toy's arrays, independently
of the methods' own `expected_weights`.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het.core.rounds import RoundRunner
from fedjax_het.methods import FEDACS_FAMILY
from test_fedacs import (MC_ROUNDS, assert_expectation, one_round_updates,
                         quadratic, toy, toy_arrays)
from test_pinned import params_hash


def toy_run(method, rounds=2, **systems):
  """(algorithm, final state) of `method` on the toy quadratic (static q and
  T of the toy's defaults, K = 5 of 10) with `systems` keys."""
  config = quadratic.algorithm_config(toy(systems, calibrate=True), method)
  data = quadratic.quadratic_data(toy().optima)
  algorithm = quadratic.quadratic_algorithm(config, data)
  state = algorithm.init({'x': jnp.zeros((1,))}, jax.random.PRNGKey(0))
  state, _ = RoundRunner(algorithm, 'vmap').run(state, data, rounds)
  return algorithm, state


@pytest.mark.parametrize('method', FEDACS_FAMILY)
def test_every_client_online_is_the_run_without_availability(method):
  _, without = toy_run(method)
  algorithm, everyone = toy_run(method, availability='bernoulli',
                                available_p=(1.0,))
  assert 'availability' in algorithm.parts.names
  assert params_hash(everyone.params) == params_hash(without.params)
  jax.tree.map(np.testing.assert_array_equal, everyone.clients,
               without.clients)
  # Half the clients offline per round: another model.
  _, half = toy_run(method, availability='bernoulli', available_p=(0.5,))
  assert not np.array_equal(half.params['x'], without.params['x'])


def planned(algorithm, state, rounds=12):
  """(client ids [R, C], active [R, C], online [R, M]) of rounds 0..R-1."""
  def one(r):
    at_r = state.replace(round=r)
    plans = algorithm.plan_round(at_r)
    return plans.client_id, plans.is_active(), algorithm.parts.online(at_r)
  return jax.device_get(jax.jit(jax.vmap(one))(jnp.arange(rounds)))


@pytest.mark.parametrize('method, participation', [
    ('fedacs', 'with_replacement'), ('fedavg_het', 'uniform'),
    ('fedavg_het', 'full'), ('os', 'with_replacement')])
def test_the_cohort_holds_only_online_clients(method, participation):
  config = quadratic.algorithm_config(
      toy({'availability': 'bernoulli', 'available_p': (0.4,)},
          participation=participation), method)
  data = quadratic.quadratic_data(toy().optima)
  algorithm = quadratic.quadratic_algorithm(config, data)
  state = algorithm.init({'x': jnp.zeros((1,))}, jax.random.PRNGKey(0))
  ids, active, online = planned(algorithm, state)
  assert 0 < online.mean() < 1
  was_online = np.take_along_axis(online, ids, axis=1)
  np.testing.assert_array_equal(active, was_online)  # offline slots idle
  count = online.sum(1)
  if participation == 'with_replacement' and method != 'os':
    # K draws from p, 0 offline: every slot online (nobody online: idle).
    np.testing.assert_array_equal(active.all(1), count > 0)
  else:  # K distinct (uniform), all M (full, OS): each online client once
    np.testing.assert_array_equal(
        active.sum(1), np.minimum(count, ids.shape[1]))
    assert all(len(set(row)) == len(row) for row in ids)


def fixed_online(tmp_path, online):
  """systems keys of a trace with the same clients `online` every round."""
  available = np.zeros((1, 10), bool)
  available[0, list(online)] = True
  np.savez(tmp_path / 'online.npz', available=available)
  return {'availability': 'trace',
          'availability_trace': str(tmp_path / 'online.npz')}


SIX = (0, 2, 3, 5, 8, 9)


@pytest.mark.parametrize('method, participation, online', [
    ('fedavg_het', 'with_replacement', SIX),   # IS: p = ω^A
    ('fedavg_het', 'uniform', SIX),            # US: K = 5 of 6
    ('fedavg_het', 'uniform', (1, 4, 9)),      # 3 < K: two idle slots
    ('fedacs', 'with_replacement', SIX),       # Eq. (15) on A
])
def test_rule_3_is_unbiased_given_who_is_online(tmp_path, method,
                                                participation, online):
  config = toy(fixed_online(tmp_path, online), client_lr=0.05,
               participation=participation)
  e, q, t, _ = toy_arrays(config)
  a = np.isin(np.arange(e.size), online)
  updates = e * (1 - (1 - config.client_lr)**t)           # U_m from X = 0

  def spec(omega):
    """e_m of E[update] = Σ e_m U_m for importances ω."""
    if method == 'fedacs':
      p = omega / ((1 - q) * t)
      return p / p.sum() * (1 - q)                        # Eq. (16)
    return omega * (1 - q)                                # Eqs. (23c), (24a)

  weights = spec(a / a.sum())                             # ω^A
  # Told apart: FedAvg's unnormalised Σ_A ω_m (1 − q_m) U_m; FedACS's
  # expectation with every client online.
  other = spec(a / a.size if method == 'fedavg_het' else 0 * a + 1 / a.size)
  samples = one_round_updates(method, config, MC_ROUNDS)
  assert_expectation(samples, weights @ updates, other=other @ updates)
  algorithm = quadratic.quadratic_algorithm(
      quadratic.algorithm_config(config, method),
      quadratic.quadratic_data(config.optima))
  state = algorithm.init({'x': jnp.zeros((1,))}, jax.random.PRNGKey(0))
  np.testing.assert_allclose(
      algorithm.expected_weights(state, algorithm.systems(state)), weights,
      rtol=1e-5, atol=1e-7)


def test_fedau_counts_an_offline_round_as_no_participation(tmp_path):
  # Full participation, reliable links: a client participates exactly in
  # the rounds it is online. Clients 0-4 are online every other round (the
  # trace's rows alternate), clients 5-9 always.
  available = np.ones((2, 10), bool)
  available[1, :5] = False
  np.savez(tmp_path / 'online.npz', available=available)
  config = quadratic.algorithm_config(
      toy({'q': (0.0,), 'availability': 'trace',
           'availability_trace': str(tmp_path / 'online.npz')},
          participation='full'), 'fedau')
  data = quadratic.quadratic_data(toy().optima)
  algorithm = quadratic.quadratic_algorithm(config, data)
  state = algorithm.init({'x': jnp.zeros((1,))}, jax.random.PRNGKey(0))
  state, _ = RoundRunner(algorithm, 'vmap').run(state, data, 4)
  stats = jax.device_get(state.clients['fedau'])
  # Rounds 0, 2 online, 1, 3 offline: intervals 1 (round 0) and 2 (round
  # 2) recorded, one round waited since; the others: four intervals of 1.
  np.testing.assert_array_equal(stats['interval_count'], [2] * 5 + [4] * 5)
  np.testing.assert_array_equal(stats['interval_sum'], [3] * 5 + [4] * 5)
  np.testing.assert_array_equal(stats['since'], [1] * 5 + [0] * 5)
