"""ScaleFL: the depth/width rule, depth masks, the multi-exit loss, the engine."""
import json
import math
import os

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het import methods, cli, models
from fedjax_het.methods.fiarse.scalefl import depth_and_width
from fedjax_het.config import base_config
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.data import FederatedData
from fedjax_het.submodel import width
from engine_utils import stacked_masks, tiny_config, tiny_data

# Tiny MLP 5-8-8-8-3 with exits: depth 1 holds 75 of 273 params, depth 2 174.
HIDDEN = (8, 8, 8)
LEVELS = (0.25, 0.6, 1.0)


def make(**overrides):
  """(algorithm, initial state, data) of ScaleFL at LEVELS on `tiny_data`."""
  config = tiny_config(algorithm='scalefl', capacities=LEVELS,
                       aggregation_weights='uniform', **overrides)
  config.model_options.hidden = HIDDEN
  config.model_options.exits = True
  data = tiny_data()
  model = models.create_model('mlp', 3, **config.model_options.to_dict())
  params = models.init_params(model, jax.random.PRNGKey(0), data.x.shape[2:])
  algorithm = methods.create_algorithm('scalefl', config, model, data)
  return algorithm, algorithm.init(params, jax.random.PRNGKey(1)), data


class ShapesOnly:
  """A model stand-in whose `init` returns zeros of the parameters' shapes in
  creation order.

  ScaleFL reads only shapes and the creation order of a model's parameters
  while it builds its levels, so the full-width ResNet-18 needs no real
  initialisation.
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
        {path: jnp.zeros(flat[path].shape, flat[path].dtype)
         for path in order})}

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
  return methods.ScaleFL(config, ShapesOnly(model), data)


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
  """{1/64, 1/16, 1/4, 1} → depths 1..4 at r = 1."""
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
  # Not nested: 0.16 keeps stages 1–3 wider (0.80) than 0.36 does (0.60).
  assert five[1][1] > five[2][1]
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
@pytest.fixture(scope='module')
def lenet():
  """ScaleFL on LeNet-5 with exits, 8x8 digits: levels at depths 2, 3, 4."""
  config = tiny_config(algorithm='scalefl', capacities=(0.1, 0.4, 1.0))
  config.model, config.model_options = 'lenet5', {'exits': True}
  data = FederatedData(x=np.zeros((6, 1, 8, 8, 1), np.float32),
                       y=np.zeros((6, 1), np.int32),
                       counts=np.ones(6, np.int32))
  model = models.create_model('lenet5', 10, exits=True)
  return methods.ScaleFL(config, ShapesOnly(model), data)


def test_trunk_is_sliced_as_in_the_model_without_exits(lenet):
  trunk = width.channel_layout(
      ShapesOnly(models.create_model('lenet5', 10)), (8, 8, 1))
  for name in trunk:
    assert lenet.layout[name] == trunk[name], name
  # fc1 reads conv2's 16 channels flattened over 2x2 positions, not 'classes'.
  assert lenet.layout['fc1']['kernel'].axes[0] == width.Axis('flat', 64, 16)
  assert lenet.layout['exit2']['kernel'].axes[1] == width.Axis('full', 10)


def test_masks_are_width_windows_of_the_stages_up_to_the_depth(lenet):
  depth_of = {'conv1': 1, 'exit1': 1, 'conv2': 2, 'exit2': 2, 'fc1': 3,
              'exit3': 3, 'fc2': 4, 'head': 4}
  assert lenet.depths.tolist() == [2, 3, 4]
  rates = lenet.rates.tolist()  # float32, as the training plans use them
  assert rates[0] < 1 and rates[1] < 1 and rates[2] == 1
  total = sum(x.size for x in jax.tree.leaves(lenet.template))
  eval_mask = jax.jit(lambda gamma: lenet.eval_mask(None, gamma),
                      static_argnums=0)  # the mask needs no parameter values
  windows = jax.jit(lambda r: width.width_mask(lenet.layout, r))
  masks = []
  for gamma, depth, rate in zip(lenet.levels, lenet.depths.tolist(), rates):
    mask = eval_mask(gamma)
    window = windows(rate)
    for name, leaves in mask.items():
      for leaf, keep in zip(jax.tree.leaves(leaves),
                            jax.tree.leaves(window[name])):
        expected = keep if depth_of[name] <= depth else np.zeros_like(keep)
        np.testing.assert_array_equal(leaf, np.broadcast_to(expected,
                                                            leaf.shape))
    held = sum(int(np.sum(m)) for m in jax.tree.leaves(mask))
    assert held / total <= gamma
    assert held / total == pytest.approx(held_fraction(lenet, depth, rate))
    masks.append(mask)
  # Rising depth and width: each level's submodel lies inside the next one.
  for small, large in zip(masks, masks[1:]):
    for a, b in zip(jax.tree.leaves(small), jax.tree.leaves(large)):
      assert np.all(np.asarray(a) <= np.asarray(b))


# ---- the tiny MLP: depths 1, 2, 3 --------------------------------------------
@pytest.fixture(scope='module')
def tiny():
  """ScaleFL on the 5-8-8-8-3 MLP: KD (g = 0.3, T = 2.5) on from round 2."""
  algorithm, state, data = make(rounds=4, submodel={
      'scaler': False, 'scalefl_kd_weight': 0.3, 'scalefl_temperature': 2.5})
  assert algorithm.depths.tolist() == [1, 2, 3]
  return algorithm, state, data


def one_round_of(algorithm, state, data, client_ids):
  """Plans, client outputs and the next state of a round with a fixed cohort."""

  @jax.jit
  def round_(state):
    keys = jax.random.split(state.key, len(client_ids))
    plans = stacked_masks(
        algorithm.plan_clients(state, jnp.asarray(client_ids), keys))
    outputs = jax.vmap(algorithm.client_update, in_axes=(None, 0, None))(
        state.params, plans, data)
    return plans, outputs, algorithm.finish_round(state, plans, outputs)[0]

  return round_(state)


def test_excluded_stages_get_exactly_zero_delta_and_stay_put(tiny):
  algorithm, state, data = tiny
  # Clients 0–3 hold levels 0, 0, 1, 1 (depths 1, 1, 2, 2); nobody depth 3.
  plans, outputs, new_state = one_round_of(algorithm, state, data, [0, 1, 2, 3])
  assert plans.extras['depth'].tolist() == [1, 1, 2, 2]
  depth_of = {'fc1': 1, 'exit1': 1, 'fc2': 2, 'exit2': 2, 'fc3': 3, 'head': 3}
  for slot, depth in enumerate(plans.extras['depth'].tolist()):
    for name, leaves in outputs.delta.items():
      moved = any(np.any(np.asarray(d[slot]) != 0)
                  for d in jax.tree.leaves(leaves))
      assert moved == (depth_of[name] <= depth), (slot, name)
  for name in ('fc3', 'head'):  # held by no client: unchanged, exactly
    jax.tree.map(np.testing.assert_array_equal, new_state.params[name],
                 state.params[name])
  assert not np.allclose(new_state.params['fc2']['kernel'],
                         state.params['fc2']['kernel'])


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


def test_loss_equals_the_hand_written_reference(tiny):
  algorithm, state, data = tiny
  x, y = data.x[0, :8], data.y[0, :8]
  loss = jax.jit(algorithm.loss)
  for round_index, g in [(0, 0.0), (2, 0.3)]:  # KD off, then on
    at = state.replace(round=jnp.asarray(round_index, jnp.int32))
    plans = stacked_masks(algorithm.plan_clients(
        at, jnp.asarray([0, 2, 4]), jax.random.split(state.key, 3)))  # levels 0–2
    for slot, depth in enumerate([1, 2, 3]):
      plan = jax.tree.map(lambda a, i=slot: a[i], plans)
      assert int(plan.extras['depth']) == depth
      np.testing.assert_allclose(plan.extras['kd_weight'], g)
      want = reference_loss(state.params, plan.mask, x, y, depth, g, 2.5)
      np.testing.assert_allclose(loss(state.params, x, y, plan, None), want,
                                 rtol=2e-6)


def test_the_teacher_gets_no_distillation_gradient(tiny):
  """Exit s is held constant in the KD terms: the head's gradient is w_s·∇CE_s."""
  algorithm, state, data = tiny
  state = state.replace(round=jnp.asarray(3, jnp.int32))  # KD on
  plan = jax.tree.map(lambda a: a[0], stacked_masks(algorithm.plan_clients(
      state, jnp.asarray([5]), state.key[None])))  # depth 3, full width
  x, y = data.x[0], data.y[0]
  head_grad = jax.jit(jax.grad(algorithm.loss))(state.params, x, y, plan,
                                                None)['head']

  def deepest_ce(params):
    logits = algorithm.model.apply({'params': params}, x)[-1]
    return 3 / 6 * -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(9), y])

  expected = jax.jit(jax.grad(deepest_ce))(state.params)['head']
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5,
                                                       atol=1e-7),
               head_grad, expected)


def test_distillation_switches_on_after_the_start_fraction_of_rounds(tiny):
  algorithm, state, _ = tiny  # rounds = 4, KD from round index > 0.25·4
  levels = jnp.asarray([0, 1, 2])
  for round_index, on in [(0, False), (1, False), (2, True), (3, True)]:
    at = state.replace(round=jnp.asarray(round_index, jnp.int32))
    _, extras = algorithm.level_plan(at, levels)
    np.testing.assert_array_equal(extras['kd_weight'],
                                  np.float32(0.3 if on else 0.0))


def test_evaluation_reads_the_exit_of_the_capacity(tiny):
  algorithm, state, data = tiny
  x = data.x[0]
  for gamma in (*LEVELS, 0.1):  # 0.1: an unparticipated size, depth 1
    depth, _ = algorithm.submodel_shape(gamma)
    submodel = algorithm.eval_params(state.params, gamma)
    logits = algorithm.model.apply({'params': submodel['params']}, x)
    np.testing.assert_array_equal(algorithm.eval_apply(submodel, x),
                                  logits[depth - 1])
  assert algorithm.submodel_shape(0.1)[0] == 1


# ---- engine and trainer ------------------------------------------------------
def test_every_backend_gives_the_same_rounds():
  results = []
  for backend, chunk in [('vmap', None), ('map', 2), ('sequential', None)]:
    algorithm, state, data = make(rounds=2)  # KD on in round 1
    state, metrics = RoundRunner(algorithm, backend, chunk).run(state, data, 2)
    results.append((state.params, metrics['train_loss']))
  for params, loss in results[1:]:
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-6),
                 params, results[0][0])
    np.testing.assert_allclose(loss, results[0][1], rtol=1e-5)


QUICKSTART = os.path.join(os.path.dirname(__file__), os.pardir, 'experiments',
                          'quickstart.py')


def test_trainer_runs_scalefl_from_the_command_line(tmp_path):
  args = ['--config', QUICKSTART, '--config.algorithm=scalefl',
          '--config.num_clients=30', '--config.rounds_per_call=10',
          '--config.model_options.hidden=(32, 32)',
          '--config.model_options.exits=True',
          "--config.capacities=(0.25, 0.5, 1.0)", '--config.local_test=True',
          '--config.submodel.eval_capacities=(0.1,)', '--config.rounds=60',
          '--config.eval_every=30', '--config.progress=False',
          f'--workdir={tmp_path}']
  assert cli.main(args) == 0
  with open(tmp_path / 'summary.json') as f:
    summary = json.load(f)
  with open(tmp_path / 'metrics.jsonl') as f:
    first, row = [json.loads(line) for line in f]
  for gamma in ('0.25', '0.5', '1'):
    assert 0 <= row[f'local_accuracy@{gamma}'] <= 1
    assert row[f'params_fraction@{gamma}'] <= float(gamma)
  assert 'unparticipated_accuracy@0.1' in row
  # Digits, 10 classes: it learns (0.86 at round 60 when written).
  assert summary['final_test_accuracy'] > max(0.75, first['test_accuracy'])


def test_bad_setups_fail_clearly(tmp_path, capsys):
  with pytest.raises(ValueError, match='model_options.exits=True'):
    methods.ScaleFL(tiny_config(algorithm='scalefl'),
                       models.create_model('mlp', 3, hidden=(8,)), tiny_data())
  for key, value in [('scalefl_depth_tolerance', 0.0),
                     ('scalefl_kd_weight', 1.5),
                     ('scalefl_temperature', 0.0),
                     ('scalefl_kd_start', -0.1)]:
    with pytest.raises(ValueError, match=f'submodel.{key} must'):
      make(submodel={key: value})
  assert cli.main(['--config', QUICKSTART, '--config.algorithm=scalefl',
                   '--config.progress=False', f'--workdir={tmp_path}']) == 2
  assert 'model_options.exits=True' in capsys.readouterr().err
