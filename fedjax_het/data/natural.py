"""Naturally partitioned federated datasets: the writer, speaker or user is the client.

`load_natural(name, data_dir, ...)` reads one of `NATURAL_DATASETS` from its distribution files
in `data_dir` (`fedjax_het.data.natural_files`; nothing is downloaded) and returns a
`FederatedSplit` whose clients are the files' clients:

| name | clients | x | y | classes |
| --- | --- | --- | --- | --- |
| fed_emnist | 3,400 writers | [28, 28, 1] float32, 1 − pixels (ink = 1) | label | 62 |
| fed_cifar100 | 500 (Pachinko over superclasses) | [32, 32, 3] float32 in [0, 1] | fine label | 100 |
| shakespeare | 715 speaking roles | [80] int32 characters | [80] next characters | 90 |
| stackoverflow | 342,477 users | [20] int32 words | [20] next words | 10,004 |
| sent140 | 660,120 Twitter users | [25] int32 words | sentiment 0 / 1 | 2 |
| celeba | 9,343 celebrities | [84, 84, 3] float32 in [0, 1] | smiling 0 / 1 | 2 |

(client counts of the full train files as TFF documents them; LEAF's for sent140 and celeba,
whose files are LEAF's JSON only: `data/<set>/data/{train,test}/` as its preprocess.sh writes
them). EMNIST's pixels are 1.0 on the
background in TFF's and LEAF's files; FedJAX feeds `1 − pixels` to its CNN
(fedjax/datasets/emnist.py), as here. Text is tokenised by `fedjax_het.data.text`.

Clients: those with at least `min_examples` examples in the train file (counted as stored:
images, snippets or posts) — and, with `local_test`, at least one test example — form the
eligible population; `num_clients` of them are kept, all in file order when they are exactly
`num_clients`, else a subsample drawn with `seed` (kept in file order); with `max_examples`, a
client trains on its first `max_examples` rows only (TFF's StackOverflow benchmark: 256 posts,
`max_elements_per_user`). The global test set is
the kept clients' own test examples (EMNIST, Shakespeare, StackOverflow and LEAF's sample split
share clients between splits); train and test files that share no client, or kept clients none
of which has test examples, are refused. CIFAR-100's 100 test clients are others by design, so
its global test set is the whole test file and `local_test` is refused; else `local_test` gives
each kept client its own test examples.

Every client read is checked, and a failure names the file and the client in one line: the
set's features and per-example shapes (another set's file under the expected name), a
conversion that fails, features that are not finite and labels outside the classes (a corrupt
block of an HDF5 file, which has no checksums, still decodes). The split's `summary` says what
was read (`format_summary`; a run prints it and writes it to `SUMMARY_FILE`): the format and
files, each `.lzma` download's decompressed copy (made once in `<cache_dir or
data_dir>/decompressed/`, saying so on stderr), the clients kept and dropped with the reason,
the train and test examples and the quantiles of the kept clients' train rows.

The train and local test clients are stored ragged (`federated.RaggedData`: a client's rows
back to back after the previous client's, with offsets), so memory follows the examples read,
not the clients times the largest client (TFF's StackOverflow, 342,477 users of up to 256
sequences each: the rows, not 342,477 × 256 of them); training reads the padded layout's
minibatches from it, bit for bit.

With `cache_dir` (and by default, in `<data_dir>/fedjax_het_cache`, when the run streams its
cohorts, `stream=True`: large populations go straight to the memory-mapped layout), the ragged
federation is written once as .npy files under `cache_dir/<name>-<key>/` (`write_ragged`, its
train and local test under the prefixes train_ and local_) and opened as read-only `np.memmap`
leaves, the host layout cohort streaming reads (`core.stream`); the key hashes the selection
options and the source files' names, sizes and modification times, and the manifest keeps each
file's SHA-256, so a source file that changes is detected (its hash is checked whenever its size
or time differs) and the cache is rebuilt, as is a cache of another layout (the padded files of
earlier versions). Building it holds the kept clients' converted arrays in memory once; they are
written client by client into the files, and later runs read only the cohorts' rows from them.

Sent140 (LEAF's models/sent140/stacked_lstm.py): an example's x is LEAF's row [tweet id,
date, query, user, text]; the text is cut into words as LEAF's `split_line` does and the first 25
become ids (`text.sent140_tokens`). LEAF's vocabulary, the default (`natural.vocabulary='glove'`),
is every word of GloVe's glove.6B.300d.txt (`natural.glove_file`, read, never downloaded), and
the split carries GloVe's vectors [400,001, 300] (a zero row for the unknown word) that
`run.build_experiment` copies into the model's embedding; `natural.vocabulary='train'` instead
takes the `natural.vocab_size` most frequent words of the train file's tweets (every user's,
so the vocabulary does not depend on the kept clients; read again on every run, the cache
included), for runs without GloVe.

CelebA (LEAF's models/celeba/cnn.py): x are file names in CelebA's img_align_celeba/ folder
(`natural.images_dir`), y the Smiling attribute as LEAF's metadata_to_json.py writes it (0.0 /
1.0). Each image is resized to 84x84 and converted to RGB as LEAF's `_load_image` does
(`natural_files.read_image`); the pixels are scaled to [0, 1] like fed_cifar100's (LEAF feeds
0..255 to a CNN whose convolutions are each followed by batch norm). Decoding the JPEGs is the
slow part, so CelebA is cached by default (in `<data_dir>/fedjax_het_cache`, or
`natural.cache_dir`) and decoded once; the cache key holds the folder's path but not its images'
fingerprints: delete the cache after replacing images in place.

Not read: FedJAX's CIFAR-100 SQLite files, TFF's `only_digits` EMNIST.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import lzma
import os
import shutil
import sys
from typing import Callable

import numpy as np

from fedjax_het.data import natural_files, text
from fedjax_het.data.federated import FederatedSplit, RaggedData, open_ragged, write_ragged
from fedjax_het.options import ConfigError, OptionGroup, non_negative_int, option, positive_int

FORMATS = ('fedjax_sqlite', 'tff_sqlite', 'tff_h5', 'leaf_json')
VOCABULARIES = ('glove', 'train')


@dataclasses.dataclass(frozen=True)
class NaturalOptions(OptionGroup):
  """The `natural` section: how partition='natural' reads a naturally partitioned set."""
  key = 'natural'
  format: str = option('auto', 'natural sets\' file format: auto (the first found of fedjax_sqlite, tff_sqlite, tff_h5, leaf_json) | ' + ' | '.join(FORMATS), choices=('auto', *FORMATS))
  min_examples: int = option(1, 'natural sets: least train examples (images, snippets, posts as stored) a client needs to be kept', check=positive_int)
  max_examples: int = option(0, 'natural sets: keep at most this many train rows (images, sequences) of each client, its first ones (TFF StackOverflow: 256); 0 = all', check=non_negative_int)
  sequence_length: int = option(0, 'shakespeare / stackoverflow / sent140: tokens per sequence (0: the benchmark\'s, 80 / 20 / 25)', check=non_negative_int)
  vocab_size: int = option(text.STACKOVERFLOW_VOCAB_WORDS, 'stackoverflow: words in the vocabulary, the first of stackoverflow.word_count (TFF/FedJAX: 10000); sent140 with vocabulary=train: the most frequent words of the train tweets (10000 is ours, LEAF has no such vocabulary)', check=positive_int)
  vocabulary: str = option('glove', 'sent140: its words; glove = every word of natural.glove_file (LEAF\'s vocabulary), whose vectors initialise an embedding of their size (the paper\'s pretrained GloVe) | train = the natural.vocab_size most frequent words of the train tweets (no GloVe needed)', choices=VOCABULARIES)
  glove_file: str = option('', f'sent140 with vocabulary=glove: the GloVe text file, {text.GLOVE_FILE} from {text.GLOVE_SOURCE}; \'\' = <data_dir>/{text.GLOVE_FILE}')
  images_dir: str = option('', f'celeba: the folder of CelebA\'s aligned JPEGs, {natural_files.CELEBA_IMAGES}/ from {natural_files.CELEBA_SOURCE}; \'\' = <data_dir>/{natural_files.CELEBA_IMAGES}')
  cache_dir: str = option('', 'natural sets: write the packed federation once as memmapped .npy files here (checked against the source files\' SHA-256) and read them back; \'\' = <data_dir>/fedjax_het_cache with stream_cohorts=True and for celeba (its decoded images), else no cache')


@dataclasses.dataclass(frozen=True)
class _Split:
  """One split's file per format: a file name, (file name, TFF split_name), or a LEAF folder."""
  fedjax_sqlite: str | None
  tff_sqlite: tuple[str, str] | None
  tff_h5: str | None
  leaf_json: str | None


@dataclasses.dataclass(frozen=True)
class _Resolved:
  """What a set's conversion reads beyond its files: `sequence_length` (0: the set's own), the
  word vocabulary (StackOverflow, Sent140: word → id), Sent140's GloVe vectors float32 [V, D]
  (or None), `input_vocab` = V, the token ids of a text classifier's input (0 for other sets),
  and CelebA's `images_dir`."""
  sequence_length: int
  vocab: dict | None = None
  embeddings: np.ndarray | None = None
  input_vocab: int = 0
  images_dir: str = ''


def _plain(data_dir, options, train_path) -> tuple[_Resolved, list[str]]:
  """A set that reads nothing beyond its train and test files."""
  del data_dir, train_path
  return _Resolved(options.sequence_length), []


@dataclasses.dataclass(frozen=True)
class _NaturalSet:
  """A naturally partitioned set: its files, features and (x, y) conversion.

  `convert(features, resolved)` maps one client's features (arrays [n, ...] as read, LEAF's
  under 'x' and 'y') to (x [m, ...], y [m, ...]); `resources(data_dir, options, train_path)`
  gives the `_Resolved` it reads (a vocabulary, an image folder) and the extra files the cache
  fingerprints. `client` names what a client is (a writer, a user); `shapes` are also the
  features and per-example shapes a client of TFF's and FedJAX's files must hold. `reads` names
  the set-specific `natural` options it reads (the others must keep their defaults);
  `cache_by_default` caches the packed federation even without streaming;
  `test_clients_are_others`: the test file's clients are not the train file's (CIFAR-100), so
  the global test set is the whole test file and `local_test` has nothing to read.
  """
  train: _Split
  test: _Split
  shapes: dict  # TFF tf.Example features read and their per-example shapes
  convert: Callable
  num_classes: Callable  # options -> int
  x_dtype: type
  origin: str
  client: str
  reads: tuple = ()
  resources: Callable = _plain
  cache_by_default: bool = False
  test_clients_are_others: bool = False


def _emnist(features, options):
  del options
  if 'pixels' in features:  # TFF / FedJAX: [n, 28, 28] with label [n]
    pixels, labels = features['pixels'], features['label']
  else:  # LEAF: x [n, 784]
    pixels, labels = np.asarray(features['x'], np.float32), features['y']
  x = 1.0 - np.asarray(pixels, np.float32).reshape(-1, 28, 28, 1)
  return x, np.asarray(labels, np.int32)


def _cifar100(features, options):
  del options
  x = np.asarray(features['image'], np.float32).reshape(-1, 32, 32, 3) * np.float32(1 / 255)
  return x, np.asarray(features['label'], np.int32)


def _shakespeare(features, options):
  length = options.sequence_length or text.SHAKESPEARE_SEQUENCE_LENGTH
  if 'snippets' in features:
    return text.shakespeare_sequences(features['snippets'], length)
  if options.sequence_length not in (0, text.SHAKESPEARE_SEQUENCE_LENGTH):
    raise ConfigError('LEAF\'s Shakespeare examples are 80 characters; natural.sequence_length '
                      'must be 0 or 80.')
  return text.leaf_shakespeare_sequences(list(features['x']), list(features['y']))


def _stackoverflow(features, options):
  return text.stackoverflow_sequences(
      features['tokens'], options.vocab,
      options.sequence_length or text.STACKOVERFLOW_SEQUENCE_LENGTH)


def _stackoverflow_resources(data_dir, options, train_path):
  """The first `vocab_size` words of stackoverflow.word_count in data_dir."""
  del train_path
  counts_path = os.path.join(data_dir, WORD_COUNT_FILE)
  if not os.path.isfile(counts_path):
    raise ValueError(f'Dataset stackoverflow needs its vocabulary {WORD_COUNT_FILE} in '
                     f'{data_dir} (TFF stackoverflow.word_count.tar.bz2, extracted).')
  vocab = text.read_word_counts(counts_path, options.vocab_size)
  return _Resolved(options.sequence_length, vocab), [counts_path]


def _tweets(features) -> list[str]:
  """The texts of a client's LEAF Sent140 rows x [n, 5]."""
  return [str(row[text.SENT140_TEXT_FIELD]) for row in features['x']]


def _sent140(features, options):
  x = text.sent140_tokens(_tweets(features), options.vocab,
                          options.sequence_length or text.SENT140_SEQUENCE_LENGTH)
  return x, np.asarray(features['y'], np.int32)


def _sent140_resources(data_dir, options, train_path):
  """GloVe's words and vectors (LEAF's), or the train tweets' most frequent words."""
  if options.vocabulary == 'train':
    reader = natural_files.LeafJson(train_path)
    clients = reader.read(reader.sizes()[0])
    vocab = text.top_words((t for c in clients.values() for t in _tweets(c)),
                           options.vocab_size)
    return _Resolved(options.sequence_length, vocab, input_vocab=len(vocab) + 1), []
  if options.vocab_size != text.STACKOVERFLOW_VOCAB_WORDS:
    raise ConfigError('natural.vocab_size sizes the train-tweet vocabulary of sent140; with '
                      'natural.vocabulary=glove the vocabulary is the GloVe file\'s, leave it at '
                      '10000.')
  glove = os.path.expanduser(options.glove_file) or os.path.join(data_dir, text.GLOVE_FILE)
  vocab, vectors = text.read_glove(glove, vectors=True)
  return _Resolved(options.sequence_length, vocab, vectors, len(vocab) + 1), [glove]


def _celeba(features, options):
  images = [natural_files.read_image(os.path.join(options.images_dir, str(name)),
                                     natural_files.CELEBA_IMAGE_SIZE) for name in features['x']]
  return np.stack(images), np.asarray(features['y'], np.int32)


def _celeba_resources(data_dir, options, train_path):
  """The image folder, which must exist (its images are checked as they are read)."""
  del train_path
  images = os.path.expanduser(options.images_dir) or os.path.join(
      data_dir, natural_files.CELEBA_IMAGES)
  if not os.path.isdir(images):
    raise ValueError(f'Dataset celeba reads its images from {images}, which is not a folder; '
                     f'extract {natural_files.CELEBA_SOURCE} there or set natural.images_dir.')
  return _Resolved(options.sequence_length, images_dir=images), []


NATURAL_SETS = {
    'fed_emnist': _NaturalSet(
        train=_Split('federated_emnist_train.sqlite', ('emnist_all.sqlite', 'all_train'),
                     'fed_emnist_train.h5', 'train'),
        test=_Split('federated_emnist_test.sqlite', ('emnist_all.sqlite', 'all_test'),
                    'fed_emnist_test.h5', 'test'),
        shapes={'pixels': (28, 28), 'label': ()}, convert=_emnist,
        num_classes=lambda options: 62, x_dtype=np.float32, client='writer',
        origin='FedJAX: storage.googleapis.com/gresearch/fedjax/emnist/federated_emnist_'
               '{train,test}.sqlite; TFF: storage.googleapis.com/tff-datasets-public/'
               'emnist_all.sqlite.lzma or fed_emnist.tar.bz2 (HDF5); LEAF: femnist '
               'data/train/, data/test/'),
    'fed_cifar100': _NaturalSet(
        train=_Split(None, None, 'fed_cifar100_train.h5', None),
        test=_Split(None, None, 'fed_cifar100_test.h5', None),
        shapes={'image': (32, 32, 3), 'label': ()}, convert=_cifar100,
        num_classes=lambda options: 100, x_dtype=np.float32, client='client',
        origin='TFF: storage.googleapis.com/tff-datasets-public/fed_cifar100.tar.bz2, '
               'extracted', test_clients_are_others=True),
    'shakespeare': _NaturalSet(
        train=_Split('shakespeare_train.sqlite', ('shakespeare.sqlite', 'train'),
                     'shakespeare_train.h5', 'train'),
        test=_Split('shakespeare_test.sqlite', ('shakespeare.sqlite', 'test'),
                    'shakespeare_test.h5', 'test'),
        shapes={'snippets': ()}, convert=_shakespeare,
        num_classes=lambda options: text.SHAKESPEARE_VOCAB, x_dtype=np.int32,
        client='speaking role', reads=('sequence_length',),
        origin='FedJAX: storage.googleapis.com/gresearch/fedjax/shakespeare/shakespeare_'
               '{train,test}.sqlite; TFF: storage.googleapis.com/tff-datasets-public/'
               'shakespeare.sqlite.lzma or shakespeare.tar.bz2 (HDF5); LEAF: shakespeare '
               'data/train/, data/test/'),
    'stackoverflow': _NaturalSet(
        train=_Split('stackoverflow_train.sqlite', ('stackoverflow.sqlite', 'train'),
                     'stackoverflow_train.h5', None),
        test=_Split('stackoverflow_test.sqlite', ('stackoverflow.sqlite', 'test'),
                    'stackoverflow_test.h5', None),
        shapes={'tokens': ()}, convert=_stackoverflow,
        num_classes=lambda options: text.NUM_RESERVED + options.vocab_size + 1,
        x_dtype=np.int32, client='user',
        origin='FedJAX: storage.googleapis.com/gresearch/fedjax/stackoverflow/stackoverflow_'
               '{train,test}.sqlite; TFF: storage.googleapis.com/tff-datasets-public/'
               'stackoverflow.sqlite.lzma or stackoverflow.tar.bz2 (HDF5); and the vocabulary '
               'stackoverflow.word_count (TFF stackoverflow.word_count.tar.bz2)',
        reads=('sequence_length', 'vocab_size'), resources=_stackoverflow_resources),
    'sent140': _NaturalSet(
        train=_Split(None, None, None, 'train'), test=_Split(None, None, None, 'test'),
        shapes={}, convert=_sent140, num_classes=lambda options: 2, x_dtype=np.int32,
        client='user',
        origin='LEAF: data/sent140/data/train/ and test/ as its preprocess.sh writes them from '
               'Sentiment140\'s trainingandtestdata.zip, and GloVe\'s glove.6B.300d.txt',
        reads=('sequence_length', 'vocab_size', 'vocabulary', 'glove_file'),
        resources=_sent140_resources),
    'celeba': _NaturalSet(
        train=_Split(None, None, None, 'train'), test=_Split(None, None, None, 'test'),
        shapes={}, convert=_celeba, num_classes=lambda options: 2, x_dtype=np.float32,
        client='celebrity',
        origin='LEAF: data/celeba/data/train/ and test/ as its preprocess.sh writes them, and '
               'CelebA\'s img_align_celeba/ folder',
        reads=('images_dir',), resources=_celeba_resources, cache_by_default=True),
}
SET_OPTIONS = ('sequence_length', 'vocab_size', 'vocabulary', 'glove_file', 'images_dir')
NATURAL_DATASETS = tuple(NATURAL_SETS)
WORD_COUNT_FILE = 'stackoverflow.word_count'


def _describe(split: _Split, fmt: str) -> str:
  entry = getattr(split, fmt)
  if fmt == 'tff_sqlite':
    return f'{entry[0]}[.lzma] (split {entry[1]!r})'
  if fmt == 'leaf_json':
    return f'{entry}/*.json'
  return entry + ('[.lzma]' if fmt == 'fedjax_sqlite' else '')


def _source(data_dir: str, split: _Split, fmt: str) -> str | None:
  """The path of `split`'s file (or its .lzma) in format `fmt` under data_dir, if there."""
  entry = getattr(split, fmt)
  if entry is None:
    return None
  path = os.path.join(data_dir, entry[0] if fmt == 'tff_sqlite' else entry)
  if fmt == 'leaf_json':
    return path if os.path.isdir(path) else None
  for candidate in (path, path + '.lzma'):
    if os.path.isfile(candidate):
      return candidate
  return None


def _missing(name: str, data_dir: str) -> ValueError:
  spec = NATURAL_SETS[name]
  choices = '; or '.join(
      ' and '.join(dict.fromkeys(_describe(s, fmt) for s in (spec.train, spec.test)))
      for fmt in FORMATS if getattr(spec.train, fmt) is not None)
  extra = f' plus {WORD_COUNT_FILE}' if name == 'stackoverflow' else ''
  return ValueError(f'Dataset {name!r}: no file of it in data_dir={data_dir}; put {choices}'
                    f'{extra} there ({spec.origin}).')


def _decompressed_path(path: str, scratch: str) -> str:
  """Where the `.lzma` download `path` is decompressed: `scratch`/its name without .lzma."""
  return os.path.join(scratch, os.path.basename(path)[:-len('.lzma')])


def _decompressed(path: str, scratch: str) -> str:
  """`path` itself, or for a `.lzma` download its decompressed copy in `scratch`, made once
  and said on stderr (the copy takes several times the download's size)."""
  if not path.endswith('.lzma'):
    return path
  target = _decompressed_path(path, scratch)
  if not os.path.isfile(target):
    os.makedirs(scratch, exist_ok=True)
    print(f'fedjax-het: decompressing {path} ({os.path.getsize(path):,} bytes) into {target}, '
          'once: later runs read that copy (several times the download\'s size; delete it to '
          'free the space).', file=sys.stderr, flush=True)
    try:
      with lzma.open(path) as src, open(target + '.part', 'wb') as dst:
        shutil.copyfileobj(src, dst, 1 << 24)
    except (OSError, lzma.LZMAError, EOFError) as e:
      raise ValueError(f'{path} does not decompress (truncated or corrupt: {e}).') from e
    os.replace(target + '.part', target)
  return target


def _reader(path: str, split: _Split, fmt: str, shapes):
  if fmt == 'tff_h5':
    return natural_files.TffH5(path)
  if fmt == 'fedjax_sqlite':
    return natural_files.FedjaxSqlite(path)
  if fmt == 'tff_sqlite':
    return natural_files.TffSqlite(path, split.tff_sqlite[1], shapes)
  return natural_files.LeafJson(path)


def _fingerprint(path: str) -> dict:
  """Name, size and modification time of a source file (every *.json of a LEAF folder)."""
  paths = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith('.json')) \
      if os.path.isdir(path) else [path]
  return {p: [os.path.getsize(p), os.stat(p).st_mtime_ns] for p in paths}


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    for block in iter(lambda: f.read(1 << 24), b''):
      digest.update(block)
  return digest.hexdigest()


def _counts(clients: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
  """int32 [M]: the rows n_i of each client's (x [n_i, ...], y [n_i, ...])."""
  return np.array([len(y) for _, y in clients], np.int32)


def _blocks(clients: list[tuple[np.ndarray, np.ndarray]], x_dtype):
  """The ragged layout's rows client after client: each client's (x as `x_dtype`, y as
  int32), one client at a time."""
  for x, y in clients:
    yield x.astype(x_dtype, copy=False), y.astype(np.int32, copy=False)


def _pack(clients: list[tuple[np.ndarray, np.ndarray]], x_dtype) -> RaggedData:
  """Per-client (x [n_i, ...], y [n_i, ...]) → a RaggedData in memory: x [Σ n_i, ...],
  y [Σ n_i, ...], draws of length max n_i (the padded layout's, so the same batches)."""
  xs, ys = zip(*_blocks(clients, x_dtype))
  return RaggedData.from_rows(np.concatenate(xs), np.concatenate(ys), _counts(clients))


def _check_features(spec, features: dict, where: str) -> None:
  """Refuses a client of TFF's or FedJAX's files without the set's features (`spec.shapes`)
  or with other per-example shapes: another set's file under the expected name."""
  missing = sorted(set(spec.shapes) - set(features))
  if missing:
    raise ValueError(f'{where} has the features {sorted(features)}, not {sorted(spec.shapes)}: '
                     'is it another set\'s file under this name?')
  for name, shape in spec.shapes.items():
    got = np.shape(features[name])[1:]
    if got != shape:
      raise ValueError(f'{where}: feature {name!r} has examples of shape {got}, not {shape}: '
                       'is it another set\'s file under this name?')


def _checked_rows(x: np.ndarray, y: np.ndarray, num_classes: int, where: str):
  """(x [n, ...], y [n] or [n, L]) if every feature is finite and every label or token lies in
  [0, num_classes), else a ValueError naming `where` and the example (a corrupt block of a
  file without checksums, e.g. HDF5's, still decodes)."""
  if np.issubdtype(x.dtype, np.inexact):
    bad = np.flatnonzero(~np.isfinite(x.reshape(len(x), -1)).all(1))
    if bad.size:
      raise ValueError(f'{where}, example {bad[0]}: its features are not finite (NaN or inf as '
                       f'{x.dtype}): the file is corrupt there.')
  outside = (y < 0) | (y >= num_classes)
  if outside.any():
    at = tuple(np.argwhere(outside)[0])
    raise ValueError(f'{where}, example {at[0]}: label {y[at]} lies outside [0, {num_classes}): '
                     'the file is corrupt there or of another set.')
  return x, y


def _converted(spec, reader, ids, resolved, num_classes: int, limit: int = 0
               ) -> list[tuple[np.ndarray, np.ndarray]]:
  """The clients' (x, y) in `ids` order, each cut to its first `limit` rows (0: all) and
  checked (`_check_features`, `_checked_rows`); a failure names the file and the client."""
  raw = reader.read(ids)
  cut = slice(limit or None)
  out = []
  for cid in ids:
    where = f'{reader.path}: {spec.client} {cid}'
    if not isinstance(reader, natural_files.LeafJson):
      _check_features(spec, raw[cid], where)
    try:
      with np.errstate(all='ignore'):  # overflows are refused as non-finite features below
        x, y = spec.convert(raw[cid], resolved)
    except ConfigError:
      raise
    except (ValueError, TypeError) as e:
      raise ValueError(f'{where}: its examples do not convert ({e}).') from e
    out.append(_checked_rows(x[cut], y[cut], num_classes, where))
  return out


@dataclasses.dataclass(frozen=True)
class NaturalSplit(FederatedSplit):
  """A natural set's FederatedSplit with `summary`, what was read (`format_summary`,
  `SUMMARY_FILE`): the format and files, the clients kept and dropped with the reason, the
  train and test examples and the per-client train rows' quantiles."""
  summary: dict = dataclasses.field(default_factory=dict)


SUMMARY_FILE = 'data_summary.json'
QUANTILES = (0.0, 0.25, 0.5, 0.75, 1.0)


def _select(spec, paths, ids, sizes, test_ids, *, num_clients: int, seed: int,
            options: NaturalOptions, local_test: bool) -> tuple[list, list, dict]:
  """(kept train ids, the test file's ids read, the summary's `clients`), as the module
  docstring says; refuses train and test files that share no client when the set's test
  clients are the train ones, and a selection none of whose clients has test examples."""
  in_test = np.isin(np.asarray(ids, object), np.asarray(test_ids, object))
  if spec.test_clients_are_others and local_test:
    raise ConfigError(f'{paths[1]} holds other clients than {paths[0]} (as the set is made), '
                      'so no client has its own test examples: set local_test=False.')
  if not spec.test_clients_are_others and not in_test.any():
    raise ValueError(f'{paths[0]} and {paths[1]} share no {spec.client}: none of the train '
                     f'file\'s {len(ids)} ({ids[0]!r}, ...) is among the test file\'s '
                     f'{len(test_ids)} ({test_ids[0]!r}, ...), so no kept {spec.client} has test '
                     'examples; put the two splits of one download in data_dir.')
  enough = sizes >= options.min_examples
  eligible = enough & in_test if local_test else enough
  pool = np.flatnonzero(eligible)
  if num_clients > pool.size:
    raise ConfigError(
        f'{paths[0]} has {pool.size} clients with >= {options.min_examples} examples'
        f'{" and a test split" if local_test else ""}; num_clients={num_clients} is too many '
        f'({f"set num_clients <= {pool.size}" if pool.size else "lower natural.min_examples"}).')
  drawn = pool if num_clients == pool.size else np.sort(
      np.random.default_rng(seed).choice(pool, num_clients, replace=False))
  kept = [ids[i] for i in drawn]
  test, kept_ids = list(test_ids), set(kept)
  if not spec.test_clients_are_others:
    test = [c for c in test_ids if c in kept_ids]
    if not test:
      raise ValueError(f'no {spec.client} kept of {paths[0]} (num_clients={num_clients}, '
                       f'seed={seed}) has test examples in {paths[1]}; set local_test=True to '
                       'keep only those that have some.')
  dropped = {f'fewer than natural.min_examples={options.min_examples} train examples':
                 int(np.sum(~enough)),
             'no test examples (local_test)': int(np.sum(enough & ~eligible)),
             f'not drawn (num_clients={num_clients} of {pool.size}, seed={seed})':
                 int(pool.size - num_clients)}
  return kept, test, {
      'kind': spec.client, 'in_train_file': len(ids), 'kept': len(kept),
      'dropped': {reason: n for reason, n in dropped.items() if n},
      'in_test_file': len(test_ids), 'test_file_only': int(len(set(test_ids) - set(ids))),
      'kept_without_test': 0 if spec.test_clients_are_others else len(kept) - len(test),
      'test_set': ('the whole test file (its clients are others)'
                   if spec.test_clients_are_others else f'each kept {spec.client}\'s own')}


def _files(spec, fmt: str, paths: list[str], scratch: str) -> dict:
  """The summary's `files`: train and test (TFF SQLite's split names), other files read, and
  each `.lzma` download's decompressed copy and its size."""
  named = [f'{p} (split {s.tff_sqlite[1]!r})' if fmt == 'tff_sqlite' else p
           for p, s in zip(paths, (spec.train, spec.test))]
  copies = {p: _decompressed_path(p, scratch) for p in dict.fromkeys(paths[:2])
            if p.endswith('.lzma')}
  return {'train': named[0], 'test': named[1], 'other': paths[2:],
          'decompressed': {p: {'into': t, 'bytes': os.path.getsize(t)}
                           for p, t in copies.items()}}


def _summary(name, fmt, files, clients, stored, train, test_rows) -> dict:
  """What `load_natural` read (NaturalSplit.summary); `stored`: the kept clients' train
  examples as the files count them, `train` their converted (x, y), `test_rows` the global
  test set's rows."""
  rows = np.array([len(y) for _, y in train])
  return {'dataset': name, 'format': fmt, 'files': files, 'clients': clients,
          'examples': {'train_stored': int(stored), 'train_rows': int(rows.sum()),
                       'test_rows': int(test_rows)},
          'train_rows_per_client': {f'q{round(100 * q)}': float(v) for q, v in
                                    zip(QUANTILES, np.quantile(rows, QUANTILES))}}


def format_summary(summary: dict) -> str:
  """The lines a run prints of a NaturalSplit's `summary`."""
  files, clients, examples = summary['files'], summary['clients'], summary['examples']
  dropped = '; '.join(f'{n} {reason}' for reason, n in clients['dropped'].items()) or 'none'
  quantiles = ', '.join(f'{k} {v:g}' for k, v in summary['train_rows_per_client'].items())
  lines = [
      f'data: {summary["dataset"]}, {summary["format"]} files: train {files["train"]}, test '
      f'{files["test"]}' + ''.join(f', {p}' for p in files['other']),
      f'  clients: {clients["kept"]} of the train file\'s {clients["in_train_file"]}, one '
      f'per {clients["kind"]}; dropped: {dropped}',
      f'  train: {examples["train_stored"]} examples as stored, {examples["train_rows"]} '
      f'rows; rows per client: {quantiles}',
      f'  test: {examples["test_rows"]} rows, {clients["test_set"]} (test file: '
      f'{clients["in_test_file"]} clients, {clients["test_file_only"]} of them not in the train '
      f'file; kept without test examples: {clients["kept_without_test"]})']
  lines += [f'  decompressed: {source} into {copy["into"]} ({copy["bytes"]:,} bytes)'
            for source, copy in files['decompressed'].items()]
  if summary.get('cache'):
    lines.append(f'  cache: {summary["cache"]}'
                 f'{" (read back)" if summary.get("from_cache") else " (written)"}')
  return '\n'.join(lines)


def load_natural(name: str, data_dir: str, *, num_clients: int, seed: int,
                 options: NaturalOptions, local_test: bool = False,
                 stream: bool = False) -> NaturalSplit:
  """The natural federation of `name` from the files in `data_dir` (module docstring).

  Returns:
    A NaturalSplit: train a `RaggedData` with x [Σ counts, *x_shape] (float32 images or int32
    tokens), y [Σ counts] labels or [Σ counts, L] next tokens, counts [num_clients] (rows after
    conversion: images, or sequences) and max_examples the largest count; test_x/test_y the
    global test set; local_test per client with `local_test` (a `RaggedData` too); client_ids
    the files' ids of the train rows; input_vocab and embeddings Sent140's token ids and GloVe
    vectors (0 and None for other sets); `summary` what was read (`format_summary`). With
    `options.cache_dir`, or with `stream` (the run streams its cohorts; the cache then defaults
    to `<data_dir>/fedjax_het_cache`), x and y are np.memmap.

  Raises:
    ValueError: unknown name, a missing data_dir or files (one line naming what to put where),
      unreadable or inconsistent files (naming the file and the client), train and test files
      that share no client, or too few eligible clients.
  """
  if name not in NATURAL_SETS:
    raise ValueError(f'Unknown natural dataset {name!r}; known: {", ".join(NATURAL_DATASETS)}.')
  spec = NATURAL_SETS[name]
  if not data_dir or not os.path.isdir(os.path.expanduser(data_dir)):
    raise ValueError(f'Dataset {name!r} is read from its files: data_dir={data_dir or "(empty)"} '
                     f'is not a directory; pass --config.data_dir=DIR holding them '
                     f'({spec.origin}).')
  data_dir = os.path.expanduser(data_dir)
  _check_reads(name, options)
  formats = FORMATS if options.format == 'auto' else (options.format,)
  found = [f for f in formats if _source(data_dir, spec.train, f)]
  if not found:
    if options.format != 'auto' and getattr(spec.train, options.format) is None:
      raise ConfigError(f'natural.format={options.format!r} has no files of {name!r}; use one '
                        f'of {", ".join(f for f in FORMATS if getattr(spec.train, f))}.')
    raise _missing(name, data_dir)
  fmt = found[0]
  cache_dir = options.cache_dir or (os.path.join(data_dir, 'fedjax_het_cache')
                                    if stream or spec.cache_by_default else '')
  scratch = os.path.join(cache_dir or data_dir, 'decompressed')
  paths = [_source(data_dir, s, fmt) for s in (spec.train, spec.test)]
  if paths[1] is None:
    raise ValueError(f'{data_dir} has {os.path.basename(paths[0])} but not the test split '
                     f'{_describe(spec.test, fmt)}.')
  resolved, extra_sources = spec.resources(data_dir, options, paths[0])
  paths += extra_sources
  finish = lambda split: dataclasses.replace(
      split, num_classes=spec.num_classes(options), input_vocab=resolved.input_vocab,
      embeddings=resolved.embeddings)
  cache = None
  if cache_dir:
    key = {'name': name, 'format': fmt, 'num_clients': num_clients, 'seed': seed,
           'local_test': local_test, 'min_examples': options.min_examples,
           'max_examples': options.max_examples,
           'sequence_length': options.sequence_length, 'vocab_size': options.vocab_size,
           'vocabulary': options.vocabulary, 'images_dir': resolved.images_dir and os.path.abspath(resolved.images_dir),
           'sources': [os.path.abspath(p) for p in paths]}
    cache = _Cache(os.path.join(cache_dir, name + '-' + hashlib.sha256(
        json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]), paths)
    cached = cache.load()
    if cached is not None:
      return finish(cached)
  train_reader, test_reader = (
      _reader(_decompressed(p, scratch), s, fmt, spec.shapes)
      for p, s in zip(paths, (spec.train, spec.test)))
  ids, sizes = train_reader.sizes()
  test_ids, _ = test_reader.sizes()
  kept, test_kept, clients = _select(spec, paths, ids, sizes, test_ids, num_clients=num_clients,
                                     seed=seed, options=options, local_test=local_test)
  num_classes = spec.num_classes(options)
  train = _converted(spec, train_reader, kept, resolved, num_classes, options.max_examples)
  tests = _converted(spec, test_reader, test_kept, resolved, num_classes)
  test_x = np.concatenate([x for x, _ in tests]).astype(spec.x_dtype)
  test_y = np.concatenate([y for _, y in tests])
  local = None
  if local_test:
    by_id = dict(zip(test_kept, tests))
    local = [by_id[c] for c in kept]
  stored = sizes[np.isin(np.asarray(ids, object), np.asarray(kept, object))].sum()
  summary = _summary(name, fmt, _files(spec, fmt, paths, scratch), clients, stored, train,
                     len(test_y))
  if cache is not None:
    return finish(cache.write(train, local, test_x, test_y, spec.x_dtype, kept, summary))
  return finish(NaturalSplit(
      train=_pack(train, spec.x_dtype), test_x=test_x, test_y=test_y,
      local_test=None if local is None else _pack(local, spec.x_dtype),
      num_classes=0, client_ids=tuple(kept), summary=summary))


def load_from_config(config) -> NaturalSplit:
  """`load_natural` of a run's config (partition='natural'): its dataset, data_dir,
  num_clients, seed, local_test, stream_cohorts and `natural` section. The CLI's data checks
  read `.summary` (`format_summary`) of what it returns."""
  return load_natural(config.dataset, config.data_dir, num_clients=config.num_clients,
                      seed=config.seed, options=NaturalOptions.from_config(config),
                      local_test=config.local_test, stream=config.stream_cohorts)


def _check_reads(name: str, options: NaturalOptions) -> None:
  """Refuses a set-specific `natural` option changed for a set that does not read it."""
  defaults = NaturalOptions.defaults()
  for key in SET_OPTIONS:
    if key not in NATURAL_SETS[name].reads and getattr(options, key) != defaults[key]:
      readers = [n for n, s in NATURAL_SETS.items() if key in s.reads]
      raise ConfigError(f'natural.{key} is read by {", ".join(readers)} only; dataset {name!r} '
                        f'does not read it, leave it at {defaults[key]!r}.')


CACHE_LAYOUT = 'ragged'  # the cache's `layout`: write_ragged's files (earlier: padded .npy)


class _Cache:
  """A packed natural federation as .npy files in `directory`, valid while its sources are
  unchanged (`manifest.json`: each source's size, modification time and SHA-256) and its
  layout is `CACHE_LAYOUT` (train and local test as `write_ragged` writes them)."""

  def __init__(self, directory: str, sources: list[str]):
    self.directory, self.sources = directory, sources
    self.manifest = os.path.join(directory, 'manifest.json')

  def _path(self, name):
    return os.path.join(self.directory, name + '.npy')

  def load(self) -> FederatedSplit | None:
    """The cached split, or None if there is none, it is of another layout or a source file
    changed."""
    try:
      with open(self.manifest) as f:
        manifest = json.load(f)
    except (OSError, ValueError):
      return None
    if manifest.get('layout') != CACHE_LAYOUT:  # padded, or before summaries: rebuilt
      return None
    for source in self.sources:
      for path, (size, mtime) in _fingerprint(source).items():
        stored = manifest['sources'].get(path)
        if stored is None:
          return None
        if [size, mtime] != stored[:2] and _sha256(path) != stored[2]:
          return None
    local = open_ragged(self.directory, 'local_') if manifest['local_test'] else None
    return NaturalSplit(train=open_ragged(self.directory, 'train_'),
                        test_x=np.load(self._path('test_x')),
                        test_y=np.load(self._path('test_y')), local_test=local,
                        num_classes=0, client_ids=tuple(manifest['client_ids']),
                        summary={**manifest['summary'], 'from_cache': True})

  def write(self, train, local, test_x, test_y, x_dtype, client_ids, summary) -> NaturalSplit:
    """Writes the ragged train and local test clients, the test set and the manifest (last),
    then opens them as `load` does."""
    try:
      os.makedirs(self.directory, exist_ok=True)
      if os.path.exists(self.manifest):
        os.remove(self.manifest)
      for prefix, clients in (('train_', train), ('local_', local)):
        if clients is not None:
          write_ragged(self.directory, _counts(clients), _blocks(clients, x_dtype),
                       prefix=prefix)
      np.save(self._path('test_x'), test_x)
      np.save(self._path('test_y'), test_y)
      sources = {}
      for source in self.sources:
        for path, stat in _fingerprint(source).items():
          sources[path] = [*stat, _sha256(path)]
      with open(self.manifest + '.part', 'w') as f:
        json.dump({'layout': CACHE_LAYOUT, 'sources': sources, 'local_test': local is not None,
                   'client_ids': list(client_ids),
                   'summary': {**summary, 'cache': self.directory}}, f)
      os.replace(self.manifest + '.part', self.manifest)
    except OSError as e:
      raise ValueError(f'cannot write the natural-data cache {self.directory} ({e}); set '
                       'natural.cache_dir to a writable directory.') from e
    split = self.load()
    return dataclasses.replace(split, summary={**split.summary, 'from_cache': False})
