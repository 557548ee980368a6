"""Readers of naturally partitioned federated files: TFF's HDF5 and SQLite, FedJAX's SQLite, LEAF's JSON.

Every reader is a `ClientFile` with two calls: `sizes()` → the file's clients in its order
and their example counts, read without decoding the examples (to pick clients cheaply), and
`read(ids)` → {client id: {feature: array [n, ...]}} for the chosen clients. Formats:

- `TffH5`: TFF's HDF5 files (fed_emnist_train.h5, shakespeare_train.h5, stackoverflow_train.h5,
  fed_cifar100_train.h5, ...; tff.simulation.datasets.*'s `HDF5ClientData`): a group
  `examples/<client id>/<feature>`, each feature a dataset with the client's examples on its
  first axis. Needs h5py (the `natural` extra).
- `FedjaxSqlite`: FedJAX's files (federated_emnist_train.sqlite, shakespeare_train.sqlite,
  stackoverflow_train.sqlite; fedjax/core/sqlite_federated_data.py): table
  `federated_data(client_id BLOB, data BLOB, num_examples INTEGER)` in rowid order, `data` a
  zlib-compressed msgpack dict feature → array, arrays as msgpack ExtType 1 (a nested msgpack
  (shape, dtype name, C-order bytes)), numpy scalars ExtType 3, arrays of bytes ExtType 4
  (shape, flat list of bytes) (fedjax/core/serialization.py).
- `TffSqlite`: TFF's current files (emnist_all.sqlite, shakespeare.sqlite, stackoverflow.sqlite;
  tff.simulation.datasets.SqlClientData): table `examples(split_name, client_id,
  serialized_example_proto)`, one serialized tf.train.Example a row, clients in sorted id
  order as SqlClientData lists them, and `client_metadata(client_id, split_name, num_examples)`.
  The Examples are decoded here from the protobuf wire format (`parse_example`), without
  TensorFlow; `shapes` names the features kept and their per-example shapes.
- `LeafJson`: LEAF's JSON shards (every `*.json` in a directory, e.g. LEAF's data/train/):
  {"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}.
  LEAF's CelebA x are image file names, decoded by `read_image` (Pillow, the `natural` extra).

Any missing, truncated or inconsistent file raises a one-line ValueError naming it.
"""

from __future__ import annotations

import glob
import json
import os
import sqlite3
import zlib

import numpy as np

Clients = dict[str, dict[str, np.ndarray]]


def _missing_extra(package: str, path: str, error: ImportError) -> ValueError:
  return ValueError(f'Reading {path} needs {package}: pip install -e ".[natural]" ({error}).')


# ---- TFF HDF5 ------------------------------------------------------------------------------

class TffH5:
  """TFF's HDF5 client data: examples/<client id>/<feature> [n, ...]."""

  def __init__(self, path: str):
    self.path = path

  def _open(self):
    try:
      import h5py  # pylint: disable=import-outside-toplevel
    except ImportError as e:
      raise _missing_extra('h5py', self.path, e) from e
    try:
      handle = h5py.File(self.path, 'r')
    except OSError as e:
      raise ValueError(f'{self.path} is not a readable HDF5 file (truncated or corrupt: '
                       f'{e}).') from e
    if 'examples' not in handle:
      handle.close()
      raise ValueError(f'{self.path} has no "examples" group; it is not one of TFF\'s HDF5 '
                       'client-data files.')
    return handle

  def sizes(self) -> tuple[list[str], np.ndarray]:
    with self._open() as f:
      ids, counts = [], []
      for cid, group in f['examples'].items():
        lengths = {name: len(group[name]) for name in group}
        if len(set(lengths.values())) > 1:
          raise ValueError(f'{self.path}: client {cid} has features of different lengths '
                           f'{lengths}.')
        ids.append(cid)
        counts.append(next(iter(lengths.values()), 0))
    return ids, np.asarray(counts, np.int64)

  def read(self, ids) -> Clients:
    out = {}
    with self._open() as f:
      examples = f['examples']
      for cid in ids:
        try:
          out[cid] = {name: np.asarray(data[()]) for name, data in examples[cid].items()}
        except (OSError, KeyError) as e:
          raise ValueError(f'{self.path}: client {cid} is unreadable (truncated or corrupt: '
                           f'{e}).') from e
    return out


# ---- FedJAX SQLite ---------------------------------------------------------------------------

def _connect(path: str, tables: tuple[str, ...]) -> sqlite3.Connection:
  """A read-only connection to `path`, which must hold `tables`."""
  if not os.path.isfile(path):
    raise ValueError(f'{path} does not exist.')
  try:
    connection = sqlite3.connect(f'file:{path}?mode=ro', uri=True)
    names = {r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
  except sqlite3.DatabaseError as e:
    raise ValueError(f'{path} is not a readable SQLite database (truncated or corrupt: '
                     f'{e}).') from e
  missing = sorted(set(tables) - names)
  if missing:
    connection.close()
    raise ValueError(f'{path} lacks the table(s) {missing} (it has {sorted(names)}).')
  return connection


def _text(client_id) -> str:
  return client_id.decode('utf-8') if isinstance(client_id, bytes) else str(client_id)


def _msgpack_array(payload: bytes) -> np.ndarray:
  """FedJAX's ExtType 1/3 payload: msgpack (shape, dtype name, C-order bytes)."""
  import msgpack  # pylint: disable=import-outside-toplevel
  shape, dtype, buffer = msgpack.unpackb(payload, raw=True)
  return np.frombuffer(buffer, np.dtype(dtype.decode())).reshape(shape)


def _msgpack_ext(code: int, payload: bytes):
  import msgpack  # pylint: disable=import-outside-toplevel
  if code == 1:
    return _msgpack_array(payload)
  if code == 3:
    return _msgpack_array(payload)[()]
  if code == 4:
    shape, flat = msgpack.unpackb(payload, raw=True)
    out = np.empty(len(flat), object)
    out[:] = flat
    return out.reshape(shape)
  raise ValueError(f'unknown msgpack ExtType {code}')


class FedjaxSqlite:
  """FedJAX's SQLite federated data: federated_data(client_id, data, num_examples)."""

  def __init__(self, path: str):
    self.path = path

  def sizes(self) -> tuple[list[str], np.ndarray]:
    with _connect(self.path, ('federated_data',)) as db:
      rows = db.execute('SELECT client_id, num_examples FROM federated_data ORDER BY rowid')
      rows = rows.fetchall()
    return [_text(r[0]) for r in rows], np.asarray([r[1] for r in rows], np.int64)

  def read(self, ids) -> Clients:
    try:
      import msgpack  # pylint: disable=import-outside-toplevel
    except ImportError as e:
      raise _missing_extra('msgpack', self.path, e) from e
    wanted = set(ids)
    out = {}
    with _connect(self.path, ('federated_data',)) as db:
      for cid, blob, n in db.execute(
          'SELECT client_id, data, num_examples FROM federated_data ORDER BY rowid'):
        cid = _text(cid)
        if cid not in wanted:
          continue
        try:
          examples = msgpack.unpackb(zlib.decompress(blob), ext_hook=_msgpack_ext, raw=False)
        except (zlib.error, ValueError, TypeError, msgpack.UnpackException) as e:
          raise ValueError(f'{self.path}: the data of client {cid} is not zlib-compressed '
                           f'msgpack (truncated or corrupt: {e}).') from e
        bad = {k: np.shape(v)[:1] for k, v in examples.items() if np.shape(v)[:1] != (n,)}
        if bad:
          raise ValueError(f'{self.path}: client {cid} has num_examples={n} but features of '
                           f'lengths {bad}.')
        out[cid] = {k: np.asarray(v) for k, v in examples.items()}
    return out


# ---- tf.train.Example without TensorFlow ------------------------------------------------------

class ProtoError(ValueError):
  """A serialized message that does not parse."""


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
  """(value, next position) of the base-128 varint at `pos`."""
  value, shift = 0, 0
  while True:
    if pos >= len(buf):
      raise ProtoError('truncated varint')
    byte = buf[pos]
    value |= (byte & 0x7F) << shift
    pos += 1
    if byte < 0x80:
      return value, pos
    shift += 7
    if shift > 63:
      raise ProtoError('varint longer than 10 bytes')


def _fields(buf: memoryview):
  """Yields (field number, wire type, value) of a message: an int for varints (type 0), a
  memoryview for length-delimited (2) and fixed 32/64-bit (5/1) fields."""
  pos = 0
  while pos < len(buf):
    key, pos = _varint(buf, pos)
    number, wire = key >> 3, key & 7
    if wire == 0:
      value, pos = _varint(buf, pos)
    elif wire in (1, 2, 5):
      if wire == 2:
        size, pos = _varint(buf, pos)
      else:
        size = 8 if wire == 1 else 4
      if pos + size > len(buf):
        raise ProtoError(f'field {number} runs past the end')
      value, pos = buf[pos:pos + size], pos + size
    else:
      raise ProtoError(f'unsupported wire type {wire}')
    yield number, wire, value


def _packed_varints(data: memoryview) -> np.ndarray:
  """int64 [n]: the varints packed back to back in `data` (two's complement for negatives)."""
  b = np.frombuffer(data, np.uint8)
  if not b.size:
    return np.zeros(0, np.int64)
  if b[-1] >= 0x80:
    raise ProtoError('truncated packed varint')
  ends = np.flatnonzero(b < 0x80)
  starts = np.concatenate([[0], ends[:-1] + 1])
  if np.max(ends - starts) > 9:
    raise ProtoError('varint longer than 10 bytes')
  shift = (np.arange(b.size) - np.repeat(starts, ends - starts + 1)) * 7
  parts = (b & 0x7F).astype(np.uint64) << shift.astype(np.uint64)
  return np.bitwise_or.reduceat(parts, starts).view(np.int64)


def _feature_values(feature: memoryview):
  """A tf.train.Feature: BytesList (field 1) → list of bytes, FloatList (2) → float32 array,
  Int64List (3) → int64 array; each list's `value` is field 1, packed or not."""
  for kind, _, lst in _fields(feature):
    if kind == 1:
      return [bytes(v) for number, _, v in _fields(lst) if number == 1]
    if kind in (2, 3):
      chunks = []
      for number, wire, v in _fields(lst):
        if number != 1:
          continue
        if kind == 2:
          chunks.append(np.frombuffer(v, '<f4'))  # packed (wire 2) or one fixed32 (wire 5)
        else:
          chunks.append(_packed_varints(v) if wire == 2 else np.array([v], np.uint64).view(np.int64))
      dtype = np.float32 if kind == 2 else np.int64
      return np.concatenate(chunks).astype(dtype) if chunks else np.zeros(0, dtype)
  return []


def parse_example(serialized: bytes) -> dict[str, object]:
  """A serialized tf.train.Example → {feature name: list of bytes | float32 [k] | int64 [k]}.

  Wire layout (tensorflow/core/example/{example,feature}.proto): Example.features = 1;
  Features.feature = 1, a map whose entries hold key = 1 (string) and value = 2 (Feature).
  """
  out = {}
  for number, _, features in _fields(memoryview(serialized)):
    if number != 1:
      continue
    for entry_number, _, entry in _fields(features):
      if entry_number != 1:
        continue
      name, value = None, memoryview(b'')
      for field, _, v in _fields(entry):
        if field == 1:
          name = bytes(v).decode('utf-8')
        elif field == 2:
          value = v
      if name is None:
        raise ProtoError('a feature map entry without a key')
      out[name] = _feature_values(value)
  return out


class TffSqlite:
  """TFF's SqlClientData: examples(split_name, client_id, serialized_example_proto).

  Args:
    path: the .sqlite file.
    split: the `split_name` read ('all_train', 'train', 'test', ...).
    shapes: feature name → per-example shape; () is a scalar, and a bytes feature must be ().
  """

  def __init__(self, path: str, split: str, shapes: dict[str, tuple[int, ...]]):
    self.path, self.split, self.shapes = path, split, shapes

  def sizes(self) -> tuple[list[str], np.ndarray]:
    with _connect(self.path, ('examples', 'client_metadata')) as db:
      rows = db.execute('SELECT client_id, COUNT(*) FROM examples WHERE split_name = ? '
                        'GROUP BY client_id ORDER BY client_id', (self.split,)).fetchall()
      try:
        meta = dict(db.execute('SELECT client_id, num_examples FROM client_metadata WHERE '
                               'split_name = ?', (self.split,)).fetchall())
      except sqlite3.OperationalError:  # client_metadata without num_examples: nothing to check
        meta = {}
    for cid, n in rows:
      if cid in meta and meta[cid] != n:
        raise ValueError(f'{self.path}: client {cid} of split {self.split!r} has {n} example '
                         f'rows but client_metadata says {meta[cid]}.')
    if not rows:
      raise ValueError(f'{self.path} has no examples of split {self.split!r}.')
    return [_text(r[0]) for r in rows], np.asarray([r[1] for r in rows], np.int64)

  def _decode(self, cid: str, blobs: list[bytes]) -> dict[str, np.ndarray]:
    columns = {name: [] for name in self.shapes}
    for i, blob in enumerate(blobs):
      try:
        example = parse_example(blob)
      except ProtoError as e:
        raise ValueError(f'{self.path}: example {i} of client {cid} is not a tf.train.Example '
                         f'(truncated or corrupt: {e}).') from e
      for name, shape in self.shapes.items():
        values = example.get(name)
        if values is None or len(values) != max(1, int(np.prod(shape))):
          raise ValueError(f'{self.path}: example {i} of client {cid} has feature {name!r} '
                           f'with {0 if values is None else len(values)} values, expected shape '
                           f'{shape}.')
        columns[name].append(values[0] if isinstance(values, list) else
                             np.reshape(values, shape))
    return {name: np.asarray(v, object if v and isinstance(v[0], bytes) else None)
            for name, v in columns.items()}

  def read(self, ids) -> Clients:
    """One pass over the split in (client id, rowid) order, so a file without an index on
    client_id is not scanned once per client."""
    wanted, blobs = set(ids), {}
    with _connect(self.path, ('examples', 'client_metadata')) as db:
      for cid, blob in db.execute(
          'SELECT client_id, serialized_example_proto FROM examples WHERE split_name = ? '
          'ORDER BY client_id, rowid', (self.split,)):
        cid = _text(cid)
        if cid in wanted:
          blobs.setdefault(cid, []).append(blob)
    return {cid: self._decode(cid, blobs.get(cid, [])) for cid in ids}


# ---- LEAF JSON -------------------------------------------------------------------------------

class LeafJson:
  """LEAF's JSON shards: every *.json in `directory` (users, num_samples, user_data)."""

  def __init__(self, directory: str):
    self.path = directory

  def _shards(self):
    paths = sorted(glob.glob(os.path.join(self.path, '*.json')))
    if not paths:
      raise ValueError(f'{self.path} holds no LEAF *.json shard.')
    for path in paths:
      try:
        with open(path, encoding='utf-8') as f:
          shard = json.load(f)
        users, counts, data = shard['users'], shard['num_samples'], shard['user_data']
      except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f'{path} is not a LEAF JSON shard with users, num_samples and '
                         f'user_data (truncated or corrupt: {e!r}).') from e
      if len(users) != len(counts):
        raise ValueError(f'{path} lists {len(users)} users but {len(counts)} num_samples.')
      yield path, users, counts, data

  def sizes(self) -> tuple[list[str], np.ndarray]:
    ids, counts = [], []
    for _, users, n, _ in self._shards():
      ids += [str(u) for u in users]
      counts += list(n)
    if len(set(ids)) != len(ids):
      raise ValueError(f'{self.path}: a user appears in more than one shard.')
    return ids, np.asarray(counts, np.int64)

  def read(self, ids) -> Clients:
    wanted, out = set(ids), {}
    for path, users, counts, data in self._shards():
      for user, n in zip(users, counts):
        if str(user) not in wanted:
          continue
        record = data.get(user)
        if not isinstance(record, dict) or len(record.get('x', ())) != n or \
            len(record.get('y', ())) != n:
          raise ValueError(f'{path}: user {user} has num_samples={n} but user_data holds a '
                           'different number of x or y.')
        out[str(user)] = {'x': np.asarray(record['x'], object if record['x'] and
                                          isinstance(record['x'][0], str) else None),
                          'y': np.asarray(record['y'], object if record['y'] and
                                          isinstance(record['y'][0], str) else None)}
    return out


# ---- images named by LEAF's CelebA ---------------------------------------------------------------
CELEBA_IMAGES = 'img_align_celeba'
CELEBA_SOURCE = ('img_align_celeba.zip of the CelebA page, '
                 'http://mmlab.ie.cuhk.edu.hk/projects/CelebA.html')
CELEBA_IMAGE_SIZE = 84  # LEAF's models/celeba/cnn.py IMAGE_SIZE


def read_image(path: str, size: int) -> np.ndarray:
  """float32 [size, size, 3] in [0, 1]: the image at `path` resized, then converted to RGB, as
  LEAF's CelebA `_load_image` does (`img.resize((84, 84)).convert('RGB')`).

  LEAF passes no filter, so it got Pillow's default: NEAREST before Pillow 7.0 (LEAF's
  requirements leave Pillow unpinned beside TensorFlow 1.13 of 2019, hence Pillow 5-6) and
  BICUBIC since; NEAREST is named here so the pixels do not change with the Pillow installed.
  """
  try:
    from PIL import Image  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise _missing_extra('Pillow', path, e) from e
  try:
    with Image.open(path) as image:
      pixels = np.asarray(image.resize((size, size), Image.Resampling.NEAREST).convert('RGB'))
  except OSError as e:  # missing, truncated or not an image (UnidentifiedImageError)
    raise ValueError(f'{path} is not a readable image (missing, truncated or corrupt: '
                     f'{e}).') from e
  return pixels.astype(np.float32) * np.float32(1 / 255)
