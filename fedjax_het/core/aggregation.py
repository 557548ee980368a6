"""The aggregation primitive: weighted, masked segment means over the client axis.

One function serves every method (DESIGN.md principle 5). For coordinate j of a
leaf and segment s (a capacity group, a cell, or the single global segment),

    mean[s, j] = Σ_{c: seg(c)=s} w_c m_cj Δ_cj / Σ_{c: seg(c)=s} w_c m_cj,

and 0 where no client of the segment covers j (the denominator, returned as
`coverage`, is 0 there). With m ≡ 1 and one segment this is the FedAvg weighted
mean; with per-coordinate masks it is the partial averaging of HeteroFL/FIARSE
(Eq. (6) of FIARSE uses counts, i.e. w ≡ 1); with disjoint masks it reassembles
the pieces (HIST Eq. 7).
"""
from typing import Any

import jax
import jax.numpy as jnp

PyTree = Any


def _expand(v: jax.Array, ndim: int) -> jax.Array:
  return v.reshape(v.shape + (1,) * (ndim - v.ndim))


def masked_segment_mean(values: PyTree, weights: jax.Array,
                        segment_ids: jax.Array, num_segments: int,
                        masks: PyTree = None) -> tuple[PyTree, PyTree]:
  """Per-segment, per-coordinate weighted mean over the client axis.

  Args:
    values: pytree of [C, ...] arrays (one row per client).
    weights: float [C] aggregation weights (0 excludes a client).
    segment_ids: int [C] in [0, num_segments).
    num_segments: static number of segments S.
    masks: pytree like `values` with 0/1 entries, or None (every client covers
      every coordinate).

  Returns:
    (mean, coverage): `mean` is a pytree of [S, ...] arrays; `coverage` holds
    the denominators Σ w_c m_cj, as [S, ...] leaves, or [S] per leaf when
    `masks` is None.
  """
  weights = weights.astype(jnp.float32)

  def segment_total(x):
    return jax.ops.segment_sum(x, segment_ids, num_segments=num_segments)

  def one_leaf(value, mask):
    w = _expand(weights, value.ndim)
    wm = w if mask is None else w * mask.astype(jnp.float32)
    numerator = segment_total(value.astype(jnp.float32) * wm)
    denominator = segment_total(wm if mask is not None else weights)
    den = _expand(denominator, numerator.ndim)
    covered = den > 0
    mean = jnp.where(covered, numerator / jnp.where(covered, den, 1.0), 0.0)
    return mean.astype(value.dtype), denominator

  if masks is None:
    pairs = jax.tree.map(lambda v: one_leaf(v, None), values)
  else:
    pairs = jax.tree.map(one_leaf, values, masks)
  is_pair = lambda x: isinstance(x, tuple)
  mean = jax.tree.map(lambda p: p[0], pairs, is_leaf=is_pair)
  coverage = jax.tree.map(lambda p: p[1], pairs, is_leaf=is_pair)
  return mean, coverage


def masked_mean(values: PyTree, weights: jax.Array,
                masks: PyTree = None) -> PyTree:
  """`masked_segment_mean` with one global segment; leaves lose the S axis."""
  segment_ids = jnp.zeros(weights.shape[0], jnp.int32)
  mean, _ = masked_segment_mean(values, weights, segment_ids, 1, masks)
  return jax.tree.map(lambda x: x[0], mean)
