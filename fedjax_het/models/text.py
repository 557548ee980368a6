"""Next-token language models: token ids [N, L] -> logits [N, L, num_classes].

`NextTokenLSTM` is an embedding, stacked LSTMs over the sequence, an optional projection and a
Dense output per position; `num_classes` is the label count (`fedjax_het.data.text`: PAD, BOS,
EOS, the vocabulary and OOV). Its presets (`TEXT_PRESETS`) are the benchmarks' models:

- `shakespeare_lstm`: FedJAX's `create_lstm_model` (McMahan et al. 2017), embedding 8, two
  LSTM layers of 256 each followed by tanh (FedJAX stacks `hk.LSTM` and `jnp.tanh` in a
  DeepRNN), Dense(90): 820,522 params (flax LSTM cells, like hk.LSTM and Keras, have one bias
  per gate).
- `stackoverflow_lstm`: TFF's StackOverflow next-word model (Reddi et al. 2021,
  `create_recurrent_model`): embedding 96, one LSTM of 670, Dense(96), Dense(10,004):
  4,050,748 params.

The loss and the token accuracy leave out padding (`fedjax_het.evaluation`).
"""

import jax
import jax.numpy as jnp
from flax import linen as nn

from fedjax_het.models.layers import dense

TEXT_PRESETS = {
    'shakespeare_lstm': {'embed': 8, 'hidden': (256, 256), 'projection': 0, 'tanh': True},
    'stackoverflow_lstm': {'embed': 96, 'hidden': (670,), 'projection': 96, 'tanh': False},
}


class NextTokenLSTM(nn.Module):
  """Embedding(num_classes, embed) - LSTM(h) [- tanh] for h in hidden - [Dense(projection)] -
  Dense(num_classes), applied at every position (inputs are cast to int32 ids)."""

  num_classes: int
  embed: int = 8
  hidden: tuple = (256, 256)
  projection: int = 0
  tanh: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    del train  # no dropout
    h = nn.Embed(self.num_classes, self.embed, name='embed')(x.astype(jnp.int32))
    for i, size in enumerate(self.hidden):
      h = nn.RNN(nn.OptimizedLSTMCell(size), name=f'lstm{i + 1}')(h)
      if self.tanh:
        h = jnp.tanh(h)
    if self.projection:
      h = dense(h, self.projection, name='projection')
    return dense(h, self.num_classes, name='head')
