"""The IDX and CIFAR-pickle readers (fedjax_het.data.files) through load_dataset, on files written here."""

import collections
import gzip
import os
import pickle
import struct

import numpy as np
import pytest

import fedjax_het.data as fd

FASHION_MNIST_DIR = '/usr/share/datasets/fashion-mnist'


def idx_bytes(array: np.ndarray) -> bytes:
  """`array` (uint8) in the IDX format: magic 0x0000_08_<ndim>, big-endian sizes, the bytes."""
  return (bytes([0, 0, 8, array.ndim]) + struct.pack(f'>{array.ndim}I', *array.shape) +
          array.tobytes())


def write_idx(path, array: np.ndarray, gz: bool) -> str:
  path = str(path) + ('.gz' if gz else '')
  with (gzip.open if gz else open)(path, 'wb') as f:
    f.write(idx_bytes(array))
  return path


def write_mnist_like(directory, *, gz=True, prefix='', num_classes=10, seed=0):
  """Four IDX files with 6 train and 4 test random 28x28 images; returns the stored arrays."""
  rng = np.random.default_rng(seed)
  stored = {}
  for split, n in (('train', 6), ('t10k', 4)):
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, num_classes, n).astype(np.uint8)
    write_idx(directory / f'{prefix}{split}-images-idx3-ubyte', images, gz)
    write_idx(directory / f'{prefix}{split}-labels-idx1-ubyte', labels, gz)
    stored[split] = images, labels
  return stored


def write_cifar(directory, files: dict[str, int], label_keys: dict[bytes, int], seed=0):
  """Pickled CIFAR batches: file name → image count, with labels under each key < its count."""
  rng = np.random.default_rng(seed)
  stored = {}
  for name, n in files.items():
    batch = {b'data': rng.integers(0, 256, (n, 3072), dtype=np.uint8)}
    batch.update({key: rng.integers(0, k, n).tolist() for key, k in label_keys.items()})
    with open(directory / name, 'wb') as f:
      pickle.dump(batch, f)
    stored[name] = batch
  return stored


def assert_images(x, stored_uint8):
  assert x.dtype == np.float32 and 0.0 <= x.min() and x.max() <= 1.0
  np.testing.assert_allclose(x, stored_uint8 / 255.0, rtol=1e-6)


@pytest.mark.parametrize('name', ['mnist', 'fashion_mnist'])
@pytest.mark.parametrize('gz', [True, False])
def test_idx_files_are_read_gzipped_or_plain(tmp_path, name, gz):
  stored = write_mnist_like(tmp_path, gz=gz)
  ds = fd.load_dataset(name, data_dir=str(tmp_path))
  assert ds.name == name and ds.num_classes == 10
  assert ds.x_train.shape == (6, 28, 28, 1) and ds.x_test.shape == (4, 28, 28, 1)
  assert_images(ds.x_train[..., 0], stored['train'][0])
  assert_images(ds.x_test[..., 0], stored['t10k'][0])
  assert ds.y_train.dtype == np.int32 and ds.y_test.dtype == np.int32
  np.testing.assert_array_equal(ds.y_train, stored['train'][1])
  np.testing.assert_array_equal(ds.y_test, stored['t10k'][1])


def test_emnist_is_read_by_split_prefix_and_turned_upright(tmp_path):
  stored = write_mnist_like(tmp_path, prefix='emnist-letters-', num_classes=27)
  write_mnist_like(tmp_path, prefix='emnist-digits-', seed=1)  # another split beside it
  ds = fd.load_dataset('emnist', data_dir=str(tmp_path), emnist_split='letters')
  assert ds.num_classes == 37  # TFDS's count for letters (labels 1..26 as NIST stores them)
  # Stored transposed by NIST: row r of the upright image is column r of the stored one.
  assert_images(ds.x_train[..., 0], stored['train'][0].transpose(0, 2, 1))
  assert_images(ds.x_test[..., 0], stored['t10k'][0].transpose(0, 2, 1))
  np.testing.assert_array_equal(ds.y_train, stored['train'][1])


@pytest.mark.parametrize('in_folder', [True, False])
def test_cifar10_batches(tmp_path, in_folder):
  root = tmp_path / 'cifar-10-batches-py' if in_folder else tmp_path
  root.mkdir(exist_ok=True)
  names = {f'data_batch_{i}': 2 for i in range(1, 6)} | {'test_batch': 3}
  stored = write_cifar(root, names, {b'labels': 10})
  ds = fd.load_dataset('cifar10', data_dir=str(tmp_path))
  assert ds.num_classes == 10
  assert ds.x_train.shape == (10, 32, 32, 3) and ds.x_test.shape == (3, 32, 32, 3)
  train = np.concatenate([stored[f'data_batch_{i}'][b'data'] for i in range(1, 6)])
  # Row i is 1024 red, 1024 green, 1024 blue values, each 32x32 row-major: x[i, r, c, ch].
  r, c, ch = 5, 17, 2
  assert ds.x_train[3, r, c, ch] == pytest.approx(train[3, ch * 1024 + r * 32 + c] / 255)
  test = stored['test_batch'][b'data']
  assert_images(ds.x_test, test.reshape(3, 3, 32, 32).transpose(0, 2, 3, 1))
  np.testing.assert_array_equal(
      ds.y_train, sum((stored[f'data_batch_{i}'][b'labels'] for i in range(1, 6)), []))
  assert ds.y_test.dtype == np.int32 and ds.y_test.tolist() == stored['test_batch'][b'labels']


@pytest.mark.parametrize('labels, key, num_classes', [
    ('fine', b'fine_labels', 100), ('coarse', b'coarse_labels', 20)])
def test_cifar100_fine_or_coarse_labels(tmp_path, labels, key, num_classes):
  root = tmp_path / 'cifar-100-python'
  root.mkdir()
  stored = write_cifar(root, {'train': 7, 'test': 2}, {b'fine_labels': 100, b'coarse_labels': 20})
  ds = fd.load_dataset('cifar100', data_dir=str(tmp_path), cifar100_labels=labels)
  assert ds.num_classes == num_classes
  assert ds.x_train.shape == (7, 32, 32, 3) and ds.x_test.shape == (2, 32, 32, 3)
  assert ds.y_train.tolist() == stored['train'][key] and ds.y_test.tolist() == stored['test'][key]


def one_line_error(match, **kwargs) -> str:
  with pytest.raises(ValueError, match=match) as info:
    fd.load_dataset(**kwargs)
  message = str(info.value)
  assert '\n' not in message
  return message


@pytest.mark.parametrize('gz', [True, False])
def test_truncated_idx_file_is_named(tmp_path, gz):
  write_mnist_like(tmp_path, gz=gz)
  path = tmp_path / ('train-images-idx3-ubyte' + ('.gz' if gz else ''))
  path.write_bytes(path.read_bytes()[:-100])
  message = one_line_error('truncated', name='mnist', data_dir=str(tmp_path))
  assert str(path) in message


def test_wrong_magic_and_inconsistent_files_are_named(tmp_path):
  write_mnist_like(tmp_path, gz=False)
  labels = tmp_path / 't10k-labels-idx1-ubyte'
  labels.write_bytes(idx_bytes(np.zeros((4, 2), np.uint8)))  # a 2-d file where 1-d is due
  assert str(labels) in one_line_error('magic', name='mnist', data_dir=str(tmp_path))
  labels.write_bytes(idx_bytes(np.zeros(3, np.uint8)))  # 4 images, 3 labels
  assert str(labels) in one_line_error('3 labels', name='mnist', data_dir=str(tmp_path))
  labels.write_bytes(idx_bytes(np.full(4, 10, np.uint8)))  # label 10 of 10 classes
  assert str(labels) in one_line_error(r'outside \[0, 10\)', name='mnist', data_dir=str(tmp_path))


def test_incomplete_files_name_the_missing_one(tmp_path):
  write_mnist_like(tmp_path)
  os.remove(tmp_path / 't10k-labels-idx1-ubyte.gz')
  one_line_error('not t10k-labels-idx1-ubyte', name='fashion_mnist', data_dir=str(tmp_path))
  root = tmp_path / 'cifar-10-batches-py'
  root.mkdir()
  write_cifar(root, {'data_batch_1': 2}, {b'labels': 10})
  one_line_error('not data_batch_2', name='cifar10', data_dir=str(tmp_path))


def test_corrupt_or_foreign_pickles_are_named_and_not_run(tmp_path):
  root = tmp_path / 'cifar-100-python'
  root.mkdir()
  write_cifar(root, {'train': 2, 'test': 2}, {b'fine_labels': 100})
  test = root / 'test'
  test.write_bytes(test.read_bytes()[:50])
  assert str(test) in one_line_error('not a readable CIFAR pickle', name='cifar100',
                                     data_dir=str(tmp_path))
  # Any global other than numpy's array constructors is refused before it is looked up.
  test.write_bytes(pickle.dumps(collections.OrderedDict(data=1)))
  assert 'collections.OrderedDict' in one_line_error('refusing', name='cifar100',
                                                     data_dir=str(tmp_path))


@pytest.mark.parametrize('name', ['fashion_mnist', 'cifar10'])
def test_missing_data_dir_says_how_to_provide_the_files(tmp_path, name):
  missing = tmp_path / 'nowhere'
  message = one_line_error('does not exist', name=name, data_dir=str(missing))
  assert str(missing) in message and '--config.data_dir' in message
  if name == 'fashion_mnist':
    assert 'train-images-idx3-ubyte' in message
    assert 'apt-get install dataset-fashion-mnist' in message
  else:
    assert 'cifar-10-batches-py/' in message


@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST_DIR),
                    reason='apt-get install dataset-fashion-mnist provides the real files')
def test_real_fashion_mnist_from_the_debian_package():
  ds = fd.load_dataset('fashion_mnist', data_dir=FASHION_MNIST_DIR)
  assert ds.x_train.shape == (60000, 28, 28, 1) and ds.x_test.shape == (10000, 28, 28, 1)
  assert np.bincount(ds.y_train).tolist() == [6000] * 10
  assert np.bincount(ds.y_test).tolist() == [1000] * 10
