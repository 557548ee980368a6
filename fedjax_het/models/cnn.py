"""Small convolutional networks: LeNet-5, pfl-research's "simple_cnn" and LEAF's CelebA CNN."""

import jax
import jax.numpy as jnp
from flax import linen as nn

from fedjax_het.models.layers import conv, dense, flatten, max_pool2, normalize

# LeNet-5 conv paddings (conv1, conv2) by name.
LENET_PADDINGS = {
    'classic': ('SAME', 'VALID'),
    'valid': ('VALID', 'VALID'),
    'same': ('SAME', 'SAME'),
}


class LeNet5(nn.Module):
  """LeNet-5: NHWC images -> logits [N, num_classes].

  conv5x5(6) - [norm] - relu - maxpool2 - conv5x5(16) - [norm] - relu - maxpool2 - flatten -
  fc1(120) - relu - fc2(84) - relu - head(num_classes).

  `padding` picks the conv paddings:
  * 'classic' (default): SAME then VALID, the classic MNIST LeNet. On 28x28x1: 28-28-14-10-5,
    flatten 400, 61,706 params = conv 2,572 + FC 59,134, the counts in the HIST paper [L474].
  * 'valid': VALID twice, HIST's code. On 28x28x1: 28-24-12-8-4, flatten 256, 44,426 params
    = 0.169 MiB, the size HIST reports. HIST partitions fc1's outputs.
  * 'same': SAME twice.
  A VALID conv on a map smaller than 5x5 runs with SAME padding and pooling keeps size-1 axes,
  so every padding works on 8x8 digits (classic: 8-8-4-4-2, flatten 64).
  `norm` ('none', 'static_bn' or 'group') is applied after each conv. `conv_impl`
  (layers.CONV_IMPLS) picks XLA's convolutions or im2col matmuls, with the same parameters.

  `exits=True` adds ScaleFL's early exits after the three first stages (conv1 block, conv2 block,
  fc1): `exit1` and `exit2` are global average pool + Dense on the pooled conv maps, `exit3` a
  Dense on fc1's activations; the fourth exit is `head`. `apply` then returns the logits of all
  four exits stacked [4, N, num_classes], deepest last. The exits add (6 + 16 + 120)·classes +
  3·classes params: 1,450 for 10 classes (63,156 on 28x28x1 classic). Parameters are created in
  forward order, which `fedjax_het.methods.fiarse.scalefl` reads to tell which exit each layer feeds.
  """

  num_classes: int
  padding: str = 'classic'
  norm: str = 'none'
  num_groups: int = 2
  exits: bool = False
  conv_impl: str = 'auto'

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    del train  # Norms use batch statistics in both modes; there is no dropout.
    if self.padding not in LENET_PADDINGS:
      raise ValueError(
          f'Unknown LeNet5 padding {self.padding!r}; valid choices are '
          f'{", ".join(LENET_PADDINGS)}.')
    pad1, pad2 = LENET_PADDINGS[self.padding]
    early_logits = []

    def early_exit(features: jax.Array, name: str) -> None:
      if self.exits:
        pooled = jnp.mean(features, axis=(1, 2)) if features.ndim == 4 else features
        early_logits.append(dense(pooled, self.num_classes, name=name))

    x = conv(x, 6, 5, name='conv1', padding=pad1, impl=self.conv_impl)
    x = max_pool2(nn.relu(normalize(x, self.norm, 'norm1', self.num_groups)))
    early_exit(x, 'exit1')
    x = conv(x, 16, 5, name='conv2', padding=pad2, impl=self.conv_impl)
    x = max_pool2(nn.relu(normalize(x, self.norm, 'norm2', self.num_groups)))
    early_exit(x, 'exit2')
    x = nn.relu(dense(flatten(x), 120, name='fc1'))
    early_exit(x, 'exit3')
    x = nn.relu(dense(x, 84, name='fc2'))
    logits = dense(x, self.num_classes, name='head')
    return jnp.stack([*early_logits, logits]) if self.exits else logits


class SimpleCNN(nn.Module):
  """pfl-research's "simple_cnn": NHWC images -> logits [N, num_classes].

  conv3x3(32) - [norm] - relu - conv3x3(64) - [norm] - relu - maxpool2 - flatten - fc1(128) - relu -
  head(num_classes), VALID convs. pfl-research's dropout layers are omitted so `apply` needs no rng.
  * 32x32x3, 10 classes: 32-30-28-14, flatten 12,544, 1,626,442 params (fc1 has 1,605,760).
  * 28x28x1, 62 classes: the EMNIST CNN of Reddi et al. used by CSE-FSL on F-EMNIST:
    convs 18,816 (client part x_c) + FC 1,187,774 (server part x_s)
    = 1,206,590 params.
  * 8x8x1: 8-6-4-2, flatten 256.
  `norm` ('none', 'static_bn' or 'group') is applied after each conv; `conv_impl` as LeNet5's.
  """

  num_classes: int
  norm: str = 'none'
  num_groups: int = 2
  conv_impl: str = 'auto'

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    del train  # Norms use batch statistics in both modes; there is no dropout.
    x = conv(x, 32, 3, name='conv1', padding='VALID', impl=self.conv_impl)
    x = nn.relu(normalize(x, self.norm, 'norm1', self.num_groups))
    x = conv(x, 64, 3, name='conv2', padding='VALID', impl=self.conv_impl)
    x = nn.relu(normalize(x, self.norm, 'norm2', self.num_groups))
    x = flatten(max_pool2(x))
    x = nn.relu(dense(x, 128, name='fc1'))
    return dense(x, self.num_classes, name='head')


class LeafCNN(nn.Module):
  """LEAF's CelebA CNN (Caldas et al. 2018; models/celeba/cnn.py): NHWC images -> logits
  [N, num_classes].

  `blocks` x (conv3x3(channels), SAME - norm - maxpool2, SAME - relu) - flatten - head. LEAF:
  4 blocks of 32, TF batch norm with `training=True` (batch statistics in training and
  evaluation: `static_bn`, the default here), and 'same' pooling, which keeps an odd row and
  column: on 84x84x3, 84-42-21-11-6, flatten 1,152, 31,202 params for 2 classes. The
  initialisation is this package's (PyTorch's defaults, `layers`), LEAF's TensorFlow's (Glorot
  uniform kernels, zero biases), and the norm's epsilon 1e-5 (TF's 1e-3).
  """

  num_classes: int
  blocks: int = 4
  channels: int = 32
  norm: str = 'static_bn'
  num_groups: int = 2
  conv_impl: str = 'auto'

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    del train  # Norms use batch statistics in both modes; there is no dropout.
    for i in range(1, self.blocks + 1):
      x = conv(x, self.channels, 3, name=f'conv{i}', impl=self.conv_impl)
      x = normalize(x, self.norm, f'norm{i}', self.num_groups)
      x = nn.relu(max_pool2(_pad_to_even(x)))
    return dense(flatten(x), self.num_classes, name='head')


def _pad_to_even(x: jax.Array) -> jax.Array:
  """[N, H, W, C] -> [N, H + H % 2, W + W % 2, C], an odd last row or column repeated, so the
  2x2 max-pool that follows is TF's 'same' pooling (its padding never wins the max)."""
  return jnp.pad(x, ((0, 0), (0, x.shape[1] % 2), (0, x.shape[2] % 2), (0, 0)), mode='edge')
