"""Text models: next-token LSTMs (token ids [N, L] -> logits [N, L, num_classes]) and a
sentence classifier (token ids [N, L] -> logits [N, num_classes]).

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

`SentenceLSTM` classifies a whole token sequence; its preset `sent140_lstm` is LEAF's Sent140
model (Caldas et al. 2018; models/sent140/stacked_lstm.py, MODEL_PARAMS seq_len 25, hidden 100):
an embedding of `vocab_size` = the vocabulary + 1 (the unknown word) rows, two LSTM layers of
100, the last position's output, Dense(128) without activation, Dense(2). The paper describes
the embedding as pretrained 300-d GloVe, which is this preset (`embed` 300, its rows copied from
the GloVe file by `load_embeddings`); LEAF's code instead trains a randomly initialised
embedding of n_hidden = 100 (it reads GloVe for the vocabulary only), which is
`model_options={'embed': 100}` with `natural.vocabulary=train` or a GloVe vocabulary's vectors
left out (`embed` ≠ 300 keeps the random init). With GloVe's 400,000 words the embedding holds
120,000,300 of the 120,254,286 params.
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from fedjax_het.models.layers import dense

TEXT_PRESETS = {
    'shakespeare_lstm': {'embed': 8, 'hidden': (256, 256), 'projection': 0, 'tanh': True},
    'stackoverflow_lstm': {'embed': 96, 'hidden': (670,), 'projection': 96, 'tanh': False},
}
CLASSIFIER_PRESETS = {
    'sent140_lstm': {'embed': 300, 'hidden': (100, 100), 'dense': 128},
}


def lstm_layers(h: jax.Array, hidden: tuple, tanh: bool = False) -> jax.Array:
  """Stacked LSTMs `lstm1`, `lstm2`, ... of sizes `hidden` over the sequence axis of h
  [N, L, D] -> [N, L, hidden[-1]], each output through tanh when `tanh`. Call inside a
  module's `nn.compact` method."""
  for i, size in enumerate(hidden):
    h = nn.RNN(nn.OptimizedLSTMCell(size), name=f'lstm{i + 1}')(h)
    if tanh:
      h = jnp.tanh(h)
  return h


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
    h = lstm_layers(h, self.hidden, self.tanh)
    if self.projection:
      h = dense(h, self.projection, name='projection')
    return dense(h, self.num_classes, name='head')


class SentenceLSTM(nn.Module):
  """Embedding(vocab_size, embed) - LSTM(h) for h in hidden - the last position - [Dense(dense),
  no activation] - Dense(num_classes): token ids [N, L] -> logits [N, num_classes].

  `vocab_size` (the input's token ids, `FederatedSplit.input_vocab`) is filled in from the data
  by `run.build_experiment`. `freeze_embed` stops the gradient at the embedding, so pretrained
  vectors stay as loaded (the paper's "pretrained" leaves open whether they train; they do by
  default here, as LEAF's code trains its embedding).
  """

  num_classes: int
  vocab_size: int
  embed: int = 300
  hidden: tuple = (100, 100)
  dense: int = 128
  freeze_embed: bool = False

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    del train  # no dropout
    h = nn.Embed(self.vocab_size, self.embed, name='embed')(x.astype(jnp.int32))
    if self.freeze_embed:
      h = jax.lax.stop_gradient(h)
    h = lstm_layers(h, self.hidden)[:, -1]
    if self.dense:
      h = dense(h, self.dense, name='fc')
    return dense(h, self.num_classes, name='head')


def load_embeddings(params: dict, vectors: np.ndarray) -> dict:
  """`params` with its embedding table (`params['embed']['embedding']`, [V, D]) replaced by
  `vectors` float32 [V, D]; unchanged when the model has no embedding of that shape, so a model
  sized otherwise (LEAF's code: D = 100) keeps its random init."""
  table = params.get('embed', {}).get('embedding')
  if table is None or table.shape != vectors.shape:
    return params
  return {**params, 'embed': {**params['embed'], 'embedding': jnp.asarray(vectors, table.dtype)}}
