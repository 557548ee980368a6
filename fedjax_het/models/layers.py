"""Building blocks shared by the models: initialised Dense/Conv, normalisation, pooling.

`dense` and `conv` create a standard `nn.Dense` / `nn.Conv` (parameters `kernel`, `bias`) with the
PyTorch-default init of `initializers.py`; they must be called inside an `@nn.compact` method,
whose module becomes the layer's parent.

Normalisation (`normalize`, choice `norm` in CNNs and ResNet):
* 'static_bn': `StaticBatchNorm`, the "static BN" of HeteroFL/FIARSE (specs/fiarse.md §3.3, §7.8).
* 'group': `nn.GroupNorm` with `gcd(num_groups, channels)` groups; the default `num_groups=2`
  follows the GroupNorm ResNets of FL practice (Hsieh et al. 2020) and, through the gcd, stays
  valid for any width-scaled channel count.
* 'none': identity, no parameters.
Every norm module is named with 'norm' in its name; `registry.maskable_leaves` relies on this to
keep norm parameters out of submodel masks.
"""

import math
from typing import Sequence, Union

import jax
import jax.numpy as jnp
from flax import linen as nn

from fedjax_het.models.initializers import torch_bias_init, torch_kernel_init

NORMS = ('static_bn', 'group', 'none')

Padding = Union[str, int]


def dense(x: jax.Array, features: int, name: str) -> jax.Array:
  """[..., in] -> [..., features] Dense layer with bias and PyTorch-default init (fan_in = in)."""
  return nn.Dense(
      features,
      kernel_init=torch_kernel_init,
      bias_init=torch_bias_init(x.shape[-1]),
      name=name,
  )(x)


def conv(
    x: jax.Array,
    features: int,
    kernel_size: int,
    name: str,
    strides: int = 1,
    padding: Padding = 'SAME',
    use_bias: bool = True,
) -> jax.Array:
  """[N, H, W, C] -> [N, H', W', features] square conv with PyTorch-default init.

  fan_in = kernel_size**2 * C. `padding` is 'SAME', 'VALID' or an int p (p zeros on every side,
  as PyTorch's `padding=p`). A 'VALID' conv on a map smaller than its kernel runs with 'SAME'
  padding instead, so spatial dims never collapse to 0 (e.g. LeNet-5 on 8x8 digits).
  """
  if padding == 'VALID' and min(x.shape[1:3]) < kernel_size:
    padding = 'SAME'
  if isinstance(padding, int):
    padding = ((padding, padding), (padding, padding))
  return nn.Conv(
      features,
      (kernel_size, kernel_size),
      strides=(strides, strides),
      padding=padding,
      use_bias=use_bias,
      kernel_init=torch_kernel_init,
      bias_init=torch_bias_init(kernel_size * kernel_size * x.shape[-1]),
      name=name,
  )(x)


def max_pool2(x: jax.Array) -> jax.Array:
  """[N, H, W, C] -> [N, H//2, W//2, C] 2x2/stride-2 max-pool; an axis of size 1 stays 1."""
  window = (min(2, x.shape[1]), min(2, x.shape[2]))
  return nn.max_pool(x, window, strides=(2, 2), padding='VALID')


class StaticBatchNorm(nn.Module):
  """Static batch norm: normalise with the current batch's statistics, always.

  [..., C] -> [..., C]. Per-channel mean and (biased) variance over every axis but the last
  ((N, H, W) for images), in training *and* evaluation; learnable `scale` (init 1) and `bias`
  (init 0); no running statistics and no mutable collections, so `apply` is pure. This is
  PyTorch's `BatchNorm2d(momentum=None, track_running_stats=False)` used by FIARSE's code and the
  sBN of HeteroFL/FedRolex (specs/fiarse.md §3.3, §7.8). Each sample's output depends on the other
  samples of its batch, including any padding rows.
  """

  epsilon: float = 1e-5

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    axes = tuple(range(x.ndim - 1))
    mean = jnp.mean(x, axis=axes)
    var = jnp.mean(jnp.square(x - mean), axis=axes)
    y = (x - mean) * jax.lax.rsqrt(var + self.epsilon)
    scale = self.param('scale', nn.initializers.ones, (x.shape[-1],), x.dtype)
    bias = self.param('bias', nn.initializers.zeros, (x.shape[-1],), x.dtype)
    return y * scale + bias


def normalize(x: jax.Array, norm: str, name: str, num_groups: int = 2) -> jax.Array:
  """Apply the normalisation `norm` (one of NORMS) as a submodule called `name` ([..., C] -> same)."""
  if norm == 'static_bn':
    return StaticBatchNorm(name=name)(x)
  if norm == 'group':
    return nn.GroupNorm(num_groups=math.gcd(num_groups, x.shape[-1]), epsilon=1e-5, name=name)(x)
  if norm == 'none':
    return x
  raise ValueError(f'Unknown norm {norm!r}; valid choices are {", ".join(NORMS)}.')


def flatten(x: jax.Array) -> jax.Array:
  """[N, ...] -> [N, prod(...)]."""
  return x.reshape(x.shape[0], -1)


def scaled_channels(channels: Sequence[int], width: float) -> tuple:
  """Channel counts times `width`, rounded to the nearest int and at least 1."""
  return tuple(max(1, int(round(c * width))) for c in channels)
