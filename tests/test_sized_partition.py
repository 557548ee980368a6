"""Tests of the size-prescribed Dirichlet partition, the per-client holdout split and their keys."""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np
import pytest

import fedjax_het.data as fd
from fedjax_het import config as config_lib
from fedjax_het import run
from fedjax_het.data.federated import holdout_split
from fedjax_het.data.partition import sized_dirichlet
from script_utils import load_script

paper_settings = load_script('experiments/cos2p/paper_settings.py')

# Co-S²P E1 (Tab. 7): one NX 8G, three AGX 32G, four AGX 64G, in type order.
E1_SIZES = [c.dataset_size for c in paper_settings.paper_clients('E1')]


def imagenet_like_labels(classes=200, per_class=1300, seed=0):
  """A large synthetic label set: `classes` classes with 732..per_class examples each."""
  rng = np.random.default_rng(seed)
  counts = rng.integers(732, per_class + 1, classes)
  return rng.permutation(np.repeat(np.arange(classes), counts))


def test_sizes_are_the_requested_proportions_exactly():
  """Client n gets round(n · size_n / Σ size): within one example of the exact share."""
  labels = imagenet_like_labels()
  parts = sized_dirichlet(labels, len(E1_SIZES), alpha=1.5, seed=0, sizes=E1_SIZES)
  got = np.array([len(p) for p in parts])
  share = np.array(E1_SIZES) / np.sum(E1_SIZES) * labels.size
  assert got.sum() == labels.size
  assert np.all(np.abs(got - share) < 1)
  # The three AGX 32G clients (equal sizes) differ by at most one example.
  assert np.ptp(got[1:4]) <= 1 and np.ptp(got[4:]) <= 1


def test_every_example_is_used_exactly_once():
  labels = imagenet_like_labels(classes=50, per_class=900, seed=1)
  parts = sized_dirichlet(labels, 16, alpha=0.3, seed=3, sizes=np.arange(1, 17))
  flat = np.concatenate(parts)
  assert flat.size == labels.size and np.unique(flat).size == labels.size
  assert all(np.all(np.diff(p) > 0) for p in parts)        # ascending, no repeats


def test_deterministic_by_seed():
  labels = imagenet_like_labels(classes=30, per_class=800)
  first = sized_dirichlet(labels, 5, alpha=1.5, seed=7, sizes=[1, 2, 3, 4, 5])
  again = sized_dirichlet(labels, 5, alpha=1.5, seed=7, sizes=[1, 2, 3, 4, 5])
  other = sized_dirichlet(labels, 5, alpha=1.5, seed=8, sizes=[1, 2, 3, 4, 5])
  assert all(np.array_equal(a, b) for a, b in zip(first, again))
  assert not all(np.array_equal(a, b) for a, b in zip(first, other))


def mean_tv_to_global(labels, parts, classes):
  glob = np.bincount(labels, minlength=classes) / labels.size
  local = np.stack([np.bincount(labels[p], minlength=classes) / p.size for p in parts])
  return 0.5 * np.abs(local - glob).sum(1).mean()


def test_label_skew_follows_alpha():
  """Huge alpha gives every client the global label mix; small alpha skews it strongly."""
  labels = imagenet_like_labels(classes=20, per_class=1300)
  sizes = [1, 3, 3, 4]
  iid_like = sized_dirichlet(labels, 4, alpha=1e5, seed=0, sizes=sizes)
  skewed = sized_dirichlet(labels, 4, alpha=0.1, seed=0, sizes=sizes)
  assert mean_tv_to_global(labels, iid_like, 20) < 0.02
  assert mean_tv_to_global(labels, skewed, 20) > 0.4
  # Sizes stay exact however skewed the labels are.
  assert [len(p) for p in skewed] == [len(p) for p in iid_like]


def test_dispatcher_and_build_federated():
  labels = imagenet_like_labels(classes=10, per_class=800)
  direct = sized_dirichlet(labels, 3, alpha=1.5, seed=2, sizes=(1, 1, 2))
  named = fd.partition(labels, 3, 'sized_dirichlet', seed=2, alpha=1.5, sizes=(1, 1, 2))
  assert all(np.array_equal(a, b) for a, b in zip(direct, named))
  with pytest.raises(ValueError, match='missing'):
    fd.partition(labels, 3, 'sized_dirichlet', seed=2, alpha=1.5)


@pytest.mark.parametrize('kwargs, match', [
    ({'sizes': [1, 2]}, 'num_clients=3'),
    ({'sizes': [1, 0, 2]}, 'positive finite'),
    ({'sizes': [1, float('nan'), 2]}, 'positive finite'),
    ({'sizes': ['a', 'b', 'c']}, 'positive finite'),
    ({'sizes': [1, 1, 1e-9]}, 'no example'),
    ({'sizes': [1, 1, 1], 'alpha': 0.0}, 'alpha'),
])
def test_sized_dirichlet_errors(kwargs, match):
  labels = np.arange(100) % 5
  with pytest.raises(ValueError, match=match):
    sized_dirichlet(labels, 3, **{'alpha': 1.0, 'seed': 0, **kwargs})


def test_holdout_split_is_eight_to_two_per_client():
  clients = [np.arange(0, 10), np.arange(10, 13), np.arange(13, 113), np.arange(200, 202)]
  train, test = holdout_split(clients, 0.2, seed=0)
  assert [len(t) for t in test] == [2, 1, 20, 1]        # round(0.2 n), at least 1, ≤ n − 1
  for whole, a, b in zip(clients, train, test):
    assert np.array_equal(np.sort(np.concatenate([a, b])), whole)
    assert np.intersect1d(a, b).size == 0 and np.all(np.diff(a) > 0) and np.all(np.diff(b) > 0)
  again = holdout_split(clients, 0.2, seed=0)
  assert all(np.array_equal(x, y) for x, y in zip(test, again[1]))
  with pytest.raises(ValueError, match='at least 2'):
    holdout_split([np.arange(5), np.arange(5, 6)], 0.2, seed=0)
  with pytest.raises(ValueError, match=r'\(0, 1\)'):
    holdout_split(clients, 1.0, seed=0)


def test_build_federated_holds_out_each_clients_own_data():
  ds = fd.load_dataset('synthetic', num_train=600, num_test=50, shape=(4,), num_classes=5)
  split = fd.build_federated(ds, num_clients=3, partition='sized_dirichlet', seed=0,
                             local_test=True, local_test_fraction=0.2, alpha=1.5,
                             sizes=(1, 2, 3))
  train, local = np.asarray(split.train.counts), np.asarray(split.local_test.counts)
  assert list(train + local) == [100, 200, 300]
  assert list(local) == [20, 40, 60]
  # The local test rows come from the training pool, not from the global test set.
  pool = {tuple(row) for row in ds.x_train}
  assert all(tuple(row) in pool for row in split.local_test.x[0, :local[0]])
  assert split.test_x.shape[0] == 50


def quick_config(**overrides):
  config = config_lib.base_config()
  config.update(dict(dataset='synthetic', model='mlp', num_clients=4, clients_per_round=2,
                     rounds=1, local_steps=1, progress=False))
  config.dataset_options = {'num_train': 400, 'num_test': 40, 'shape': (4,)}
  config.model_options = {'hidden': (8,)}
  config.update(overrides)
  return config


def test_core_keys_are_checked():
  config_lib.validate(quick_config(partition='sized_dirichlet', client_sizes=(1, 2, 3, 4)))
  for overrides, match in (
      ({'partition': 'sized_dirichlet'}, 'one entry per client'),
      ({'partition': 'sized_dirichlet', 'client_sizes': (1, 2)}, 'one entry per client'),
      ({'client_sizes': (1, -2, 3, 4)}, 'positive numbers'),
      ({'client_sizes': (1, True, 3, 4)}, 'positive numbers'),
      ({'local_test_fraction': 0.2}, 'local_test=True'),
      ({'local_test': True, 'local_test_fraction': 1.0}, 'local_test_fraction'),
  ):
    with pytest.raises(config_lib.ConfigError, match=match):
      config_lib.validate(quick_config(**overrides))


def test_build_experiment_wires_sizes_and_holdout():
  config = quick_config(partition='sized_dirichlet', client_sizes=(1.0, 1.0, 2.0, 4.0),
                        alpha=1.5, local_test=True, local_test_fraction=0.25)
  split, _, _, _ = run.build_experiment(config)
  total = np.asarray(split.train.counts) + np.asarray(split.local_test.counts)
  assert list(total) == [50, 50, 100, 200]
  assert list(np.asarray(split.local_test.counts)) == [12, 12, 25, 50]
