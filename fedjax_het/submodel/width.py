"""Width submodels: channel windows of every hidden layer, as masks.

HeteroFL, FedRolex and FjORD train the sub-network made of a window of
⌈r·C⌉ channels of every hidden layer with C channels (r is the width ratio).
On the engine's mechanism that sub-network is a mask over the full model's
parameters: a kernel entry is kept when both its input and its output channel
are in their windows, a bias or norm entry when its channel is. The masked
full model computes exactly what the sliced model computes (inputs from
dropped channels meet zero weights; a dropped conv channel is zero before a
static-BN or no norm; with GroupNorm the zeros change group statistics, so use
'static_bn' or 'none' for exact width submodels).

The window of an axis with C channels, width r and offset t is

    {c : (c + t) mod C < ⌈r·C⌉},

the first ⌈rC⌉ channels for t = 0 (HeteroFL, FjORD) and the rolling window
{(j − t) mod C : j < ⌈rC⌉} of FedRolex round t. Because the window depends
only on C, r and t, layers tied by residual connections (same C) get the same
window. Image channels (the first layer's input) and classes (the outputs of
`head` and `exit*` layers) are never sliced. A Dense layer fed by a flattened
NHWC feature map of C channels slices its input features by channel
(feature i belongs to channel i mod C).
"""
import dataclasses
import math
from typing import Any, Sequence

import flax
import jax
import jax.numpy as jnp

PyTree = Any
# Relative slack in ⌈r·C⌉ so that e.g. r = 0.2 (a float32 √0.04) keeps 0.2·C.
_CEIL_SLACK = 1e-4


@dataclasses.dataclass(frozen=True)
class Axis:
  """How one axis of a parameter is sliced.

  kind: 'full' (never sliced), 'channel' (C channels), or 'flat' (flattened
  NHWC features whose channel is index mod C).
  """
  kind: str
  size: int
  channels: int = 0


@dataclasses.dataclass(frozen=True)
class LeafLayout:
  """Slicing of one parameter leaf: one `Axis` per array axis.

  `hidden_layer` marks the kernel and bias of a layer whose outputs are
  sliced (HeteroFL's Scaler divides those outputs by r in training).
  """
  axes: tuple
  hidden_layer: bool


def _is_output_layer(module: str) -> bool:
  return module == 'head' or module.startswith('exit')


def channel_layout(model, input_shape: Sequence[int],
                   key: jax.Array | None = None) -> PyTree:
  """The `LeafLayout` of every parameter of `model` (a pytree like its params).

  The rule reads the parameters in creation order (the forward order of
  `@nn.compact` modules, kept by `model.init`), so the first kernel is the
  input layer and a Dense kernel whose input is a multiple of the previous
  layer's channels reads a flattened feature map.
  """
  key = jax.random.PRNGKey(0) if key is None else key
  params = model.init(key, jnp.zeros((1, *input_shape), jnp.float32))['params']
  flat = flax.traverse_util.flatten_dict(params)
  layout = {}
  previous_out = None
  for path, leaf in flat.items():
    name = path[-1]
    is_norm = any('norm' in p.lower() for p in path[:-1])
    output_layer = any(_is_output_layer(p) for p in path[:-1])
    if is_norm or (name == 'bias' and leaf.ndim == 1):
      kind = 'full' if output_layer and not is_norm else 'channel'
      layout[path] = LeafLayout((Axis(kind, leaf.shape[0], leaf.shape[0]),),
                                hidden_layer=not is_norm and not output_layer)
      continue
    if name != 'kernel' or leaf.ndim < 2:
      layout[path] = LeafLayout(tuple(Axis('full', n) for n in leaf.shape),
                                hidden_layer=False)
      continue
    fan_in, fan_out = leaf.shape[-2], leaf.shape[-1]
    if previous_out is None:
      in_axis = Axis('full', fan_in)
    elif (leaf.ndim == 2 and fan_in != previous_out and
          fan_in % previous_out == 0):
      in_axis = Axis('flat', fan_in, previous_out)
    else:
      in_axis = Axis('channel', fan_in, fan_in)
    out_axis = (Axis('full', fan_out) if output_layer
                else Axis('channel', fan_out, fan_out))
    spatial = tuple(Axis('full', n) for n in leaf.shape[:-2])
    layout[path] = LeafLayout(spatial + (in_axis, out_axis),
                              hidden_layer=not output_layer)
    if not output_layer:  # an early exit's classes feed no later layer
      previous_out = fan_out
  return flax.traverse_util.unflatten_dict(layout)


def window_size(rate, channels: int):
  """⌈r·C⌉ channels, at least 1 (a traced rate gives a traced size)."""
  if isinstance(rate, (int, float)):
    return min(channels, max(1, math.ceil(rate * channels * (1 - _CEIL_SLACK))))
  k = jnp.ceil(rate * channels * (1 - _CEIL_SLACK))
  return jnp.clip(k, 1, channels)


def channel_window(channels: int, rate, offset=0) -> jax.Array:
  """bool [C]: channels {c : (c + offset) mod C < ⌈rate·C⌉}."""
  position = (jnp.arange(channels) + offset) % channels
  return position < window_size(rate, channels)


def _axis_keep(axis: Axis, rate, offset) -> jax.Array:
  if axis.kind == 'full':
    return jnp.ones((axis.size,), bool)
  window = channel_window(axis.channels, rate, offset)
  if axis.kind == 'flat':
    return window[jnp.arange(axis.size) % axis.channels]
  return window


def width_mask(layout: PyTree, rate, offset=0) -> PyTree:
  """Mask (bool leaves like the params) of the width-`rate` window at `offset`.

  `rate` and `offset` may be traced scalars (per-client values under vmap).
  """

  def leaf_mask(leaf: LeafLayout):
    mask = jnp.ones((), bool)
    for i, axis in enumerate(leaf.axes):
      keep = _axis_keep(axis, rate, offset)
      shape = [1] * len(leaf.axes)
      shape[i] = axis.size
      mask = mask & keep.reshape(shape)
    return mask

  return jax.tree.map(leaf_mask, layout, is_leaf=_is_layout)


def hidden_output_scale(layout: PyTree, rate) -> PyTree:
  """HeteroFL's Scaler: 1/r for kernels and biases of hidden layers, else 1.

  Scaling a layer's weights and bias by 1/r scales its outputs by 1/r, the
  training-time `Scaler` of HeteroFL/FedRolex.
  """
  inverse = 1.0 / jnp.asarray(rate, jnp.float32)
  return jax.tree.map(
      lambda leaf: inverse if leaf.hidden_layer else jnp.ones((), jnp.float32),
      layout, is_leaf=_is_layout)


def _is_layout(x) -> bool:
  return isinstance(x, LeafLayout)


def kept_fraction(layout: PyTree, rate: float) -> float:
  """Fraction of all parameters in the width-`rate` submodel (host, exact)."""
  kept = total = 0
  for leaf in jax.tree.leaves(layout, is_leaf=_is_layout):
    count = 1
    for axis in leaf.axes:
      if axis.kind == 'full':
        count *= axis.size
      else:
        k = window_size(float(rate), axis.channels)
        count *= k if axis.kind == 'channel' else axis.size // axis.channels * k
    kept += count
    total += math.prod(a.size for a in leaf.axes)
  return kept / total


def width_for_capacity(layout: PyTree, gamma: float, rule: str = 'sqrt'
                       ) -> float:
  """Width ratio r of capacity γ.

  'sqrt': r = √γ (conv parameters scale as r², so the
  submodel holds ≈ γ of them; the capacity sets {1/64, 1/16, 1/4, 1} and
  {0.04, …, 1} are the squares of {1/8, …, 1} and {0.2, …, 1}).
  'params': the largest r whose submodel holds at most a γ fraction of the
  parameters (exact for models where r² is a poor estimate, e.g. MLPs whose
  input layer dominates); at least the narrowest one-channel model.
  """
  if rule == 'sqrt':
    return math.sqrt(gamma)
  if rule != 'params':
    raise ValueError(f"unknown width rule {rule!r}; choose 'sqrt' or 'params'.")
  if gamma >= 1:
    return 1.0
  low, high = 0.0, 1.0
  for _ in range(40):
    mid = (low + high) / 2
    if kept_fraction(layout, mid) <= gamma:
      low = mid
    else:
      high = mid
  # Just inside the breakpoint, so a float32 copy of r keeps the same windows.
  return max(low * (1 - 1e-6), 1e-6)
