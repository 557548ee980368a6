"""FIARSE and the width-slicing baselines on the engine."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het import methods, evaluation, models
from fedjax_het.methods.fiarse.submodels import level_of_clients
from fedjax_het.core.rounds import RoundRunner
from engine_utils import stacked_masks, tiny_config, tiny_data, tiny_fedavg

SUBMODEL_METHODS = ('fiarse', 'fiarse_layerwise', 'pruning_greedy',
                    'heterofl', 'fedrolex', 'fjord')
LEVELS = (0.25, 0.5, 1.0)


def make(name, data=None, seed=0, **overrides):
  """(algorithm, initial state, data) of method `name` on `tiny_data`."""
  overrides.setdefault('capacities', LEVELS)
  overrides.setdefault('aggregation_weights', 'uniform')
  config = tiny_config(algorithm=name, **overrides)
  config.model_options.hidden = (12, 8)
  data = data if data is not None else tiny_data()
  model = models.create_model('mlp', 3, **config.model_options.to_dict())
  params = models.init_params(model, jax.random.PRNGKey(seed),
                              data.x.shape[2:])
  algorithm = methods.create_algorithm(name, config, model, data)
  return algorithm, algorithm.init(params, jax.random.PRNGKey(seed + 1)), data


def test_capacity_levels_are_equal_contiguous_blocks():
  np.testing.assert_array_equal(level_of_clients(8, 4),
                                [0, 0, 1, 1, 2, 2, 3, 3])
  assert np.bincount(level_of_clients(100, 4)).tolist() == [25] * 4


@pytest.mark.parametrize('name', ['fiarse', 'heterofl', 'fedrolex'])
def test_full_capacity_equals_fedavg(name):
  config = tiny_config(aggregation_weights='uniform')
  config.model_options.hidden = (12, 8)
  fedavg, state, data = tiny_fedavg(config)
  method, _, _ = make(name, capacities=(1.0,),
                      submodel={'partial_average': 'mask'})
  method_state = jax.tree.map(jnp.copy, method.init(state.params, state.key))
  expected, _ = RoundRunner(fedavg, 'vmap').run(state, data, 3)  # donates
  got, _ = RoundRunner(method, 'vmap').run(method_state, data, 3)
  # Equal up to float32 rounding (XLA fuses the two programs differently).
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6,
                                                       atol=1e-7),
               got.params, expected.params)


@pytest.mark.parametrize('name,backends', [
    (name, ('vmap', 'sequential')) for name in SUBMODEL_METHODS] + [
        ('fiarse', ('vmap', 'map')), ('fjord', ('vmap', 'map'))])
def test_every_backend_gives_the_same_rounds(name, backends):
  results = []
  for backend in backends:
    chunk = 2 if backend == 'map' else None
    algorithm, state, data = make(name)
    state, metrics = RoundRunner(algorithm, backend, chunk).run(state, data, 3)
    results.append((state.params, metrics['train_loss']))
  for params, loss in results[1:]:
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-6),
                 params, results[0][0])
    np.testing.assert_allclose(loss, results[0][1], rtol=1e-5)


def run_one_round(name, **overrides):
  algorithm, state, data = make(name, **overrides)

  @jax.jit
  def one_round(state, data):
    plans = stacked_masks(algorithm.plan_round(state, data))
    outputs = jax.vmap(algorithm.client_update, in_axes=(None, 0, None))(
        state.params, plans, data)
    return plans, outputs, algorithm.finish_round(state, plans, outputs)[0]

  return (algorithm, state) + one_round(state, data)


def test_fiarse_submodel_only_shrinks_within_a_round():
  algorithm, state, plans, outputs, _ = run_one_round('fiarse', local_steps=6,
                                                      client_lr=0.5)
  local = jax.tree.map(lambda p, d: p - d, state.params, outputs.delta)
  for p, d, m, t in zip(*(jax.tree.leaves(x) for x in (
      local, outputs.delta, plans.mask, plans.extras['theta']))):
    t = t.reshape(t.shape + (1,) * (p.ndim - 1))
    end_mask = np.abs(np.asarray(p)) >= np.asarray(t)
    start_mask = np.asarray(m)
    assert not np.any(end_mask & ~start_mask)  # nothing re-enters
    assert np.all(np.asarray(d)[~start_mask] == 0)  # nothing outside moves
  # The round-start masks hold ⌊γd⌋ maskable entries: a γ fraction.
  levels = np.asarray(algorithm.client_level)[np.asarray(plans.client_id)]
  d = algorithm.thresholds.num_maskable
  for slot, level in enumerate(levels):
    kept = sum(int(np.asarray(m[slot]).sum()) for m, maskable in zip(
        jax.tree.leaves(plans.mask),
        jax.tree.leaves(models.maskable_leaves(state.params))) if maskable)
    assert kept == max(1, int(LEVELS[level] * d))


@pytest.mark.parametrize('tcb_bias', [True, False])
def test_fiarse_client_step_is_tcb_gd(tcb_bias):
  """One local step moves kept entries by −η·g·(1 + 2|w|θ/(|w|+θ)²) (Eq. (3)), or
  with tcb_bias=False by the plain masked gradient −η·g·1{|w| ≥ θ} (the official code)."""
  algorithm, state, plans, outputs, _ = run_one_round(
      'fiarse', local_steps=1, batch_size=9, submodel={'tcb_bias': tcb_bias})
  slot = 0
  plan = jax.tree.map(lambda x: x[slot], plans)
  client = int(plan.client_id)
  theta = plan.extras['theta']
  data = tiny_data()
  count = int(data.counts[client])
  x, y = data.x[client, :count], data.y[client, :count]
  # Batch 9 ≥ count: a full epoch permutation plus wrap-around rows.
  from fedjax_het.core import batching
  rows = batching.batch_indices(plan.key, 0, count, batch_size=9,
                                max_examples=9, max_epochs_per_batch=2)

  @jax.jit
  def expected_delta(params, theta, x, y):
    masked = jax.tree.map(lambda p, t: jnp.where(jnp.abs(p) >= t, p, 0),
                          params, theta)

    def plain_loss(p):
      logits = algorithm.model.apply({'params': p}, x)
      return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(9), y])

    g = jax.grad(plain_loss)(masked)
    return jax.tree.map(
        lambda w, gw, t: jnp.where(
            jnp.abs(w) >= t,
            0.1 * gw * (1 + tcb_bias * 2 * jnp.abs(w) * t / (jnp.abs(w) + t)**2),
            0),
        params, g, theta)

  expected = expected_delta(state.params, theta, x[rows], y[rows])
  delta = jax.tree.map(lambda d: d[slot], outputs.delta)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
               delta, expected)


@pytest.mark.parametrize('rule', ['mask', 'nonzero'])
def test_partial_averaging_identities(rule):
  algorithm, state, plans, outputs, new_state = run_one_round(
      'fiarse', submodel={'partial_average': rule})
  for old, new, delta, mask in zip(*(jax.tree.leaves(x) for x in (
      state.params, new_state.params, outputs.delta, plans.mask))):
    old, new, delta, mask = map(np.asarray, (old, new, delta, mask))
    held = mask if rule == 'mask' else delta != 0
    count = held.sum(axis=0)
    # Σ_i Δ_i / #{i holding the entry}; entries nobody holds stay unchanged.
    expected = old - np.where(count > 0, delta.sum(axis=0) /
                              np.maximum(count, 1), 0)
    np.testing.assert_allclose(new, expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(new[count == 0], old[count == 0])


def test_fedrolex_window_rolls_one_channel_per_round_heterofl_stays():
  for name, moves in [('fedrolex', True), ('heterofl', False)]:
    algorithm, state, _ = make(name)
    masks, plan_round = [], jax.jit(algorithm.plan_round)
    for r in (0, 1):
      plans = plan_round(state.replace(round=jnp.int32(r)), None)
      level = np.asarray(algorithm.client_level)[np.asarray(plans.client_id)]
      slot = int(np.flatnonzero(level == 0)[0])  # a γ = 1/4 client
      masks.append(np.asarray(plans.client_masks()['fc1']['bias'][slot]))
    # r = √¼ of 12 hidden units: 6 channels; FedRolex's window moves by one.
    assert masks[0].sum() == masks[1].sum() == 6
    np.testing.assert_array_equal(masks[0], np.arange(12) < 6)
    np.testing.assert_array_equal(masks[1], np.roll(masks[0], -1) if moves
                                  else masks[0])


@pytest.mark.parametrize('update_mask, shrinks', [('round_start', False),
                                                  ('current', True)])
def test_with_momentum_the_submodel_shrinks_only_under_the_current_mask(
    update_mask, shrinks):
  """Momentum 0.9 moves entries after they fall below θ (the round-start mask
  alone lets them drift and re-enter); 'current' freezes them where they fell."""
  algorithm, state, data = make('fiarse', local_steps=8, client_lr=1.0,
                                client_momentum=0.9,
                                submodel={'update_mask': update_mask})
  plans = stacked_masks(jax.jit(algorithm.plan_round)(state, data))
  plan = jax.tree.map(lambda x: x[0], plans)
  theta = plan.extras['theta']
  update = jax.jit(algorithm.client_update)
  deltas = [update(state.params, plan.replace(num_steps=jnp.asarray(s)), data).delta
            for s in range(9)]
  fell = drifted = reentered = 0
  for prev, out in zip(deltas, deltas[1:]):
    for p0, d, dp, m, t in zip(*(jax.tree.leaves(x) for x in (
        state.params, out, prev, plan.mask, theta))):
      before = np.asarray(p0 - dp)
      after = np.asarray(p0 - d)
      out_before = np.asarray(m) & (np.abs(before) < np.asarray(t))
      fell += int(np.sum(out_before))
      drifted += int(np.sum(out_before & (after != before)))
      reentered += int(np.sum(out_before & (np.abs(after) >= np.asarray(t))))
  assert fell > 0
  if shrinks:
    assert drifted == 0 and reentered == 0
  else:
    assert drifted > 0


def test_update_mask_current_is_fiarse_only():
  with pytest.raises(ValueError, match="submodel.update_mask='current'"):
    make('heterofl', submodel={'update_mask': 'current'})
  with pytest.raises(ValueError, match='submodel.update_mask must be one of'):
    make('fiarse', submodel={'update_mask': 'now'})


def test_global_test_client_shards_is_the_shards_in_client_order():
  """FIARSE's code: the global set is the local test shards one client after another, so
  with batch-statistics norms the accuracy depends on that order."""
  from fedjax_het import data as data_lib
  split = data_lib.build_federated(data_lib.load_dataset('digits', seed=0), num_clients=10,
                                   partition='one_class', seed=0, local_test=True)
  x, y = evaluation.concatenated_shards(split.local_test)
  counts = np.asarray(split.local_test.counts)
  assert x.shape[0] == y.size == counts.sum()
  np.testing.assert_array_equal(y, np.repeat(np.arange(10), counts))  # client c: class c
  np.testing.assert_array_equal(x[counts[0]:counts[0] + 2], np.asarray(split.local_test.x)[1, :2])
  config = tiny_config(algorithm='fiarse', capacities=(0.5, 1.0), local_test=True,
                       eval_batch_size=20)
  config.submodel.global_test = 'client_shards'
  model = models.create_model('mlp', 10, hidden=(8,))
  params = models.init_params(model, jax.random.PRNGKey(0), (64,))
  config.num_clients = 10
  algorithm = methods.create_algorithm('fiarse', config, model, split.train)
  got = algorithm.evaluator(split)(params)
  want = evaluation.make_evaluator(lambda p, b: model.apply({'params': p}, b), x, y, 20)(
      algorithm._eval_params(params, 1.0))
  np.testing.assert_allclose(got['accuracy@1'], want['accuracy'], rtol=1e-6)
  config.local_test = False
  with pytest.raises(ValueError, match="global_test='client_shards' needs local_test"):
    methods.create_algorithm('fiarse', config, model, split.train)


def test_pruning_greedy_keeps_the_mask_and_plain_gradient():
  algorithm, state, plans, outputs, _ = run_one_round('pruning_greedy',
                                                      local_steps=1)
  fiarse = run_one_round('fiarse', local_steps=1)[3]
  # Same round-start masks; on kept entries FIARSE's step is larger by the
  # bias factor in (1, 1.5].
  for d_greedy, d_fiarse, m in zip(jax.tree.leaves(outputs.delta),
                                   jax.tree.leaves(fiarse.delta),
                                   jax.tree.leaves(plans.mask)):
    d_greedy, d_fiarse = np.asarray(d_greedy), np.asarray(d_fiarse)
    moved = (d_greedy != 0) & np.asarray(m)
    ratio = d_fiarse[moved] / d_greedy[moved]
    assert np.all((ratio > 1 - 1e-5) & (ratio <= 1.5 + 1e-5))


def test_fjord_trains_random_nested_widths_inside_its_own():
  algorithm, state, plans, outputs, _ = run_one_round('fjord', local_steps=5)
  for delta, mask in zip(jax.tree.leaves(outputs.delta),
                         jax.tree.leaves(plans.mask)):
    assert np.all(np.asarray(delta)[~np.asarray(mask)] == 0)
  ctx_rates = []
  plan = jax.tree.map(lambda x: x[0], plans)
  for s in range(40):
    key = jax.random.fold_in(jax.random.PRNGKey(3), s)
    ctx = type('Ctx', (), {'key': key})
    fwd = algorithm.forward_params(state.params, plan, ctx)
    ctx_rates.append(int((np.asarray(fwd['fc1']['bias']) != 0).sum()))
  allowed = {math.ceil(float(r) * 12 - 1e-3) for r in algorithm.rates
             if r <= plan.extras['rate'] + 1e-6}
  assert set(ctx_rates) == allowed


def test_client_evaluator_equals_one_evaluator_per_client():
  data = tiny_data()
  model = models.create_model('mlp', 3, hidden=(5,))
  params = [models.init_params(model, jax.random.PRNGKey(s), (5,))
            for s in range(2)]
  apply = lambda p, x: model.apply({'params': p}, x)
  stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *params)
  which = np.asarray([0, 1, 1, 0, 1, 0])
  got = evaluation.make_client_evaluator(apply, data, 4)(stacked, which)
  for c in range(6):
    n = int(data.counts[c])
    one = evaluation.make_evaluator(apply, np.asarray(data.x[c, :n]),
                                  np.asarray(data.y[c, :n]), 4)(
                                      params[which[c]])
    np.testing.assert_allclose(got['accuracy'][c], one['accuracy'], rtol=1e-6)
    np.testing.assert_allclose(got['loss'][c], one['loss'], rtol=1e-5)


def test_bad_submodel_configs_fail_clearly():
  with pytest.raises(ValueError, match='distinct'):
    make('fiarse', capacities=(0.5, 0.5))
  with pytest.raises(ValueError, match='partial_average'):
    make('heterofl', submodel={'partial_average': 'median'})
  with pytest.raises(ValueError, match='granularity'):
    make('fiarse', submodel={'threshold_granularity': 'neuron'})
  with pytest.raises(ValueError, match='capacities must be'):
    tiny_fedavg(tiny_config(capacities=(0.5, 1.0)))
