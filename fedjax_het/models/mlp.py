"""Fully connected network."""

from typing import Sequence

import jax
import jax.numpy as jnp
from flax import linen as nn

from fedjax_het.models.layers import dense, flatten


class MLP(nn.Module):
  """Multilayer perceptron with ReLU: [N, ...] (flattened) -> logits [N, num_classes].

  Layers are named fc1..fcK for the hidden layers and `head` for the output layer.
  * hidden=(200, 200): the 784-200-200-10 benchmark MLP (199,210 params on 28x28x1).
  * hidden=(300,): HIST's FCNN 784-300-10 (238,510 params), whose hidden
    neurons are partitioned across cells.

  `exits=True` adds ScaleFL's early exits: after hidden layer k < K a Dense exit `exit{k}` reads
  fc{k}'s activations (h_k·classes + classes params, e.g. 2,010 more for (200, 200) and 10
  classes: 201,220); the K-th exit is `head`. `apply` then returns the logits of all K exits
  stacked [K, N, num_classes], deepest last. Parameters are created in forward order (fc1, exit1,
  fc2, ...), which `fedjax_het.methods.fiarse.scalefl` reads to tell which exit each layer feeds.
  """

  hidden: Sequence[int]
  num_classes: int
  exits: bool = False

  def __post_init__(self):
    if any(isinstance(h, bool) or not isinstance(h, int) or h < 1
           for h in self.hidden):
      raise ValueError('model_options.hidden must hold positive layer widths, '
                       f'got {tuple(self.hidden)!r}.')
    super().__post_init__()

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    del train  # No dropout or batch-dependent layers.
    x = flatten(x)
    early_logits = []
    for i, features in enumerate(self.hidden):
      x = nn.relu(dense(x, features, name=f'fc{i + 1}'))
      if self.exits and i + 1 < len(self.hidden):
        early_logits.append(dense(x, self.num_classes, name=f'exit{i + 1}'))
    logits = dense(x, self.num_classes, name='head')
    return jnp.stack([*early_logits, logits]) if self.exits else logits
