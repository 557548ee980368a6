"""Identities of the masked segment-sum aggregation primitive."""
import chex
import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fedjax_het.core import aggregation

SETTINGS = settings(max_examples=15, deadline=None)
# The identities below run compiled, one program per shape of the inputs (op by
# op, each op of every new shape would compile on its own); the eager path is
# `test_jit_and_eager_agree`'s.
masked_mean = jax.jit(aggregation.masked_mean)
masked_segment_mean = jax.jit(aggregation.masked_segment_mean,
                              static_argnums=3)


def _values(draw, clients):
  shape = draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=4))
  elements = st.floats(-10, 10, allow_nan=False, width=32)
  return {'a': draw(hnp.arrays(np.float32, (clients,) + shape, elements=elements)),
          'b': draw(hnp.arrays(np.float32, (clients, 3), elements=elements))}


@st.composite
def cohorts(draw):
  clients = draw(st.integers(1, 6))
  values = _values(draw, clients)
  weights = draw(hnp.arrays(np.float32, (clients,),
                            elements=st.floats(0.125, 5, width=32)))
  return values, weights


@SETTINGS
@given(cohorts())
def test_full_masks_give_the_weighted_mean(cohort):
  values, weights = cohort
  ones = jax.tree.map(np.ones_like, values)
  expected = jax.tree.map(
      lambda v: np.tensordot(weights, v, axes=1) / weights.sum(), values)
  chex.assert_trees_all_close(
      masked_mean(values, jnp.asarray(weights)), expected,
      rtol=1e-5, atol=1e-5)
  chex.assert_trees_all_close(
      masked_mean(values, jnp.asarray(weights), ones), expected,
      rtol=1e-5, atol=1e-5)


@SETTINGS
@given(cohorts(), st.integers(0, 2**31 - 1))
def test_disjoint_masks_reassemble_the_pieces(cohort, seed):
  values, weights = cohort
  clients = weights.shape[0]
  rng = np.random.default_rng(seed)
  owner = jax.tree.map(lambda v: rng.integers(0, clients, v.shape[1:]), values)
  masks = jax.tree.map(
      lambda o: (o[None] == np.arange(clients).reshape((-1,) + (1,) * o.ndim)
                ).astype(np.float32), owner)
  expected = jax.tree.map(lambda v, m: (v * m).sum(0), values, masks)
  chex.assert_trees_all_close(
      masked_mean(values, jnp.asarray(weights), masks), expected,
      rtol=1e-5, atol=1e-5)


@SETTINGS
@given(cohorts(), st.integers(0, 2**31 - 1))
def test_partial_average_is_per_coordinate(cohort, seed):
  values, weights = cohort
  rng = np.random.default_rng(seed)
  masks = jax.tree.map(lambda v: rng.integers(0, 2, v.shape).astype(np.float32),
                       values)
  w = lambda v: weights.reshape((-1,) + (1,) * (v.ndim - 1))
  num = jax.tree.map(lambda v, m: (w(v) * m * v).sum(0), values, masks)
  den = jax.tree.map(lambda v, m: (w(v) * m).sum(0), values, masks)
  expected = jax.tree.map(
      lambda n, d: np.where(d > 0, n / np.where(d > 0, d, 1), 0), num, den)
  got = masked_mean(values, jnp.asarray(weights), masks)
  chex.assert_trees_all_close(got, expected, rtol=1e-5, atol=1e-5)
  # Coordinates no client covers get exactly zero.
  jax.tree.map(lambda g, d: np.testing.assert_array_equal(
      np.asarray(g)[d == 0], 0), got, den)


@SETTINGS
@given(cohorts(), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_segment_mean_equals_a_loop_over_segments(cohort, segments, seed):
  values, weights = cohort
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, segments, weights.shape[0])
  masks = jax.tree.map(lambda v: rng.integers(0, 2, v.shape).astype(np.float32),
                       values)
  # In numpy: indexed below, a jax array would compile every index.
  mean, coverage = jax.tree.map(np.asarray, masked_segment_mean(
      values, jnp.asarray(weights), jnp.asarray(ids), segments, masks))
  for s in range(segments):
    members = ids == s
    if not members.any():
      jax.tree.map(lambda m: np.testing.assert_array_equal(m[s], 0), mean)
      continue
    expected = masked_mean(
        jax.tree.map(lambda v: v[members], values), jnp.asarray(weights[members]),
        jax.tree.map(lambda m: m[members], masks))
    chex.assert_trees_all_close(jax.tree.map(lambda m: m[s], mean), expected,
                                rtol=1e-5, atol=1e-5)
    chex.assert_trees_all_close(
        jax.tree.map(lambda c: c[s], coverage),
        jax.tree.map(lambda m: np.tensordot(weights[members], m[members], 1),
                     masks), rtol=1e-5)


def test_zero_weight_excludes_a_client():
  values = {'w': jnp.array([[1.0, 2.0], [100.0, 100.0], [3.0, 4.0]])}
  got = aggregation.masked_mean(values, jnp.array([1.0, 0.0, 1.0]))
  np.testing.assert_allclose(got['w'], [2.0, 3.0])


def test_nobody_uploads_leaves_zero_not_nan():
  values = {'w': jnp.ones((2, 3))}
  got = aggregation.masked_mean(values, jnp.zeros(2))
  np.testing.assert_array_equal(got['w'], 0.0)


@pytest.mark.parametrize('jit', [False, True])
def test_jit_and_eager_agree(jit):
  values = {'w': jnp.arange(12.0).reshape(3, 4)}
  masks = {'w': (jnp.arange(12).reshape(3, 4) % 3 != 0).astype(jnp.float32)}
  fn = aggregation.masked_segment_mean
  fn = jax.jit(fn, static_argnums=3) if jit else fn
  mean, _ = fn(values, jnp.array([1.0, 2.0, 3.0]), jnp.array([0, 1, 0]), 2,
               masks)
  expected = aggregation.masked_segment_mean(
      values, jnp.array([1.0, 2.0, 3.0]), jnp.array([0, 1, 0]), 2, masks)[0]
  chex.assert_trees_all_close(mean, expected)
