"""Writers of small natural federated files in every format `fedjax_het.data.natural_files`
reads, written from the formats' specifications (not through the readers):

- TFF HDF5: examples/<client>/<feature> datasets (h5py);
- FedJAX SQLite: federated_data(client_id, data, num_examples), data = zlib(msgpack(dict))
  with arrays as msgpack ExtType 1 and bytes arrays as ExtType 4;
- TFF SQLite: examples(split_name, client_id, serialized_example_proto) with tf.train.Example
  protos encoded here by hand, and client_metadata;
- LEAF JSON: {"users", "num_samples", "user_data"} shards.

`clients` arguments map a client id to {feature: array [n, ...]} (bytes features as lists).
"""
import json
import os
import sqlite3
import struct
import zlib

import msgpack
import numpy as np


# ---- protobuf wire format --------------------------------------------------------------------
def varint(value: int) -> bytes:
  value &= (1 << 64) - 1  # negatives as 10-byte two's complement
  out = bytearray()
  while True:
    byte, value = value & 0x7F, value >> 7
    out.append(byte | (0x80 if value else 0))
    if not value:
      return bytes(out)


def field(number: int, payload: bytes) -> bytes:
  """A length-delimited field."""
  return varint(number << 3 | 2) + varint(len(payload)) + payload


def feature(values) -> bytes:
  """A tf.train.Feature: bytes → BytesList, float arrays → packed FloatList, ints → packed
  Int64List."""
  if isinstance(values, bytes):
    return field(1, field(1, values))
  values = np.asarray(values).ravel()
  if values.dtype.kind == 'f':
    return field(2, field(1, values.astype('<f4').tobytes()))
  return field(3, field(1, b''.join(varint(int(v)) for v in values)))


def example(features: dict) -> bytes:
  """A serialized tf.train.Example of {name: value}."""
  entries = b''.join(field(1, field(1, name.encode()) + field(2, feature(value)))
                     for name, value in features.items())
  return field(1, entries)


# ---- writers -----------------------------------------------------------------------------------
def write_tff_h5(path, clients):
  import h5py
  with h5py.File(path, 'w') as f:
    for cid, features in clients.items():
      group = f.create_group(f'examples/{cid}')
      for name, values in features.items():
        if isinstance(values, list):
          group.create_dataset(name, data=np.array(values, dtype=object),
                               dtype=h5py.string_dtype('ascii'))
        else:
          group.create_dataset(name, data=values)


def _pack_ext(value):
  if isinstance(value, np.ndarray):
    payload = msgpack.packb((value.shape, value.dtype.name, value.tobytes()), use_bin_type=True)
    return msgpack.ExtType(1, payload)
  raise TypeError(type(value))


def fedjax_blob(features) -> bytes:
  data = {}
  for name, values in features.items():
    if isinstance(values, list):
      data[name] = msgpack.ExtType(4, msgpack.packb(((len(values),), values), use_bin_type=True))
    else:
      data[name] = values
  return zlib.compress(msgpack.packb(data, default=_pack_ext, use_bin_type=True))


def write_fedjax_sqlite(path, clients, num_examples=None):
  db = sqlite3.connect(path)
  db.execute('CREATE TABLE federated_data (client_id BLOB NOT NULL PRIMARY KEY, '
             'data BLOB NOT NULL, num_examples INTEGER NOT NULL)')
  for cid, features in clients.items():
    n = len(next(iter(features.values())))
    db.execute('INSERT INTO federated_data VALUES (?, ?, ?)',
               (cid.encode(), fedjax_blob(features), (num_examples or {}).get(cid, n)))
  db.commit()
  db.close()


def write_tff_sqlite(path, splits):
  """`splits`: split_name → clients."""
  db = sqlite3.connect(path)
  db.execute('CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, '
             'serialized_example_proto BLOB NOT NULL)')
  db.execute('CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name TEXT NOT NULL, '
             'num_examples INTEGER NOT NULL)')
  for split, clients in splits.items():
    for cid, features in clients.items():
      n = len(next(iter(features.values())))
      db.execute('INSERT INTO client_metadata VALUES (?, ?, ?)', (cid, split, n))
      for i in range(n):
        db.execute('INSERT INTO examples VALUES (?, ?, ?)',
                   (split, cid, example({k: v[i] for k, v in features.items()})))
  db.commit()
  db.close()


def write_leaf(directory, clients, shards=2):
  """LEAF shards of {'x': [...], 'y': [...]} clients, users dealt round-robin to `shards`."""
  os.makedirs(directory, exist_ok=True)
  ids = list(clients)
  for s in range(shards):
    users = ids[s::shards]
    shard = {'users': users,
             'num_samples': [len(clients[u]['y']) for u in users],
             'user_data': {u: {'x': _jsonable(clients[u]['x']), 'y': _jsonable(clients[u]['y'])}
                           for u in users}}
    with open(os.path.join(directory, f'all_data_{s}.json'), 'w') as f:
      json.dump(shard, f)


def _jsonable(values):
  return values.tolist() if isinstance(values, np.ndarray) else list(values)


# ---- the sets ----------------------------------------------------------------------------------
def write_splits(directory, fmt, train, test, *, h5, fedjax, tff, tff_splits=('train', 'test')):
  """Train and test clients as TFF's `<h5>_{train,test}.h5`, FedJAX's
  `<fedjax>_{train,test}.sqlite` or TFF's `<tff>.sqlite` (splits `tff_splits`); False for
  LEAF, which the caller writes."""
  if fmt == 'leaf_json':
    return False
  if fmt == 'tff_sqlite':
    write_tff_sqlite(os.path.join(directory, f'{tff}.sqlite'), dict(zip(tff_splits, (train, test))))
  for split, clients in (('train', train), ('test', test)):
    if fmt == 'tff_h5':
      write_tff_h5(os.path.join(directory, f'{h5}_{split}.h5'), clients)
    elif fmt == 'fedjax_sqlite':
      write_fedjax_sqlite(os.path.join(directory, f'{fedjax}_{split}.sqlite'), clients)
  return True


EMNIST_TRAIN_SIZES = {'f0000_14': 3, 'f0001_41': 1, 'f0002_02': 5, 'f0003_33': 2}
EMNIST_TEST_SIZES = {'f0000_14': 1, 'f0001_41': 1, 'f0002_02': 2, 'f0003_33': 1}


def emnist_clients(sizes, seed):
  """Writers' pixels [n, 28, 28] (multiples of 1/255, 1 = background) and labels [n] < 62."""
  rng = np.random.default_rng(seed)
  return {cid: {'pixels': (rng.integers(0, 256, (n, 28, 28)) / 255).astype(np.float32),
                'label': rng.integers(0, 62, n).astype(np.int32)}
          for cid, n in sizes.items()}


def write_emnist(directory, fmt):
  """A 4-writer F-EMNIST in `fmt` under `directory`; returns (train, test) clients."""
  train = emnist_clients(EMNIST_TRAIN_SIZES, 0)
  test = emnist_clients(EMNIST_TEST_SIZES, 1)
  directory = str(directory)
  if not write_splits(directory, fmt, train, test, h5='fed_emnist', fedjax='federated_emnist',
                      tff='emnist_all', tff_splits=('all_train', 'all_test')):
    for split, clients in (('train', train), ('test', test)):
      write_leaf(os.path.join(directory, split),
                 {c: {'x': f['pixels'].reshape(len(f['label']), -1), 'y': f['label']}
                  for c, f in clients.items()})
  return train, test


SHAKESPEARE_TRAIN = {'THE_TEMPEST_ARIEL': [b'All hail, great master!', b'Grave sir, hail!'],
                     'HAMLET_HORATIO': [b'Hail to your lordship!'],
                     'KING_LEAR_FOOL': [b'Let me hire him too: here\'s my coxcomb.{}']}
SHAKESPEARE_TEST = {'THE_TEMPEST_ARIEL': [b'I come'],
                    'HAMLET_HORATIO': [b'The same, my lord.'],
                    'KING_LEAR_FOOL': [b'Sirrah, you were best take my coxcomb.']}


def write_shakespeare(directory, fmt):
  directory = str(directory)
  train = {c: {'snippets': s} for c, s in SHAKESPEARE_TRAIN.items()}
  test = {c: {'snippets': s} for c, s in SHAKESPEARE_TEST.items()}
  if not write_splits(directory, fmt, train, test, h5='shakespeare', fedjax='shakespeare',
                      tff='shakespeare'):  # LEAF: 80-character windows and the next character
    for split, snippets in (('train', SHAKESPEARE_TRAIN), ('test', SHAKESPEARE_TEST)):
      clients = {}
      for cid, lines in snippets.items():
        joined = (b' '.join(lines) * 100).decode()
        clients[cid] = {'x': [joined[i:i + 80] for i in range(2)],
                        'y': [joined[i + 80] for i in range(2)]}
      write_leaf(os.path.join(directory, split), clients)


STACKOVERFLOW_WORDS = ['the', 'to', 'i', 'a', 'is']
STACKOVERFLOW_TRAIN = {'00000001': [b'i want to use a', b'the is'],
                       '00000002': [b'what is the regex']}
STACKOVERFLOW_TEST = {'00000001': [b'a b'], '00000002': [b'the']}


def write_stackoverflow(directory, fmt='fedjax_sqlite'):
  directory = str(directory)
  with open(os.path.join(directory, 'stackoverflow.word_count'), 'w') as f:
    f.writelines(f'{w} {100 - i}\n' for i, w in enumerate(STACKOVERFLOW_WORDS))
  for split, clients in (('train', STACKOVERFLOW_TRAIN), ('test', STACKOVERFLOW_TEST)):
    clients = {c: {'tokens': t, 'type': [b'question'] * len(t)} for c, t in clients.items()}
    if fmt == 'fedjax_sqlite':
      write_fedjax_sqlite(os.path.join(directory, f'stackoverflow_{split}.sqlite'), clients)
    else:
      write_tff_h5(os.path.join(directory, f'stackoverflow_{split}.h5'), clients)


def truncate(path, keep: float = 0.5):
  """Cuts the file to `keep` of its size."""
  size = os.path.getsize(path)
  with open(path, 'r+b') as f:
    f.truncate(int(size * keep))


def float_field(number: int, value: float) -> bytes:
  """An unpacked fixed32 field (wire type 5)."""
  return varint(number << 3 | 5) + struct.pack('<f', value)


# ---- LEAF's Sent140 and CelebA ------------------------------------------------------------------
SENT140_TRAIN = {'alice_bob': ['I love it, really!', 'so sad today', 'love love love'],
                 'zed99': ["can't wait"],
                 'mo': ['the sun is out', 'meh.']}
SENT140_TEST = {'alice_bob': ['love this'], 'zed99': ['sad :('], 'mo': ['out again']}
GLOVE_WORDS = ['love', 'sad', 'the', 'is', 'it', 'I', ',', '!', "can't"]


def sent140_row(user: str, i: int, tweet: str) -> list[str]:
  """LEAF's Sent140 x row: [tweet id, date, query, user, text] (data_to_json.py: row[1:] of
  Sentiment140's CSV)."""
  return [str(1000 + i), 'Sat May 16 23:58:44 UTC 2009', 'NO_QUERY', user, tweet]


def write_sent140(directory, glove_dim: int = 4):
  """LEAF Sent140 train/ and test/ shards (label 1 when the tweet has 'love') and a GloVe
  text file of GLOVE_WORDS, word i's vector [i, i + 0.5, ...]; returns its path."""
  directory = str(directory)
  for split, tweets in (('train', SENT140_TRAIN), ('test', SENT140_TEST)):
    write_leaf(os.path.join(directory, split),
               {u: {'x': [sent140_row(u, i, t) for i, t in enumerate(ts)],
                    'y': [int('love' in t) for t in ts]} for u, ts in tweets.items()})
  path = os.path.join(directory, 'glove.6B.300d.txt')
  with open(path, 'w', encoding='utf-8') as f:
    for i, word in enumerate(GLOVE_WORDS):
      f.write(word + ' ' + ' '.join(str(i + 0.5 * k) for k in range(glove_dim)) + '\n')
  return path


CELEBA_TRAIN = {'12': 3, '7': 1, '301': 2}  # celebrity id -> images
CELEBA_TEST = {'12': 1, '7': 1, '301': 1}


def celeba_colour(number: int) -> tuple[int, int, int]:
  """The solid RGB colour of written image `number`."""
  return (number * 37 % 256, number * 91 % 256, number * 13 % 256)


def write_celeba(directory):
  """LEAF CelebA train/ and test/ shards (x CelebA's image names 000001.jpg, ...; y 0.0 / 1.0
  as LEAF's metadata_to_json.py writes them) and their images in img_align_celeba/: 9x7 JPEGs of
  one colour each (the reader resizes them to 84x84)."""
  from PIL import Image
  directory = str(directory)
  images = os.path.join(directory, 'img_align_celeba')
  os.makedirs(images, exist_ok=True)
  number = 0
  for split, sizes in (('train', CELEBA_TRAIN), ('test', CELEBA_TEST)):
    clients = {}
    for celeb, n in sizes.items():
      names = [f'{number + k:06d}.jpg' for k in range(1, n + 1)]
      number += n
      clients[celeb] = {'x': names, 'y': [float(k % 2) for k in range(n)]}
    write_leaf(os.path.join(directory, split), clients)
  for k in range(1, number + 1):
    Image.new('RGB', (9, 7), celeba_colour(k)).save(os.path.join(images, f'{k:06d}.jpg'))
