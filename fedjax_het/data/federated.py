"""Federated layouts: per-client examples padded into one array with a leading client axis
(`FederatedData`), or stored back to back with offsets (`RaggedData`).

`pack_clients` and `build_federated` return host (numpy) arrays; `FederatedData.to_device`
places them once (optionally sharded over the client axis), so the engine decides placement and
a large federation is copied exactly once on the host (the padded gather) and once to the device.
`FederatedData.ragged()` drops the padding: memory then follows Σ_m n_m examples, not M × the
largest client (the trainer places that layout on the device; `write_ragged` / `open_ragged`
keep it as memmapped .npy files for streaming).

A federation larger than device memory stays on the host (numpy or `np.memmap` leaves) and is
streamed: `FederatedData.cohorts` gathers the rows of the rounds' cohorts into a `CohortData`
(`core.stream.CohortStream` moves them to the device a chunk of rounds ahead). In-round code
reads a client's rows through `data.client_row(client_id)`, the identity on a `FederatedData`
and the cohort row holding that client on a `CohortData`, and its examples through
`data.examples(row, idx)`, so one client program serves every layout.
"""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
from typing import Any, Iterable

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_het.data.partition import iid
from fedjax_het.data.partition import partition as partition_labels
from fedjax_het.data.partition import sample_by_priors
from fedjax_het.data.partition import split_by_class_shares
from fedjax_het.data.sources import ArrayDataset


@flax.struct.dataclass
class FederatedData:
  """Per-client data, zero-padded to the largest client; a pytree that can be passed into jit.

  Attributes:
    x: [num_clients, max_examples, *feature_shape] features; rows >= counts[i] are zero.
    y: [num_clients, max_examples] int32 labels; rows >= counts[i] are 0.
    counts: [num_clients] int32 number of valid rows per client (>= 1).
  Leaves are numpy arrays on the host until `to_device` (then jax.Array).
  """
  x: Any
  y: Any
  counts: Any

  @property
  def num_clients(self) -> int:
    return self.counts.shape[0]

  @property
  def max_examples(self) -> int:
    return self.y.shape[1]

  @property
  def feature_shape(self) -> tuple[int, ...]:
    """One example's feature shape (x's trailing axes)."""
    return tuple(self.x.shape[2:])

  @property
  def label_shape(self) -> tuple[int, ...]:
    """One example's label shape: () for a class, (L,) for next-token targets."""
    return tuple(self.y.shape[2:])

  def to_device(self, sharding: jax.sharding.Sharding | None = None) -> FederatedData:
    """Copies all leaves to the device(s); e.g. a NamedSharding over the client axis."""
    return jax.device_put(self, sharding)

  def client_row(self, client_id: jax.Array) -> jax.Array:
    """The row of `x`, `y`, `counts` holding client `client_id`: the id itself."""
    return client_id

  def examples(self, row: jax.Array, idx: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(x [..., *f], y [..., *l]): rows `idx` (int, any shape, each < counts[row]) of the
    client in row `row`."""
    return _padded_examples(self, row, idx)

  def ragged(self) -> RaggedData:
    """The same federation with the padding dropped (host numpy leaves); its minibatch
    draws keep this layout's length `max_examples`, so training on it is bit-identical."""
    counts = np.asarray(self.counts)
    valid = np.arange(self.max_examples) < counts[:, None]
    return RaggedData.from_rows(np.asarray(self.x)[valid], np.asarray(self.y)[valid], counts,
                                self.max_examples)

  def validate(self, num_classes: int, chunk_bytes: int = 1 << 26) -> None:
    """Raises a one-line ValueError naming the first bad client and row.

    Checks the layout (counts [M] and y [M, N, ...] of an integer dtype, x [M, N, ...]),
    every count within [1, N], every valid row's labels in [0, num_classes) (next-token
    labels y [M, N, L]: every token below the vocabulary size `num_classes`, PAD = 0
    included) and its features finite. Host leaves (numpy or `np.memmap`) are read
    `chunk_bytes` of clients at a time, so a large memmap is never loaded whole.
    """
    # Device leaves come to the host whole (they fit there); host ones stay put.
    x, y, counts = (a if isinstance(a, np.ndarray) else np.asarray(a)
                    for a in (self.x, self.y, self.counts))
    for name, leaf in (('counts', counts), ('y', y)):
      if not np.issubdtype(leaf.dtype, np.integer):
        raise ValueError(f'federated data: {name} are {leaf.dtype}; they must be integers '
                         f'(e.g. {name}.astype(np.int32)).')
    if counts.ndim != 1 or y.ndim < 2 or x.shape[:2] != y.shape[:2] or \
        y.shape[0] != counts.size:
      raise ValueError(f'federated data: counts {counts.shape}, y {y.shape} and x {x.shape} '
                       'must be [M], [M, N, ...] and [M, N, ...].')
    rows = y.shape[1]
    at = _first((counts < 1) | (counts > rows))
    if at:
      raise ValueError(f'federated data: client {at[0]} has counts {counts[at]}, outside '
                       f'[1, {rows}] (its padded rows); fix the counts or the padding.')
    per_client = max(x[:1].nbytes + y[:1].nbytes, 1)
    step = max(1, chunk_bytes // per_client)
    for start in range(0, len(counts), step):
      _validate_rows(np.asarray(x[start:start + step]),
                     np.asarray(y[start:start + step]), counts[start:start + step],
                     num_classes, start)

  def cohorts(self, client_ids: np.ndarray) -> CohortData:
    """The host rows of the clients `client_ids` (int [..., K]) as a `CohortData` with the
    same leading axes, e.g. [R, K] for R rounds' cohorts; works on `np.memmap` leaves
    (only the gathered rows are read)."""
    ids = np.asarray(client_ids, np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= self.num_clients):
      raise ValueError(f'cohort client ids must lie in [0, {self.num_clients}), got range '
                       f'[{ids.min()}, {ids.max()}].')
    return CohortData(x=np.asarray(self.x[ids]), y=np.asarray(self.y[ids]),
                      counts=np.asarray(self.counts)[ids],
                      client_ids=ids.astype(np.int32))


def _padded_examples(data, row: jax.Array, idx: jax.Array) -> tuple[jax.Array, jax.Array]:
  """`examples` of a padded layout (x [M, N, ...]): x[row, idx], y[row, idx]."""
  return jnp.asarray(data.x)[row, idx], jnp.asarray(data.y)[row, idx]


def _offsets(counts: np.ndarray) -> np.ndarray:
  """int32 [M]: where each client's rows start in the back-to-back layout (exclusive cumsum).

  Raises a one-line ValueError when Σ counts does not fit an int32 row index.
  """
  ends = np.cumsum(np.asarray(counts, np.int64))
  if ends.size and ends[-1] >= 2**31:
    raise ValueError(f'a ragged federation indexes its rows with int32; {ends[-1]:,} rows are '
                     'too many: split the federation.')
  return np.concatenate([[0], ends[:-1]]).astype(np.int32)


def _first(bad: np.ndarray) -> tuple[int, ...] | None:
  """The index of the first set entry of `bad`, or None if none is set."""
  return tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else None


def _validate_rows(x: np.ndarray, y: np.ndarray, counts: np.ndarray, num_classes: int,
                   first_client: int) -> None:
  """`FederatedData.validate` of the valid rows of a block of clients from `first_client`."""
  valid = np.arange(y.shape[1]) < counts[:, None]
  clients, rows = np.nonzero(valid)
  _check_examples(x[valid], y[valid], num_classes,
                  lambda i: (first_client + clients[i], rows[i]))


def _check_examples(x: np.ndarray, y: np.ndarray, num_classes: int, position) -> None:
  """Raises a one-line ValueError naming `position(i)` = (client, row) of the first bad
  example i of x [n, *f], y [n, *l]: a label (token) outside [0, num_classes), or a feature
  that is not finite."""
  tokens = y.reshape(len(y), -1)  # a class label is one token
  at = _first((tokens < 0) | (tokens >= num_classes))
  if at:
    kind, range_of = ('token', 'vocabulary') if y.ndim > 1 else ('label', 'classes')
    client, row = position(at[0])
    raise ValueError(f'federated data: client {client}, row {row}: {kind} '
                     f'{tokens[at]} lies outside [0, {num_classes}), the model\'s {range_of}; '
                     'fix the labels or the number of classes.')
  if np.issubdtype(x.dtype, np.inexact):
    at = _first(~np.isfinite(x).reshape(len(x), -1).all(-1))
    if at:
      client, row = position(at[0])
      raise ValueError(f'federated data: client {client}, row {row}: its '
                       'features are not finite (NaN or inf); fix or drop that example.')


@flax.struct.dataclass
class CohortData:
  """The rows of one round's cohort of a `FederatedData` (a streamed round's data).

  Attributes:
    x: [K, max_examples, *feature_shape] the cohort's features (slot order).
    y: [K, max_examples] int32 labels.
    counts: [K] int32 valid rows per cohort client.
    client_ids: [K] int32 global ids of the rows' clients.
  Stacked over rounds (leaves [R, K, ...]) it is a chunk's cohorts, scanned over.
  """
  x: Any
  y: Any
  counts: Any
  client_ids: Any

  @property
  def max_examples(self) -> int:
    return self.x.shape[self.counts.ndim]  # x [(R,) K, N, ...]

  def examples(self, row: jax.Array, idx: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(x [..., *f], y [..., *l]): rows `idx` of the cohort row `row` (one round's cohort)."""
    return _padded_examples(self, row, idx)

  def client_row(self, client_id: jax.Array) -> jax.Array:
    """The cohort row holding client `client_id` (a scalar; the first row of a repeated
    client, whose rows are equal); row 0 if it is absent, which `holds` reports."""
    return jnp.argmax(jnp.asarray(self.client_ids) == client_id)

  def holds(self, client_ids: jax.Array) -> jax.Array:
    """bool [...]: whether each of `client_ids` has a row in this cohort."""
    ids = jnp.asarray(client_ids)
    return jnp.any(ids[..., None] == jnp.asarray(self.client_ids), axis=-1)


@flax.struct.dataclass
class RaggedData:
  """Per-client data stored back to back: client m's n_m rows are rows
  offsets[m] .. offsets[m] + n_m − 1 of x and y, so the data take Σ_m n_m rows, not
  M × max_m n_m (a pytree that can be passed into jit, like `FederatedData`).

  Attributes:
    x: [Σ counts, *feature_shape] features, client after client.
    y: [Σ counts, *label_shape] integer labels (next-token targets [Σ counts, L]).
    counts: [num_clients] int32 rows per client (>= 1).
    offsets: [num_clients] int32 first row of each client (the exclusive cumsum of counts).
    max_examples: static length N of a client's minibatch draws (`core.batching` permutes N
      positions, the first n_m of them valid): the padded layout's N, so a run on either
      layout draws the same batches.
  Leaves are numpy arrays (or read-only `np.memmap`, `open_ragged`) until `to_device`.
  """
  x: Any
  y: Any
  counts: Any
  offsets: Any
  max_examples: int = flax.struct.field(pytree_node=False)

  @classmethod
  def from_rows(cls, x, y, counts: np.ndarray, max_examples: int = 0) -> RaggedData:
    """The federation of rows x [Σ counts, ...], y [Σ counts, ...] stored client after
    client, client m holding counts[m] of them; `max_examples` 0: the largest count."""
    counts = np.asarray(counts)
    return cls(x=x, y=y, counts=counts, offsets=_offsets(counts),
               max_examples=int(max_examples or counts.max()))

  @property
  def num_clients(self) -> int:
    return self.counts.shape[0]

  @property
  def feature_shape(self) -> tuple[int, ...]:
    return tuple(self.x.shape[1:])

  @property
  def label_shape(self) -> tuple[int, ...]:
    return tuple(self.y.shape[1:])

  @property
  def nbytes(self) -> int:
    """Bytes of the stored data: Σ counts × (an x row + a y row) + counts and offsets."""
    return sum(int(a.nbytes) for a in (self.x, self.y, self.counts, self.offsets))

  def to_device(self, sharding: jax.sharding.Sharding | None = None) -> RaggedData:
    """Copies all leaves to the device(s) (replicated: rows are not split by client)."""
    return jax.device_put(self, sharding)

  def ragged(self) -> RaggedData:
    """This layout itself (`FederatedData.ragged`'s counterpart): host code that reads a
    federation's rows client after client takes either layout through it."""
    return self

  def client_row(self, client_id: jax.Array) -> jax.Array:
    """The client's index into `counts` and `offsets`: the id itself."""
    return client_id

  def examples(self, row: jax.Array, idx: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(x [..., *f], y [..., *l]): rows `idx` (int, any shape, each < counts[row]) of
    client `row` (a scalar), i.e. x[offsets[row] + idx]. An index past the stored rows
    (a padded position >= counts[row] of the last clients) is clipped to the last row."""
    at = jnp.asarray(self.offsets)[row] + idx
    return (jnp.take(jnp.asarray(self.x), at, axis=0, mode='clip'),
            jnp.take(jnp.asarray(self.y), at, axis=0, mode='clip'))

  def validate(self, num_classes: int, chunk_bytes: int = 1 << 26) -> None:
    """Raises a one-line ValueError naming the first bad client and row.

    Checks the layout (counts, offsets [M], x and y with Σ counts rows, offsets the
    exclusive cumsum of counts), every count within [1, max_examples], every label or
    token in [0, num_classes) and every feature finite. Rows are read `chunk_bytes` at a
    time; from a memmapped file through a map of that chunk only, so validating a large
    file leaves none of it resident.
    """
    counts, offsets = np.asarray(self.counts), np.asarray(self.offsets)
    for name, leaf in (('counts', counts), ('offsets', offsets), ('y', self.y)):
      if not np.issubdtype(leaf.dtype, np.integer):
        raise ValueError(f'ragged data: {name} are {leaf.dtype}; they must be integers.')
    total = int(counts.sum(dtype=np.int64))
    if counts.ndim != 1 or offsets.shape != counts.shape or len(self.x) != total or \
        len(self.y) != total or not np.array_equal(offsets, _offsets(counts)):
      raise ValueError(f'ragged data: counts {counts.shape}, offsets {offsets.shape}, x '
                       f'{self.x.shape} and y {self.y.shape} must be [M], [M] (the exclusive '
                       f'cumsum of counts) and [Σ counts = {total}, ...].')
    at = _first((counts < 1) | (counts > self.max_examples))
    if at:
      raise ValueError(f'ragged data: client {at[0]} has counts {counts[at]}, outside '
                       f'[1, {self.max_examples}] (max_examples); fix the counts.')
    row_bytes = max(self.x[:1].nbytes + self.y[:1].nbytes, 1)
    step = max(1, chunk_bytes // row_bytes)
    for start in range(0, total, step):
      stop = min(total, start + step)
      rows = np.arange(start, stop)

      def position(i, rows=rows):
        client = int(np.searchsorted(offsets, rows[i], side='right')) - 1
        return client, int(rows[i] - offsets[client])

      _check_examples(_read_rows(self.x, start, stop), _read_rows(self.y, start, stop),
                      num_classes, position)

  def cohorts(self, client_ids: np.ndarray) -> CohortData:
    """The padded rows (zeros past each count, length `max_examples`) of the clients
    `client_ids` (int [..., K]) as a `CohortData` with the same leading axes: what
    `FederatedData.cohorts` gives for the padded layout. Reads only those clients' rows."""
    ids = np.asarray(client_ids, np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= self.num_clients):
      raise ValueError(f'cohort client ids must lie in [0, {self.num_clients}), got range '
                       f'[{ids.min()}, {ids.max()}].')
    counts = np.asarray(self.counts)[ids]
    valid = np.arange(self.max_examples) < counts[..., None]
    rows = np.asarray(self.offsets, np.int64)[ids][..., None] + np.arange(self.max_examples)
    x = np.zeros(valid.shape + self.feature_shape, self.x.dtype)
    y = np.zeros(valid.shape + self.label_shape, self.y.dtype)
    x[valid], y[valid] = self.x[rows[valid]], self.y[rows[valid]]
    return CohortData(x=x, y=y, counts=counts, client_ids=ids.astype(np.int32))


def _read_rows(leaf, start: int, stop: int) -> np.ndarray:
  """Rows [start, stop) of `leaf` as an in-memory array; from a whole memmapped file
  through a transient map of those rows, unmapped when the copy is made."""
  if isinstance(leaf, np.memmap) and isinstance(leaf.base, mmap.mmap):
    row_bytes = leaf[:1].nbytes
    chunk = np.memmap(leaf.filename, leaf.dtype, 'r', offset=leaf.offset + start * row_bytes,
                      shape=(stop - start, *leaf.shape[1:]))
    return np.array(chunk)
  return np.asarray(leaf[start:stop])


_RAGGED_FILES = ('x.npy', 'y.npy', 'counts.npy', 'layout.json')


def write_ragged(directory: str, counts: np.ndarray,
                 blocks: Iterable[tuple[np.ndarray, np.ndarray]],
                 max_examples: int = 0, prefix: str = '') -> RaggedData:
  """Writes a ragged federation as .npy files in `directory`, block by block, and opens it.

  Args:
    directory: an existing directory; x.npy, y.npy, counts.npy and layout.json are written,
      each name preceded by `prefix` (several federations in one directory, e.g. 'train_').
    counts: int [M] rows per client.
    blocks: (x [b, *f], y [b, *l]) consecutive rows of the clients in order (any block
      sizes), Σ b = Σ counts; only one block is held at a time.
    max_examples: the minibatch draw length N; 0: the largest count.

  Returns:
    `open_ragged(directory, prefix)`.
  """
  counts = np.asarray(counts, np.int32)
  total, written = int(counts.sum(dtype=np.int64)), 0
  files = {}
  try:
    for x, y in blocks:
      for name, rows in (('x', x), ('y', y)):
        if name not in files:
          files[name] = open(os.path.join(directory, f'{prefix}{name}.npy'), 'wb')
          np.lib.format.write_array_header_1_0(files[name], {
              'descr': np.lib.format.dtype_to_descr(rows.dtype), 'fortran_order': False,
              'shape': (total, *rows.shape[1:])})
        files[name].write(np.ascontiguousarray(rows).tobytes())
      written += len(x)
  finally:
    for f in files.values():
      f.close()
  if written != total or not files:
    raise ValueError(f'the blocks hold {written} rows; the counts say {total}.')
  np.save(os.path.join(directory, f'{prefix}counts.npy'), counts)
  with open(os.path.join(directory, f'{prefix}layout.json'), 'w') as f:
    json.dump({'max_examples': int(max_examples or counts.max())}, f)
  return open_ragged(directory, prefix)


def open_ragged(directory: str, prefix: str = '') -> RaggedData:
  """The ragged federation `write_ragged` wrote in `directory` under `prefix`: x and y
  read-only `np.memmap` (paged in as cohorts read them), counts and offsets in memory."""
  path = lambda name: os.path.join(directory, prefix + name)
  missing = [prefix + n for n in _RAGGED_FILES if not os.path.exists(path(n))]
  if missing:
    raise ValueError(f'{directory} holds no ragged federation: {", ".join(missing)} missing.')
  with open(path('layout.json')) as f:
    layout = json.load(f)
  return RaggedData.from_rows(np.load(path('x.npy'), mmap_mode='r'),
                              np.load(path('y.npy'), mmap_mode='r'),
                              np.load(path('counts.npy')), layout['max_examples'])


@dataclasses.dataclass(frozen=True)
class FederatedSplit:
  """Federated training data plus evaluation sets.

  Attributes:
    train: per-client training data, padded (`FederatedData`) or back to back
      (`RaggedData`: natural sets, `data.natural`).
    test_x: [n_test, *feature_shape] the global test set (host numpy).
    test_y: [n_test] int32.
    local_test: per-client test shards (either layout), or None unless requested.
    num_classes: number of label classes.
    client_ids: the files' id of each train row's client (natural sets,
      `data.natural`), else None.
    input_vocab: the token ids [0, input_vocab) of a text classifier's input
      (Sent140), the model's `vocab_size`; 0 for other sets.
    embeddings: float32 [input_vocab, D] initial word vectors of those ids
      (Sent140's GloVe), or None.
  """
  train: FederatedData | RaggedData
  test_x: np.ndarray
  test_y: np.ndarray
  local_test: FederatedData | RaggedData | None
  num_classes: int
  client_ids: tuple[str, ...] | None = None
  input_vocab: int = 0
  embeddings: np.ndarray | None = None


def pack_clients(x: np.ndarray, y: np.ndarray, client_indices: list[np.ndarray],
                 dtype=np.float32) -> FederatedData:
  """Gathers x [n, *f], y [n] into a padded FederatedData with one row block per client.

  Client i's valid rows are x[client_indices[i]] in the given order, cast to `dtype`.
  """
  x, y = np.asarray(x), np.asarray(y)
  counts = np.array([len(idx) for idx in client_indices], np.int32)
  if counts.size == 0 or counts.min() == 0:
    empty = np.flatnonzero(counts == 0)
    raise ValueError(f'Every client needs at least one example; got {counts.size} clients, '
                     f'empty ones: {empty[:10].tolist()}.')
  flat = np.concatenate(client_indices).astype(np.int64)
  if flat.min() < 0 or flat.max() >= len(y) or len(x) != len(y):
    raise ValueError(f'client_indices must index the {len(y)} examples of x {x.shape} and '
                     f'y {y.shape}.')
  valid = np.arange(counts.max()) < counts[:, None]
  gather = np.zeros(valid.shape, np.int64)
  gather[valid] = flat
  packed_x = np.take(x, gather, axis=0).astype(dtype, copy=False)
  packed_x[~valid] = 0
  packed_y = np.where(valid, y[gather], 0).astype(np.int32)
  return FederatedData(x=packed_x, y=packed_y, counts=counts)


def client_label_histogram(data: FederatedData | RaggedData, num_classes: int) -> np.ndarray:
  """[num_clients, num_classes] int64 label counts over each client's valid rows."""
  ragged = data.ragged()
  labels, counts = np.asarray(ragged.y), np.asarray(ragged.counts)
  if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
    raise ValueError(f'labels must lie in [0, {num_classes}), got range '
                     f'[{labels.min()}, {labels.max()}].')
  client = np.repeat(np.arange(counts.size), counts)
  flat = np.bincount(client * num_classes + labels, minlength=counts.size * num_classes)
  return flat.reshape(counts.size, num_classes)


def _local_test_indices(dataset: ArrayDataset, train: FederatedData, method: str,
                        seed: int) -> list[np.ndarray]:
  """Per-client test indices following each client's training label distribution."""
  num_clients, n_test = train.num_clients, len(dataset.y_test)
  if n_test < num_clients:
    raise ValueError(f'local_test=True needs at least one test example per client, but there are '
                     f'{n_test} test examples for {num_clients} clients.')
  if method == 'iid':
    return iid(dataset.y_test, num_clients, seed)
  train_counts = client_label_histogram(train, dataset.num_classes)
  if method == 'balanced_dirichlet':
    return sample_by_priors(dataset.y_test, train_counts, n_test // num_clients, seed)
  return split_by_class_shares(dataset.y_test, train_counts, seed)


def holdout_split(client_indices: list[np.ndarray], fraction: float,
                  seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
  """Splits every client's examples at random into (train, test) index lists.

  Client i holds out round(fraction · n_i) of its n_i examples, at least 1 and at most
  n_i − 1 (Co-S²P's 8:2 split is fraction 0.2); both parts stay in ascending order.

  Raises:
    ValueError: fraction outside (0, 1), or a client with fewer than 2 examples.
  """
  if not 0 < fraction < 1:
    raise ValueError(f'the local test fraction must lie in (0, 1), got {fraction}.')
  sizes = np.array([len(idx) for idx in client_indices])
  if sizes.min() < 2:
    raise ValueError(f'client {int(np.argmin(sizes))} holds {sizes.min()} example(s); a local '
                     'test split needs at least 2 per client.')
  rng = np.random.default_rng(seed)
  train, test = [], []
  for idx, size in zip(client_indices, sizes):
    held = rng.permutation(size) < np.clip(np.rint(fraction * size), 1, size - 1)
    train.append(np.asarray(idx)[~held])
    test.append(np.asarray(idx)[held])
  return train, test


def build_federated(dataset: ArrayDataset, *, num_clients: int, partition: str, seed: int,
                    local_test: bool = False, local_test_fraction: float = 0.0,
                    **partition_kwargs) -> FederatedSplit:
  """Partitions the training set over clients and packs it (host arrays; see `to_device`).

  Args:
    dataset: the centralised dataset.
    num_clients: number of clients.
    partition: a name in `PARTITIONS`; `partition_kwargs` are its options (e.g. alpha=0.3).
    seed: partition seed (the local test split uses a seed derived from it).
    local_test: also give every client a local test split. By default the test set is split
      into per-client shards that follow each client's *training* label distribution
      (FIARSE's code instead draws an independent test prior, a deliberate deviation):
      - 'iid': an IID split of the test set, sizes differing by at most 1;
      - 'balanced_dirichlet': exactly n_test // num_clients examples per client, labels drawn
        from the client's empirical train label distribution (`sample_by_priors`);
      - 'dirichlet', 'shards', 'one_class', 'quantity_skew', 'sized_dirichlet': each test
        class is split among clients in proportion to their train counts of that class
        (`split_by_class_shares`), so clients see only their training classes and test sizes
        scale with train sizes.
      Raises ValueError if a client would get no test example.
    local_test_fraction: with `local_test`, 0 (default) shards the global test set as above;
      f in (0, 1) instead holds out a random fraction f of every client's own partition as its
      local test split and trains on the rest (`holdout_split`; Co-S²P's clients split their
      data 8:2, f = 0.2). The global test set is the test split either way.

  Returns:
    A FederatedSplit; the global test set is the full test split.
  """
  train_indices = partition_labels(dataset.y_train, num_clients, partition, seed,
                                   **partition_kwargs)
  test_seed = int(np.random.SeedSequence([seed, 1]).generate_state(1)[0])
  if local_test and local_test_fraction:
    train_indices, test_indices = holdout_split(train_indices, local_test_fraction, test_seed)
    train = pack_clients(dataset.x_train, dataset.y_train, train_indices)
    local = pack_clients(dataset.x_train, dataset.y_train, test_indices)
    return FederatedSplit(train=train, test_x=dataset.x_test, test_y=dataset.y_test,
                          local_test=local, num_classes=dataset.num_classes)
  train = pack_clients(dataset.x_train, dataset.y_train, train_indices)
  local = None
  if local_test:
    test_indices = _local_test_indices(dataset, train, partition, test_seed)
    empty = [i for i, idx in enumerate(test_indices) if len(idx) == 0]
    if empty:
      raise ValueError(f'local_test=True leaves {len(empty)} clients (e.g. client {empty[0]}) '
                       'without test examples of their training classes; use fewer clients or '
                       'local_test=False.')
    local = pack_clients(dataset.x_test, dataset.y_test, test_indices)
  return FederatedSplit(train=train, test_x=dataset.x_test, test_y=dataset.y_test,
                        local_test=local, num_classes=dataset.num_classes)
