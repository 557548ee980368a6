"""Model registry, parameter initialisation and the maskability rule."""

import dataclasses
import functools
from typing import Any, Sequence

import jax
import flax
import jax.numpy as jnp
from flax import linen as nn

from fedjax_het.models.cnn import LeafCNN, LeNet5, SimpleCNN
from fedjax_het.models.mlp import MLP
from fedjax_het.models.resnet import ResNet18
from fedjax_het.models.split import SplitCifarCNN, SplitEmnistCNN, SplitLeNet5
from fedjax_het.models.text import (CLASSIFIER_PRESETS, TEXT_PRESETS, NextTokenLSTM,
                                     SentenceLSTM)
from fedjax_het.models.vit import VIT_PRESETS, ViT

_CLASSES = {
    'mlp': MLP,
    'lenet5': LeNet5,
    'simple_cnn': SimpleCNN,
    'leaf_cnn': LeafCNN,
    'resnet18': ResNet18,
    'split_cifar_cnn': SplitCifarCNN,
    'split_emnist_cnn': SplitEmnistCNN,
    'split_lenet5': SplitLeNet5,
    'vit': ViT,
    **{preset: ViT for preset in VIT_PRESETS},
    'lstm': NextTokenLSTM,
    **{preset: NextTokenLSTM for preset in TEXT_PRESETS},
    'sentence_lstm': SentenceLSTM,
    **{preset: SentenceLSTM for preset in CLASSIFIER_PRESETS},
}
_PRESETS = {**VIT_PRESETS, **TEXT_PRESETS, **CLASSIFIER_PRESETS}
MODELS = tuple(_CLASSES)

# Leaf names that Dense and Conv layers create.
_LAYER_LEAVES = ('kernel', 'bias')


def create_model(name: str, num_classes: int, **kwargs: Any) -> nn.Module:
  """Build model `name` (one of MODELS) with `num_classes` outputs and its own options.

  Options: mlp(hidden, exits), lenet5(padding, norm, num_groups, exits, conv_impl),
  simple_cnn(norm, num_groups, conv_impl), resnet18(width, norm, num_groups, exits, conv_impl);
  split models (models/split.py): split_cifar_cnn(cut, aux, aux_channels, pool),
  split_emnist_cnn(cut, aux, aux_channels, conv_relu), split_lenet5(cut, aux, aux_channels);
  vit(depth, hidden, mlp, heads, patch, decisions) and its presets vit_tiny, vit_base, vit_base_ext (the
  paper sizes of Co-S²P, `models.vit.VIT_PRESETS`; options override them); lstm(embed, hidden,
  projection, tanh) on token ids [N, L] -> logits [N, L, num_classes] and its presets
  shakespeare_lstm, stackoverflow_lstm (the benchmarks' models, `models.text.TEXT_PRESETS`);
  sentence_lstm(vocab_size, embed, hidden, dense, freeze_embed) on token ids [N, L] -> logits
  [N, num_classes] and its preset sent140_lstm (LEAF's Sent140 model; `vocab_size` comes from the
  data, `FederatedSplit.input_vocab`); leaf_cnn(blocks, channels, norm, num_groups, conv_impl),
  LEAF's CelebA CNN.
  `conv_impl` is 'auto' (im2col on CPU, XLA's convolutions elsewhere), 'xla' or 'im2col'
  (`layers.CONV_IMPLS`); the parameters do not depend on it. `exits=True` adds ScaleFL's early-exit
  classifiers (`exit1`, `exit2`, ...; the last exit is `head`) and makes `apply` return the logits
  of every exit stacked [num_exits, N, num_classes]. Lists are stored as tuples so modules stay
  hashable.
  """
  if name not in _CLASSES:
    raise ValueError(f'Unknown model {name!r}; valid choices are {", ".join(MODELS)}.')
  cls = _CLASSES[name]
  options = [f.name for f in dataclasses.fields(cls)
             if f.init and f.name not in ('num_classes', 'parent', 'name')]
  unknown = sorted(set(kwargs) - set(options))
  if unknown:
    raise ValueError(
        f'Unknown option(s) {", ".join(unknown)} for model {name!r}; valid options are '
        f'{", ".join(options) or "none"}.')
  required = [f.name for f in dataclasses.fields(cls)
              if f.name in options and f.default is dataclasses.MISSING]
  missing = [o for o in required if o not in kwargs]
  if missing:
    raise ValueError(f'Model {name!r} requires option(s) {", ".join(missing)}.')
  kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()}
  return cls(num_classes=num_classes, **{**_PRESETS.get(name, {}), **kwargs})


def option_defaults(name: str) -> dict:
  """The options model `name` (one of MODELS) takes that have a default, with
  their defaults (a preset's own values for a preset)."""
  fields = dataclasses.fields(_CLASSES[name])
  return {**{f.name: f.default for f in fields
             if f.init and f.default is not dataclasses.MISSING
             and f.name not in ('num_classes', 'parent', 'name')},
          **_PRESETS.get(name, {})}


def init_params(model: nn.Module, key: jax.Array, input_shape: Sequence[int]) -> dict:
  """The `params` collection of `model` for inputs of shape `input_shape` (no batch axis).

  Apply with `model.apply({'params': params}, x, train=...)`; no model has other collections.
  The dicts are in creation (forward) order, as `model.init` returns them (ScaleFL's stages read
  it). The initialisation is one compiled program per (model, input shape): run op by op, its
  many small random and reshaping ops would each compile on their own; the values are the same.
  """
  compiled, order = _init_program(model, tuple(input_shape))
  return _in_creation_order(compiled(key), order)


def parameter_shapes(model: nn.Module, input_shape: Sequence[int]) -> dict:
  """`jax.ShapeDtypeStruct`s of `init_params`' result, in the same creation order; nothing is
  computed (`jax.eval_shape`). HIST's partition rule reads the forward order."""
  compiled, order = _init_program(model, tuple(input_shape))
  return _in_creation_order(jax.eval_shape(compiled, jax.random.PRNGKey(0)), order)


def _in_creation_order(params: dict, order: list) -> dict:
  """`params` (a jitted init's dicts, keys sorted) rebuilt in the recorded creation order."""
  flat = flax.traverse_util.flatten_dict(params)
  return flax.traverse_util.unflatten_dict({path: flat[path] for path in order})


@functools.lru_cache(maxsize=None)
def _init_program(model: nn.Module, input_shape: tuple):
  """(jitted init of `model`'s params, their key paths in creation order).

  A jitted function returns dicts with sorted keys, so the order is recorded
  while it traces (on its first call or `eval_shape`, before the order is read).
  """
  order = []

  def init(key):
    params = model.init(key, jnp.zeros((1, *input_shape), jnp.float32))['params']
    order.extend(flax.traverse_util.flatten_dict(params))
    return params

  return jax.jit(init), order


def _key_name(entry) -> str:
  return str(getattr(entry, 'key', getattr(entry, 'name', entry)))


def maskable_leaves(params) -> Any:
  """Pytree of bools, shaped like `params`: may a submodel method mask this leaf?

  Rule (following FIARSE's code): every Dense/Conv `kernel` and `bias` is
  maskable; normalisation parameters (StaticBatchNorm/GroupNorm `scale` and `bias`) never are, nor
  is any other leaf. A leaf belongs to a norm when a module on its path has 'norm' in its name
  (case-insensitive), which holds for every norm in this package (stem_norm, norm1,
  shortcut_norm, ...) and for Flax's automatic names (GroupNorm_0, BatchNorm_0, LayerNorm_0).
  """

  def is_maskable(path, _):
    names = [_key_name(entry) for entry in path]
    in_norm = any('norm' in n.lower() for n in names[:-1])
    return names[-1] in _LAYER_LEAVES and not in_norm

  return jax.tree_util.tree_map_with_path(is_maskable, params)
