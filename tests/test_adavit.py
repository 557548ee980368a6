"""FedAvg+AdaViT: hard per-input keep-sets at evaluation, the token policy,
the usage loss and its pull toward the budget, the round's keep-set upload,
FedAvg at budget 1."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine_utils import TINY_VIT, tiny_vit_config, vit_experiment
from fedjax_het.methods.cos2p import adavit
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.models import vit
from fedjax_het.options import ConfigError

IMAGES = jax.random.normal(jax.random.PRNGKey(3), (6, 8, 8, 1))


def decision_model():
  """TINY_VIT with decision networks, and params whose decision logits are
  far from the thresholds (so hard gates are a mix of 0 and 1)."""
  model = vit.ViT(num_classes=5, decisions=True, **TINY_VIT)
  params = model.init(jax.random.PRNGKey(0), IMAGES)['params']
  keys = jax.random.split(jax.random.PRNGKey(1), 3)
  for key, kind in zip(keys, vit.DECISION_KINDS):
    name = f'decisions_{kind}_kernel'
    params[name] = 3.0 * jax.random.normal(key, params[name].shape)
  return model, params


def adavit_config(**adavit_options):
  config = tiny_vit_config(algorithm='vit_fedavg_adavit',
                           aggregation_weights='uniform', rounds=2)
  config.model_options['decisions'] = True
  config.adavit.update(adavit_options)
  return config


def test_evaluation_gates_are_hard_keep_sets_equal_to_static_submodels():
  """At evaluation every gate is 0 or 1 and each input's logits are those
  of the static submodel its gates select (heads → head units, MSA/MLP
  sub-layers → the projection / fc2 rows)."""
  model, params = decision_model()
  decide = vit.Decide(key=None, enabled=jnp.asarray(True),
                      kinds=('heads', 'layers'), keep_layers=0)
  logits, gates = model.apply({'params': params}, IMAGES, decide=decide)
  for kind in ('heads', 'layers'):
    values = np.asarray(gates[kind])
    assert set(np.unique(values)) == {0.0, 1.0}, kind
  assert np.all(np.asarray(gates['tokens']) == 1.0)
  for b in range(IMAGES.shape[0]):
    attention, mlp = gates['layers'][:, b, 0], gates['layers'][:, b, 1]
    units = {'heads': gates['heads'][:, b],
             'proj': jnp.broadcast_to(attention[:, None], (2, 16)),
             'fc1': jnp.ones((2, 32)),
             'fc2': jnp.broadcast_to(mlp[:, None], (2, 16))}
    static = model.apply({'params': params}, IMAGES[b:b + 1], units=units)
    np.testing.assert_allclose(logits[b:b + 1], static, rtol=1e-5, atol=1e-6)


def test_dropped_tokens_are_neither_updated_nor_attended_to():
  """A block with token j dropped leaves x[:, j] as it was, and the kept
  tokens' outputs do not depend on it."""
  model, params = decision_model()
  block_params = {m: {leaf: params[f'blocks_{m}_{leaf}'][0]
                      for leaf in ('kernel', 'bias', 'scale')
                      if f'blocks_{m}_{leaf}' in params}
                  for m in ('ln1', 'qkv', 'proj', 'ln2', 'fc1', 'fc2')}
  units = {k: jnp.ones(s[1]) for k, s in model.unit_shapes().items()}
  x = jax.random.normal(jax.random.PRNGKey(4), (2, 5, 16))
  tokens = jnp.array([[1.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
  gates = {'heads': jnp.ones((2, 2)), 'layers': jnp.ones((2, 2)),
           'tokens': tokens}
  out = vit.block(x, block_params, units, gates)
  dropped = np.asarray(jnp.pad(tokens, ((0, 0), (1, 0)),
                               constant_values=1.0)) == 0
  np.testing.assert_array_equal(np.asarray(out)[dropped],
                                np.asarray(x)[dropped])
  moved = x + 5.0 * jnp.asarray(dropped)[..., None]
  out_moved = vit.block(moved, block_params, units, gates)
  np.testing.assert_allclose(np.asarray(out_moved)[~dropped],
                             np.asarray(out)[~dropped], rtol=1e-5, atol=1e-6)


def test_usage_loss_by_hand():
  """ū_heads counts heads of decided blocks that run a sub-layer, ū_layers
  the decided blocks' sub-layers, ū_tokens all tokens; |·| for heads and
  layers, (·)² for tokens."""
  heads = jnp.array([[[1., 1.], [0., 1.]],        # block 0 (not decided)
                     [[1., 0.], [0., 0.]],        # block 1
                     [[1., 1.], [1., 0.]]])       # block 2; [L, B, H]
  layers = jnp.array([[[1., 1.], [1., 1.]],
                      [[1., 0.], [0., 0.]],       # input 1 runs nothing
                      [[0., 1.], [1., 1.]]])
  tokens = jnp.array([[[1., 0., 0.]] * 2, [[1., 1., 0.]] * 2,
                      [[0., 0., 0.]] * 2])
  gates = {'heads': heads, 'layers': layers, 'tokens': tokens}
  total, usage = adavit.usage_loss(gates, jnp.float32(0.25),
                                   vit.DECISION_KINDS, keep_layers=1)
  # Heads over (1, 0), (2, 0), (2, 1): [1, 0] + [1, 1] + [1, 0] -> 4 / 6.
  assert float(usage['heads']) == pytest.approx(4 / 6)
  assert float(usage['layers']) == pytest.approx(4 / 8)
  assert float(usage['tokens']) == pytest.approx(6 / 18)
  expected = abs(4 / 6 - 0.25) + abs(0.5 - 0.25) + (1 / 3 - 0.25)**2
  assert float(total) == pytest.approx(expected)
  only_tokens, _ = adavit.usage_loss(gates, jnp.float32(0.25), ('tokens',), 1)
  assert float(only_tokens) == pytest.approx((1 / 3 - 0.25)**2)


def test_usage_loss_pulls_the_kept_fraction_toward_the_target():
  """Gradient steps on the usage loss alone (Gumbel gates, straight-through)
  move every kind's expected usage from ≈ ½ to within half the distance of
  γ, down for γ = 0.2 and up for γ = 0.8."""
  model = vit.ViT(num_classes=5, decisions=True, **TINY_VIT)
  start = model.init(jax.random.PRNGKey(0), IMAGES)['params']

  @jax.jit
  def usage(p, key, target):
    decide = vit.Decide(key=key, enabled=jnp.asarray(True), keep_layers=0,
                        token_threshold=0.5)
    _, gates = model.apply({'params': p}, IMAGES, decide=decide)
    return adavit.usage_loss(gates, target, vit.DECISION_KINDS, 0)

  @jax.jit
  def step(p, key, target):
    grads = jax.grad(lambda q: usage(q, key, target)[0])(p)
    return jax.tree.map(lambda a, g: a - 10.0 * g, p, grads)

  def expected_usage(p, target):
    samples = [usage(p, jax.random.PRNGKey(100 + i), target)[1]
               for i in range(8)]
    return {k: np.mean([float(s[k]) for s in samples]) for k in samples[0]}

  for target in (jnp.float32(0.2), jnp.float32(0.8)):
    params = start
    before = expected_usage(params, target)
    for i in range(40):
      params = step(params, jax.random.PRNGKey(i), target)
    after = expected_usage(params, target)
    for kind in vit.DECISION_KINDS:
      assert abs(after[kind] - target) < 0.5 * abs(before[kind] - target), (
          kind, float(target), before[kind], after[kind])


def test_a_round_uploads_the_keep_set_and_budget_one_clients_do_not_decide():
  """Heads no input of any client ran stay bit-identical; the client with
  R_n = 1 runs every gate (usage 1) and its decision networks do not move
  the server's."""
  config = adavit_config()
  config.cos2p.budgets = (0.25, 0.25, 1.0, 0.25)
  algorithm, state, split = vit_experiment(config)
  data = split.train.to_device()
  before = jax.tree.map(np.asarray, state.params)
  state, metrics = RoundRunner(algorithm, 'map').run(state, data, 1)
  units = jax.tree.map(np.asarray, state.clients['units'])
  usage = np.asarray(state.clients['usage'])
  np.testing.assert_array_equal(usage[2], [1.0, 1.0, 1.0])
  assert np.all(usage[[0, 1, 3]] < 1.0)
  assert float(metrics['usage_heads'][0]) == pytest.approx(
      usage[[0, 1, 3], 0].mean(), rel=1e-5)
  kept_by_any = units['heads'].max(0) > 0                          # [L, H]
  moved = np.abs(np.asarray(state.params['blocks_qkv_kernel']) -
                 before['blocks_qkv_kernel']).sum((1, 2, 4)) > 0
  np.testing.assert_array_equal(moved, kept_by_any)
  np.testing.assert_array_equal(units['heads'][2], np.ones((2, 2)))


def test_budget_one_reduces_to_fedavg():
  """Budgets 1: no client decides, the backbone follows `vit_fedavg` (to
  1e-5) and the decision networks stay where they started."""
  config = adavit_config()
  algorithm, state, split = vit_experiment(config)
  data = split.train.to_device()
  start = jax.tree.map(np.asarray, state.params)
  state, _ = RoundRunner(algorithm, 'map').run(state, data, 2)
  config.update(dict(algorithm='vit_fedavg'))
  config.model_options['decisions'] = False
  fedavg, fedavg_state, _ = vit_experiment(config)
  fedavg_state, _ = RoundRunner(fedavg, 'map').run(fedavg_state, data, 2)
  backbone = {k: v for k, v in state.params.items()
              if not k.startswith('decisions_')}
  chex.assert_trees_all_close(backbone, fedavg_state.params, atol=1e-5)
  for name, value in state.params.items():
    if name.startswith('decisions_'):
      np.testing.assert_array_equal(np.asarray(value), start[name])


def test_decision_networks_belong_to_adavit_only():
  config = adavit_config()
  config.model_options['decisions'] = False
  with pytest.raises(ConfigError, match='decisions=True') as info:
    vit_experiment(config)
  assert '\n' not in str(info.value)
  config = adavit_config(keep_layers=2)
  with pytest.raises(ConfigError, match='keep_layers'):
    vit_experiment(config)
  config = tiny_vit_config(algorithm='vit_fedavg')
  config.model_options['decisions'] = True
  with pytest.raises(ConfigError, match='decisions=False'):
    vit_experiment(config)
