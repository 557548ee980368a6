"""Structured units: the segments a structured-pruning method masks and aggregates.

A structured model (e.g. `models.vit.ViT`) names, for every parameter leaf, the
segment group it belongs to and which of its axes index segments of that group
(`UnitSpec`). A leaf of shape [L, D, 3, H, hd] whose axes 0 and 3 index the
group 'blocks/heads' holds L·H segments (one per block and head, Co-S²P's MSA
head); the entries of a segment are all other axes. Several leaves may feed
one group (a head's q/k/v kernel rows and their biases), so per-segment
quantities are sums over the group's leaves:

    unit_sums(tree, specs)            -> {group: [*segment_shape]}  Σ over a segment's entries
    unit_broadcast(values, specs)     -> a tree like `specs`, each leaf reading its segment's value

The aggregation of Co-S²P (Eqs. 4–5) and its per-segment holder sets are
written with these two maps, so they hold for any model that declares specs.
"""
import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

PyTree = Any


@dataclasses.dataclass(frozen=True)
class UnitSpec:
  """Which segments a leaf's entries belong to.

  Attributes:
    group: name of the segment group (e.g. 'blocks/fc1').
    axes: the leaf's axes that index the group's segments, in the order of
      the group's segment shape (e.g. (0, 2): block, row of a [L, D, M]
      kernel). `()` makes the whole leaf one segment.
    shape: the leaf's shape.
  """
  group: str
  axes: tuple[int, ...]
  shape: tuple[int, ...]

  @property
  def segment_shape(self) -> tuple[int, ...]:
    return tuple(self.shape[a] for a in self.axes)

  def reduce(self, leaf: jax.Array) -> jax.Array:
    """Σ of `leaf` over each segment's entries: [*segment_shape]."""
    other = tuple(a for a in range(len(self.shape)) if a not in self.axes)
    total = jnp.sum(leaf, axis=other)
    # jnp.sum keeps the kept axes in their original order, already sorted.
    order = sorted(self.axes)
    return jnp.transpose(total, [order.index(a) for a in self.axes])

  def expand(self, values: jax.Array) -> jax.Array:
    """`values` [*segment_shape] broadcast to the leaf's shape."""
    order = sorted(self.axes)
    values = jnp.transpose(values, [self.axes.index(a) for a in order])
    shape = [self.shape[a] if a in self.axes else 1
             for a in range(len(self.shape))]
    return jnp.broadcast_to(values.reshape(shape), self.shape)


def _is_spec(x) -> bool:
  return isinstance(x, UnitSpec)


def group_shapes(specs: PyTree) -> dict[str, tuple[int, ...]]:
  """{group: segment shape}; checks every leaf of a group agrees."""
  shapes = {}
  for spec in jax.tree.leaves(specs, is_leaf=_is_spec):
    shape = shapes.setdefault(spec.group, spec.segment_shape)
    if shape != spec.segment_shape:
      raise ValueError(f'segment group {spec.group!r} has leaves with segment '
                       f'shapes {shape} and {spec.segment_shape}.')
  return shapes


def unit_sums(tree: PyTree, specs: PyTree,
              transform: Callable[[jax.Array], jax.Array] | None = None
              ) -> dict[str, jax.Array]:
  """{group: Σ over each segment's entries of transform(leaf)} ([*segment_shape]).

  E.g. `unit_sums(delta, specs, jnp.abs)` is every segment's ‖Δ^i‖₁ and
  `unit_sums(ones, specs)` its size.
  """
  totals = {}
  leaves = jax.tree.leaves(tree)
  spec_leaves = jax.tree.leaves(specs, is_leaf=_is_spec)
  if len(leaves) != len(spec_leaves):
    raise ValueError(f'the tree has {len(leaves)} leaves, the specs '
                     f'{len(spec_leaves)}.')
  for leaf, spec in zip(leaves, spec_leaves):
    value = spec.reduce(leaf if transform is None else transform(leaf))
    totals[spec.group] = totals[spec.group] + value if (
        spec.group in totals) else value
  return totals


def segment_sizes(specs: PyTree) -> dict[str, jax.Array]:
  """{group: entries per segment} (float32 [*segment_shape])."""
  ones = jax.tree.map(lambda s: jnp.ones(s.shape, jnp.float32), specs,
                      is_leaf=_is_spec)
  return unit_sums(ones, specs)


def unit_broadcast(values: dict[str, jax.Array], specs: PyTree) -> PyTree:
  """A tree like `specs` whose leaf entries read their segment's value.

  `values[group]` has the group's segment shape, or extra leading axes (e.g.
  a client axis [K, *segment_shape] gives leaves [K, *leaf_shape]).
  """
  def leaf(spec):
    value = values[spec.group]
    lead = value.shape[:value.ndim - len(spec.axes)]
    return jax.vmap(spec.expand)(value.reshape((-1,) + spec.segment_shape)
                                 ).reshape(lead + spec.shape)
  return jax.tree.map(leaf, specs, is_leaf=_is_spec)
