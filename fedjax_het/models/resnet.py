"""Width-scalable CIFAR ResNet-18 (FIARSE and its baselines HeteroFL, FedRolex, ScaleFL)."""

import jax
import jax.numpy as jnp
from flax import linen as nn

from fedjax_het.models.layers import conv, dense, normalize, scaled_channels

RESNET18_CHANNELS = (64, 128, 256, 512)
RESNET18_STRIDES = (1, 2, 2, 2)
RESNET18_BLOCKS = (2, 2, 2, 2)


class BasicBlock(nn.Module):
  """ResNet basic block: [N, H, W, C] -> [N, H/strides, W/strides, features].

  conv3x3(strides) - norm1 - relu - conv3x3 - norm2, plus the shortcut (identity, or
  shortcut_conv 1x1(strides) - shortcut_norm when the shape changes), then relu. Convs have no
  bias and PyTorch padding (1 for 3x3, 0 for 1x1), so both paths sample the same positions.
  """

  features: int
  strides: int
  norm: str
  num_groups: int
  conv_impl: str = 'auto'

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    y = conv(x, self.features, 3, 'conv1', self.strides, padding=1, use_bias=False,
             impl=self.conv_impl)
    y = nn.relu(normalize(y, self.norm, 'norm1', self.num_groups))
    y = conv(y, self.features, 3, 'conv2', 1, padding=1, use_bias=False,
             impl=self.conv_impl)
    y = normalize(y, self.norm, 'norm2', self.num_groups)
    if self.strides != 1 or x.shape[-1] != self.features:
      x = conv(x, self.features, 1, 'shortcut_conv', self.strides, padding=0, use_bias=False,
               impl=self.conv_impl)
      x = normalize(x, self.norm, 'shortcut_norm', self.num_groups)
    return nn.relu(y + x)


class ResNet18(nn.Module):
  """CIFAR ResNet-18: NHWC images -> logits [N, num_classes].

  stem_conv 3x3(64, stride 1, no bias) - stem_norm - relu (no max-pool); 4 stages of 2 BasicBlocks
  (stage{s}_block{b}) with 64, 128, 256, 512 channels and strides 1, 2, 2, 2; global average pool;
  `head` Dense with bias. Channel counts are multiplied by `width` (rounded, at least 1), as in
  HeteroFL/FedRolex width submodels. `norm` is 'static_bn' (FIARSE's static BN: batch statistics
  in training and evaluation), 'group' (GroupNorm, gcd(num_groups, channels) groups) or 'none'.
  Params at width 1, 10 classes: 11,173,962 with 'static_bn'/'group', 11,164,362 with 'none'.

  `exits=True` adds ScaleFL's early exits (Ilhan et al., CVPR 2023): after stage s = 1, 2, 3 an
  exit classifier `exit{s}` (global average pool + Dense with bias) reads the stage's output; the
  fourth exit is `head`. `apply` then returns the logits of all four exits stacked
  [4, N, num_classes], deepest last. The exits add C_s·classes + classes for C_s = 64, 128, 256
  (times `width`): 4,510 params for 10 classes (11,178,472 in all with static BN), 45,100 for 100.
  Parameters are created in forward order (stem, stage1, exit1, stage2, exit2, ...), which
  `fedjax_het.methods.fiarse.scalefl` reads to tell which exit each module feeds.
  `conv_impl` (layers.CONV_IMPLS) picks XLA's convolutions or im2col matmuls; parameters and
  results are the same.
  """

  num_classes: int
  width: float = 1.0
  norm: str = 'static_bn'
  num_groups: int = 2
  exits: bool = False
  conv_impl: str = 'auto'

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    del train  # Static BN uses batch statistics in both modes; there is no dropout.
    if not self.width > 0:
      raise ValueError(f'ResNet18 width must be positive, got {self.width}.')
    channels = scaled_channels(RESNET18_CHANNELS, self.width)
    x = conv(x, channels[0], 3, 'stem_conv', 1, padding=1, use_bias=False,
             impl=self.conv_impl)
    x = nn.relu(normalize(x, self.norm, 'stem_norm', self.num_groups))
    early_logits = []
    for s, (features, strides, blocks) in enumerate(
        zip(channels, RESNET18_STRIDES, RESNET18_BLOCKS)):
      for b in range(blocks):
        x = BasicBlock(
            features, strides if b == 0 else 1, self.norm, self.num_groups, self.conv_impl,
            name=f'stage{s + 1}_block{b + 1}')(x)
      if self.exits and s + 1 < len(channels):
        early_logits.append(
            dense(jnp.mean(x, axis=(1, 2)), self.num_classes, name=f'exit{s + 1}'))
    logits = dense(jnp.mean(x, axis=(1, 2)), self.num_classes, name='head')
    return jnp.stack([*early_logits, logits]) if self.exits else logits
