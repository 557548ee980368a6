"""Centralised datasets as host numpy arrays: offline sets (digits, synthetic) and real image sets.

`load_dataset(name, ...)` returns an `ArrayDataset` with images as float32 NHWC in [0, 1]
(or standardised per channel with `normalize=True`) and int32 labels. Nothing is ever
downloaded here. The real sets (mnist, fashion_mnist, emnist, cifar10, cifar100) are read from
`data_dir` in this order:

1. the dataset's own distribution files, when any of them is in `data_dir`
   (`fedjax_het.data.files`): the IDX files of MNIST / Fashion-MNIST / EMNIST
   (`train-images-idx3-ubyte[.gz]` ..., EMNIST's named `emnist-<split>-...`), the python pickles
   of CIFAR (`cifar-10-batches-py/`, `cifar-100-python/`, or their contents). On Debian,
   `apt-get install dataset-fashion-mnist` puts Fashion-MNIST's in /usr/share/datasets/fashion-mnist;
2. otherwise TFDS's prepared data in `data_dir` (no `data_dir`: TFDS's default directory);
3. otherwise one line saying how to provide the files. A `data_dir` that does not exist, or
   raw files that are incomplete, truncated or inconsistent, stop with one line naming them.

Both readers give the same arrays and class counts (TFDS copies the same files); EMNIST is
turned upright by either (see `_load_emnist`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import os

import numpy as np

from fedjax_het.data import files


@dataclasses.dataclass(frozen=True)
class ArrayDataset:
  """A centralised dataset with a fixed train/test split.

  Attributes:
    name: dataset name as passed to `load_dataset`.
    x_train: [n_train, *feature_shape] float32, e.g. [n, H, W, C] images or [n, d] features.
    y_train: [n_train] int32 labels in [0, num_classes).
    x_test: [n_test, *feature_shape] float32.
    y_test: [n_test] int32.
    num_classes: number of label classes.
  """
  name: str
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int

  def __post_init__(self):
    for split, x, y in (('train', self.x_train, self.y_train), ('test', self.x_test, self.y_test)):
      if y.ndim != 1 or x.shape[:1] != y.shape:
        raise ValueError(f'{self.name} {split}: x {x.shape} and y {y.shape} must share the '
                         'leading axis.')
    if self.x_train.shape[1:] != self.x_test.shape[1:]:
      raise ValueError(f'{self.name}: train features {self.x_train.shape[1:]} differ from test '
                       f'features {self.x_test.shape[1:]}.')


def _load_digits(*, data_dir, seed, test_fraction=0.2):
  """scikit-learn's bundled 8x8 digits (1797 images), stratified seeded split, x = pixel / 16."""
  del data_dir
  from sklearn import datasets, model_selection
  if not 0 < test_fraction < 1:
    raise ValueError(f'test_fraction must lie in (0, 1), got {test_fraction}.')
  digits = datasets.load_digits()
  x = (digits.images / 16.0).astype(np.float32)[..., None]
  y = digits.target.astype(np.int32)
  x_train, x_test, y_train, y_test = model_selection.train_test_split(
      x, y, test_size=test_fraction, random_state=seed, stratify=y)
  return ArrayDataset('digits', x_train, y_train, x_test, y_test, num_classes=10)


def _load_synthetic(*, data_dir, seed, num_train=2000, num_test=500, shape=(8, 8, 1),
                    num_classes=10, noise=1.0):
  """Gaussian class clusters: x = prototype[y] + noise * N(0, I), prototypes ~ N(0, I).

  Prototypes live in the flattened feature space of size prod(shape); larger `noise` makes the
  task harder. Labels are balanced (counts differ by at most 1) and shuffled.
  """
  del data_dir
  shape = tuple(int(s) for s in np.atleast_1d(shape))
  if num_train < 1 or num_test < 1 or num_classes < 2 or not shape or min(shape) < 1 or noise < 0:
    raise ValueError('synthetic needs num_train >= 1, num_test >= 1, num_classes >= 2, '
                     f'a non-empty positive shape and noise >= 0, got {num_train}, {num_test}, '
                     f'{num_classes}, {shape}, {noise}.')
  rng = np.random.default_rng(seed)
  prototypes = rng.normal(size=(num_classes, int(np.prod(shape))))

  def sample(n):
    y = rng.permutation(np.arange(n) % num_classes).astype(np.int32)
    x = prototypes[y] + noise * rng.normal(size=(n, prototypes.shape[1]))
    return x.astype(np.float32).reshape((n, *shape)), y

  x_train, y_train = sample(num_train)
  x_test, y_test = sample(num_test)
  return ArrayDataset('synthetic', x_train, y_train, x_test, y_test, num_classes=num_classes)


def _read_tfds(name: str, tfds_name: str, data_dir: str | None, *, label_key: str = 'label',
               otherwise: str = '') -> ArrayDataset:
  """Reads a prepared TFDS image-classification set into memory; never downloads.

  `label_key` is the TFDS feature used as the label; `otherwise` ends the errors with the other
  way to provide the data.
  """
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  try:
    import tensorflow as tf
    import tensorflow_datasets as tfds
  except ImportError as e:
    raise ValueError(f'Dataset {name!r} needs TensorFlow: pip install -e ".[tfds]" '
                     f'({e}){otherwise}.') from e
  try:  # Keep TensorFlow off accelerators so JAX keeps their memory.
    tf.config.set_visible_devices([], 'GPU')
  except RuntimeError:
    pass  # TF was already initialised by the caller; its device choice stands.
  where = data_dir or tfds.core.constants.DATA_DIR
  absl_logger = logging.getLogger('absl')
  level = absl_logger.level
  absl_logger.setLevel(logging.ERROR)  # our error below says it all, once
  try:
    builder = tfds.builder(tfds_name, data_dir=data_dir)
    splits = tfds.load(tfds_name, split=['train', 'test'], data_dir=data_dir, download=False)
  except (AssertionError, FileNotFoundError, tfds.core.DatasetNotFoundError,
          tf.errors.NotFoundError) as e:
    raise ValueError(
        f'Dataset {tfds_name!r} is not prepared under data_dir={where}: download it on a networked '
        f'machine with `python -c "import tensorflow_datasets as tfds; '
        f"tfds.builder('{tfds_name}', data_dir='{where}').download_and_prepare()\"` "
        f'and pass --config.data_dir={where}{otherwise}.') from e
  finally:
    absl_logger.setLevel(level)
  arrays = []
  for ds in splits:
    # One batch of the whole split. Not `batch_size=-1`: that sizes the batch from the stored
    # split metadata, which TFDS mock data lacks; the dataset cardinality is always known here.
    ds = ds.map(lambda example: (example['image'], example[label_key]))
    x, y = tfds.as_numpy(ds.batch(int(ds.cardinality())).get_single_element())
    x = x.astype(np.float32)
    x *= np.float32(1 / 255)
    arrays += [x, y.astype(np.int32)]
  num_classes = builder.info.features[label_key].num_classes
  return ArrayDataset(name, *arrays, num_classes=num_classes)


def _files_or_tfds(name: str, data_dir: str | None, raw: files.Idx | files.CifarPickles,
                   num_classes: int, origin: str, *, tfds_name: str | None = None,
                   label_key: str = 'label') -> ArrayDataset:
  """The raw files `raw` in `data_dir` if any of them is there, else TFDS's prepared set.

  Args:
    name: dataset name.
    data_dir: directory of the raw files or of TFDS's prepared data (None: TFDS's default).
    raw: the distribution files' reader.
    num_classes: the label count (TFDS's for the same set).
    origin: where the raw files come from, for the error messages.
    tfds_name: TFDS's name of the set (default `name`).
    label_key: TFDS's label feature.
  """
  tfds_name = tfds_name or name
  files_text = f'{raw.describe()} ({origin})'
  if data_dir:
    data_dir = os.path.expanduser(data_dir)
    if not os.path.isdir(data_dir):
      raise ValueError(f'Dataset {name!r}: data_dir={data_dir} does not exist; put {files_text} '
                       f'there, or prepare TFDS\'s {tfds_name!r} there, and pass '
                       '--config.data_dir=DIR.')
    if raw.present(data_dir):
      return ArrayDataset(name, *raw.read(data_dir, num_classes), num_classes=num_classes)
  return _read_tfds(name, tfds_name, data_dir, label_key=label_key,
                    otherwise=f'; or put {files_text} in a directory DIR and pass '
                              '--config.data_dir=DIR')


_ORIGINS = {
    'mnist': 'from yann.lecun.com/exdb/mnist',
    'fashion_mnist': ('from github.com/zalandoresearch/fashion-mnist; on Debian '
                      '`apt-get install dataset-fashion-mnist` puts them in '
                      '/usr/share/datasets/fashion-mnist'),
    'emnist': "the gzip/ folder of NIST's EMNIST gzip.zip",
    'cifar10': 'cifar-10-python.tar.gz from www.cs.toronto.edu/~kriz/cifar.html, extracted',
    'cifar100': 'cifar-100-python.tar.gz from www.cs.toronto.edu/~kriz/cifar.html, extracted',
}
# Label counts as TFDS gives them (EMNIST letters: labels 1..26 of 37, as NIST stores them).
_EMNIST_CLASSES = {'byclass': 62, 'bymerge': 47, 'balanced': 47, 'letters': 37, 'digits': 10,
                   'mnist': 10}
_CIFAR10 = files.CifarPickles('cifar-10-batches-py',
                              tuple(f'data_batch_{i}' for i in range(1, 6)), ('test_batch',),
                              'labels')
_CIFAR100_LABELS = {'fine': 100, 'coarse': 20}


def _load_mnist_like(name, *, data_dir, seed):
  """MNIST or Fashion-MNIST: [n, 28, 28, 1], 10 classes (`seed` is unused)."""
  del seed
  return _files_or_tfds(name, data_dir, files.Idx(), 10, _ORIGINS[name])


def _load_emnist(*, data_dir, seed, emnist_split='balanced'):
  """EMNIST `emnist_split`, [n, 28, 28, 1], turned upright.

  NIST stores every EMNIST image transposed (rows are the glyph's columns) and TFDS copies them
  as stored; both readers' images are transposed back here, so they share MNIST's orientation.
  """
  del seed
  if emnist_split not in _EMNIST_CLASSES:
    raise ValueError(f'Unknown emnist_split {emnist_split!r}; choose one of '
                     f'{", ".join(_EMNIST_CLASSES)}.')
  ds = _files_or_tfds('emnist', data_dir, files.Idx(f'emnist-{emnist_split}-'),
                      _EMNIST_CLASSES[emnist_split], _ORIGINS['emnist'],
                      tfds_name=f'emnist/{emnist_split}')
  upright = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))
  return dataclasses.replace(ds, x_train=upright(ds.x_train), x_test=upright(ds.x_test))


def _load_cifar10(*, data_dir, seed):
  """CIFAR-10: [n, 32, 32, 3], 10 classes (`seed` is unused)."""
  del seed
  return _files_or_tfds('cifar10', data_dir, _CIFAR10, 10, _ORIGINS['cifar10'])


def _load_cifar100(*, data_dir, seed, cifar100_labels='fine'):
  """CIFAR-100: [n, 32, 32, 3] with the 100 fine labels or the 20 coarse superclasses."""
  del seed
  if cifar100_labels not in _CIFAR100_LABELS:
    raise ValueError(f"cifar100_labels must be 'fine' or 'coarse', got {cifar100_labels!r}.")
  raw = files.CifarPickles('cifar-100-python', ('train',), ('test',), f'{cifar100_labels}_labels')
  return _files_or_tfds('cifar100', data_dir, raw, _CIFAR100_LABELS[cifar100_labels],
                        _ORIGINS['cifar100'],
                        label_key='label' if cifar100_labels == 'fine' else 'coarse_label')


_LOADERS = {
    'digits': _load_digits,
    'synthetic': _load_synthetic,
    'mnist': functools.partial(_load_mnist_like, 'mnist'),
    'fashion_mnist': functools.partial(_load_mnist_like, 'fashion_mnist'),
    'emnist': _load_emnist,
    'cifar10': _load_cifar10,
    'cifar100': _load_cifar100,
}
DATASETS = tuple(_LOADERS)


def _standardize(ds: ArrayDataset) -> ArrayDataset:
  """Per-channel (last axis) standardisation with train mean/std, applied to train and test."""
  axes = tuple(range(ds.x_train.ndim - 1))
  mean = ds.x_train.mean(axis=axes, dtype=np.float64)
  std = np.maximum(ds.x_train.std(axis=axes, dtype=np.float64), 1e-8)
  scale = lambda x: ((x - mean) / std).astype(np.float32)
  return dataclasses.replace(ds, x_train=scale(ds.x_train), x_test=scale(ds.x_test))


def load_dataset(name: str, *, data_dir: str | None = None, seed: int = 0,
                 normalize: bool = False, **options) -> ArrayDataset:
  """Loads dataset `name` (one of `DATASETS`) into host memory.

  Args:
    name: 'digits', 'synthetic', 'mnist', 'fashion_mnist', 'emnist', 'cifar10' or 'cifar100'.
    data_dir: directory holding the real set's distribution files or TFDS's prepared data (see
      the module docstring for the order; None = TFDS's default directory).
    seed: seed of the digits train/test split and of the synthetic generator.
    normalize: standardise each channel with the train mean/std instead of keeping [0, 1].
    **options: per-dataset options: digits `test_fraction`; synthetic `num_train`, `num_test`,
      `shape`, `num_classes`, `noise`; emnist `emnist_split`; cifar100 `cifar100_labels`
      ('fine' or 'coarse').

  Returns:
    An `ArrayDataset` with float32 features [n, *feature_shape] and int32 labels [n].

  Raises:
    ValueError: unknown name or option, bad option value, a missing `data_dir`, raw files that
      are incomplete or corrupt, or a real set found neither as raw files nor prepared by TFDS.
  """
  if name not in _LOADERS:
    raise ValueError(f'Unknown dataset {name!r}; known datasets: {", ".join(DATASETS)}.')
  loader = _LOADERS[name]
  valid = [p for p in inspect.signature(loader).parameters if p not in ('data_dir', 'seed')]
  unknown = sorted(set(options) - set(valid))
  if unknown:
    raise ValueError(f'Unknown option(s) {unknown} for dataset {name!r}; valid options: '
                     f'{sorted(valid + ["normalize"])}.')
  ds = loader(data_dir=data_dir, seed=seed, **options)
  return _standardize(ds) if normalize else ds
