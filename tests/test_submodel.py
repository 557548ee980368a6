"""Submodel masks: TCB-GD's custom_vjp, magnitude thresholds, width windows."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from fedjax_het import models
from fedjax_het.submodel import magnitude, width
from fedjax_het.submodel.tcb import tcb_mask


# ---- TCB-GD (Eq. 3 of FIARSE) -------------------------------------------------
def eq3_gradient(w, theta, upstream):
  """g ⊙ 1{|w| ≥ θ} ⊙ (1 + 2|w|θ/(|w|+θ)²), in float64 (1 where θ = 0)."""
  w, a = np.asarray(w, np.float64), np.abs(np.asarray(w, np.float64))
  kept = a >= theta
  with np.errstate(invalid='ignore', divide='ignore'):
    bias = np.where(a + theta > 0, 2 * a * theta / (a + theta)**2, 0.0)
  return np.where(kept, upstream * (1 + bias), 0.0)


finite = st.floats(-3, 3, allow_nan=False, allow_subnormal=False, width=32)


@jax.jit
def tcb_vjp(w, theta, upstream):
  """(tcb_mask(w, θ), ∂w, ∂θ) of `upstream`: one program per shape (op by op,
  every example's new shape would compile each op on its own)."""
  out, vjp = jax.vjp(tcb_mask, w, theta)
  return (out, *vjp(upstream))


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float32, st.integers(1, 12), elements=finite),
       st.floats(0, 2, width=32, allow_subnormal=False), st.integers(0, 2**16))
def test_tcb_vjp_is_eq3_and_theta_gets_nothing(w, theta, seed):
  upstream = np.random.default_rng(seed).normal(size=w.shape).astype(np.float32)
  w = w.copy()
  w[0] = theta  # a parameter exactly at the threshold is kept (≥)
  out, grad_w, grad_theta = tcb_vjp(w, np.float32(theta), upstream)
  np.testing.assert_array_equal(out, np.where(np.abs(w) >= theta, w, 0))
  np.testing.assert_allclose(grad_w, eq3_gradient(w, theta, upstream),
                             rtol=1e-6, atol=1e-7)
  assert grad_theta == 0
  below = np.abs(w) < theta
  assert np.all(np.asarray(grad_w)[below] == 0)  # exactly zero, not small


def test_tcb_factor_bounds_and_theta_zero_is_the_full_model():
  w = jnp.asarray([0.5, -0.5, 0.6, 3.0, -1e4, 0.0])
  grad = jax.grad(lambda w: tcb_mask(w, 0.5).sum())(w)
  np.testing.assert_allclose(grad[:2], 1.5)  # |w| = θ: factor 1 + 2θ²/(2θ)²
  assert 1 < grad[2] < 1.5 and 1 < grad[3] < 1.5 and grad[4] < 1.001
  assert grad[5] == 0
  full = jax.grad(lambda w: (tcb_mask(w, 0.0) * w).sum())(w)
  np.testing.assert_array_equal(full, 2 * w)  # θ = 0: exactly plain autodiff


def test_tcb_second_derivative_is_the_derivative_of_the_factor():
  w = jnp.asarray([0.7, -1.3, 2.0, 0.1, -0.05])
  theta, c = 0.5, jnp.asarray([1.0, 2.0, -1.0, 3.0, 1.0])
  first = lambda w: jax.grad(lambda v: jnp.sum(c * tcb_mask(v, theta)))(w)
  second = jax.jit(jax.grad(lambda w: jnp.sum(first(w))))(w)  # one program
  a = np.abs(np.asarray(w))
  expected = np.where(a > theta, np.asarray(c) * np.sign(w) * 2 * theta *
                      (theta - a) / (a + theta)**3, 0.0)
  np.testing.assert_allclose(second, expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16, jnp.float16])
def test_tcb_works_under_jit_and_vmap_in_any_dtype(dtype):
  w = jnp.asarray([[0.2, -0.9, 1.5], [0.4, 0.05, -2.0]], dtype)
  theta = jnp.asarray([0.3, 1.0], jnp.float32)
  grad = jax.jit(jax.vmap(jax.grad(lambda w, t: tcb_mask(w, t).sum())))(
      w, theta)
  assert grad.dtype == dtype
  expected = np.stack([eq3_gradient(np.asarray(w[i], np.float32), float(t), 1.0)
                       for i, t in enumerate(theta)])
  np.testing.assert_allclose(np.asarray(grad, np.float32), expected,
                             rtol=1e-2)


# ---- magnitude thresholds -------------------------------------------------------
def random_params(model, input_shape, seed=0):
  """Params of `model` drawn in numpy: what is tested here holds for any
  values, and compiling a ResNet's init takes seconds. Kernels are
  N(0, 1/fan_in), the scale of flax's default (LeCun normal) init, so a deep
  network's activations stay O(1) and float32 rounding stays at its usual
  size; other leaves are standard normal."""
  rng = np.random.default_rng(seed)

  def draw(s):
    scale = 1 / np.sqrt(np.prod(s.shape[:-1])) if len(s.shape) > 1 else 1.0
    return (scale * rng.standard_normal(s.shape)).astype(np.float32)

  return jax.tree.map(draw, models.parameter_shapes(model, input_shape))


def mlp_params(hidden=(30, 20), seed=0):
  return random_params(models.create_model('mlp', 5, hidden=hidden), (4, 4, 1),
                       seed)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0.01, 1.0), min_size=1, max_size=4, unique=True),
       st.sampled_from(['model', 'layer']))
def test_masks_hold_floor_gamma_d_and_nest(gammas, granularity):
  params = mlp_params()
  thresholds = magnitude.MagnitudeThresholds(
      params, models.maskable_leaves(params), granularity)
  theta = thresholds(params, sorted(gammas))
  masks = [magnitude.magnitude_mask(params, jax.tree.map(lambda t, i=i: t[i],
                                                         theta))
           for i in range(len(gammas))]
  leaves = jax.tree.leaves(params)
  groups = jax.tree.leaves(thresholds.group_of)
  for gamma, mask in zip(sorted(gammas), masks):
    kept = jax.tree.leaves(mask)
    for g, size in enumerate(thresholds.group_sizes):  # random floats: no ties
      held = sum(int(m.sum()) for m, i in zip(kept, groups) if i == g)
      assert held == magnitude.top_k_count(gamma, size)
  for small, large in zip(masks, masks[1:]):
    for s, l in zip(jax.tree.leaves(small), jax.tree.leaves(large)):
      assert np.all(np.asarray(l)[np.asarray(s)])  # small ⊆ large
  del leaves


def test_full_capacity_has_threshold_zero_and_norms_are_never_masked():
  model = models.create_model('simple_cnn', 3, norm='static_bn')
  params = random_params(model, (8, 8, 1))
  thresholds = magnitude.MagnitudeThresholds(params,
                                             models.maskable_leaves(params))
  theta = jax.tree.map(np.asarray, jax.jit(  # one program, read in numpy
      lambda p: thresholds(p, (0.05, 1.0)))(params))
  for path, t in jax.tree_util.tree_leaves_with_path(theta):
    names = jax.tree_util.keystr(path)
    assert t[1] == 0
    assert (t[0] == 0) == ('norm' in names)


def test_resnet18_counts_match_fiarse_code():
  """d and k = ⌊γd⌋ of the CIFAR-10 ResNet-18 (FIARSE's CIFAR-10 setting)."""
  model = models.create_model('resnet18', 10)
  shapes = jax.eval_shape(
      lambda: models.init_params(model, jax.random.PRNGKey(0), (32, 32, 3)))
  thresholds = magnitude.MagnitudeThresholds(shapes,
                                             models.maskable_leaves(shapes))
  assert thresholds.num_maskable == 11_164_362
  assert [magnitude.top_k_count(g, 11_164_362)
          for g in (1 / 64, 1 / 16, 1 / 4, 1)] == [
              174_443, 697_772, 2_791_090, 11_164_362]
  layerwise = magnitude.MagnitudeThresholds(
      shapes, models.maskable_leaves(shapes), 'layer')
  assert layerwise.num_groups == 6  # stem, stage1..4, head as in FIARSE's code


def test_shard_thresholds_need_prefixes_that_match():
  params = mlp_params()
  maskable = models.maskable_leaves(params)
  with pytest.raises(ValueError, match='shards'):
    magnitude.MagnitudeThresholds(params, maskable, 'shard')
  with pytest.raises(ValueError, match='no maskable'):
    magnitude.MagnitudeThresholds(params, maskable, 'shard', ('fc1', 'conv'))
  sharded = magnitude.MagnitudeThresholds(params, maskable, 'shard', ('fc',))
  theta = sharded(params, (0.1,))
  assert theta['head']['kernel'][0] == 0  # outside every shard: unmasked
  assert theta['fc1']['kernel'][0] == theta['fc2']['bias'][0] > 0


# ---- width windows (HeteroFL, FedRolex) -----------------------------------------
def layout_of(model, input_shape):
  """`width.channel_layout`, traced abstractly: it reads only the shapes of
  the parameters, and its `model.init`, run op by op, would compile every op
  on its own."""
  layout = []
  jax.eval_shape(lambda: layout.append(width.channel_layout(model,
                                                            input_shape)))
  return layout[0]


def jitted_width_mask(layout, rate, round_index=0):
  """`width.width_mask` as one program (numpy leaves); `rate` and
  `round_index` stay Python numbers."""
  return jax.tree.map(np.asarray, jax.jit(
      lambda: width.width_mask(layout, rate, round_index))())


def paper_window(channels, rate, round_index):
  """FedRolex's index rule roll(arange(C), t)[:⌈rC⌉]; t = 0 is HeteroFL's."""
  k = math.ceil(rate * channels - 1e-9)
  keep = np.zeros(channels, bool)
  keep[np.roll(np.arange(channels), round_index)[:k]] = True
  return keep


@pytest.mark.parametrize('rate,round_index', [(0.5, 0), (0.25, 0), (0.5, 3),
                                              (0.25, 37), (1.0, 5)])
def test_width_masks_follow_the_papers_index_rules(rate, round_index):
  model = models.create_model('lenet5', 10)
  mask = jitted_width_mask(layout_of(model, (8, 8, 1)), rate, round_index)
  conv2 = np.asarray(mask['conv2']['kernel'])  # [5, 5, 6, 16]
  expected = np.outer(paper_window(6, rate, round_index),
                      paper_window(16, rate, round_index))
  np.testing.assert_array_equal(conv2, np.broadcast_to(expected, conv2.shape))
  # The image channel and the classes are never sliced.
  assert np.all(mask['conv1']['kernel'][:, :, 0, :] ==
                paper_window(6, rate, round_index))
  assert np.all(np.asarray(mask['head']['bias']))
  # fc1 reads the flattened 2x2x16 map: feature i is channel i mod 16.
  fc1_in = np.asarray(mask['fc1']['kernel']).any(axis=1)
  np.testing.assert_array_equal(
      fc1_in, np.tile(paper_window(16, rate, round_index), 4))


@pytest.mark.parametrize('name,options,narrow,shape', [
    ('mlp', {'hidden': (20, 12)}, {'hidden': (10, 6)}, (4, 4, 1)),
    ('resnet18', {'width': 0.125, 'norm': 'static_bn'},
     {'width': 0.0625, 'norm': 'static_bn'}, (8, 8, 3)),
])
def test_masked_full_model_computes_the_sliced_model(name, options, narrow,
                                                     shape):
  """A width-½ mask on the full model = the half-width network, exactly."""
  full = models.create_model(name, 5, **options)
  small = models.create_model(name, 5, **narrow)
  params = random_params(full, shape)
  mask = jitted_width_mask(layout_of(full, shape), 0.5)
  sliced = jax.tree.map(
      lambda p, m: np.asarray(p)[np.ix_(*[np.flatnonzero(m.any(
          axis=tuple(j for j in range(m.ndim) if j != i)))
          for i in range(m.ndim)])],
      params, mask)
  x = jax.random.normal(jax.random.PRNGKey(1), (6, *shape))
  # Each forward is one compiled program (op by op, a ResNet's many small
  # ops would each compile on their own).
  masked_out = jax.jit(lambda p, m, x: full.apply({'params': jax.tree.map(
      lambda p, m: p * m, p, m)}, x))(params, mask, x)
  small_out = jax.jit(small.apply)({'params': sliced}, x)
  np.testing.assert_allclose(masked_out, small_out, rtol=1e-5, atol=1e-5)


def test_width_rules():
  layout = layout_of(models.create_model('mlp', 10, hidden=(50,)), (8, 8, 1))
  assert width.width_for_capacity(layout, 0.25) == 0.5
  r = width.width_for_capacity(layout, 0.25, 'params')
  assert width.kept_fraction(layout, r) <= 0.25 < width.kept_fraction(
      layout, r + 0.02)
  with pytest.raises(ValueError, match='width rule'):
    width.width_for_capacity(layout, 0.5, 'cubic')


# One program per shape of the arrays and of the ks (op by op, the search's
# loop compiles anew on every call).
kth_largest_magnitude = jax.jit(magnitude.kth_largest_magnitude)


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.float32, st.integers(1, 40),
                  elements=st.sampled_from([0.0, -0.5, 0.5, 1.0, -2.0, 3e-8,
                                            7.25, -1e6])),
       st.data())
def test_kth_largest_magnitude_equals_sorting_even_with_ties(x, data):
  ks = data.draw(st.lists(st.integers(1, x.size), min_size=1, max_size=4))
  split = data.draw(st.integers(0, x.size))
  got = kth_largest_magnitude([x[:split], x[split:]], np.asarray(ks))
  expected = [np.sort(np.abs(x))[::-1][k - 1] for k in ks]
  np.testing.assert_array_equal(got, expected)
