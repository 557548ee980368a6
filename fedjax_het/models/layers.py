"""Building blocks shared by the models: initialised Dense/Conv, normalisation, pooling.

`dense` and `conv` create a standard `nn.Dense` / `nn.Conv` (parameters `kernel`, `bias`) with the
PyTorch-default init of `initializers.py`; they must be called inside an `@nn.compact` method,
whose module becomes the layer's parent.

Normalisation (`normalize`, choice `norm` in CNNs and ResNet):
* 'static_bn': `StaticBatchNorm`, the "static BN" of HeteroFL/FIARSE.
* 'group': `nn.GroupNorm` with `gcd(num_groups, channels)` groups; the default `num_groups=2`
  follows the GroupNorm ResNets of FL practice (Hsieh et al. 2020) and, through the gcd, stays
  valid for any width-scaled channel count.
* 'none': identity, no parameters.
Every norm module is named with 'norm' in its name; `registry.maskable_leaves` relies on this to
keep norm parameters out of submodel masks.
"""

import math
from typing import Any, Callable, Sequence, Union

import jax
import jax.numpy as jnp
from flax import linen as nn

from fedjax_het.models.initializers import torch_bias_init, torch_kernel_init

NORMS = ('static_bn', 'group', 'none')
# How convolutions are computed (`conv_impl` of every CNN): 'xla' is XLA's
# convolution op, 'im2col' patches + one matmul (`PatchConv`), 'auto' is
# im2col on CPU and XLA's op elsewhere (measurements in README "Speed").
CONV_IMPLS = ('auto', 'xla', 'im2col')

Padding = Union[str, int]


def dense(x: jax.Array, features: int, name: str) -> jax.Array:
  """[..., in] -> [..., features] Dense layer with bias and PyTorch-default init (fan_in = in)."""
  return nn.Dense(
      features,
      kernel_init=torch_kernel_init,
      bias_init=torch_bias_init(x.shape[-1]),
      name=name,
  )(x)


def resolve_conv_impl(impl: str) -> str:
  """'xla' or 'im2col' for a `conv_impl` choice; 'auto' reads the default backend.

  XLA:CPU's convolutions are slow inside loops (local steps in `lax.scan`,
  clients in `lax.map`) and vmapped convolutions become grouped convolutions
  (README, Speed); a matmul is fast everywhere, so on CPU 'auto' lowers
  convolutions to patches + matmul. GPUs and TPUs keep their native
  convolutions (cuDNN, the MXU's conv path), which need no patch buffer.
  """
  if impl not in CONV_IMPLS:
    raise ValueError(f'Unknown conv_impl {impl!r}; valid choices are {", ".join(CONV_IMPLS)}.')
  if impl == 'auto':
    return 'im2col' if jax.default_backend() == 'cpu' else 'xla'
  return impl


def extract_patches(x: jax.Array, kernel_size: tuple[int, int], strides: tuple[int, int],
                    pads: Sequence[tuple[int, int]]) -> jax.Array:
  """[N, H, W, C] -> [N, H', W', kh·kw·C] image patches, feature index (i·kw + j)·C + c.

  Built from kh·kw strided slices of the padded input, so neither the patches nor their
  gradient (pads and adds) contain a convolution op. The feature order matches a
  [kh, kw, C, O] kernel reshaped to [kh·kw·C, O].
  """
  (kh, kw), (sh, sw) = kernel_size, strides
  x = jnp.pad(x, ((0, 0), tuple(pads[0]), tuple(pads[1]), (0, 0)))
  out_h = (x.shape[1] - kh) // sh + 1
  out_w = (x.shape[2] - kw) // sw + 1
  slices = [
      x[:, i:i + sh * (out_h - 1) + 1:sh, j:j + sw * (out_w - 1) + 1:sw, :]
      for i in range(kh) for j in range(kw)
  ]
  return slices[0] if len(slices) == 1 else jnp.concatenate(slices, axis=-1)


class PatchConv(nn.Module):
  """`nn.Conv` (2-D, NHWC, no dilation or groups) as im2col: patches @ kernel.

  Same parameters as `nn.Conv` (`kernel` [kh, kw, C, O], `bias` [O]), same init
  and the same result up to float rounding, so checkpoints, masks and width
  layouts do not depend on the implementation.
  """

  features: int
  kernel_size: tuple[int, int]
  strides: tuple[int, int] = (1, 1)
  padding: Any = 'SAME'
  use_bias: bool = True
  kernel_init: Callable = nn.initializers.lecun_normal()
  bias_init: Callable = nn.initializers.zeros

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    kernel = self.param('kernel', self.kernel_init,
                        (*self.kernel_size, x.shape[-1], self.features), jnp.float32)
    if isinstance(self.padding, str):
      pads = jax.lax.padtype_to_pads(x.shape[1:3], self.kernel_size, self.strides, self.padding)
    else:
      pads = self.padding
    bias = (self.param('bias', self.bias_init, (self.features,), jnp.float32)
            if self.use_bias else None)
    x, kernel, bias = nn.dtypes.promote_dtype(x, kernel, bias)  # as nn.Conv
    patches = extract_patches(x, self.kernel_size, self.strides, pads)
    # One 2-D matmul: its weight gradient is then a plain [K, M] @ [M, O] GEMM.
    y = patches.reshape(-1, patches.shape[-1]) @ kernel.reshape(-1, self.features)
    y = y.reshape(*patches.shape[:-1], self.features)
    return y if bias is None else y + bias


def conv(
    x: jax.Array,
    features: int,
    kernel_size: int,
    name: str,
    strides: int = 1,
    padding: Padding = 'SAME',
    use_bias: bool = True,
    impl: str = 'auto',
) -> jax.Array:
  """[N, H, W, C] -> [N, H', W', features] square conv with PyTorch-default init.

  fan_in = kernel_size**2 * C. `padding` is 'SAME', 'VALID' or an int p (p zeros on every side,
  as PyTorch's `padding=p`). A 'VALID' conv on a map smaller than its kernel runs with 'SAME'
  padding instead, so spatial dims never collapse to 0 (e.g. LeNet-5 on 8x8 digits). `impl` is
  one of CONV_IMPLS: `nn.Conv` ('xla') or `PatchConv` ('im2col'), with identical parameters.
  """
  if padding == 'VALID' and min(x.shape[1:3]) < kernel_size:
    padding = 'SAME'
  if isinstance(padding, int):
    padding = ((padding, padding), (padding, padding))
  layer = nn.Conv if resolve_conv_impl(impl) == 'xla' else PatchConv
  return layer(
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
  """[N, H, W, C] -> [N, H//2, W//2, C] 2x2/stride-2 max-pool; an axis of size 1 stays 1.

  Computed as a max over a [N, H//2, 2, W//2, 2, C] reshape (an odd last row or column is
  dropped, as VALID pooling does) rather than `nn.max_pool`: the forward pass is identical, and
  the gradient is a cheap elementwise select instead of XLA's select-and-scatter, which cost 5 ms
  of a 14 ms simple_cnn step on CPU. The only difference is at exact ties inside a window, where
  the gradient is split among the tied entries instead of going to the first; after a ReLU the
  tied entries are zeros, whose ReLU gradient is 0 either way.
  """
  window_h, window_w = min(2, x.shape[1]), min(2, x.shape[2])
  n, h, w, c = x.shape
  out_h, out_w = h // window_h, w // window_w
  x = x[:, :out_h * window_h, :out_w * window_w]
  return x.reshape(n, out_h, window_h, out_w, window_w, c).max(axis=(2, 4))


class StaticBatchNorm(nn.Module):
  """Static batch norm: normalise with the current batch's statistics, always.

  [..., C] -> [..., C]. Per-channel mean and (biased) variance over every axis but the last
  ((N, H, W) for images), in training *and* evaluation; learnable `scale` (init 1) and `bias`
  (init 0); no running statistics and no mutable collections, so `apply` is pure. This is
  PyTorch's `BatchNorm2d(momentum=None, track_running_stats=False)` used by FIARSE's code and the
  sBN of HeteroFL/FedRolex. Each sample's output depends on the other
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
