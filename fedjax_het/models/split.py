"""Split models for federated split learning (CSE-FSL, FSL_MC/OC/AN).

A split model holds one params tree `{'client', 'aux', 'server'}`:

    smashed = client(x)        x_c, the bottom layers up to the cut
    logits  = server(smashed)  x_s, the top layers (inference: server(client(x)))
    logits  = aux(smashed)     a_c, the client's auxiliary head (CSE-FSL, FSL_AN)

`model.apply({'params': p}, x, train=...)` is the composed model, so every
evaluator and FedAvg run it unchanged; `split_apply(model, params, part, x)`
runs one part. Each model is a list of named *stages* (functions that build
their layers inside the calling compact module); `cut` names the last stage on
the client. Smashed data keep their spatial layout ([B, H, W, C]) so that a
conv aux head can read them; the server flattens.

Dropout runs only when `train=True` and the apply is given a 'dropout' rng
(the split methods pass per-client, per-step keys); otherwise it is identity.

Models (CSE-FSL paper, Mu & Shen, Sec. V and Tables III/IV):
* `split_cifar_cnn` on 24x24x3 crops: block1 = conv5x5(64, pad 2)-ReLU-pool-LRN,
  block2 = conv5x5(64, pad 2)-ReLU-LRN-pool → smashed 6x6x64 = 2304;
  fc1 384-ReLU, fc2 192-ReLU, head 10. |x_c| = 107,328, |x_s| = 960,970.
  `pool='max3s2'` is the authors' 3x3/stride-2/pad-1 max-pool (default);
  'max2' the paper text's 2x2 pool (same shapes). LRN as torch's
  LocalResponseNorm(4, 0.001/9, 0.75, 1).
* `split_emnist_cnn` on 28x28x1: conv3x3(32)-ReLU, conv3x3(64)-ReLU-pool2-
  dropout 0.25 → smashed 12x12x64 = 9216; fc1 128-ReLU-dropout 0.5, head 62.
  |x_c| = 18,816, |x_s| = 1,187,774. `conv_relu=False` is the authors' code
  (no ReLU after the convs; the paper's cited model [57] has them).
* `split_lenet5`: LeNet-5 (`cnn.LeNet5`, classic padding) cut after conv2 by
  default, for offline runs (digits, Fashion-MNIST).
Aux heads (`aux`): 'mlp' = Dense(num_classes) on the flattened smashed data
(CIFAR: 23,050 params; F-EMNIST: 571,454); 'cnn' = conv1x1(aux_channels)-ReLU-
Dense(num_classes) (CIFAR c = 54/27/14/7: 22,960/11,485/5,960/2,985). The ReLU
after the 1x1 conv is our reading (the paper does not say; it adds no params).
Init is PyTorch's default (`initializers.py`); the authors' code draws
N(0, 0.05) for every parameter (the paper is silent).
"""

import functools
from typing import Callable

import jax
import jax.numpy as jnp
from flax import linen as nn

from fedjax_het.models.layers import conv, dense, flatten, max_pool2

AUX_HEADS = ('mlp', 'cnn')
SPLIT_PARTS = ('client', 'aux', 'server')
POOLS = ('max3s2', 'max2')

# A stage: (name, fn(x, train) -> x) building its layers in the calling module.
Stage = tuple[str, Callable[[jax.Array, bool], jax.Array]]


def local_response_norm(x: jax.Array, size: int = 4, alpha: float = 0.001 / 9,
                        beta: float = 0.75, k: float = 1.0) -> jax.Array:
  """torch.nn.LocalResponseNorm over the channels of [..., C]:

      b_c = a_c / (k + alpha/size · Σ_{c'=c−⌊size/2⌋}^{c+⌈size/2⌉−1} a_{c'}²)^beta

  with zero padding outside [0, C) (torch divides alpha by size).
  """
  squares = jnp.square(x)
  channels = x.shape[-1]
  pad = [(0, 0)] * (x.ndim - 1) + [(size // 2, (size - 1) // 2)]
  padded = jnp.pad(squares, pad)
  window = sum(padded[..., i:i + channels] for i in range(size))
  return x / (k + alpha / size * window)**beta


def _pool(x: jax.Array, kind: str) -> jax.Array:
  if kind == 'max2':
    return max_pool2(x)
  return nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))


class Part(nn.Module):
  """A run of stages: [B, ...] -> [B, ...]. Stages see `train` only when a
  'dropout' rng is given (it gates nothing else)."""
  stages: tuple

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    dropout = train and self.has_rng('dropout')
    for _, fn in self.stages:
      x = fn(x, dropout)
    return x


def _aux_stages(kind: str, channels: int, num_classes: int) -> tuple:
  if kind not in AUX_HEADS:
    raise ValueError(f'model_options.aux must be one of {", ".join(AUX_HEADS)}'
                     f', got {kind!r}.')
  if channels < 1:
    raise ValueError(f'model_options.aux_channels must be ≥ 1, got {channels}.')

  def mlp(x, train):
    del train
    return dense(flatten(x), num_classes, name='head')

  def cnn(x, train):
    del train
    x = nn.relu(conv(x, channels, 1, name='conv', padding='VALID'))
    return dense(flatten(x), num_classes, name='head')

  return ((kind, mlp if kind == 'mlp' else cnn),)


class SplitModel(nn.Module):
  """Base of split models; subclasses define `stages()` and the default cut.

  Attributes (shared options):
    num_classes: outputs of the server head and the aux head.
    cut: name of the last client stage (`cuts()` lists them).
    aux: aux head kind, one of AUX_HEADS.
    aux_channels: c of the 'cnn' aux head.
  """
  num_classes: int
  cut: str = ''
  aux: str = 'mlp'
  aux_channels: int = 54

  def __post_init__(self):
    if self.cut not in self.cuts():
      raise ValueError(
          f'model_options.cut {self.cut!r} is not a cut layer of '
          f'{type(self).__name__}; choose one of {", ".join(self.cuts())}.')
    _aux_stages(self.aux, self.aux_channels, self.num_classes)
    super().__post_init__()

  def stages(self) -> tuple:
    raise NotImplementedError

  def cuts(self) -> tuple[str, ...]:
    """Valid cut points: every stage but the last."""
    return tuple(name for name, _ in self.stages()[:-1])

  def setup(self):
    stages = self.stages()
    k = [name for name, _ in stages].index(self.cut) + 1
    self.client = Part(stages[:k])
    self.server = Part(stages[k:])
    self.aux_head = Part(_aux_stages(self.aux, self.aux_channels,
                                     self.num_classes), name='aux')

  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    smashed = self.client(x, train)
    if self.is_initializing():
      self.aux_head(smashed, train)
    return self.server(smashed, train)

  def run_part(self, part: str, x: jax.Array, train: bool = False):
    return {'client': self.client, 'server': self.server,
            'aux': self.aux_head}[part](x, train)


def split_apply(model: SplitModel, params, part: str, x: jax.Array, *,
                train: bool = False, key: jax.Array | None = None):
  """One part of a split model: 'client' (x → smashed), 'aux' or 'server'
  (smashed → logits). `params` is the whole tree or just {part: ...};
  `key` is the dropout key (dropout runs when train and key are given)."""
  rngs = {'dropout': key} if key is not None else {}
  return model.apply({'params': params}, part, x, train,
                     method=SplitModel.run_part, rngs=rngs)


def is_split(model) -> bool:
  return isinstance(model, SplitModel)


def _conv_block(x, train, *, name, features, kernel, padding, after=(),
                relu=True, dropout=0.0, pool_kind='max3s2'):
  """conv - [ReLU] - `after` ('pool' / 'lrn', in order) - [dropout]."""
  x = conv(x, features, kernel, name=name, padding=padding)
  x = nn.relu(x) if relu else x
  for op in after:
    x = _pool(x, pool_kind) if op == 'pool' else local_response_norm(x)
  return nn.Dropout(dropout, deterministic=not train)(x) if dropout else x


def _dense_stage(x, train, *, name, features, relu=True, dropout=0.0):
  x = dense(flatten(x), features, name=name)
  if relu:
    x = nn.relu(x)
  return nn.Dropout(dropout, deterministic=not train)(x) if dropout else x


class SplitCifarCNN(SplitModel):
  """The CSE-FSL CIFAR-10 CNN (see the module docstring)."""
  cut: str = 'block2'
  pool: str = 'max3s2'

  def stages(self):
    if self.pool not in POOLS:
      raise ValueError(f'model_options.pool must be one of '
                       f'{", ".join(POOLS)}, got {self.pool!r}.')
    block = functools.partial(_conv_block, features=64, kernel=5, padding=2,
                              pool_kind=self.pool)
    return (('block1', functools.partial(block, name='conv1',
                                         after=('pool', 'lrn'))),
            ('block2', functools.partial(block, name='conv2',
                                         after=('lrn', 'pool'))),
            ('fc1', functools.partial(_dense_stage, name='fc1', features=384)),
            ('fc2', functools.partial(_dense_stage, name='fc2', features=192)),
            ('head', functools.partial(_dense_stage, name='head',
                                       features=self.num_classes,
                                       relu=False)))


class SplitEmnistCNN(SplitModel):
  """The CSE-FSL F-EMNIST CNN (Reddi et al.'s EMNIST CNN; module docstring)."""
  cut: str = 'conv2'
  conv_relu: bool = True

  def stages(self):
    block = functools.partial(_conv_block, features=0, kernel=3,
                              padding='VALID', relu=self.conv_relu,
                              pool_kind='max2')
    return (('conv1', functools.partial(block, name='conv1', features=32)),
            ('conv2', functools.partial(block, name='conv2', features=64,
                                        after=('pool',), dropout=0.25)),
            ('fc1', functools.partial(_dense_stage, name='fc1', features=128,
                                      dropout=0.5)),
            ('head', functools.partial(_dense_stage, name='head',
                                       features=self.num_classes,
                                       relu=False)))


class SplitLeNet5(SplitModel):
  """LeNet-5 (classic padding, `cnn.LeNet5`'s layers and counts) as a split
  model: conv1/conv2 blocks (conv-ReLU-pool2), fc1 120, fc2 84, head."""
  cut: str = 'conv2'

  def stages(self):
    block = functools.partial(_conv_block, kernel=5, after=('pool',),
                              pool_kind='max2')
    return (('conv1', functools.partial(block, name='conv1', features=6,
                                        padding='SAME')),
            ('conv2', functools.partial(block, name='conv2', features=16,
                                        padding='VALID')),
            ('fc1', functools.partial(_dense_stage, name='fc1', features=120)),
            ('fc2', functools.partial(_dense_stage, name='fc2', features=84)),
            ('head', functools.partial(_dense_stage, name='head',
                                       features=self.num_classes,
                                       relu=False)))
