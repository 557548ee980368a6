"""HIST's disjoint submodels: hidden neurons split among N cells, as masks.

HIST (Fang, Han & Brinton) trains, in every global round,
N submodels that cover the global model without overlap (Eq. (3):
p_j ⊙ p_j' = 0, Σ_j p_j = 1). The unit of partitioning is a hidden neuron of a
fully connected layer: neuron u of a partitioned hidden layer owns

    column u of the kernel that produces the layer, its bias entry, and
    row u of the kernel that consumes the layer,

so cell j's submodel is the network restricted to the neurons it holds.
Following the paper's rule for deep stacks ("partition only the hidden
neurons every two layers", Appendix B) the 1st, 3rd, 5th, ... hidden layers of
the fully connected stack are partitioned; the others, the output bias and
all convolutions are **shared**: every cell trains them and the cloud averages
them (our reading; the paper's Eq. (7) sum covers only disjoint pieces).
The FCNN 784-300-10 thus splits its 300 hidden neurons (each with 784 + 1 +
10 = 795 parameters; only the 10 output biases are shared), LeNet-5 splits
the 120 neurons of fc1 (fc2's 84 neurons and the convs are shared) and a CNN
splits its first fully connected layer.

A partition is a random permutation of each partitioned layer's neurons cut
into N consecutive chunks (the authors' `partition_to_list`). Uniform chunks
are `[K//N]*(N-1) + [K - (N-1)*(K//N)]` neurons, as in their code; optimised
sizes (`fedjax_het.systems.partition_sizing`) give the chunk lengths of one
partitioned layer. Everything is jit-able, and sizes may be traced.

Masks are bool pytrees like the params (shared leaves all True), the engine's
one mechanism for submodels.
"""
import dataclasses
from typing import Any, Sequence

import flax
import jax
import jax.numpy as jnp
import numpy as np

PyTree = Any


@dataclasses.dataclass(frozen=True)
class NeuronGroup:
  """One partitioned hidden layer of the fully connected stack.

  Attributes:
    producer: path of the Dense layer whose outputs are the neurons.
    consumer: path of the Dense layer that reads them.
    num_units: K, the number of neurons.
    unit_params: parameters one neuron owns (producer fan-in + bias +
      consumer fan-out).
  """
  producer: tuple
  consumer: tuple
  num_units: int
  unit_params: int


@dataclasses.dataclass(frozen=True)
class PartitionLayout:
  """Which parameters HIST partitions, for one parameter structure.

  Attributes:
    groups: the partitioned hidden layers, in forward order.
    total_params: d, every parameter of the model.
    shared_params: parameters every cell trains (convs, unpartitioned layers,
      output bias): d − Σ_groups K·unit_params.
  """
  groups: tuple
  total_params: int
  shared_params: int

  @property
  def num_units(self) -> int:
    """Neurons of the first partitioned layer (the unit of sizing)."""
    return self.groups[0].num_units


def _dense_layers(params: PyTree) -> list[tuple]:
  """Paths of Dense layers (a 2-D `kernel`), in the params' creation order."""
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(params))
  return [path[:-1] for path, leaf in flat.items()
          if path[-1] == 'kernel' and np.ndim(leaf) == 2]


def partition_layout(params: PyTree) -> PartitionLayout:
  """The partitioned neuron groups of `params` (host; shapes only).

  The Dense layers must form one chain in the params' order (each kernel's
  input size equal to the previous one's output size), which holds for the
  package's MLP, LeNet-5 and CNNs in creation order, the order `model.init`
  returns. Jax transformations return dicts with sorted keys, which keeps
  that order unless layer names sort differently (fc10 before fc2);
  `models.parameter_shapes` gets shapes in creation order.

  Raises:
    ValueError: when the model has no hidden fully connected layer.
  """
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(params))
  dense = _dense_layers(params)
  shapes = [np.shape(flat[path + ('kernel',)]) for path in dense]
  for (prev, shape, path) in zip(shapes, shapes[1:], dense[1:]):
    if prev[1] != shape[0]:
      raise ValueError(
          f'the fully connected layers do not form a chain ({"/".join(path)} '
          f'reads {shape[0]} features after a layer of {prev[1]}), so HIST '
          'cannot tell which neurons are hidden.')
  if len(dense) < 2:
    raise ValueError('HIST partitions the hidden neurons of fully connected '
                     'layers, and this model has no hidden fully connected '
                     'layer.')
  groups = []
  for layer in range(0, len(dense) - 1, 2):  # every two hidden layers
    producer, consumer = dense[layer], dense[layer + 1]
    fan_in, units = shapes[layer]
    has_bias = producer + ('bias',) in flat
    groups.append(NeuronGroup(producer, consumer, int(units),
                              int(fan_in + has_bias + shapes[layer + 1][1])))
  total = int(sum(np.size(leaf) for leaf in flat.values()))
  partitioned = sum(g.num_units * g.unit_params for g in groups)
  return PartitionLayout(tuple(groups), total, total - partitioned)


def uniform_sizes(num_units: int, num_parts: int) -> np.ndarray:
  """The authors' chunk sizes: K//N neurons each, the rest to the last part."""
  if not 1 <= num_parts <= num_units:
    raise ValueError(f'cannot split {num_units} hidden neurons into '
                     f'{num_parts} non-empty parts; use at most {num_units} '
                     'cells.')
  sizes = np.full(num_parts, num_units // num_parts, np.int32)
  sizes[-1] = num_units - (num_parts - 1) * (num_units // num_parts)
  return sizes


def unit_owners(key: jax.Array, num_units: int, sizes: jax.Array) -> jax.Array:
  """Part of each neuron: a random permutation cut into chunks of `sizes`.

  Args:
    key: PRNG key of this partition.
    num_units: K (static).
    sizes: int [N] chunk lengths summing to K (may be traced).

  Returns:
    int32 [K]: the part (0..N-1) that owns each neuron.
  """
  rank_part = jnp.searchsorted(jnp.cumsum(sizes), jnp.arange(num_units),
                               side='right').astype(jnp.int32)
  order = jax.random.permutation(key, num_units)
  return jnp.zeros(num_units, jnp.int32).at[order].set(rank_part)


def stacked_partition(key: jax.Array, params: PyTree, num_parts: int,
                      sizes: jax.Array | None = None,
                      layout: PartitionLayout | None = None) -> PyTree:
  """All N masks at once: a pytree like `params` with bool [N, ...] leaves.

  Args:
    key: PRNG key (each partitioned layer folds in its index).
    params: the global parameters (only structure and shapes are read).
    num_parts: N, static.
    sizes: int [N] neurons per part for the (single) partitioned layer, or
      None for the uniform sizes of every partitioned layer.
    layout: `partition_layout(params)`, when already known.
  """
  layout = layout or partition_layout(params)
  if sizes is not None and len(layout.groups) != 1:
    raise ValueError('partition sizes can be given for a model with one '
                     f'partitioned hidden layer, this one has '
                     f'{len(layout.groups)}.')
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(params))
  masks = {path: jnp.ones((num_parts,) + np.shape(leaf), bool)
           for path, leaf in flat.items()}
  parts = jnp.arange(num_parts, dtype=jnp.int32)
  for index, group in enumerate(layout.groups):
    group_sizes = (uniform_sizes(group.num_units, num_parts)
                   if sizes is None else sizes)
    owner = unit_owners(jax.random.fold_in(key, index), group.num_units,
                        jnp.asarray(group_sizes))
    owns = owner[None, :] == parts[:, None]  # [N, K]
    masks[group.producer + ('kernel',)] = jnp.broadcast_to(
        owns[:, None, :], masks[group.producer + ('kernel',)].shape)
    if group.producer + ('bias',) in masks:
      masks[group.producer + ('bias',)] = owns
    masks[group.consumer + ('kernel',)] = jnp.broadcast_to(
        owns[:, :, None], masks[group.consumer + ('kernel',)].shape)
  unflat = flax.traverse_util.unflatten_dict(masks)
  return jax.tree.map(lambda _, m: m, params, unflat)


def disjoint_partition(key: jax.Array, params: PyTree, num_parts: int,
                       sizes: Sequence[int] | jax.Array | None = None
                       ) -> list[PyTree]:
  """HIST's N disjoint submodel masks of `params` for one global round.

  Every partitioned parameter (a hidden neuron's incoming weights, bias and
  outgoing weights, see the module docstring) is True in exactly one mask;
  shared parameters are True in all of them.

  Args:
    key: PRNG key of the round's partition.
    params: the global parameters (structure and shapes).
    num_parts: N ≥ 1, at most the neurons of the smallest partitioned layer.
    sizes: neurons per part for a model with one partitioned layer (N
      positive ints summing to its K), or None for uniform sizes.

  Returns:
    A list of `num_parts` bool mask pytrees shaped like `params`.
  """
  layout = partition_layout(params)
  for group in layout.groups:
    uniform_sizes(group.num_units, num_parts)  # validates N
  if isinstance(sizes, (list, tuple, np.ndarray)):  # concrete: check here
    check_sizes(sizes, num_parts, layout.num_units)
  stacked = _jitted_partition(key, params, num_parts,
                              None if sizes is None else jnp.asarray(sizes),
                              layout)
  return [jax.tree.map(lambda m, j=j: m[j], stacked) for j in range(num_parts)]


def check_sizes(sizes: Sequence[int], num_parts: int, num_units: int) -> None:
  """Raises ValueError unless `sizes` are N positive ints summing to K."""
  sizes = np.asarray(sizes)
  if (sizes.shape != (num_parts,) or not np.issubdtype(sizes.dtype, np.integer)
      or sizes.min() < 1 or sizes.sum() != num_units):
    raise ValueError(f'partition sizes must be {num_parts} positive integers '
                     f'summing to the {num_units} hidden neurons, got '
                     f'{sizes.tolist()}.')


_jitted_partition = jax.jit(stacked_partition, static_argnums=(2, 4))
