"""Token data: FedJAX's Shakespeare characters and StackOverflow words (next-token prediction),
LEAF's Sent140 tweets (sentiment classification).

Both sets share FedJAX's reserved labels (fedjax/datasets/shakespeare.py and
`StackoverflowTokenizer` in fedjax/datasets/stackoverflow.py): PAD = 0, BOS = 1, EOS = 2; the
vocabulary follows from 3 and the out-of-vocabulary label is the last one. A client's examples
become pairs (x, y) of int32 [n, L] sequences, y the next label after each position of x.

Training and evaluation read the same rules (`fedjax_het.evaluation`): a PAD target counts in
neither the loss nor the accuracy, and the token accuracy leaves out EOS targets too — FedJAX's
`accuracy_no_eos` (SequenceTokenAccuracy(masked_target_values=(PAD, EOS))) and TFF's
StackOverflow `accuracy_no_oov_or_eos` without the OOV exclusion (a predicted or target OOV
counts as a mistake or a hit like any label).
"""

from __future__ import annotations

import collections
import os
import re

import numpy as np

PAD, BOS, EOS = 0, 1, 2
NUM_RESERVED = 3
# FedJAX's Shakespeare characters (reused from TFF's text-generation tutorial): 86 bytes,
# byte SHAKESPEARE_CHARS[i] is label 3 + i; any other byte is OOV = 89; 90 labels in all.
SHAKESPEARE_CHARS = (b'dhlptx@DHLPTX $(,048cgkoswCGKOSW[_#\'/37;?bfjnrvzBFJNRVZ"&*.26:\naeimquyAEIMQ'
                     b'UY]!%)-159\r')
SHAKESPEARE_VOCAB = NUM_RESERVED + len(SHAKESPEARE_CHARS) + 1
SHAKESPEARE_SEQUENCE_LENGTH = 80   # McMahan et al. 2017, FedJAX's and TFF's default
STACKOVERFLOW_VOCAB_WORDS = 10000  # TFF's and FedJAX's default word vocabulary
STACKOVERFLOW_SEQUENCE_LENGTH = 20

_CHAR_TABLE = np.full(256, SHAKESPEARE_VOCAB - 1, np.int32)
_CHAR_TABLE[np.frombuffer(SHAKESPEARE_CHARS, np.uint8)] = NUM_RESERVED + np.arange(
    len(SHAKESPEARE_CHARS))


def shakespeare_labels(text: bytes) -> np.ndarray:
  """int32 [len(text)]: each byte's label (3..88, OOV 89)."""
  return _CHAR_TABLE[np.frombuffer(text, np.uint8)]


def shakespeare_sequences(snippets, sequence_length: int) -> tuple[np.ndarray, np.ndarray]:
  """A client's snippets (bytes) → (x, y) int32 [m, sequence_length], FedJAX's rule.

  The snippets are joined into one label stream, each as BOS, its characters, EOS; x is the
  stream without its last label, y without its first, both cut into rows of
  `sequence_length` and the last row padded with PAD (fedjax `shakespeare.preprocess_client`:
  [b'ABCD', b'E'] at length 3 gives x [[BOS,A,B],[C,D,EOS],[BOS,E,PAD]] and
  y [[A,B,C],[D,EOS,BOS],[E,EOS,PAD]]). m = ceil((Σ (len + 2) − 1) / sequence_length).
  """
  stream = np.concatenate([np.concatenate([[BOS], shakespeare_labels(bytes(s)), [EOS]])
                           for s in snippets]).astype(np.int32)
  return _rows(stream[:-1], sequence_length), _rows(stream[1:], sequence_length)


def _rows(labels: np.ndarray, length: int) -> np.ndarray:
  """labels [n] → [ceil(n / length), length], the last row padded with PAD."""
  rows = -(-labels.size // length)
  out = np.full(rows * length, PAD, np.int32)
  out[:labels.size] = labels
  return out.reshape(rows, length)


def _char_labels(text: str) -> np.ndarray:
  """int32 [len(text)]: the labels of a str's characters; any beyond one byte is OOV."""
  codes = np.array([ord(c) for c in text], np.int64)
  return np.where(codes < 256, _CHAR_TABLE[np.minimum(codes, 255)], SHAKESPEARE_VOCAB - 1)


def leaf_shakespeare_sequences(x: list[str], y: list[str]) -> tuple[np.ndarray, np.ndarray]:
  """LEAF's Shakespeare examples (an 80-character string x, the next character y) → (x, y)
  int32 [n, 80]: the characters' labels, and the same shifted by one with y appended, so every
  position is a next-character target of the one model (LEAF scores only the last)."""
  inputs = np.stack([_char_labels(s) for s in x])
  last = np.array([_char_labels(c)[0] for c in y], np.int32)
  return inputs, np.concatenate([inputs[:, 1:], last[:, None]], axis=1)


def read_word_counts(path: str, vocab_words: int) -> dict[str, int]:
  """The first `vocab_words` words of a `stackoverflow.word_count` file (a line 'word count',
  most frequent first; TFF's `load_word_counts`, FedJAX's `default_vocab`) → word: label, the
  i-th word label 3 + i."""
  words = []
  try:
    with open(path, encoding='utf-8') as f:
      for line in f:
        if len(words) == vocab_words:
          break
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
          raise ValueError(f'{path} line {len(words) + 1} is not "word count": {line!r}.')
        words.append(parts[0])
  except (OSError, UnicodeDecodeError) as e:
    raise ValueError(f'{path} is unreadable ({e}).') from e
  if len(words) < vocab_words:
    raise ValueError(f'{path} lists {len(words)} words, fewer than the vocabulary of '
                     f'{vocab_words}; it is truncated or vocab_size is too large.')
  return {w: NUM_RESERVED + i for i, w in enumerate(words)}


def stackoverflow_sequences(tokens, vocab: dict[str, int],
                            sequence_length: int) -> tuple[np.ndarray, np.ndarray]:
  """Posts (bytes or str of space-separated tokens) → (x, y) int32 [n, sequence_length].

  FedJAX's `StackoverflowTokenizer.as_preprocess_batch`: each post becomes BOS, its words'
  labels (OOV = 3 + len(vocab), one bucket), EOS; x drops the last label, y the first; both
  are truncated or PAD-padded to `sequence_length`. Words are split on single spaces as
  tf.strings.split(sep=' ') does, so an empty word (two spaces) is OOV.
  """
  oov = NUM_RESERVED + len(vocab)
  x = np.full((len(tokens), sequence_length), PAD, np.int32)
  y = np.full((len(tokens), sequence_length), PAD, np.int32)
  for i, post in enumerate(tokens):
    text = post.decode('utf-8', 'replace') if isinstance(post, bytes) else str(post)
    ids = [BOS, *(vocab.get(w, oov) for w in text.split(' ')), EOS]
    inputs, targets = ids[:-1][:sequence_length], ids[1:][:sequence_length]
    x[i, :len(inputs)] = inputs
    y[i, :len(targets)] = targets
  return x, y


# ---- Sent140 (LEAF) ----------------------------------------------------------------------------
SENT140_SEQUENCE_LENGTH = 25  # LEAF's stacked_lstm: MODEL_PARAMS seq_len, line_to_indices max_words
SENT140_TEXT_FIELD = 4        # LEAF's x: [tweet id, date, query, user, text]
GLOVE_FILE = 'glove.6B.300d.txt'
GLOVE_SOURCE = "glove.6B.zip of Stanford's GloVe page, https://nlp.stanford.edu/projects/glove/"
_LEAF_WORDS = re.compile(r"[\w']+|[.,!?;]")


def sent140_words(tweet: str) -> list[str]:
  """A tweet's words as LEAF's `split_line` cuts them: runs of word characters and
  apostrophes, and the punctuation marks . , ! ? ; each on its own; case is kept."""
  return _LEAF_WORDS.findall(tweet)


def read_glove(path: str, vectors: bool) -> tuple[dict[str, int], np.ndarray | None]:
  """A GloVe text file (a line 'word v1 ... vD') → (word: id, the i-th line's word id i;
  float32 [V + 1, D] its vectors with a last row of zeros for the unknown word, as LEAF's
  get_embs.py appends, or None without `vectors`)."""
  if not os.path.isfile(path):
    raise ValueError(f'{path} does not exist: Sent140\'s vocabulary is GloVe\'s {GLOVE_FILE} '
                     f'(extract it from {GLOVE_SOURCE}); set natural.glove_file to it, or '
                     'natural.vocabulary=train.')
  words, rows = {}, []
  try:
    with open(path, encoding='utf-8') as f:
      for number, line in enumerate(f, 1):
        word, _, numbers = line.rstrip('\n').partition(' ')
        if not numbers:
          raise ValueError(f'{path} line {number} is not "word v1 ... vD" (truncated?).')
        if word in words:
          raise ValueError(f'{path} line {number} repeats the word {word!r}; it is not a GloVe '
                           'file.')
        words[word] = len(words)
        if vectors:
          rows.append(np.fromstring(numbers, np.float32, sep=' '))
  except (OSError, UnicodeDecodeError) as e:
    raise ValueError(f'{path} is unreadable ({e}).') from e
  if not words:
    raise ValueError(f'{path} is empty; it is not a GloVe file.')
  if not vectors:
    return words, None
  if len({r.size for r in rows}) != 1:
    raise ValueError(f'{path} has lines of different lengths (truncated or corrupt).')
  return words, np.concatenate([np.stack(rows), np.zeros((1, rows[0].size), np.float32)])


def top_words(tweets, vocab_words: int) -> dict[str, int]:
  """The `vocab_words` most frequent words of `tweets` (LEAF's split, ties in order of first
  appearance) → word: id, the most frequent 0."""
  counts = collections.Counter(w for t in tweets for w in sent140_words(t))
  return {w: i for i, (w, _) in enumerate(counts.most_common(vocab_words))}


def sent140_tokens(tweets, vocab: dict[str, int], sequence_length: int) -> np.ndarray:
  """Tweets → int32 [n, sequence_length], LEAF's `line_to_indices`: the first
  `sequence_length` words' ids, an unknown word len(vocab), and padded at the end with the same
  unknown id (LEAF pads with it; its LSTM reads the padding and classifies from the last
  position)."""
  unknown = len(vocab)
  out = np.full((len(tweets), sequence_length), unknown, np.int32)
  for i, tweet in enumerate(tweets):
    ids = [vocab.get(w, unknown) for w in sent140_words(str(tweet))[:sequence_length]]
    out[i, :len(ids)] = ids
  return out
