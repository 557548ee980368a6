"""Tests of fedjax_het.models: shapes, exact parameter counts, init, static BN, maskability."""

import functools
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_het.models import layers
from fedjax_het.models import (
    MODELS,
    NORMS,
    StaticBatchNorm,
    create_model,
    init_params,
    maskable_leaves,
    parameter_shapes,
    torch_bias_init,
)

SHAPES = ((8, 8, 1), (28, 28, 1), (32, 32, 3))

# (name, options) covering every model, padding and norm; ResNets at width 0.25 for speed.
CONFIGS = (
    ('mlp', (('hidden', (200, 200)),)),
    ('mlp', (('hidden', (300,)),)),
    ('lenet5', ()),
    ('lenet5', (('padding', 'valid'),)),
    ('lenet5', (('padding', 'same'), ('norm', 'group'))),
    ('simple_cnn', ()),
    ('simple_cnn', (('norm', 'static_bn'),)),
    ('resnet18', (('width', 0.25),)),
    ('resnet18', (('width', 0.25), ('norm', 'group'))),
    ('resnet18', (('width', 0.25), ('norm', 'none'))),
)
# The subset whose parameters are materialised (compiling an init is the slow part of this suite).
NUMERIC_CONFIGS = tuple(CONFIGS[i] for i in (0, 2, 6, 7, 8))


def _ids(configs):
  return [f'{n}-' + '-'.join(f'{k}={v}' for k, v in o) for n, o in configs]


@functools.partial(jax.jit, static_argnames=('model', 'train'))
def _apply(model, params, x, train=False):
  return model.apply({'params': params}, x, train=train)


@functools.lru_cache(maxsize=None)
def _model_and_params(name, options, shape=(32, 32, 3), num_classes=10, seed=0):
  # One init per model: on XLA:CPU, compiling an init's threefry RNG costs seconds per model.
  model = create_model(name, num_classes, **dict(options))
  return model, init_params(model, jax.random.key(seed), shape)


def _param_count(name, shape, num_classes=10, **options):
  model = create_model(name, num_classes, **options)
  shapes = jax.eval_shape(lambda k: init_params(model, k, shape), jax.random.key(0))
  return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(shapes))


def _path_names(path):
  return [str(getattr(e, 'key', e)) for e in path]


def _layer_leaves(params):
  """(path names, array, kernel fan_in) for every Dense/Conv kernel and bias."""
  out = []
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    names = _path_names(path)
    if any('norm' in n for n in names[:-1]):
      continue
    layer = params
    for n in names[:-1]:
      layer = layer[n]
    out.append((names, leaf, math.prod(layer['kernel'].shape[:-1])))
  return out


def _random_params(shapes, seed=0):
  """N(0, 1/fan_in) values for a tree of shapes (fan_in: the product of all axes but the last),
  drawn in numpy: parameters for identities that hold for any values, with no init to compile
  (compiling a model's random init takes seconds)."""
  rng = np.random.default_rng(seed)
  return jax.tree.map(
      lambda s: (rng.standard_normal(s.shape) / math.sqrt(math.prod(s.shape[:-1]))).astype(
          np.float32), shapes)


def _batch(shape, n=3, seed=1):
  """Standard normal inputs, drawn in numpy (jax.random.normal compiles a program per shape)."""
  return np.random.default_rng(seed).standard_normal((n, *shape)).astype(np.float32)


# ----------------------------------------------------------------------------- shapes, counts


@pytest.mark.parametrize('shape', SHAPES, ids=lambda s: 'x'.join(map(str, s)))
@pytest.mark.parametrize('name,options', CONFIGS, ids=_ids(CONFIGS))
def test_output_shape_every_model_and_input(name, options, shape):
  model = create_model(name, 10, **dict(options))

  def logits(key):
    params = init_params(model, key, shape)
    return model.apply({'params': params}, jnp.zeros((3, *shape)), train=True)

  out = jax.eval_shape(logits, jax.random.key(0))
  assert out.shape == (3, 10) and out.dtype == jnp.float32


def test_registry_lists_every_model():
  assert set(MODELS) == {'mlp', 'lenet5', 'simple_cnn', 'resnet18',
                         'split_cifar_cnn', 'split_emnist_cnn', 'split_lenet5',
                         'vit', 'vit_tiny', 'vit_base', 'vit_base_ext', 'lstm', 'shakespeare_lstm',
                         'stackoverflow_lstm', 'leaf_cnn', 'sentence_lstm', 'sent140_lstm'}
  assert set(NORMS) == {'static_bn', 'group', 'none'}


@pytest.mark.parametrize('name,shape,num_classes,options,expected', [
    ('mlp', (28, 28, 1), 10, {'hidden': (200, 200)}, 199_210),
    ('mlp', (28, 28, 1), 10, {'hidden': (300,)}, 238_510),  # HIST FCNN, 0.91 MiB.
    ('lenet5', (28, 28, 1), 10, {}, 61_706),  # HIST paper: conv 2,572 + FC 59,134.
    ('lenet5', (28, 28, 1), 10, {'padding': 'valid'}, 44_426),  # HIST code, 0.169 MiB.
    ('simple_cnn', (32, 32, 3), 10, {}, 1_626_442),
    ('simple_cnn', (28, 28, 1), 62, {}, 1_206_590),  # CSE-FSL F-EMNIST: 18,816 + 1,187,774.
    ('resnet18', (32, 32, 3), 10, {}, 11_173_962),
    ('resnet18', (32, 32, 3), 10, {'norm': 'group'}, 11_173_962),
    ('resnet18', (32, 32, 3), 10, {'norm': 'none'}, 11_164_362),
    ('resnet18', (32, 32, 3), 100, {}, 11_220_132),
    ('leaf_cnn', (84, 84, 3), 2, {}, 31_202),  # LEAF CelebA; 'same' pooling: 84-42-21-11-6.
    ('sent140_lstm', (25,), 2, {'vocab_size': 400_001}, 120_254_286),  # GloVe 6B: 400,000 words.
])
def test_exact_param_counts(name, shape, num_classes, options, expected):
  assert _param_count(name, shape, num_classes, **options) == expected


def test_simple_cnn_fc1_dominates():
  shapes = jax.eval_shape(
      lambda k: init_params(create_model('simple_cnn', 10), k, (32, 32, 3)), jax.random.key(0))
  chex.assert_shape(shapes['fc1']['kernel'], (14 * 14 * 64, 128))


# ----------------------------------------------------------------------------- initialisation


def test_no_exact_zero_in_any_kernel_or_bias_full_resnet18():
  model = create_model('resnet18', 10)
  params = init_params(model, jax.random.key(3), (32, 32, 3))
  leaves = _layer_leaves(params)
  assert sum(leaf.size for _, leaf, _ in leaves) == 11_164_362
  for names, leaf, _ in leaves:
    assert not np.any(np.asarray(leaf) == 0), names


@pytest.mark.parametrize('name,options', NUMERIC_CONFIGS, ids=_ids(NUMERIC_CONFIGS))
def test_init_no_zeros_and_within_pytorch_bound(name, options):
  _, params = _model_and_params(name, options)
  leaves = _layer_leaves(params)
  assert leaves
  for names, leaf, fan_in in leaves:
    w = np.asarray(leaf)
    bound = 1.0 / math.sqrt(fan_in)
    assert not np.any(w == 0), names
    assert np.abs(w).max() <= bound, names
    if w.size >= 2000:  # The bound is attained and the spread is uniform's (std = bound/sqrt(3)).
      assert np.abs(w).max() > 0.99 * bound, names
      np.testing.assert_allclose(w.std(), bound / math.sqrt(3), rtol=0.1, err_msg=str(names))


def test_nonzero_uniform_sampler_never_returns_zero():
  # jax.random.uniform(-b, b) hits exactly 0 about twice in 2**24 draws; this sampler never does.
  w = np.asarray(torch_bias_init(1)(jax.random.key(0), (1 << 24,)))
  assert not np.any(w == 0)
  assert np.abs(w).max() < 1.0
  assert abs(w.mean()) < 1e-3
  np.testing.assert_allclose(w.std(), 1 / math.sqrt(3), rtol=1e-3)


def test_init_is_deterministic_given_key():
  model, a = _model_and_params('lenet5', (), seed=0)
  b = init_params(model, jax.random.key(0), (32, 32, 3))
  c = init_params(model, jax.random.key(1), (32, 32, 3))
  chex.assert_trees_all_equal(a, b)
  assert not np.array_equal(a['fc1']['kernel'], c['fc1']['kernel'])


def test_init_params_returns_plain_params_dict():
  model, params = _model_and_params('simple_cnn', (('norm', 'static_bn'),))
  # Compiled, as init_params compiles it (op by op, every op would compile on its own).
  variables = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, 32, 32, 3)))
  assert set(variables) == {'params'}  # No batch_stats or other mutable collections.
  assert type(params) is dict and 'params' not in params
  chex.assert_trees_all_equal(params, variables['params'])


# ----------------------------------------------------------------------------- norms


# StaticBatchNorm's init and apply, compiled once per input shape (op by op, every op would
# compile on its own).
_static_bn_init = jax.jit(StaticBatchNorm().init)
_static_bn_apply = jax.jit(StaticBatchNorm().apply)


@settings(max_examples=25, deadline=None)
@given(
    n=st.sampled_from((2, 5)), hw=st.sampled_from((1, 3)), c=st.just(3),
    scale=st.floats(0.1, 100.0), shift=st.floats(-50.0, 50.0), seed=st.integers(0, 2**31 - 1))
def test_static_bn_normalises_each_channel_over_batch(n, hw, c, scale, shift, seed):
  x = np.random.default_rng(seed).normal(shift, scale, (n, hw, hw, c)).astype(np.float32)
  params = _static_bn_init(jax.random.key(0), x)
  y = np.asarray(_static_bn_apply(params, x), np.float64)
  var_x = x.astype(np.float64).var(axis=(0, 1, 2))
  np.testing.assert_allclose(y.mean(axis=(0, 1, 2)), 0.0, atol=1e-3)
  np.testing.assert_allclose(y.var(axis=(0, 1, 2)), var_x / (var_x + 1e-5), rtol=1e-3)


def test_static_bn_uses_current_batch_statistics_at_evaluation():
  x = _batch((4, 4, 3), n=5)
  params = _static_bn_init(jax.random.key(0), x)
  y = np.asarray(_static_bn_apply(params, x))
  # Batch statistics make the output invariant to a per-channel affine change of the batch ...
  chex.assert_trees_all_close(_static_bn_apply(params, 3.0 * x + 2.0), y, atol=1e-4)
  # ... and a sample's output depends on the rest of its batch.
  other = np.asarray(_static_bn_apply(params, np.concatenate([x[:1], 5.0 * x[1:] - 1.0])))
  assert not np.allclose(other[0], y[0], atol=1e-3)


def test_static_bn_model_needs_no_mutable_and_ignores_train_flag():
  model, params = _model_and_params('resnet18', (('width', 0.25),))
  a, b = _batch((32, 32, 3), seed=1), _batch((32, 32, 3), seed=2)
  out = _apply(model, params, a)  # Plain call: no `mutable=`, returns an array.
  chex.assert_shape(out, (3, 10))
  chex.assert_trees_all_close(_apply(model, params, a, train=True), out, atol=1e-5)
  # Evaluation normalises with the batch's statistics: same sample, different batch-mates.
  mixed = _apply(model, params, jnp.concatenate([a[:1], b[1:]]))
  assert not np.allclose(mixed[0], out[0], atol=1e-4)


def test_static_bn_layers_inside_resnet_output_zero_mean_unit_variance():
  model, params = _model_and_params('resnet18', (('width', 0.25),))
  _, state = jax.jit(functools.partial(
      model.apply,
      capture_intermediates=lambda mdl, _: isinstance(mdl, StaticBatchNorm),
      mutable=['intermediates']))({'params': params}, _batch((32, 32, 3), n=4))
  outputs = jax.tree.leaves(state['intermediates'])
  assert len(outputs) == 1 + 8 * 2 + 3  # stem, two per block, three projection shortcuts.
  for y in outputs:
    y = np.asarray(y, np.float64)
    axes = tuple(range(y.ndim - 1))
    np.testing.assert_allclose(y.mean(axis=axes), 0.0, atol=1e-4)
    var = y.var(axis=axes)
    # Channels that are constant over the batch (possible after ReLU) normalise to 0.
    assert np.all((np.abs(var - 1.0) < 1e-2) | (var < 1e-6))


def test_group_norm_resnet_is_per_sample_and_handles_odd_widths():
  model, params = _model_and_params('resnet18', (('width', 0.25), ('norm', 'group')))
  assert set(params['stem_norm']) == {'scale', 'bias'}
  a, b = _batch((32, 32, 3), seed=1), _batch((32, 32, 3), seed=2)
  out = _apply(model, params, a)
  mixed = _apply(model, params, jnp.concatenate([a[:1], b[1:]]))
  chex.assert_trees_all_close(mixed[0], out[0], atol=1e-5)  # Unlike static BN.
  # Width 0.3 gives 19, 38, 77, 154 channels; groups fall back to gcd(2, channels).
  odd = create_model('resnet18', 10, width=0.3, norm='group')
  odd_params = jax.eval_shape(lambda k: init_params(odd, k, (8, 8, 1)), jax.random.key(0))
  chex.assert_shape(odd_params['stage3_block1']['norm1']['scale'], (77,))
  chex.assert_shape(jax.eval_shape(_apply, odd, odd_params, _batch((8, 8, 1))), (3, 10))


# ----------------------------------------------------------------------------- maskability


@pytest.mark.parametrize('name,options', NUMERIC_CONFIGS, ids=_ids(NUMERIC_CONFIGS))
def test_maskable_leaves_marks_layers_not_norms(name, options):
  _, params = _model_and_params(name, options)
  mask = maskable_leaves(params)
  chex.assert_trees_all_equal_structs(mask, params)
  for (path, flag), leaf in zip(
      jax.tree_util.tree_leaves_with_path(mask), jax.tree.leaves(params)):
    names = _path_names(path)
    is_norm = any('norm' in n for n in names[:-1])
    assert flag is (not is_norm), names
    if is_norm:
      assert names[-1] in ('scale', 'bias')
    else:
      assert names[-1] in ('kernel', 'bias') and not np.any(np.asarray(leaf) == 0)


def test_maskable_count_of_resnet18_excludes_exactly_the_norm_params():
  model = create_model('resnet18', 10)
  shapes = jax.eval_shape(lambda k: init_params(model, k, (32, 32, 3)), jax.random.key(0))
  flags, sizes = jax.tree.leaves(maskable_leaves(shapes)), jax.tree.leaves(shapes)
  assert sum(math.prod(s.shape) for f, s in zip(flags, sizes) if f) == 11_164_362
  assert sum(math.prod(s.shape) for f, s in zip(flags, sizes) if not f) == 9_600


def test_maskable_leaves_recognises_flax_auto_named_norms():
  class Tiny(nn.Module):

    @nn.compact
    def __call__(self, x):
      return nn.Dense(4)(nn.LayerNorm()(x))

  params = jax.jit(Tiny().init)(jax.random.key(0), jnp.ones((1, 3)))['params']
  assert maskable_leaves(params) == {
      'LayerNorm_0': {'scale': False, 'bias': False},
      'Dense_0': {'kernel': True, 'bias': True},
  }


# ----------------------------------------------------------------------------- width, jit


def test_width_half_halves_every_conv_channel_count():
  def kernels(width):
    model = create_model('resnet18', 10, width=width)
    shapes = jax.eval_shape(lambda k: init_params(model, k, (32, 32, 3)), jax.random.key(0))
    return {tuple(_path_names(p)): s.shape for p, s in jax.tree_util.tree_leaves_with_path(shapes)
            if _path_names(p)[-1] == 'kernel'}

  full, half = kernels(1.0), kernels(0.5)
  assert full.keys() == half.keys()
  for path, shape in full.items():
    kh, kw, cin, cout = shape if len(shape) == 4 else (None, None, *shape)
    expected_in = cin if path[0] == 'stem_conv' else cin // 2
    expected_out = cout if path[0] == 'head' else cout // 2
    assert half[path] == ((kh, kw) if kh else ()) + (expected_in, expected_out), path


@pytest.mark.parametrize('name,options', NUMERIC_CONFIGS, ids=_ids(NUMERIC_CONFIGS))
def test_jit_apply_matches_apply(name, options):
  model, params = _model_and_params(name, options)
  x = _batch((32, 32, 3))
  eager = model.apply({'params': params}, x)
  jitted = _apply(model, params, x)
  chex.assert_tree_all_finite(eager)
  chex.assert_trees_all_close(jitted, eager, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- early exits

EXIT_CONFIGS = (
    ('mlp', (('hidden', (200, 200)),), 2),
    ('lenet5', (), 4),
    ('resnet18', (('width', 0.25),), 4),
)


@pytest.mark.parametrize('name,options,num_exits', EXIT_CONFIGS,
                         ids=_ids([c[:2] for c in EXIT_CONFIGS]))
def test_exits_stack_every_exit_and_the_last_is_the_plain_model(name, options, num_exits):
  plain, plain_params = _model_and_params(name, options)
  model, params = _model_and_params(name, options + (('exits', True),))
  exits = [f'exit{j}' for j in range(1, num_exits)]
  assert [n for n in params if n.startswith('exit')] == exits
  # Exits are maskable Dense layers; the trunk and head initialise as without exits.
  assert all(all(jax.tree.leaves(maskable_leaves(params)[n])) for n in exits)
  chex.assert_trees_all_equal({n: p for n, p in params.items() if n not in exits},
                              plain_params)
  x = _batch((32, 32, 3))
  logits = _apply(model, params, x)
  chex.assert_shape(logits, (num_exits, 3, 10))
  chex.assert_trees_all_close(logits[-1], _apply(plain, plain_params, x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('name,shape,num_classes,options,expected', [
    ('mlp', (28, 28, 1), 10, {'hidden': (200, 200)}, 201_220),  # + exit1 2,010
    ('lenet5', (28, 28, 1), 10, {}, 63_156),  # + exits (6 + 16 + 120)·10 + 3·10
    ('resnet18', (32, 32, 3), 10, {}, 11_178_472),  # + (64 + 128 + 256)·10 + 3·10
    ('resnet18', (32, 32, 3), 100, {}, 11_265_232),
])
def test_exact_param_counts_with_exits(name, shape, num_classes, options, expected):
  assert _param_count(name, shape, num_classes, exits=True, **options) == expected


# ----------------------------------------------------------------------------- registry errors


@pytest.mark.parametrize('call,match', [
    (lambda: create_model('vgg', 10), r"Unknown model 'vgg'; valid choices are mlp, lenet5"),
    (lambda: create_model('resnet18', 10, depth=34), r'Unknown option\(s\) depth .*valid options'),
    (lambda: create_model('mlp', 10), r"Model 'mlp' requires option\(s\) hidden"),
])
def test_create_model_rejects_bad_requests(call, match):
  with pytest.raises(ValueError, match=match):
    call()


@pytest.mark.parametrize('name,options,match', [
    ('resnet18', {'norm': 'batch'}, r"Unknown norm 'batch'; valid choices are static_bn"),
    ('lenet5', {'padding': 'full'}, r"Unknown LeNet5 padding 'full'"),
    ('resnet18', {'width': 0.0}, r'width must be positive'),
])
def test_invalid_options_fail_at_init(name, options, match):
  model = create_model(name, 10, **options)
  with pytest.raises(ValueError, match=match):
    init_params(model, jax.random.key(0), (8, 8, 1))


def test_create_model_stores_lists_as_tuples():
  model = create_model('mlp', 10, hidden=[300])
  assert model.hidden == (300,)
  hash(model)


@pytest.mark.parametrize('kernel_size, strides, padding, hw', [
    (3, 1, 'VALID', 10), (3, 1, 'SAME', 9), (5, 1, 'SAME', 8), (3, 2, 1, 9),
    (1, 2, 0, 8), (3, 2, 'SAME', 8), (5, 1, 'VALID', 7)])
def test_im2col_conv_equals_xla_conv_values_and_gradients(kernel_size, strides, padding, hw):
  x = _batch((hw, hw, 3), n=2, seed=0)

  def build(impl):
    class OneConv(nn.Module):
      @nn.compact
      def __call__(self, x):
        return layers.conv(x, 4, kernel_size, 'conv', strides, padding, impl=impl)
    return OneConv()

  xla, im2col = build('xla'), build('im2col')
  params = _random_params(jax.eval_shape(xla.init, jax.random.PRNGKey(1), x))
  chex.assert_trees_all_equal_shapes(params, jax.eval_shape(im2col.init, jax.random.PRNGKey(1), x))

  def loss(model):
    return lambda p, x: jnp.sum(jnp.sin(model.apply(p, x)))

  @jax.jit  # one program (op by op, every op would compile on its own)
  def outputs_and_grads(params, x):
    return [(m.apply(params, x), jax.grad(loss(m), argnums=(0, 1))(params, x))
            for m in (xla, im2col)]

  (xla_out, xla_grads), (im2col_out, im2col_grads) = outputs_and_grads(params, x)
  chex.assert_trees_all_close(im2col_out, xla_out, atol=1e-5)
  chex.assert_trees_all_close(im2col_grads, xla_grads, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize('name, options, shape', [
    ('simple_cnn', {}, (32, 32, 3)), ('lenet5', {}, (28, 28, 1)),
    ('resnet18', {'width': 0.125, 'norm': 'group'}, (16, 16, 3))])
def test_models_give_the_same_logits_with_either_conv_impl(name, options, shape):
  x = _batch(shape, seed=0)
  xla = create_model(name, 10, conv_impl='xla', **options)
  im2col = create_model(name, 10, conv_impl='im2col', **options)
  params = _random_params(parameter_shapes(xla, shape))
  # Both forwards as one program (op by op, a ResNet's many small ops would each compile).
  im2col_out, xla_out = jax.jit(lambda v, x: (im2col.apply(v, x), xla.apply(v, x)))(
      {'params': params}, x)
  chex.assert_trees_all_close(im2col_out, xla_out, atol=1e-4)
  with pytest.raises(ValueError, match='conv_impl'):
    create_model(name, 10, conv_impl='fft', **options).apply({'params': params}, x)


@pytest.mark.parametrize('hw', [(8, 8), (7, 9), (1, 6)])
def test_reshape_max_pool_equals_reduce_window_and_routes_gradients_to_maxima(hw):
  x = jax.random.normal(jax.random.PRNGKey(0), (2, *hw, 3))
  window = (min(2, hw[0]), min(2, hw[1]))
  reference = lambda v: nn.max_pool(v, window, strides=(2, 2), padding='VALID')
  chex.assert_trees_all_equal(layers.max_pool2(x), reference(x))
  # Without ties (random normals) the gradients agree exactly too.
  g = jax.random.normal(jax.random.PRNGKey(1), layers.max_pool2(x).shape)
  chex.assert_trees_all_equal(
      jax.grad(lambda v: jnp.sum(layers.max_pool2(v) * g))(x),
      jax.grad(lambda v: jnp.sum(reference(v) * g))(x))
