"""Co-S²P on the engine: reductions, the clock in the compiled rounds, Eqs. 2–5."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine_utils import (TINY_VIT, checkpoint_round_trip, tiny_vit_config,
                          vit_experiment)
from fedjax_het import config as config_lib
from fedjax_het.algorithms import cos2p
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.options import ConfigError

def cos2p_config(**cos2p_options):
  """Four digits clients of ~360 examples on a 2-block ViT, fixed clocks."""
  config = tiny_vit_config()
  config.cos2p.update(cos2p_options)
  return config


def build(config):
  algorithm, state, split = vit_experiment(config)
  return algorithm, state, split.train.to_device()


def test_reduces_to_fedavg():
  """Budgets 1, λ2 = 0, no masks, μ = 1, T_clk = 0 and uniform weights over
  holders: FedAvg's parameters (to 1e-5)."""
  config = cos2p_config(width_masks='full', weighting='holders',
                        personal_heads=False, mu=1.0, t_clk=0.0)
  config.aggregation_weights = 'uniform'
  algorithm, state, data = build(config)
  assert (algorithm.batches == algorithm.batches[0]).all()
  state, _ = RoundRunner(algorithm, 'map').run(state, data, 2)

  fedavg_config = cos2p_config()
  fedavg_config.update(dict(algorithm='fedavg', aggregation_weights='uniform',
                            local_steps=int(algorithm.batches[0])))
  fedavg, fedavg_state, _ = build(fedavg_config)
  fedavg_state, _ = RoundRunner(fedavg, 'map').run(fedavg_state, data, 2)
  chex.assert_trees_all_close(state.params, fedavg_state.params, atol=1e-5)


def test_stale_client_trains_from_its_dispatch_model():
  """Durations 1, 1, 2.5 s with ⌈μN⌉ = 2: client 2, dispatched in round 0,
  arrives in round 2 with τ = 2 and starts from w_0 with round 0's key."""
  config = cos2p_config(client_seconds=(1.0, 1.0, 2.5, 1.0), mu=0.5)
  config.num_clients = config.clients_per_round = 4
  algorithm, state, data = build(config)
  schedule = algorithm.schedule
  np.testing.assert_array_equal(schedule.arrivals[:3, 2], [False, False, True])
  assert schedule.staleness[2, 2] == 2 and schedule.dispatch_round[2, 2] == 0
  w0 = jax.tree.map(np.asarray, state.params)   # the run donates state
  state, _ = RoundRunner(algorithm, 'map').run(state, data, 2)
  inputs = jax.tree.map(lambda x: jnp.asarray(x[0]),
                        algorithm.round_inputs(2, 1))
  plans = algorithm.plan_round(state, data, inputs)
  assert int(plans.start_model[2]) == 2 and bool(plans.active[2])
  table = algorithm.start_models(state, plans)
  chex.assert_trees_all_equal(jax.tree.map(lambda t: t[2], table), w0)
  round0_key = jax.random.fold_in(jax.random.fold_in(jax.random.split(
      jax.random.fold_in(state.key, 0))[1], 2), 0)
  np.testing.assert_array_equal(plans.key[2], round0_key)


def test_staleness_weights_match_a_hand_computation():
  """Eq. 4 per fc1-row and head segment, Eq. 5's normalised sum."""
  config = cos2p_config(client_seconds=(1.0, 1.0, 2.5, 1.0), mu=0.5)
  algorithm, state, data = build(config)
  rng = np.random.default_rng(0)
  noisy = lambda t: jax.tree.map(lambda p: p + jnp.asarray(
      rng.normal(size=p.shape), p.dtype), t)
  state = state.replace(params=noisy(state.params), extras={
      'past': jax.tree.map(lambda p: jnp.stack([p, p + 0.5]),
                           noisy(state.params))})
  inputs = jax.tree.map(lambda x: jnp.asarray(x[0]),
                        algorithm.round_inputs(2, 1))
  plans = algorithm.plan_round(state, data, inputs)
  plans = plans.replace(active=jnp.array([True, True, True, False]),
                        start_model=jnp.array([0, 1, 2, 0]))
  units = {k: jnp.asarray(rng.integers(0, 2, (4,) + s), jnp.float32)
           for k, s in algorithm.model.unit_shapes().items()}
  delta = noisy(jax.tree.map(jnp.zeros_like, jax.tree.map(
      lambda p: jnp.broadcast_to(p, (4,) + p.shape), state.params)))
  update = algorithm.staleness_weighted(state, plans, delta, units,
                                        plans.active)
  table = jax.tree.map(np.asarray, algorithm.start_models(state, plans))
  params = jax.tree.map(np.asarray, state.params)
  delta, update = jax.tree.map(np.asarray, (delta, update))
  for kind, leaves, axes in (
      ('fc1', ('blocks_fc1_kernel', 'blocks_fc1_bias'), (2, 1)),
      ('heads', ('blocks_qkv_kernel', 'blocks_qkv_bias'), (3, 2))):
    for layer in range(2):
      for unit in range(units[kind].shape[2]):
        def entries(tree, k=None, layer=layer, unit=unit):
          return np.concatenate([np.take(
              (tree[name] if k is None else tree[name][k])[layer], unit,
              axis=axis - 1).ravel() for name, axis in zip(leaves, axes)])
        gammas = []
        for k in range(4):
          holds = units[kind][k, layer, unit] and plans.active[k]
          tau = int(plans.start_model[k])
          drift = np.abs(entries(params) - entries(
              jax.tree.map(lambda t: t[tau], table))).sum()
          size = entries(params).size
          gammas.append(holds * np.abs(entries(delta, k)).sum() /
                        (drift + size))
        gammas = np.array(gammas) / max(np.sum(gammas), 1e-30)
        expected = sum(g * entries(delta, k) for k, g in enumerate(gammas))
        np.testing.assert_allclose(entries(update), expected, rtol=2e-5,
                                   atol=1e-7)


def test_straight_through_gradients():
  """∂f(M)/∂I = f'(M)·σ'(I) ('identity') or f'(M)·P·σ'(I) ('probability')."""
  logits = jnp.array([-1.0, 0.3, 2.0, 0.0])
  weights = jnp.array([0.5, -2.0, 1.5, 3.0])
  key = jax.random.PRNGKey(3)
  for ste, factor in (('identity', 1.0), ('probability', None)):
    f = lambda i, ste=ste: jnp.sum(weights * cos2p.straight_through(
        i, key, ste)**2)
    m = cos2p.straight_through(logits, key, ste)
    np.testing.assert_array_equal(m, jax.random.bernoulli(
        key, jax.nn.sigmoid(logits)).astype(jnp.float32))
    p = jax.nn.sigmoid(logits)
    expected = 2 * weights * m * p * (1 - p) * (p if factor is None else 1.0)
    np.testing.assert_allclose(jax.grad(f)(logits), expected, rtol=1e-6)


def test_semi_async_rounds_resume_exactly_and_backends_agree(tmp_path):
  """Mask phase, self-distillation, stragglers: a run checkpointed while a
  straggler is in flight resumes bit-exactly, and vmap agrees with map."""
  config = cos2p_config(budgets=(0.25, 1.0), client_seconds=(1.0, 2.2),
                        mu=0.5, t_clk=0.1, mask_rounds=2, lambda_kd=0.3)
  config.num_clients = config.clients_per_round = 2
  config.rounds = 4
  algorithm, state, data = build(config)
  assert algorithm.schedule.dispatch_round[2, 1] < 2   # in flight at round 2
  runner = RoundRunner(algorithm, 'map')
  state, _ = runner.run(state, data, 2)
  restored, _ = checkpoint_round_trip(str(tmp_path), 2, state, state)
  full, _ = runner.run(state, data, 2)
  resumed, _ = runner.run(restored, data, 2)
  chex.assert_trees_all_equal(resumed.params, full.params)
  chex.assert_trees_all_equal(resumed.clients, full.clients)
  algorithm, state, data = build(config)
  runner = RoundRunner(algorithm, 'vmap')
  state, _ = runner.run(*runner.run(state, data, 2)[:1], data, 2)
  chex.assert_trees_all_close(state.params, full.params, rtol=1e-5,
                              atol=1e-6)


@pytest.mark.parametrize('key,value,message', [
    ('cos2p.mu', 0.0, 'cos2p.mu must be in (0, 1]'),
    ('cos2p.mu', 1.5, 'cos2p.mu must be in (0, 1]'),
    ('cos2p.t_clk', -1.0, 'cos2p.t_clk must be ≥ 0'),
    ('cos2p.budgets', (0.5, 1.2), 'cos2p.budgets must be in (0, 1]'),
    ('cos2p.budgets', (0.01,), 'trainable blocks'),
    ('cos2p.device_types', ('tx2',), "unknown device type 'tx2'"),
    ('model_options', dict(TINY_VIT, heads=3), 'divisible by heads'),
    ('clients_per_round', 2, 'clients_per_round must equal num_clients'),
])
def test_bad_input_fails_with_one_line(key, value, message):
  config = cos2p_config()
  if key == 'cos2p.device_types':
    config.cos2p.client_seconds = ()
  section, _, name = key.rpartition('.')
  if key == 'model_options':
    config.model_options = value
  else:
    (config[section] if section else config)[name] = value
  with pytest.raises((ConfigError, ValueError), match=message.replace(
      '(', r'\(').replace(')', r'\)').replace('[', r'\[')) as info:
    config_lib.validate(config)
    build(config)
  assert '\n' not in str(info.value)
