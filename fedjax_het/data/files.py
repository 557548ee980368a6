"""Readers of the datasets' own distribution formats: IDX files and CIFAR python pickles.

- `Idx`: MNIST, Fashion-MNIST and EMNIST as LeCun, Zalando and NIST ship them, four IDX files
  (`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`,
  `t10k-labels-idx1-ubyte`, each gzipped (`.gz`) or not, EMNIST's with an `emnist-<split>-`
  prefix) directly in the data directory.
- `CifarPickles`: CIFAR-10 / CIFAR-100 as the python tarballs extract, `cifar-10-batches-py/`
  (`data_batch_1..5`, `test_batch`) and `cifar-100-python/` (`train`, `test`), either in the data
  directory or the data directory itself. The pickles are read with an unpickler that builds only
  dicts, lists and numpy arrays, so a foreign pickle cannot run code.

Both return (x_train, y_train, x_test, y_test): float32 [n, H, W, C] images in [0, 1] and int32
[n] labels, checked against the headers and the class count; any unreadable, truncated or
inconsistent file raises a one-line ValueError naming it. `fedjax_het.data.sources` decides when
to use them (see `load_dataset`).
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import math
import os
import pickle
import struct
import zlib

import numpy as np

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]

_IDX_UNSIGNED_BYTE = 0x08
_IDX_SPLITS = (('train-images-idx3-ubyte', 'train-labels-idx1-ubyte'),
               ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'))


def _unit_float(x: np.ndarray) -> np.ndarray:
  """uint8 pixels → float32 in [0, 1], as the TFDS reader scales them."""
  x = x.astype(np.float32)
  x *= np.float32(1 / 255)
  return x


def _checked_labels(y: np.ndarray, num_classes: int, path: str) -> np.ndarray:
  """y as int32 [n], or an error naming `path` if a label lies outside [0, num_classes)."""
  if y.size and (y.min() < 0 or y.max() >= num_classes):
    raise ValueError(f'{path}: labels span [{y.min()}, {y.max()}], outside [0, {num_classes}).')
  return y.astype(np.int32)


def _read_bytes(path: str) -> bytes:
  """The whole file, gunzipped if its name ends in .gz."""
  try:
    with (gzip.open if path.endswith('.gz') else open)(path, 'rb') as f:
      return f.read()
  except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError
    raise ValueError(f'{path} is unreadable or truncated ({e}).') from e


def read_idx(path: str, ndim: int) -> np.ndarray:
  """An IDX file of unsigned bytes with `ndim` dimensions as a uint8 array of the header's shape.

  The header is the magic 0x0000_08_<ndim> and `ndim` big-endian uint32 sizes; the data must fill
  exactly their product.
  """
  raw = _read_bytes(path)
  header = 4 + 4 * ndim
  magic = bytes([0, 0, _IDX_UNSIGNED_BYTE, ndim])
  if len(raw) < header or raw[:4] != magic:
    raise ValueError(f'{path} is not an IDX file of {ndim}-d unsigned bytes (magic '
                     f'0x{raw[:4].hex()}, expected 0x{magic.hex()}).')
  shape = struct.unpack(f'>{ndim}I', raw[4:header])
  if len(raw) - header != math.prod(shape):
    raise ValueError(f'{path} is truncated or corrupt: {len(raw) - header} data bytes, its '
                     f'header says {math.prod(shape)} ({"x".join(map(str, shape))}).')
  return np.frombuffer(raw, np.uint8, offset=header).reshape(shape)


def _find(directory: str, names: tuple[str, ...]) -> str | None:
  """The first of `names` that is a file in `directory`, else None."""
  for name in names:
    path = os.path.join(directory, name)
    if os.path.isfile(path):
      return path
  return None


@dataclasses.dataclass(frozen=True)
class Idx:
  """The four IDX files of an MNIST-like set, `<prefix>train-images-idx3-ubyte[.gz]` etc."""
  prefix: str = ''

  def _names(self, base: str) -> tuple[str, str]:
    return self.prefix + base + '.gz', self.prefix + base

  def describe(self) -> str:
    return ', '.join(f'{self.prefix}{base}[.gz]' for pair in _IDX_SPLITS for base in pair)

  def present(self, data_dir: str) -> bool:
    """Whether any of the four files is in `data_dir`."""
    return any(_find(data_dir, self._names(base)) for pair in _IDX_SPLITS for base in pair)

  def read(self, data_dir: str, num_classes: int) -> Arrays:
    """Images [n, 28, 28, 1] (as stored, rows first) and labels of train then test."""
    arrays = []
    for images_base, labels_base in _IDX_SPLITS:
      paths = []
      for base in (images_base, labels_base):
        path = _find(data_dir, self._names(base))
        if path is None:
          raise ValueError(f'{data_dir} has some IDX files of this dataset but not '
                           f'{self.prefix}{base}[.gz].')
        paths.append(path)
      x, y = read_idx(paths[0], ndim=3), read_idx(paths[1], ndim=1)
      if x.shape[0] != y.shape[0]:
        raise ValueError(f'{paths[0]} holds {x.shape[0]} images but {paths[1]} holds '
                         f'{y.shape[0]} labels.')
      arrays += [_unit_float(x[..., None]), _checked_labels(y, num_classes, paths[1])]
    return tuple(arrays)


class _ArrayUnpickler(pickle.Unpickler):
  """Builds dicts, lists, bytes and numpy arrays only; any other global is refused."""

  _NUMPY_NAMES = ('_reconstruct', '_frombuffer', 'ndarray', 'dtype', 'scalar')

  def find_class(self, module, name):
    if ((module.split('.')[0] == 'numpy' and name in self._NUMPY_NAMES) or
        (module, name) == ('_codecs', 'encode')):
      return super().find_class(module, name)
    raise pickle.UnpicklingError(f'refusing to load {module}.{name}, not an array')


def _read_pickle(path: str) -> dict:
  """A CIFAR batch: a dict with byte-string keys."""
  raw = _read_bytes(path)
  try:
    batch = _ArrayUnpickler(io.BytesIO(raw), encoding='bytes').load()
  except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as e:
    raise ValueError(f'{path} is not a readable CIFAR pickle ({e}).') from e
  if not isinstance(batch, dict):
    raise ValueError(f'{path} is not a CIFAR pickle (holds a {type(batch).__name__}).')
  return batch


@dataclasses.dataclass(frozen=True)
class CifarPickles:
  """A CIFAR python release: `folder`/ with pickled `train` and `test` batches.

  Each batch is a dict with b'data' [n, 3072] uint8 (1024 red, 1024 green, 1024 blue values, each
  32x32 row-major) and the list `label_key` of n labels.
  """
  folder: str
  train: tuple[str, ...]
  test: tuple[str, ...]
  label_key: str

  def describe(self) -> str:
    return f'{self.folder}/ with {", ".join(self.train + self.test)}'

  def _root(self, data_dir: str) -> str:
    """data_dir/folder if it exists, else data_dir (the folder itself may be given)."""
    inner = os.path.join(data_dir, self.folder)
    return inner if os.path.isdir(inner) else data_dir

  def present(self, data_dir: str) -> bool:
    """Whether any batch file is in data_dir/folder or data_dir."""
    root = self._root(data_dir)
    return any(os.path.isfile(os.path.join(root, n)) for n in self.train + self.test)

  def _read_batches(self, root: str, names: tuple[str, ...],
                    num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Images [n, 32, 32, 3] and labels [n] of the named batches, concatenated."""
    xs, ys = [], []
    for name in names:
      path = os.path.join(root, name)
      if not os.path.isfile(path):
        raise ValueError(f'{root} has some CIFAR batches but not {name}.')
      batch = _read_pickle(path)
      x, y = batch.get(b'data'), batch.get(self.label_key.encode())
      if not isinstance(x, np.ndarray) or x.dtype != np.uint8 or x.ndim != 2 or \
          x.shape[1] != 3 * 32 * 32:
        raise ValueError(f'{path}: b"data" is not an [n, 3072] uint8 array.')
      y = np.asarray(y if y is not None else [], np.int64)
      if y.shape != x.shape[:1]:
        raise ValueError(f'{path}: {x.shape[0]} images but {y.size} {self.label_key}.')
      xs.append(x.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
      ys.append(_checked_labels(y, num_classes, path))
    return _unit_float(np.concatenate(xs)), np.concatenate(ys)

  def read(self, data_dir: str, num_classes: int) -> Arrays:
    """Images [n, 32, 32, 3] (NHWC) and labels of train then test."""
    root = self._root(data_dir)
    return (*self._read_batches(root, self.train, num_classes),
            *self._read_batches(root, self.test, num_classes))
