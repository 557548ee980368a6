"""The aggregation primitive: weighted, masked segment sums and means over the client axis.

One primitive serves every method (`segment_sums`). For coordinate j of a
leaf and segment s (a capacity group, a cell, or the single global segment),

    mean[s, j] = Σ_{c: seg(c)=s} w_c m_cj Δ_cj / Σ_{c: seg(c)=s} w_c m_cj,

and 0 where no client of the segment covers j (the denominator, returned as
`coverage`, is 0 there). With m ≡ 1 and one segment this is the FedAvg weighted
mean; with per-coordinate masks it is the partial averaging of HeteroFL/FIARSE
(Eq. (6) of FIARSE uses counts, i.e. w ≡ 1); with disjoint masks it reassembles
the pieces (HIST Eq. 7). Methods whose rule is not a mean (FedACS's rule (3)
divides by the number of draws, AirComp adds noise to the sums) use the sums.
"""
from typing import Any

import jax
import jax.numpy as jnp

PyTree = Any


def _expand(v: jax.Array, ndim: int) -> jax.Array:
  return v.reshape(v.shape + (1,) * (ndim - v.ndim))


# Up to this many segments, `segment_sum` contracts with a one-hot matrix.
ONE_HOT_MAX_SEGMENTS = 64


def segment_sum(x: jax.Array, segment_ids: jax.Array, num_segments: int,
                weights: jax.Array | None = None) -> jax.Array:
  """[C, ...] -> [S, ...]: Σ_{c: seg(c)=s} w_c x_c (ids outside [0, S) dropped).

  `jax.ops.segment_sum(w·x)`, computed for the few segments of FL (one global
  segment, capacity levels, cells) as a contraction of x's client axis with
  the [C, S] matrix w_c·1{seg(c)=s}: a GEMM that XLA runs at memory speed,
  with the weights folded in rather than multiplied into a copy of x, and
  deterministic on GPU. Measured on a 2-core CPU for 50 × 156,800 float32:
  0.6 ms, against 4.2 ms for the scatter-add lowering and 1.6 ms (81 ms
  with a mask product) for `jnp.sum(w·x, axis=0)`. Many segments use the
  scatter-add, whose cost does not grow with S.
  """
  if weights is None:
    weights = jnp.ones(segment_ids.shape, x.dtype)
  if num_segments > ONE_HOT_MAX_SEGMENTS:
    return jax.ops.segment_sum(_expand(weights, x.ndim) * x, segment_ids,
                               num_segments=num_segments)
  coefficients = jnp.where(segment_ids[:, None] == jnp.arange(num_segments),
                           weights[:, None], 0).astype(x.dtype)
  return jnp.tensordot(coefficients, x, axes=(0, 0),
                       precision=jax.lax.Precision.HIGHEST)


def segment_sums(values: PyTree, weights: jax.Array, segment_ids: jax.Array,
                 num_segments: int, masks: PyTree = None, *,
                 values_masked: bool = False,
                 denominator_weights: jax.Array | None = None
                 ) -> tuple[PyTree, PyTree]:
  """(numerator, denominator) of the per-segment, per-coordinate weighted mean.

  For coordinate j of a leaf and segment s,

      numerator[s, j]   = Σ_{c: seg(c)=s} w_c m_cj Δ_cj,
      denominator[s, j] = Σ_{c: seg(c)=s} w_c m_cj,

  the primitive every aggregation rule is built on: the masked mean is their
  ratio (`masked_segment_mean`), FedACS's rule (3) is numerator / K, a
  staleness-weighted rule puts its factor into w or m.

  Args:
    values: pytree of [C, ...] arrays (one row per client).
    weights: float [C] per-client weights (0 excludes a client).
    segment_ids: int [C] in [0, num_segments); other ids are dropped.
    num_segments: static number of segments S.
    masks: None (every client covers every coordinate), or a pytree like
      `values` whose leaves are 0/1 masks or float weights per (client,
      coordinate) [C, ...], or per (client, structured unit): any shape that
      broadcasts against the leaf, e.g. [C, 1, out] for a kernel's output
      rows or [C, heads, 1] for attention heads.
    values_masked: the values are already 0 where their mask is, as client
      deltas are (`core.program.run_program` masks them); the numerator then
      sums the values as they are, with no [C, ...] product materialised.
      Only for 0/1 masks.
    denominator_weights: float [C] weights of the denominator when they
      differ from the numerator's (AirComp: the received effective weights
      sum the signals, the nominal ones the coverage); default `weights`.

  Returns:
    (numerator, denominator): [S, ...] leaves; the denominator is [S] per
    leaf when `masks` is None and [S, *mask.shape[1:]] otherwise.
  """
  weights = weights.astype(jnp.float32)
  counted = weights if denominator_weights is None else (
      denominator_weights.astype(jnp.float32))

  def one_leaf(leaf, mask):
    value = leaf.astype(jnp.float32)
    if mask is None:
      numerator = segment_sum(value, segment_ids, num_segments, weights)
      denominator = segment_sum(counted, segment_ids, num_segments)
    else:
      mask = mask.astype(jnp.float32)
      numerator = segment_sum(value if values_masked else value * mask,
                              segment_ids, num_segments, weights)
      denominator = segment_sum(mask, segment_ids, num_segments, counted)
    return numerator, denominator

  return _unzip(_map_leaves(one_leaf, values, masks))


def _map_leaves(fn, values: PyTree, masks: PyTree) -> PyTree:
  if masks is None:
    return jax.tree.map(lambda v: fn(v, None), values)
  return jax.tree.map(fn, values, masks)


def _unzip(pairs: PyTree) -> tuple[PyTree, PyTree]:
  is_pair = lambda x: isinstance(x, tuple)
  return (jax.tree.map(lambda p: p[0], pairs, is_leaf=is_pair),
          jax.tree.map(lambda p: p[1], pairs, is_leaf=is_pair))


def ratio(numerator: jax.Array, denominator: jax.Array) -> jax.Array:
  """numerator / denominator where the denominator is > 0, else 0."""
  den = _expand(denominator, numerator.ndim)
  covered = den > 0
  return jnp.where(covered, numerator / jnp.where(covered, den, 1.0), 0.0)


def masked_segment_mean(values: PyTree, weights: jax.Array,
                        segment_ids: jax.Array, num_segments: int,
                        masks: PyTree = None, *,
                        values_masked: bool = False) -> tuple[PyTree, PyTree]:
  """Per-segment, per-coordinate weighted mean over the client axis.

  The ratio of `segment_sums` (same arguments), 0 where no client of the
  segment covers a coordinate.

  Returns:
    (mean, coverage): `mean` is a pytree of [S, ...] arrays in the values'
    dtypes; `coverage` holds the denominators Σ w_c m_cj (`segment_sums`).
  """
  sums = segment_sums(values, weights, segment_ids, num_segments, masks,
                      values_masked=values_masked)
  return mean_of_sums(sums, values)


def mean_of_sums(sums: tuple[PyTree, PyTree], like: PyTree
                 ) -> tuple[PyTree, PyTree]:
  """(mean, coverage) from `segment_sums`'s (numerator, denominator).

  `mean` is their `ratio` in the dtypes of `like`'s leaves (the deltas, or
  the params they are deltas of); `coverage` is the denominator.
  """
  numerator, denominator = sums
  mean = jax.tree.map(lambda n, d, v: ratio(n, d).astype(v.dtype), numerator,
                      denominator, like)
  return mean, denominator


def masked_mean(values: PyTree, weights: jax.Array,
                masks: PyTree = None) -> PyTree:
  """`masked_segment_mean` with one global segment; leaves lose the S axis."""
  segment_ids = jnp.zeros(weights.shape[0], jnp.int32)
  mean, _ = masked_segment_mean(values, weights, segment_ids, 1, masks)
  return jax.tree.map(lambda x: x[0], mean)
