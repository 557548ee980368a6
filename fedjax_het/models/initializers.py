"""PyTorch-default initialisation for every Dense and Conv in `fedjax_het.models`.

FIARSE selects parameters by magnitude (top-k of |x|). A parameter that starts at exactly 0, such
as Flax's default zero bias, sits below every positive threshold: under TCB-GD it gets a zero
gradient and is never selected. The reference code relies on PyTorch's
defaults, so every layer here uses them:

* kernel ~ U(-1/sqrt(fan_in), +1/sqrt(fan_in))  (``kaiming_uniform_(a=sqrt(5))``);
* bias   ~ U(-1/sqrt(fan_in), +1/sqrt(fan_in))  (non-zero, unlike Flax's default);

where fan_in = kh * kw * in_channels for a conv and in_features for a dense layer.

`jax.random.uniform(minval=-b, maxval=b)` returns exactly 0 with probability 2**-23 per element
(about one zero per 8M parameters, so a ResNet-18 usually has one). The sampler below draws from a
symmetric grid that excludes 0, so no kernel or bias is ever exactly zero at init.
"""

import functools
import math

import jax
import jax.numpy as jnp
from flax import linen as nn

_MANTISSA_BITS = 23


# Jitted so that eager (un-jitted) init compiles one program per shape instead of one per op.
@functools.partial(jax.jit, static_argnames=('shape', 'dtype'))
def _nonzero_uniform(key: jax.Array, shape, dtype, bound: float) -> jax.Array:
  """U(-bound, bound) on the grid bound * ((2k + 1) / 2**23 - 1), k < 2**23; never exactly 0."""
  k = jax.random.bits(key, shape, jnp.uint32) >> (32 - _MANTISSA_BITS)
  # 2k + 1 < 2**24 is exact in float32, and it is odd, so it never equals 2**23.
  centred = (2 * k + 1).astype(jnp.float32) * (2.0**-_MANTISSA_BITS) - 1.0
  return (bound * centred).astype(dtype)


def uniform_bound(fan_in: int) -> float:
  """Half-width 1/sqrt(fan_in) of PyTorch's default uniform init."""
  return 1.0 / math.sqrt(fan_in)


def torch_kernel_init(key: jax.Array, shape, dtype=jnp.float32) -> jax.Array:
  """Kernel initialiser U(±1/sqrt(fan_in)) for Flax kernels of shape (..., in, out).

  fan_in is the product of all axes but the last: in_features for Dense (in, out) and
  kh * kw * in_channels for Conv (kh, kw, in, out).
  """
  return _nonzero_uniform(key, tuple(shape), dtype, uniform_bound(math.prod(shape[:-1])))


def torch_bias_init(fan_in: int) -> nn.initializers.Initializer:
  """Bias initialiser U(±1/sqrt(fan_in)); `fan_in` is that of the layer's kernel."""
  bound = uniform_bound(fan_in)

  def init(key: jax.Array, shape, dtype=jnp.float32) -> jax.Array:
    return _nonzero_uniform(key, tuple(shape), dtype, bound)

  return init
