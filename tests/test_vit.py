"""ViT: unit masks equal slicing, depth windows, exits, presets, segments."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_het import models
from fedjax_het.models import vit
from fedjax_het.submodel import units as units_lib

DEPTH, D, M, H, P, C = 2, 8, 16, 4, 4, 10
E = D // H


@functools.cache
def tiny(depth=DEPTH):
  return models.create_model('vit', C, depth=depth, hidden=D, mlp=M, heads=H,
                             patch=P)


# Inputs, masks and results are numpy arrays: indexed or summed op by op,
# jax arrays would compile every op on its own.
def random_params(depth=DEPTH, seed=0):
  """Params of `tiny(depth)` with every leaf random (biases and LN too)."""
  shapes = jax.eval_shape(tiny(depth).init, jax.random.key(0),
                          jax.ShapeDtypeStruct((1, 8, 8, 1), jnp.float32))
  rng = np.random.default_rng(seed)
  return jax.tree.map(
      lambda s: np.asarray(0.5 * rng.standard_normal(s.shape), np.float32),
      shapes['params'])


def random_units(seed, depth=DEPTH):
  """Random 0/1 masks [L, U] per kind, at least one unit kept per layer."""
  rng = np.random.default_rng(seed)
  out = {}
  for kind, (l, u) in tiny(depth).unit_shapes().items():
    mask = (rng.random((l, u)) < 0.5).astype(np.float32)
    mask[np.arange(l), rng.integers(0, u, l)] = 1.0
    out[kind] = mask
  return out


def ones_units(depth=DEPTH):
  return {k: np.ones(s, np.float32)
          for k, s in tiny(depth).unit_shapes().items()}


def images(n=3, seed=1):
  return jnp.asarray(np.random.default_rng(seed).standard_normal((n, 8, 8, 1)),
                     jnp.float32)


def _loss(logits):
  labels = jnp.arange(logits.shape[0]) % C
  return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


@functools.cache
def exits_fn(depth):
  """jit (params, x, units, window) -> every exit's logits [L, B, C]."""
  return jax.jit(lambda p, x, units, window: tiny(depth).apply(
      {'params': p}, x, units=units, window=window, all_exits=True))


@functools.cache
def grad_fn(depth):
  """jit (params, x, units, window) -> d loss(last exit) / d params."""
  return jax.jit(jax.grad(lambda p, x, units, window: _loss(
      exits_fn(depth)(p, x, units, window)[-1])))


def run(params, x, units=None, window=None):
  depth = params['blocks_fc1_bias'].shape[0]
  units = ones_units(depth) if units is None else units
  window = vit.full_window(depth) if window is None else window
  return np.asarray(exits_fn(depth)(params, x, units, window))


def grads(params, x, units=None, window=None):
  depth = params['blocks_fc1_bias'].shape[0]
  units = ones_units(depth) if units is None else units
  window = vit.full_window(depth) if window is None else window
  return jax.tree.map(np.asarray, grad_fn(depth)(params, x, units, window))


_entry_mask = jax.jit(vit.entry_mask)


def entry_mask(params, units):
  """`vit.entry_mask` as one compiled program, in numpy."""
  return jax.tree.map(np.asarray, _entry_mask(params, units))


# ---- an independent reference: the submodel physically sliced ---------------


def _ln(x, scale, bias):
  mu = jnp.mean(x, -1, keepdims=True)
  var = jnp.mean((x - mu) ** 2, -1, keepdims=True)
  return (x - mu) / jnp.sqrt(var + 1e-6) * scale + bias


def _scatter(values, index, width):
  """values [..., k] placed at columns `index` of zeros [..., width]."""
  return jnp.zeros(values.shape[:-1] + (width,), values.dtype).at[
      ..., index].set(values)


def sliced_forward(params, x, masks):
  """Logits of the submodel `masks` selects, computed on sliced weights."""
  b = x.shape[0]
  g = x.shape[1] // P
  patches = x.reshape(b, g, P, g, P, 1).transpose(0, 1, 3, 2, 4, 5).reshape(
      b, g * g, P * P)
  tokens = patches @ params['embed']['kernel'] + params['embed']['bias']
  cls = jnp.tile(params['cls'][None, None], (b, 1, 1))
  x = jnp.concatenate([cls, tokens], 1) + params['pos']
  for l in range(DEPTH):
    heads = np.flatnonzero(masks['heads'][l])
    proj = np.flatnonzero(masks['proj'][l])
    fc1 = np.flatnonzero(masks['fc1'][l])
    fc2 = np.flatnonzero(masks['fc2'][l])
    h = _ln(x, params['blocks_ln1_scale'][l], params['blocks_ln1_bias'][l])
    outs = []
    for j in heads:
      q, k, v = [h @ params['blocks_qkv_kernel'][l, :, s, j]
                 + params['blocks_qkv_bias'][l, s, j] for s in range(3)]
      attn = jax.nn.softmax(q @ k.transpose(0, 2, 1) / np.sqrt(E), -1)
      outs.append(attn @ v)                                      # [B, T, E]
    w = params['blocks_proj_kernel'][l][heads][:, :, proj].reshape(
        len(heads) * E, len(proj))
    out = jnp.concatenate(outs, -1) @ w + params['blocks_proj_bias'][l, proj]
    x = x + _scatter(out, proj, D)
    h = _ln(x, params['blocks_ln2_scale'][l], params['blocks_ln2_bias'][l])
    hidden = jax.nn.gelu(h @ params['blocks_fc1_kernel'][l][:, fc1]
                         + params['blocks_fc1_bias'][l, fc1], approximate=False)
    out = hidden @ params['blocks_fc2_kernel'][l][fc1][:, fc2] + \
        params['blocks_fc2_bias'][l, fc2]
    x = x + _scatter(out, fc2, D)
  last = DEPTH - 1
  cls = _ln(x[:, 0], params['exits_norm_scale'][last],
            params['exits_norm_bias'][last])
  return cls @ params['exits_dense_kernel'][last] + \
      params['exits_dense_bias'][last]


def test_masked_model_equals_sliced_submodel_values_and_gradients():
  params, x, masks = random_params(), images(), random_units(0)
  # Every layer keeps some but not all units of every kind.
  assert all(0 < float(v[l].sum()) < v.shape[1] for v in masks.values()
             for l in range(DEPTH))
  got = run(params, x, masks)[-1]
  # The reference, jitted with this mask's slices baked in.
  def reference(p):
    logits = sliced_forward(p, x, masks)
    return _loss(logits), logits
  (_, want), want_grad = jax.jit(jax.value_and_grad(reference, has_aux=True))(
      params)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  # Masking really changes the function (the comparison is not vacuous).
  assert not np.allclose(got, run(params, x)[-1], atol=1e-3)

  # Slicing is differentiated too: entries the submodel never reads get 0.
  grad = grads(params, x, masks)
  keep = entry_mask(params, masks)
  for (path, g), w, k in zip(jax.tree_util.tree_leaves_with_path(grad),
                             jax.tree.leaves(want_grad), jax.tree.leaves(keep),
                             strict=True):
    name, g = jax.tree_util.keystr(path), np.asarray(g)
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6, err_msg=name)
    assert np.all(g[np.asarray(k) == 0] == 0), name
  # Some kept entries of every masked leaf do get gradient.
  for name in ('blocks_qkv_kernel', 'blocks_proj_kernel', 'blocks_fc1_kernel',
               'blocks_fc2_kernel'):
    k = np.asarray(keep[name])
    assert 0 < k.sum() < k.size
    assert np.abs(np.asarray(grad[name])[k == 1]).max() > 0, name


def test_entry_mask_times_params_equals_unit_masks():
  params, x = random_params(), images()
  for seed in range(3):
    masks = random_units(seed + 10)
    keep = entry_mask(params, masks)
    assert jax.tree.structure(keep) == jax.tree.structure(params)
    sliced = jax.tree.map(np.multiply, params, keep)
    np.testing.assert_allclose(run(sliced, x), run(params, x, masks),
                               rtol=1e-5, atol=1e-6)
  ones = entry_mask(params, ones_units())
  assert all(np.all(np.asarray(v) == 1) for v in jax.tree.leaves(ones))


# ---- depth windows -----------------------------------------------------------


def _window(run_, frozen):
  return vit.Window(run=jnp.asarray(run_), frozen=jnp.asarray(frozen))


def _take_blocks(params, index):
  """Params of a shallower ViT made of the blocks (and exits) `index`."""
  index = np.asarray(index)
  return {k: (v[index] if k.startswith(('blocks_', 'exits_')) else v)
          for k, v in params.items()}


def test_pruned_blocks_pass_the_residual_stream_through():
  params, x = random_params(depth=3), images()
  no = [False] * 3
  out = run(params, x, window=_window([True, True, False], no))
  shallow = run(_take_blocks(params, [0, 1]), x)
  np.testing.assert_allclose(out[:2], shallow, rtol=1e-5, atol=1e-6)
  # The last exit reads the stream after block 1: with exit 1's head it
  # equals exit 1.
  same_head = dict(params)
  for k in ('exits_norm_scale', 'exits_norm_bias', 'exits_dense_kernel',
            'exits_dense_bias'):
    same_head[k] = params[k][[0, 1, 1]]  # exit 2 gets exit 1's head
  out = run(same_head, x, window=_window([True, True, False], no))
  np.testing.assert_allclose(out[2], out[1], rtol=1e-6, atol=1e-6)
  # A pruned middle block: blocks 0 and 2 alone.
  out = run(params, x, window=_window([True, False, True], no))
  shallow = run(_take_blocks(params, [0, 2]), x)
  np.testing.assert_allclose(out[2], shallow[1], rtol=1e-5, atol=1e-6)
  assert not np.allclose(out[2], run(params, x)[2], atol=1e-3)


def _block_norm(grad, layer):
  return sum(float(np.abs(v[layer]).sum()) for k, v in grad.items()
             if k.startswith('blocks_'))


def test_frozen_and_pruned_blocks_get_no_gradient():
  params, x = random_params(depth=3), images()
  g = grads(params, x, window=_window([True] * 3, [True, False, False]))
  assert _block_norm(g, 0) == 0
  for name in ('cls', 'pos'):
    assert np.all(np.asarray(g[name]) == 0), name
  assert all(np.all(np.asarray(v) == 0) for v in jax.tree.leaves(g['embed']))
  for name, v in g.items():       # every leaf of blocks 1 and 2 trains
    if name.startswith('blocks_'):
      assert float(np.abs(v[1]).max()) > 0, name
      assert float(np.abs(v[2]).max()) > 0, name
  # Freezing does not change the forward pass.
  np.testing.assert_array_equal(
      run(params, x, window=_window([True] * 3, [True, True, False])),
      run(params, x))
  g = grads(params, x, window=_window([True] * 3, [True, True, False]))
  assert _block_norm(g, 0) == 0 and _block_norm(g, 1) == 0
  assert _block_norm(g, 2) > 0
  g = grads(params, x, window=_window([True, True, False], [False] * 3))
  assert _block_norm(g, 2) == 0
  assert _block_norm(g, 0) > 0 and _block_norm(g, 1) > 0
  assert float(np.abs(g['pos']).sum()) > 0


# ---- exits -------------------------------------------------------------------


def test_all_exits_shape_and_last_exit_is_the_default_output():
  params, x = random_params(depth=3), images()
  masks = random_units(5, depth=3)
  model = tiny(3)
  every = model.apply({'params': params}, x, all_exits=True, units=masks)
  assert every.shape == (3, 3, C)
  np.testing.assert_array_equal(
      every[-1], model.apply({'params': params}, x, units=masks))
  assert not np.allclose(every[0], every[-1], atol=1e-3)


def test_exit_head_reads_the_cls_token_only():
  params = random_params()
  head = {'norm': {'scale': params['exits_norm_scale'][0],
                   'bias': params['exits_norm_bias'][0]},
          'dense': {'kernel': params['exits_dense_kernel'][0],
                    'bias': params['exits_dense_bias'][0]}}
  rng = np.random.default_rng(3)
  tokens = rng.standard_normal((2, 5, D)).astype(np.float32)
  other = tokens.copy()
  other[:, 1:] = rng.standard_normal((2, 4, D))
  exit_logits = jax.jit(vit.exit_logits)
  np.testing.assert_array_equal(exit_logits(tokens, head),
                                exit_logits(other, head))
  g = np.asarray(jax.jit(jax.grad(
      lambda t: vit.exit_logits(t, head)[:, 3].sum()))(tokens))
  assert np.all(g[:, 1:] == 0)
  assert np.abs(g[:, 0]).min() > 0

  def reference(t):
    cls = _ln(t[:, 0], head['norm']['scale'], head['norm']['bias'])
    return cls @ head['dense']['kernel'] + head['dense']['bias']

  want = jax.jit(reference)(tokens)
  np.testing.assert_allclose(exit_logits(tokens, head), want, rtol=1e-5,
                             atol=1e-6)


# ---- presets and option checks ----------------------------------------------


def _count(model, image):
  shapes = jax.eval_shape(
      model.init, jax.random.key(0),
      jax.ShapeDtypeStruct((1,) + image, jnp.float32))['params']
  return sum(int(np.prod(v.shape)) for v in jax.tree.leaves(shapes))


def test_vit_tiny_preset_has_about_26m_parameters():
  model = models.create_model('vit_tiny', num_classes=200)
  assert (model.depth, model.hidden, model.mlp, model.heads, model.patch) == (
      8, 512, 2048, 8, 16)
  d, m, l, c, t = 512, 2048, 8, 200, 14 * 14
  block = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * m + m) + \
      (m * d + d)
  want = (16 * 16 * 3 * d + d) + d + (t + 1) * d + l * block + \
      l * (2 * d + d * c + c)
  got = _count(model, (224, 224, 3))
  assert got == want
  assert 26e6 < got < 27e6
  # Options override the preset.
  assert models.create_model('vit_tiny', 10, depth=2).depth == 2


def test_bad_vit_options_raise():
  with pytest.raises(ValueError, match=r'hidden \(10\) must be divisible by '
                     r'heads \(4\)'):
    models.create_model('vit', 10, hidden=10, heads=4)
  with pytest.raises(ValueError, match='must be a positive int'):
    models.create_model('vit', 10, depth=0)
  with pytest.raises(ValueError, match='patch 4 does not divide the image '
                     'size 10x8'):
    tiny().init(jax.random.key(0), jnp.zeros((1, 10, 8, 1)))


# ---- segments ----------------------------------------------------------------


def test_segment_specs_sizes_by_hand():
  params = random_params()
  specs = vit.segment_specs(params)
  # Sizes and broadcasts as compiled programs, in numpy (op by op, every
  # leaf's ops would compile on their own).
  sizes = jax.tree.map(np.asarray, jax.jit(
      lambda: units_lib.segment_sizes(specs))())
  t = (8 // P) ** 2 + 1
  want = {
      'blocks/heads': ((DEPTH, H), 3 * D * E + 3 * E),
      'blocks/proj': ((DEPTH, D), H * E + 1),
      'blocks/fc1': ((DEPTH, M), D + 1),
      'blocks/fc2': ((DEPTH, D), M + 1),
      'blocks/ln1': ((DEPTH,), 2 * D),
      'blocks/ln2': ((DEPTH,), 2 * D),
      'exits': ((DEPTH,), 2 * D + D * C + C),
      'embed': ((), P * P * 1 * D + D),
      'cls': ((), D),
      'pos': ((), t * D),
  }
  assert set(sizes) == set(want)
  assert units_lib.group_shapes(specs) == {k: s for k, (s, _) in want.items()}
  for group, (shape, size) in want.items():
    np.testing.assert_array_equal(sizes[group], np.full(shape, size),
                                  err_msg=group)
  total = sum(float(v.sum()) for v in sizes.values())
  assert total == sum(v.size for v in jax.tree.leaves(params))
  # A unit mask broadcast over the segments of the output unit keeps exactly
  # the entries whose output unit is kept (entry_mask also needs the input).
  masks = random_units(7)
  values = {g: np.ones(s, np.float32) for g, (s, _) in want.items()}
  values.update({f'blocks/{k}': v for k, v in masks.items()})
  spread = jax.tree.map(np.asarray, jax.jit(
      lambda v: units_lib.unit_broadcast(v, specs))(values))
  keep = entry_mask(params, masks)
  for name in ('blocks_qkv_kernel', 'blocks_fc1_kernel', 'blocks_fc1_bias',
               'blocks_proj_bias', 'blocks_fc2_bias'):
    np.testing.assert_array_equal(spread[name], keep[name], err_msg=name)
  # Inputs narrow the mask further: entry_mask <= the output-unit mask.
  for name in ('blocks_proj_kernel', 'blocks_fc2_kernel'):
    assert np.all(np.asarray(keep[name]) <= np.asarray(spread[name]))
