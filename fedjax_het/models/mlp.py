"""Fully connected network."""

from typing import Sequence

import jax
from flax import linen as nn

from fedjax_het.models.layers import dense, flatten


class MLP(nn.Module):
  """Multilayer perceptron with ReLU: [N, ...] (flattened) -> logits [N, num_classes].

  Layers are named fc1..fcK for the hidden layers and `head` for the output layer.
  * hidden=(200, 200): the 784-200-200-10 benchmark MLP (199,210 params on 28x28x1).
  * hidden=(300,): HIST's FCNN 784-300-10 (238,510 params; specs/hist.md §2.2), whose hidden
    neurons are partitioned across cells.
  """

  hidden: Sequence[int]
  num_classes: int

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    del train  # No dropout or batch-dependent layers.
    x = flatten(x)
    for i, features in enumerate(self.hidden):
      x = nn.relu(dense(x, features, name=f'fc{i + 1}'))
    return dense(x, self.num_classes, name='head')
