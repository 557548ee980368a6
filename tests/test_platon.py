"""FedAvg+PLATON: the score EMAs, the cubic schedule, top-unit selection, FedAvg at budget 1."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine_utils import tiny_vit_config, vit_experiment
from fedjax_het.methods.cos2p import platon
from fedjax_het.methods.cos2p.width_baselines import FedAvgFull
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.options import ConfigError

def platon_config(**platon_options):
  """Four digits clients of ~360 examples on a 2-block ViT, fixed clocks."""
  config = tiny_vit_config(algorithm='vit_fedavg',
                           aggregation_weights='uniform')
  config.platon.update(platon_options)
  return config


def build(config, cls=platon.FedAvgPlaton):
  """The experiment of `config` with `cls` as its algorithm."""
  algorithm, state, split = vit_experiment(config, cls)
  return algorithm, state, split.train.to_device()


def test_scores_follow_the_ema_definitions():
  """Three steps of Ī ← β1Ī + (1−β1)I, Ū ← β2Ū + (1−β2)|I − Ī|, s = ĪŪ,
  I = |θ ⊙ g|, against the numbers written out by hand."""
  b1, b2 = 0.85, 0.95
  thetas = [np.array([1.0, -2.0]), np.array([0.5, 4.0]),
            np.array([-3.0, 0.0])]
  grads = [np.array([0.2, 0.5]), np.array([-2.0, 0.25]),
           np.array([1.0, 7.0])]
  # I: [0.2, 1.0], [1.0, 1.0], [3.0, 0.0].
  ema_i, ema_u = jnp.zeros(2), jnp.zeros(2)
  for theta, grad in zip(thetas, grads):
    ema_i, ema_u, score = platon.platon_scores(
        ema_i, ema_u, jnp.asarray(theta), jnp.asarray(grad), b1, b2)
  # Ī: [0.03, 0.15] -> [0.1755, 0.2775] -> [0.599175, 0.235875].
  expected_i = np.array([0.599175, 0.235875])
  # U: [0.17, 0.85] -> [0.8245, 0.7225] -> [2.400825, 0.235875];
  # Ū: [0.0085, 0.0425] -> [0.04930, 0.07650] -> [0.16687, 0.08447].
  u1 = 0.05 * np.array([0.17, 0.85])
  u2 = 0.95 * u1 + 0.05 * np.array([0.8245, 0.7225])
  expected_u = 0.95 * u2 + 0.05 * np.array([2.400825, 0.235875])
  np.testing.assert_allclose(ema_i, expected_i, rtol=1e-6)
  np.testing.assert_allclose(ema_u, expected_u, rtol=1e-6)
  np.testing.assert_allclose(score, expected_i * expected_u, rtol=1e-6)


def test_cubic_schedule_runs_from_one_to_the_target():
  target, start, end = 0.3, 10.0, 50.0
  rate = lambda t: float(platon.cubic_rate(t, target, start, end))
  assert rate(0) == 1.0 and rate(start) == 1.0
  assert rate(end) == pytest.approx(target) and rate(80) == pytest.approx(
      target)
  # Halfway: R + (1 − R)·(1/2)³.
  assert rate(30) == pytest.approx(target + (1 - target) / 8)
  rates = [rate(t) for t in range(0, 60)]
  assert all(a >= b for a, b in zip(rates, rates[1:]))
  assert float(platon.cubic_rate(5, target, 5.0, 5.0)) == pytest.approx(
      target)


@pytest.mark.parametrize('ranking', ['layer', 'kind'])
def test_kept_units_are_the_top_scoring(ranking):
  """Unit scores are Σ Ī·Ū over a head's q/k/v rows and biases (a row's
  kernel row and bias); exactly the ⌈r·U⌉ best are kept."""
  config = platon_config(ranking=ranking)
  config.cos2p.budgets = (0.25,)
  algorithm, state, _ = build(config)
  rng = np.random.default_rng(0)
  row = jax.tree.map(lambda x: x[0], state.clients)
  row['importance'] = jax.tree.map(
      lambda x: jnp.asarray(rng.uniform(size=x.shape), x.dtype),
      row['importance'])
  row['uncertainty'] = jax.tree.map(
      lambda x: jnp.asarray(rng.uniform(size=x.shape), x.dtype),
      row['uncertainty'])
  rate = 0.4
  units = algorithm.select_units(row, jnp.float32(rate))
  s = {k: np.asarray(row['importance'][k] * row['uncertainty'][k])
       for k in row['importance']}
  by_hand = {
      'heads': s['blocks_qkv_kernel'].sum((1, 2, 4)) +
               s['blocks_qkv_bias'].sum((1, 3)),
      'proj': s['blocks_proj_kernel'].sum((1, 2)) + s['blocks_proj_bias'],
      'fc1': s['blocks_fc1_kernel'].sum(1) + s['blocks_fc1_bias'],
      'fc2': s['blocks_fc2_kernel'].sum(1) + s['blocks_fc2_bias'],
  }
  for kind, scores in by_hand.items():
    kept = np.asarray(units[kind])
    groups = [scores.ravel()] if ranking == 'kind' else list(scores)
    masks = [kept.ravel()] if ranking == 'kind' else list(kept)
    for group, mask in zip(groups, masks):
      k = int(np.ceil(rate * group.size))
      assert mask.sum() == k, kind
      assert set(np.flatnonzero(mask)) == set(np.argsort(-group)[:k]), kind


def test_clients_end_at_their_width_and_upload_only_it():
  """After the ramp every client keeps ⌈√R_n·U⌉ units per layer and kind,
  and a round moves only the heads some client kept in it."""
  config = platon_config(end_fraction=0.3)
  config.cos2p.budgets = (0.25, 0.25, 1.0, 0.25)
  algorithm, state, data = build(config)
  runner = RoundRunner(algorithm, 'map')
  state, _ = runner.run(state, data, 1)
  before = jax.tree.map(np.asarray, state.params)
  state, _ = runner.run(state, data, 1)
  units = jax.tree.map(np.asarray, state.clients['units'])
  for kind, (layers, count) in algorithm.model.unit_shapes().items():
    for n, width in enumerate(algorithm.width):
      np.testing.assert_array_equal(
          units[kind][n].sum(1), [int(np.ceil(width * count - 1e-6))] * layers)
  kept_by_any = units['heads'].max(0) > 0                          # [L, H]
  moved = np.abs(np.asarray(state.params['blocks_qkv_kernel']) -
                 before['blocks_qkv_kernel']).sum((1, 2, 4)) > 0
  np.testing.assert_array_equal(moved, kept_by_any)
  assert np.asarray(state.clients['step']).tolist() == [
      2 * int(b) for b in algorithm.batches]


def test_budget_one_reduces_to_fedavg():
  """Budgets 1: r_t = 1 at every step, PLATON keeps every unit and the run
  is `vit_fedavg`'s (parameters to 1e-5)."""
  config = platon_config(end_fraction=0.1)
  algorithm, state, data = build(config)
  state, _ = RoundRunner(algorithm, 'map').run(state, data, 2)
  fedavg, fedavg_state, _ = build(config, cls=FedAvgFull)
  fedavg_state, _ = RoundRunner(fedavg, 'map').run(fedavg_state, data, 2)
  chex.assert_trees_all_close(state.params, fedavg_state.params, atol=1e-5)


def test_bad_schedule_fails_with_one_line():
  config = platon_config(start_fraction=0.5, end_fraction=0.2)
  with pytest.raises(ConfigError, match='end_fraction') as info:
    build(config)
  assert '\n' not in str(info.value)
