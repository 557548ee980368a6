"""Structured units: per-segment sums and broadcasts for any axis layout."""
import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het.submodel import units
from fedjax_het.submodel.units import UnitSpec

# Group 'g' has segments [5, 3]: leaf 'a' [3, 4, 5] indexes them by axes
# (2, 0) (out of order, not adjacent), leaf 'b' [5, 2, 3] by (0, 2) and leaf
# 'c' [3, 5] by (1, 0). Group 'w' is leaf 'd' as one segment.
SPECS = {'a': UnitSpec('g', (2, 0), (3, 4, 5)),
         'b': UnitSpec('g', (0, 2), (5, 2, 3)),
         'c': UnitSpec('g', (1, 0), (3, 5)),
         'd': UnitSpec('w', (), (2, 3))}


def _tree(seed=0):
  rng = np.random.default_rng(seed)
  return {k: rng.standard_normal(s.shape).astype(np.float32)
          for k, s in SPECS.items()}


def _broadcast(values):
  """`units.unit_broadcast` of `values` over SPECS, in numpy (indexed op by
  op, jax arrays would compile every index on its own)."""
  return {k: np.asarray(v) for k, v in units.unit_broadcast(values,
                                                            SPECS).items()}


def _hand_sums(tree, transform=lambda v: v):
  """Σ over segment (i, j) of group 'g' by explicit loops; 'w': whole leaf."""
  t = {k: transform(v) for k, v in tree.items()}
  g = np.zeros((5, 3))
  for i, j in itertools.product(range(5), range(3)):
    g[i, j] = t['a'][j, :, i].sum() + t['b'][i, :, j].sum() + t['c'][j, i]
  return {'g': g, 'w': np.asarray(t['d'].sum())}


def test_unit_sums_equal_a_hand_loop():
  tree = _tree()
  got = units.unit_sums(tree, SPECS)
  want = _hand_sums(tree)
  assert set(got) == {'g', 'w'}
  assert got['g'].shape == (5, 3) and got['w'].shape == ()
  for k in want:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
  got = units.unit_sums(tree, SPECS, jnp.abs)
  want = _hand_sums(tree, np.abs)
  for k in want:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)


def test_segment_sizes_and_group_shapes():
  sizes = units.segment_sizes(SPECS)
  np.testing.assert_array_equal(sizes['g'], np.full((5, 3), 4 + 2 + 1))
  np.testing.assert_array_equal(sizes['w'], 6)
  assert units.group_shapes(SPECS) == {'g': (5, 3), 'w': ()}
  assert SPECS['a'].segment_shape == (5, 3)


def test_broadcast_places_each_value_on_its_segment():
  values = {'g': np.arange(15, dtype=np.float32).reshape(5, 3) + 1.0,
            'w': np.float32(7.0)}
  out = _broadcast(values)
  assert {k: v.shape for k, v in out.items()} == {
      k: s.shape for k, s in SPECS.items()}
  g = values['g']
  for i, j in itertools.product(range(5), range(3)):
    np.testing.assert_array_equal(out['a'][j, :, i], g[i, j])
    np.testing.assert_array_equal(out['b'][i, :, j], g[i, j])
    assert out['c'][j, i] == g[i, j]
  np.testing.assert_array_equal(out['d'], np.full((2, 3), 7.0))


def test_sum_of_broadcast_is_size_times_value():
  sizes = units.segment_sizes(SPECS)
  rng = np.random.default_rng(1)
  values = {'g': rng.standard_normal((5, 3)).astype(np.float32),
            'w': np.float32(-2.5)}
  back = units.unit_sums(units.unit_broadcast(values, SPECS), SPECS)
  for k in values:
    np.testing.assert_allclose(back[k], sizes[k] * values[k], rtol=1e-5)
  # A one-hot value touches exactly its segment's entries.
  for i, j in [(0, 0), (4, 1), (2, 2)]:
    one_hot = {'g': np.zeros((5, 3), np.float32).copy(),
               'w': np.float32(0.0)}
    one_hot['g'][i, j] = 3.0
    spread = _broadcast(one_hot)
    assert sum(float(np.sum(v)) for v in spread.values()) == 3.0 * 7
    assert sum(int(np.sum(v != 0)) for v in spread.values()) == 7
    back = units.unit_sums(spread, SPECS)
    np.testing.assert_array_equal(back['g'], 7 * one_hot['g'])


def test_broadcast_with_leading_client_axes():
  rng = np.random.default_rng(2)
  values = {'g': rng.standard_normal((4, 5, 3)).astype(np.float32),
            'w': rng.standard_normal((4,)).astype(np.float32)}
  out = _broadcast(values)
  for k, spec in SPECS.items():
    assert out[k].shape == (4,) + spec.shape
  for c in range(4):
    one = _broadcast({k: v[c] for k, v in values.items()})
    for k in SPECS:
      np.testing.assert_array_equal(out[k][c], one[k])
  # Two leading axes.
  values = {'g': rng.standard_normal((2, 3, 5, 3)).astype(np.float32),
            'w': rng.standard_normal((2, 3)).astype(np.float32)}
  out = _broadcast(values)
  assert out['a'].shape == (2, 3, 3, 4, 5)
  np.testing.assert_array_equal(out['a'][1, 2, :, 0, 4], values['g'][1, 2, 4])
  np.testing.assert_array_equal(out['d'][1, 0], np.full((2, 3),
                                                        values['w'][1, 0]))


def test_mismatched_specs_raise():
  bad = {**SPECS, 'e': UnitSpec('g', (0, 1), (3, 5))}      # segments [3, 5]
  with pytest.raises(ValueError, match=r"group 'g' has leaves with segment "
                     r'shapes \(5, 3\) and \(3, 5\)'):
    units.group_shapes(bad)
  with pytest.raises(ValueError, match='the tree has 3 leaves, the specs 4'):
    units.unit_sums({k: v for k, v in _tree().items() if k != 'd'}, SPECS)
