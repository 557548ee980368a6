"""Tests of fedjax_het.data: sources, partitioners and the padded federated layout."""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fedjax_het.data as fd

FAST = settings(max_examples=30, deadline=None)

# method -> kwargs used in the generic property tests.
METHOD_KWARGS = {
    'iid': {},
    'dirichlet': {'alpha': 0.5, 'min_size': 1},
    'balanced_dirichlet': {'alpha': 0.5},
    'shards': {'shards_per_client': 2},
    'cell_shards': {'shards_per_client': 2, 'num_cells': 1},  # 1 divides any client count
    'one_class': {},
    'class_blocks': {},
    'quantity_skew': {'alpha': 0.5},
    'sized_dirichlet': {'alpha': 0.5},
}
EXACT_COVER = ('iid', 'dirichlet', 'shards', 'cell_shards', 'quantity_skew', 'sized_dirichlet')


def method_kwargs(method, clients):
  """METHOD_KWARGS[method], with relative sizes 1, 2, 3, 1, ... per client for sized_dirichlet."""
  kwargs = dict(METHOD_KWARGS[method])
  if method == 'sized_dirichlet':
    kwargs['sizes'] = 1 + np.arange(clients) % 3
  return kwargs


def random_labels(n, num_classes, seed):
  return np.random.default_rng(seed).integers(0, num_classes, n)


def label_distance(labels, parts, num_classes):
  """Mean total-variation distance of client label distributions to the global one."""
  glob = np.bincount(labels, minlength=num_classes) / labels.size
  local = np.stack([np.bincount(labels[p], minlength=num_classes) / p.size for p in parts])
  return 0.5 * np.abs(local - glob).sum(axis=1).mean()


# ---------------------------------------------------------------- partitioners

@pytest.mark.parametrize('method', fd.PARTITIONS)
@FAST
@given(n=st.integers(40, 400), num_classes=st.integers(1, 8), clients=st.integers(1, 10),
       seed=st.integers(0, 2**31 - 1))
def test_partition_uses_each_index_at_most_once(method, n, num_classes, clients, seed):
  labels = random_labels(n, num_classes, seed)
  try:
    parts = fd.partition(labels, clients, method, seed=seed, **method_kwargs(method, clients))
  except ValueError as e:
    # one_class and class_blocks give each present class a block of the clients; a class
    # with fewer examples than its block is refused in one line, which needs a class
    # smaller than the largest block.
    present = np.bincount(labels)[np.bincount(labels) > 0]
    assert method in ('one_class', 'class_blocks') and 'use fewer clients' in str(e), e
    assert present.min() < -(-clients // present.size)
    return
  assert len(parts) == clients
  assert all(p.dtype == np.int64 and np.all(np.diff(p) > 0) for p in parts)
  flat = np.concatenate(parts)
  assert flat.size == np.unique(flat).size and flat.min() >= 0 and flat.max() < n
  if method in EXACT_COVER:
    np.testing.assert_array_equal(np.sort(flat), np.arange(n))
  if method in ('one_class', 'class_blocks') and clients >= len(np.unique(labels)):
    np.testing.assert_array_equal(np.sort(flat), np.arange(n))


@pytest.mark.parametrize('method', fd.PARTITIONS)
def test_partition_seeded(method):
  labels = random_labels(1000, 10, 0)
  kwargs = method_kwargs(method, 20)
  a = fd.partition(labels, 20, method, seed=3, **kwargs)
  b = fd.partition(labels, 20, method, seed=3, **kwargs)
  c = fd.partition(labels, 20, method, seed=4, **kwargs)
  assert all(np.array_equal(u, v) for u, v in zip(a, b))
  assert not all(np.array_equal(u, v) for u, v in zip(a, c))


@FAST
@given(n=st.integers(1, 500), clients=st.integers(1, 50), seed=st.integers(0, 1000))
def test_iid_sizes_differ_by_at_most_one(n, clients, seed):
  clients = min(clients, n)
  sizes = [p.size for p in fd.iid(np.zeros(n, int), clients, seed)]
  assert max(sizes) - min(sizes) <= 1 and sum(sizes) == n


def test_dirichlet_heterogeneity_decreases_with_alpha():
  labels = random_labels(5000, 10, 1)
  dist = [np.mean([label_distance(labels, fd.dirichlet(labels, 20, alpha, seed), 10)
                   for seed in range(3)])
          for alpha in (0.05, 0.5, 5.0, 500.0)]
  assert all(a > b for a, b in zip(dist, dist[1:])), dist
  assert dist[0] > 0.6 and dist[-1] < 0.1


@FAST
@given(min_size=st.integers(1, 10), clients=st.integers(2, 30), seed=st.integers(0, 1000))
def test_dirichlet_min_size_honoured(min_size, clients, seed):
  labels = random_labels(1000, 10, seed)
  parts = fd.dirichlet(labels, clients, alpha=0.3, seed=seed, min_size=min_size)
  assert min(p.size for p in parts) >= min_size


def test_dirichlet_min_size_impossible():
  with pytest.raises(ValueError, match='min_size'):
    fd.dirichlet(np.zeros(10, int), 5, alpha=1.0, seed=0, min_size=3)
  with pytest.raises(ValueError, match='tries'):  # Possible in principle, hopeless in practice.
    fd.dirichlet(np.arange(100) % 10, 20, alpha=1e-3, seed=0, min_size=5)


@FAST
@given(n=st.integers(50, 600), clients=st.integers(1, 20), per_client=st.integers(1, 30),
       alpha=st.floats(0.01, 100.0), seed=st.integers(0, 1000))
def test_balanced_dirichlet_exact_sizes(n, clients, per_client, alpha, seed):
  labels = random_labels(n, 7, seed)
  per_client = min(per_client, n // clients)
  parts = fd.balanced_dirichlet(labels, clients, alpha, seed, samples_per_client=per_client)
  assert [p.size for p in parts] == [per_client] * clients
  default = fd.balanced_dirichlet(labels, clients, alpha, seed)
  assert [p.size for p in default] == [n // clients] * clients


def test_balanced_dirichlet_heterogeneity_and_speed():
  labels = random_labels(50_000, 10, 0)
  start = time.perf_counter()
  skewed = fd.balanced_dirichlet(labels, 100, 0.1, seed=0)
  assert time.perf_counter() - start < 3.0
  near_iid = fd.balanced_dirichlet(labels, 100, 100.0, seed=0)
  assert label_distance(labels, skewed, 10) > 0.5 > 0.1 > label_distance(labels, near_iid, 10)


def test_sample_by_priors_follows_priors():
  labels = np.arange(3000) % 3
  priors = np.array([[1.0, 0, 0], [0, 1, 1], [0, 0, 5]])
  parts = fd.sample_by_priors(labels, priors, 200, seed=0)
  assert [set(labels[p]) for p in parts] == [{0}, {1, 2}, {2}]


@FAST
@given(clients=st.integers(1, 10), k=st.integers(1, 4), per_shard=st.integers(1, 20),
       classes=st.integers(1, 10), seed=st.integers(0, 1000))
def test_shards_at_most_k_labels(clients, k, per_shard, classes, seed):
  num_shards = clients * k
  classes = min(classes, num_shards)
  # Every class spans a whole number of shards: at most k labels per client.
  shards_per_class = num_shards // classes + (np.arange(classes) < num_shards % classes)
  labels = np.repeat(np.arange(classes), shards_per_class * per_shard)
  labels = np.random.default_rng(seed).permutation(labels)
  parts = fd.shards(labels, clients, k, seed)
  assert all(p.size == k * per_shard and len(np.unique(labels[p])) <= k for p in parts)


@pytest.mark.parametrize('clients', [10, 20, 25])
def test_one_class_per_client(clients):
  labels = random_labels(2000, 10, 0)
  parts = fd.one_class_per_client(labels, clients, seed=0)
  for m, p in enumerate(parts):
    np.testing.assert_array_equal(np.unique(labels[p]), [m % 10])
  for c in range(10):
    sizes = [p.size for m, p in enumerate(parts) if m % 10 == c]
    assert sum(sizes) == np.sum(labels == c) and max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize('clients', [10, 20, 30])
def test_class_blocks_halves_hold_disjoint_classes(clients):
  """Client m → class ⌊m·10/M⌋ (⌊m/2⌋ for M = 20): the two equal contiguous halves (the dynamic
  systems model's groups) hold disjoint class sets, together all ten."""
  labels = random_labels(2000, 10, 0)
  parts = fd.class_blocks(labels, clients, seed=0)
  for m, p in enumerate(parts):
    np.testing.assert_array_equal(np.unique(labels[p]), [m * 10 // clients])
  halves = [set(np.unique(labels[np.concatenate(parts[h])]).tolist())
            for h in (slice(0, clients // 2), slice(clients // 2, None))]
  assert not halves[0] & halves[1] and halves[0] | halves[1] == set(range(10))
  cyclic = [set(np.unique(labels[np.concatenate(fd.one_class_per_client(labels, clients, 0)[h])])
                .tolist()) for h in (slice(0, clients // 2), slice(clients // 2, None))]
  assert bool(cyclic[0] & cyclic[1]) == (clients > 10)  # m mod 10: both halves share classes


@FAST
@given(min_size=st.integers(1, 20), clients=st.integers(1, 40), alpha=st.floats(0.05, 10.0),
       seed=st.integers(0, 1000))
def test_quantity_skew_sizes(min_size, clients, alpha, seed):
  parts = fd.quantity_skew(random_labels(1000, 5, seed), clients, alpha, seed, min_size=min_size)
  assert min(p.size for p in parts) >= min_size and sum(p.size for p in parts) == 1000


def test_quantity_skew_sizes_vary_with_alpha():
  labels = random_labels(10_000, 10, 0)
  spread = [np.std([p.size for p in fd.quantity_skew(labels, 50, alpha, seed=0)])
            for alpha in (0.1, 1000.0)]
  assert spread[0] > 5 * spread[1]


def test_split_by_class_shares_proportional():
  labels = np.repeat(np.arange(2), 100)
  parts = fd.split_by_class_shares(labels, np.array([[3.0, 0.0], [1.0, 1.0]]), seed=0)
  assert np.bincount(labels[parts[0]], minlength=2).tolist() == [75, 0]
  assert np.bincount(labels[parts[1]], minlength=2).tolist() == [25, 100]


def test_dispatcher_matches_direct_call():
  labels = random_labels(500, 10, 0)
  a = fd.partition(labels, 10, 'dirichlet', seed=1, alpha=0.3)
  b = fd.dirichlet(labels, 10, 0.3, 1)
  assert all(np.array_equal(u, v) for u, v in zip(a, b))


@pytest.mark.parametrize('call, match', [
    (lambda y: fd.partition(y, 5, 'nope', seed=0), 'Unknown partition'),
    (lambda y: fd.partition(y, 5, 'iid', seed=0, alpha=1.0), 'unknown'),
    (lambda y: fd.partition(y, 5, 'dirichlet', seed=0), 'missing'),
    (lambda y: fd.dirichlet(y, 5, 0.0, 0), 'alpha'),
    (lambda y: fd.quantity_skew(y, 5, -1.0, 0), 'alpha'),
    (lambda y: fd.balanced_dirichlet(y, 5, 0.0, 0), 'alpha'),
    (lambda y: fd.iid(y, 101, 0), 'num_clients'),
    (lambda y: fd.iid(y, 0, 0), 'num_clients'),
    (lambda y: fd.shards(y, 10, 0, 0), 'shards_per_client'),
    (lambda y: fd.shards(y, 10, 11, 0), 'shards_per_client'),
    (lambda y: fd.balanced_dirichlet(y, 10, 1.0, 0, samples_per_client=11), 'samples_per_client'),
    (lambda y: fd.one_class_per_client(np.array([0, 1, 1, 1]), 3, 0), 'class 0 has 1 examples'),
    (lambda y: fd.iid(y.astype(float), 5, 0), 'integers'),
    (lambda y: fd.iid(-y, 5, 0), 'non-negative'),
])
def test_partition_errors(call, match):
  with pytest.raises(ValueError, match=match):
    call(np.arange(100) % 10)


# ---------------------------------------------------------------- federated layout

@FAST
@given(n=st.integers(10, 200), clients=st.integers(1, 10), seed=st.integers(0, 1000))
def test_pack_clients_round_trip(n, clients, seed):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, 3, 2)).astype(np.float32)
  y = rng.integers(0, 5, n)
  parts = fd.quantity_skew(y, min(clients, n), 0.5, seed)
  data = fd.pack_clients(x, y, parts)
  assert data.x.shape == (len(parts), max(p.size for p in parts), 3, 2)
  assert data.x.dtype == np.float32
  assert data.y.dtype == np.int32 and data.counts.dtype == np.int32
  np.testing.assert_array_equal(data.counts, [p.size for p in parts])
  for i, p in enumerate(parts):
    np.testing.assert_array_equal(data.x[i, :p.size], x[p])
    np.testing.assert_array_equal(data.y[i, :p.size], y[p])
    assert not data.x[i, p.size:].any() and not data.y[i, p.size:].any()
  np.testing.assert_array_equal(fd.client_label_histogram(data, 5),
                                [np.bincount(y[p], minlength=5) for p in parts])


def test_pack_clients_errors():
  x, y = np.zeros((4, 2)), np.zeros(4, int)
  with pytest.raises(ValueError, match='at least one example'):
    fd.pack_clients(x, y, [np.array([0, 1]), np.array([], np.int64)])
  with pytest.raises(ValueError, match='index'):
    fd.pack_clients(x, y, [np.array([0, 4])])


def test_federated_data_is_a_jittable_pytree():
  data = fd.pack_clients(np.arange(12.0).reshape(6, 2), np.arange(6) % 2,
                         [np.arange(4), np.arange(4, 6)])
  device = data.to_device()
  assert isinstance(device.x, jax.Array) and device.num_clients == 2 and device.max_examples == 4

  @jax.jit
  def valid_sum(d):
    mask = jnp.arange(d.max_examples) < d.counts[:, None]
    return jnp.sum(jnp.where(mask[..., None], d.x, 0.0), axis=(1, 2))

  np.testing.assert_allclose(valid_sum(device), [28.0, 38.0])


@pytest.fixture(scope='module')
def digits():
  return fd.load_dataset('digits')


def test_build_federated_train(digits):
  split = fd.build_federated(digits, num_clients=30, partition='dirichlet', seed=0, alpha=0.3)
  assert split.local_test is None and split.num_classes == 10
  assert int(split.train.counts.sum()) == len(digits.y_train)
  np.testing.assert_array_equal(fd.client_label_histogram(split.train, 10).sum(0),
                                np.bincount(digits.y_train, minlength=10))
  assert split.test_x is digits.x_test and split.test_y is digits.y_test


@pytest.mark.parametrize('method, kwargs', [
    ('iid', {}), ('dirichlet', {'alpha': 0.5}), ('balanced_dirichlet', {'alpha': 0.3}),
    ('shards', {'shards_per_client': 2}), ('one_class', {}), ('class_blocks', {}), ('quantity_skew', {'alpha': 2.0}),
])
def test_build_federated_local_test_follows_train(digits, method, kwargs):
  split = fd.build_federated(digits, num_clients=10, partition=method, seed=0, local_test=True,
                             **kwargs)
  train = fd.client_label_histogram(split.train, 10)
  test = fd.client_label_histogram(split.local_test, 10)
  flat = split.local_test.counts.sum()
  assert flat <= len(digits.y_test) and test.sum() == flat
  if method == 'balanced_dirichlet':
    assert set(split.local_test.counts.tolist()) == {len(digits.y_test) // 10}
  if method in ('dirichlet', 'shards', 'one_class', 'class_blocks'):
    assert np.all(test[train == 0] == 0)  # Test classes are among the client's train classes.
  if method != 'iid':
    train_dist = train / train.sum(1, keepdims=True)
    test_dist = test / test.sum(1, keepdims=True)
    assert 0.5 * np.abs(train_dist - test_dist).sum(1).mean() < 0.3


def test_build_federated_local_test_too_many_clients(digits):
  with pytest.raises(ValueError, match='test example'):
    fd.build_federated(digits, num_clients=400, partition='iid', seed=0, local_test=True)


# ---------------------------------------------------------------- sources

def test_digits(digits):
  assert digits.x_train.shape == (1437, 8, 8, 1) and digits.x_test.shape == (360, 8, 8, 1)
  assert digits.x_train.dtype == np.float32 and digits.y_train.dtype == np.int32
  assert digits.x_train.min() == 0.0 and digits.x_train.max() == 1.0 and digits.num_classes == 10
  # Stratified: every class keeps (about) its share in the test split.
  share = np.bincount(digits.y_test) / np.bincount(np.concatenate([digits.y_train, digits.y_test]))
  assert np.all(np.abs(share - 0.2) < 0.02)
  again = fd.load_dataset('digits')
  np.testing.assert_array_equal(again.x_train, digits.x_train)
  other = fd.load_dataset('digits', seed=1, test_fraction=0.5)
  assert other.x_test.shape[0] in (898, 899)
  assert not np.array_equal(other.y_train[:50], digits.y_train[:50])


def test_synthetic_deterministic_and_learnable():
  from sklearn.linear_model import LogisticRegression
  ds = fd.load_dataset('synthetic', seed=5)
  assert ds.x_train.shape == (2000, 8, 8, 1) and ds.x_test.shape == (500, 8, 8, 1)
  assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
  np.testing.assert_array_equal(np.bincount(ds.y_train), [200] * 10)
  same = fd.load_dataset('synthetic', seed=5)
  other = fd.load_dataset('synthetic', seed=6)
  np.testing.assert_array_equal(same.x_train, ds.x_train)
  assert not np.array_equal(other.x_train, ds.x_train)
  hard = fd.load_dataset('synthetic', seed=5, noise=3.0, num_train=1000, num_classes=5)
  model = LogisticRegression(max_iter=500).fit(hard.x_train.reshape(1000, -1), hard.y_train)
  assert model.score(hard.x_test.reshape(500, -1), hard.y_test) > 0.6  # chance: 0.2
  flat = fd.load_dataset('synthetic', shape=(20,), num_train=30, num_test=10)
  assert flat.x_train.shape == (30, 20)


def test_normalize():
  ds = fd.load_dataset('synthetic', shape=(4, 4, 3), normalize=True)
  np.testing.assert_allclose(ds.x_train.mean(axis=(0, 1, 2)), 0.0, atol=1e-5)
  np.testing.assert_allclose(ds.x_train.std(axis=(0, 1, 2)), 1.0, atol=1e-4)
  assert ds.x_train.dtype == np.float32


@pytest.mark.parametrize('name, options, match', [
    ('imagenet', {}, 'known datasets'),
    ('digits', {'num_train': 3}, 'Unknown option'),
    ('mnist', {'emnist_split': 'letters'}, 'Unknown option'),
    ('emnist', {'emnist_split': 'nope'}, 'emnist_split'),
    ('cifar100', {'cifar100_labels': 'medium'}, 'cifar100_labels'),
    ('digits', {'test_fraction': 1.5}, 'test_fraction'),
    ('synthetic', {'num_classes': 1}, 'num_classes'),
])
def test_load_dataset_errors(name, options, match):
  with pytest.raises(ValueError, match=match):
    fd.load_dataset(name, **options)


@pytest.mark.parametrize('name, options, shape, num_classes', [
    ('mnist', {}, (28, 28, 1), 10),
    ('cifar10', {}, (32, 32, 3), 10),
    ('cifar100', {'cifar100_labels': 'coarse'}, (32, 32, 3), 20),
    ('emnist', {}, (28, 28, 1), 47),
    ('emnist', {'emnist_split': 'digits'}, (28, 28, 1), 10),
])
def test_tfds_with_mock_data(tmp_path, name, options, shape, num_classes):
  tfds = pytest.importorskip('tensorflow_datasets')
  with tfds.testing.mock_data(num_examples=12):
    ds = fd.load_dataset(name, data_dir=str(tmp_path), **options)
  assert ds.x_train.shape == (12, *shape) and ds.x_test.shape == (12, *shape)
  assert ds.x_train.dtype == np.float32
  assert ds.y_train.dtype == np.int32 and ds.y_test.dtype == np.int32
  assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0 and ds.x_train.max() > 0.5
  assert ds.num_classes == num_classes and 0 <= ds.y_train.min() and ds.y_train.max() < num_classes


def test_tfds_not_prepared_raises_without_downloading(tmp_path, monkeypatch):
  tfds = pytest.importorskip('tensorflow_datasets')
  downloads = []
  monkeypatch.setattr(tfds.core.DatasetBuilder, 'download_and_prepare',
                      lambda self, *a, **k: downloads.append(self.name))
  with pytest.raises(ValueError) as info:
    fd.load_dataset('cifar10', data_dir=str(tmp_path))
  message = str(info.value)
  assert f'data_dir={tmp_path}' in message and 'download_and_prepare()' in message
  assert '--config.data_dir' in message and '\n' not in message
  assert downloads == [] and not any(tmp_path.rglob('*.tfrecord*'))
