"""Flax linen models with PyTorch-default init, static BN / GroupNorm, and the maskability rule.

All models map NHWC float images (the MLP flattens any input) to logits [batch, num_classes] with
`model.apply({'params': params}, x, train=...)`; `apply` is pure (no mutable collections, no rng).
Built with `exits=True` (mlp, lenet5, resnet18), a model returns the logits of all its early exits
stacked [num_exits, batch, num_classes], deepest (`head`) last (ScaleFL). The text models
(`models/text.py`) map token ids [batch, L] to logits [batch, L, num_classes], the sentence
classifier (`SentenceLSTM`) to logits [batch, num_classes].
"""

from fedjax_het.models.cnn import LeafCNN, LeNet5, SimpleCNN
from fedjax_het.models.initializers import torch_bias_init, torch_kernel_init, uniform_bound
from fedjax_het.models.layers import NORMS, StaticBatchNorm
from fedjax_het.models.mlp import MLP
from fedjax_het.models.registry import (MODELS, create_model, init_params, maskable_leaves,
                                        parameter_shapes)
from fedjax_het.models.resnet import BasicBlock, ResNet18
from fedjax_het.models.split import SplitModel, is_split, split_apply
from fedjax_het.models.text import NextTokenLSTM, SentenceLSTM
from fedjax_het.models.vit import ViT

__all__ = [
    'BasicBlock',
    'LeafCNN',
    'LeNet5',
    'MLP',
    'MODELS',
    'NextTokenLSTM',
    'NORMS',
    'ResNet18',
    'SentenceLSTM',
    'SimpleCNN',
    'SplitModel',
    'StaticBatchNorm',
    'create_model',
    'init_params',
    'is_split',
    'maskable_leaves',
    'parameter_shapes',
    'split_apply',
    'torch_bias_init',
    'torch_kernel_init',
    'uniform_bound',
    'ViT',
]
