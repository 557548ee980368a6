"""ScaleFL: the depth/width rule, depth masks, the multi-exit loss, the engine."""
import json
import math

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het import algorithms, cli, models
from fedjax_het.algorithms.scalefl import depth_and_width
from fedjax_het.config import base_config
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.data import FederatedData
from fedjax_het.submodel import width
from engine_utils import tiny_config, tiny_data, tiny_fedavg

# Tiny MLP 5-8-8-8-3 with exits: depth 1 holds 75 of 273 params, depth 2 174.
HIDDEN = (8, 8, 8)
LEVELS = (0.25, 0.6, 1.0)


def make(levels=LEVELS, data=None, seed=0, hidden=HIDDEN, **overrides):
  """(algorithm, initial state, data) of ScaleFL on `tiny_data`."""
  config = tiny_config(algorithm='scalefl', capacities=levels,
                       aggregation_weights='uniform', **overrides)
  config.model_options.hidden = hidden
  config.model_options.exits = True
  data = data if data is not None else tiny_data()
  model = models.create_model('mlp', 3, **config.model_options.to_dict())
  params = models.init_params(model, jax.random.PRNGKey(seed),
                              data.x.shape[2:])
  algorithm = algorithms.create_algorithm('scalefl', config, model, data)
  return algorithm, algorithm.init(params, jax.random.PRNGKey(seed + 1)), data


class ShapesOnly:
  """A model stand-in whose `init` returns parameter shapes in creation order.

  ScaleFL reads only shapes and the creation order of a model's parameters
  while it builds its levels, so the full-width ResNet-18 needs no arrays.
  """

  def __init__(self, model):
    self.model = model
    self.exits = model.exits

  def init(self, key, x):
    order = []

    def init(key):
      params = self.model.init(key, x)['params']
      order.extend(flax.traverse_util.flatten_dict(params))  # creation order
      return params

    flat = flax.traverse_util.flatten_dict(jax.eval_shape(init, key))
    return {'params': flax.traverse_util.unflatten_dict(
        {path: flat[path] for path in order})}

  def clone(self, **updates):
    return ShapesOnly(self.model.clone(**updates))


def resnet18_scalefl(levels, num_classes=10, **submodel):
  config = base_config()
  config.num_clients, config.clients_per_round = 5, 2
  config.capacities = levels
  config.submodel.update(submodel)
  model = models.create_model('resnet18', num_classes, exits=True)
  data = FederatedData(x=np.zeros((5, 1, 32, 32, 3), np.float32),
                       y=np.zeros((5, 1), np.int32),
                       counts=np.ones(5, np.int32))
  return algorithms.ScaleFL(config, ShapesOnly(model), data)


def held_fraction(algorithm, depth, rate):
  """Share of all parameters in the (depth, rate) submodel, counted on the host."""
  leaves = jax.tree.leaves(algorithm.layout,
                           is_leaf=lambda x: isinstance(x, width.LeafLayout))
  depths = jax.tree.leaves(algorithm.leaf_depth)
  sizes = [math.prod(a.size for a in leaf.axes) for leaf in leaves]
  kept = [leaf for leaf, d in zip(leaves, depths) if d <= depth]
  held = sum(n for n, d in zip(sizes, depths) if d <= depth)
  return width.kept_fraction(kept, rate) * held / sum(sizes)


# ---- the depth/width rule ----------------------------------------------------
def test_resnet18_levels_are_the_stages_at_full_width():
  """{1/64, 1/16, 1/4, 1} → depths 1..4 at r = 1 (specs/fiarse.md §4)."""
  algorithm = resnet18_scalefl((1 / 64, 1 / 16, 1 / 4, 1.0))
  assert algorithm.depths.tolist() == [1, 2, 3, 4]
  assert algorithm.rates.tolist() == [1.0, 1.0, 1.0, 1.0]
  # stem 1,856 + stage1 147,968 + exit1 650 (static BN), of 11,178,472.
  assert held_fraction(algorithm, 1, 1.0) == 150_474 / 11_178_472
  # + stage2 525,568 + exit2 1,290; + stage3 2,099,712 + exit3 2,570.
  assert held_fraction(algorithm, 2, 1.0) == 677_332 / 11_178_472
  assert held_fraction(algorithm, 3, 1.0) == 2_779_614 / 11_178_472

  # The five-size set combines depth with r < 1; r is the widest that fits.
  five = [algorithm.submodel_shape(g) for g in (0.04, 0.16, 0.36, 0.64, 1.0)]
  assert [s for s, _ in five] == [2, 3, 4, 4, 4]
  np.testing.assert_allclose([r for _, r in five], [0.80, 0.80, 0.60, 0.80, 1],
                             atol=0.01)
  for gamma, (depth, rate) in zip((0.04, 0.16, 0.36, 0.64), five):
    assert held_fraction(algorithm, depth, rate) <= gamma
    assert held_fraction(algorithm, depth, rate * (1 + 1e-5)) > gamma
    assert held_fraction(algorithm, depth, float(np.float32(rate))) == (
        held_fraction(algorithm, depth, rate))  # training's float32 rate


def test_the_depth_tolerance_decides_between_depth_and_width():
  # At τ = 0.8 γ = 0.36 needs depth 4 (stages 1–3 hold 0.2487 < 0.288); at
  # τ = 0.6 stages 1–3 suffice (0.2487 ≥ 0.216) at full width.
  algorithm = resnet18_scalefl((0.36,), scalefl_depth_tolerance=0.6)
  assert (algorithm.depths.tolist(), algorithm.rates.tolist()) == ([3], [1.0])
  assert depth_and_width(algorithm.layout, algorithm.leaf_depth, 0.36,
                         0.8)[0] == 4


def test_cifar100_exits_push_depth_three_just_below_full_width():
  algorithm = resnet18_scalefl((1 / 64, 1 / 16, 1 / 4, 1.0), num_classes=100)
  assert algorithm.depths.tolist() == [1, 2, 3, 4]
  rates = algorithm.rates.tolist()
  assert rates[:2] == [1.0, 1.0] and 0.99 < rates[2] < 1 and rates[3] == 1


# ---- masks -------------------------------------------------------------------
def lenet_scalefl(levels=(0.1, 0.4, 1.0)):
  config = tiny_config(algorithm='scalefl', capacities=levels)
  config.model, config.model_options = 'lenet5', {'exits': True}
  data = FederatedData(x=np.zeros((6, 1, 8, 8, 1), np.float32),
                       y=np.zeros((6, 1), np.int32),
                       counts=np.ones(6, np.int32))
  model = models.create_model('lenet5', 10, exits=True)
  return algorithms.ScaleFL(config, model, data)


def test_trunk_is_sliced_as_in_the_model_without_exits():
  algorithm = lenet_scalefl()
  trunk = width.channel_layout(algorithm.model.clone(exits=False), (8, 8, 1))
  for name in trunk:
    assert algorithm.layout[name] == trunk[name], name
  # fc1 reads conv2's 16 channels flattened over 2x2 positions, not 'classes'.
  assert algorithm.layout['fc1']['kernel'].axes[0] == width.Axis('flat', 64, 16)
  assert algorithm.layout['exit2']['kernel'].axes[1] == width.Axis('full', 10)


def test_masks_are_width_windows_of_the_stages_up_to_the_depth():
  algorithm = lenet_scalefl()
  depth_of = {'conv1': 1, 'exit1': 1, 'conv2': 2, 'exit2': 2, 'fc1': 3,
              'exit3': 3, 'fc2': 4, 'head': 4}
  assert algorithm.depths.tolist() == [2, 3, 4]
  rates = algorithm.rates.tolist()
  assert rates[0] < 1 and rates[1] < 1 and rates[2] == 1
  total = sum(x.size for x in jax.tree.leaves(algorithm.template))
  masks = []
  for gamma, depth, rate in zip(algorithm.levels, algorithm.depths.tolist(),
                                rates):
    mask = algorithm.eval_mask(algorithm.template, gamma)
    window = width.width_mask(algorithm.layout, rate)
    for name, leaves in mask.items():
      for leaf, keep in zip(jax.tree.leaves(leaves),
                            jax.tree.leaves(window[name])):
        expected = keep if depth_of[name] <= depth else np.zeros_like(keep)
        np.testing.assert_array_equal(leaf, np.broadcast_to(expected,
                                                             leaf.shape))
    held = sum(int(np.sum(m)) for m in jax.tree.leaves(mask))
    assert held / total <= gamma
    assert held / total == pytest.approx(held_fraction(algorithm, depth, rate))
    masks.append(mask)
  # Rising depth and width: each level's submodel lies inside the next one.
  for small, large in zip(masks, masks[1:]):
    for a, b in zip(jax.tree.leaves(small), jax.tree.leaves(large)):
      assert np.all(np.asarray(a) <= np.asarray(b))


def test_excluded_stages_get_exactly_zero_delta_and_stay_put():
  algorithm, state, data = make(levels=(0.25, 0.6))  # depths 1 and 2 of 3
  assert algorithm.depths.tolist() == [1, 2]
  plans = algorithm.plan_round(state, data)
  outputs = jax.vmap(algorithm.client_update, in_axes=(None, 0, None))(
      state.params, plans, data)
  depth_of = {'fc1': 1, 'exit1': 1, 'fc2': 2, 'exit2': 2, 'fc3': 3, 'head': 3}
  for slot, depth in enumerate(plans.extras['depth'].tolist()):
    for name, leaves in outputs.delta.items():
      moved = any(np.any(np.asarray(d[slot]) != 0)
                  for d in jax.tree.leaves(leaves))
      assert moved == (depth_of[name] <= depth), (slot, name)
  new_state, _ = algorithm.finish_round(state, plans, outputs)
  for name in ('fc3', 'head'):  # no client holds stage 3: unchanged, exactly
    jax.tree.map(np.testing.assert_array_equal, new_state.params[name],
                 state.params[name])
  assert not np.allclose(new_state.params['fc1']['kernel'],
                         state.params['fc1']['kernel'])


# ---- the local objective -----------------------------------------------------
def reference_loss(params, mask, x, y, depth, g, temperature):
  """ScaleFL's exit loss written out in float64 NumPy (module docstring)."""
  p = {name: {k: np.asarray(v, np.float64) * np.asarray(mask[name][k])
              for k, v in leaves.items()} for name, leaves in params.items()}
  h, logits = np.asarray(x, np.float64), []
  for i, exit_name in enumerate(['exit1', 'exit2', 'head']):
    h = np.maximum(h @ p[f'fc{i + 1}']['kernel'] + p[f'fc{i + 1}']['bias'], 0)
    logits.append(h @ p[exit_name]['kernel'] + p[exit_name]['bias'])

  def log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))

  def ce(z):
    return -log_softmax(z)[np.arange(len(y)), y].mean()

  teacher = np.exp(log_softmax(logits[depth - 1] / temperature))
  total = 0.0
  for j in range(1, depth + 1):
    z = logits[j - 1]
    if j == depth:
      loss = ce(z)
    else:
      kl = (teacher * (np.log(teacher) - log_softmax(z / temperature))).sum(-1)
      loss = (1 - g) * ce(z) + g * temperature**2 * kl.mean()
    total += j * loss
  return total / (depth * (depth + 1) / 2)


@pytest.mark.parametrize('kd_weight', [0.0, 0.3])
def test_loss_equals_the_hand_written_reference(kd_weight):
  algorithm, state, data = make(
      levels=(0.6, 1.0), submodel={'scaler': False,
                                   'scalefl_kd_weight': kd_weight,
                                   'scalefl_temperature': 2.5})
  x, y = data.x[0, :8], data.y[0, :8]
  state = state.replace(round=jnp.asarray(algorithm.config.rounds, jnp.int32))
  plans = algorithm.plan_clients(state, jnp.asarray([0, 5]),  # levels 0, 1
                                 jax.random.split(state.key, 2))
  for slot in (0, 1):
    plan = jax.tree.map(lambda a, i=slot: a[i], plans)
    depth = int(plan.extras['depth'])
    assert float(plan.extras['kd_weight']) == kd_weight
    got = algorithm.loss(state.params, x, y, plan, None)
    want = reference_loss(state.params, plan.mask, x, y, depth, kd_weight, 2.5)
    np.testing.assert_allclose(got, want, rtol=2e-6)
  assert algorithm.depths.tolist() == [2, 3]


def test_the_teacher_gets_no_distillation_gradient():
  """Exit s is held constant in the KD terms: the head's gradient is w_s·∇CE_s."""
  algorithm, state, data = make(levels=(1.0,), submodel={
      'scalefl_kd_weight': 0.5})
  state = state.replace(round=jnp.asarray(algorithm.config.rounds, jnp.int32))
  plan = jax.tree.map(lambda a: a[0], algorithm.plan_clients(
      state, jnp.asarray([0]), state.key[None]))
  x, y = data.x[0], data.y[0]
  head_grad = jax.grad(algorithm.loss)(state.params, x, y, plan, None)['head']

  def deepest_ce(params):
    logits = algorithm.model.apply({'params': params}, x)[-1]
    return 3 / 6 * -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(9), y])

  expected = jax.grad(deepest_ce)(state.params)['head']
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5,
                                                       atol=1e-7),
               head_grad, expected)


def test_distillation_switches_on_after_the_start_fraction_of_rounds():
  algorithm, state, _ = make(rounds=8, submodel={'scalefl_kd_weight': 0.2})
  levels = jnp.asarray([0, 1, 2])
  for round_index, on in [(0, False), (2, False), (3, True), (7, True)]:
    at = state.replace(round=jnp.asarray(round_index, jnp.int32))
    _, extras = algorithm.level_plan(at, levels)
    np.testing.assert_array_equal(extras['kd_weight'], 0.2 if on else 0.0)


def test_one_exit_at_full_capacity_is_fedavg():
  config = tiny_config(aggregation_weights='uniform')
  config.model_options.hidden = (12,)
  fedavg, state, data = tiny_fedavg(config)
  scalefl, _, _ = make(levels=(1.0,), hidden=(12,),
                       submodel={'scalefl_kd_weight': 0.5})
  scalefl_state = jax.tree.map(jnp.copy, scalefl.init(state.params, state.key))
  expected, _ = RoundRunner(fedavg, 'vmap').run(state, data, 3)  # donates
  got, _ = RoundRunner(scalefl, 'vmap').run(scalefl_state, data, 3)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6,
                                                       atol=1e-7),
               got.params, expected.params)


# ---- engine, evaluation, trainer ---------------------------------------------
def test_every_backend_gives_the_same_rounds():
  results = []
  for backend, chunk in [('vmap', None), ('map', 2), ('sequential', None)]:
    algorithm, state, data = make(rounds=4)  # KD on from round 2
    state, metrics = RoundRunner(algorithm, backend, chunk).run(state, data, 3)
    results.append((state.params, metrics['train_loss']))
  for params, loss in results[1:]:
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-6),
                 params, results[0][0])
    np.testing.assert_allclose(loss, results[0][1], rtol=1e-5)


def test_evaluation_reads_the_exit_of_the_capacity():
  algorithm, state, data = make()
  x = data.x[0]
  for gamma in (*LEVELS, 0.1):  # 0.1: an unparticipated size
    depth, _ = algorithm.submodel_shape(gamma)
    submodel = algorithm.eval_params(state.params, gamma)
    logits = algorithm.model.apply({'params': submodel['params']}, x)
    np.testing.assert_array_equal(algorithm.eval_apply(submodel, x),
                                  logits[depth - 1])
  assert algorithm.submodel_shape(0.1)[0] == 1


def test_trainer_runs_scalefl_from_the_command_line(tmp_path):
  args = ['--config.algorithm=scalefl', '--config.num_clients=30',
          '--config.model_options.hidden=(32, 32)',
          '--config.model_options.exits=True',
          "--config.capacities=(0.25, 0.5, 1.0)", '--config.local_test=True',
          '--config.submodel.eval_capacities=(0.1,)', '--config.rounds=20',
          '--config.eval_every=10', '--config.progress=False',
          f'--workdir={tmp_path}']
  assert cli.main(args) == 0
  with open(tmp_path / 'summary.json') as f:
    summary = json.load(f)
  with open(tmp_path / 'metrics.jsonl') as f:
    row = [json.loads(line) for line in f][-1]
  for gamma in ('0.25', '0.5', '1'):
    assert 0 <= row[f'local_accuracy@{gamma}'] <= 1
    assert row[f'params_fraction@{gamma}'] <= float(gamma)
  assert 'unparticipated_accuracy@0.1' in row
  assert summary['final_test_accuracy'] > 0.5  # digits, 10 classes


def test_bad_setups_fail_clearly(tmp_path, capsys):
  with pytest.raises(ValueError, match='model_options.exits=True'):
    algorithms.ScaleFL(tiny_config(algorithm='scalefl'),
                       models.create_model('mlp', 3, hidden=(8,)), tiny_data())
  for key, value in [('scalefl_depth_tolerance', 0.0),
                     ('scalefl_kd_weight', 1.5),
                     ('scalefl_temperature', 0.0),
                     ('scalefl_kd_start', -0.1)]:
    with pytest.raises(ValueError, match=f'submodel.{key} must'):
      make(submodel={key: value})
  assert cli.main(['--config.algorithm=scalefl', '--config.rounds=1',
                   '--config.progress=False', f'--workdir={tmp_path}']) == 2
  assert 'model_options.exits=True' in capsys.readouterr().err
