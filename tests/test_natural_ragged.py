"""Natural federations stored ragged (`data.natural`): trained and evaluated on bit for bit as
the padded layout, cached back to back with bytes that follow the examples, and a padded cache
of earlier versions rebuilt, never misread."""
import dataclasses
import json
import os

import chex
import jax
import numpy as np

from fedjax_het import config as config_lib
from fedjax_het import methods, run, sanity
from fedjax_het.config import base_config
from fedjax_het.data import FederatedData, RaggedData
from fedjax_het.data.natural import NaturalOptions, load_natural
import natural_writers as nw

NUM_CLIENTS = 4


def options(**kw):
  return NaturalOptions(**{**NaturalOptions.defaults(), **kw})


def padded(ragged: RaggedData) -> FederatedData:
  """The same clients zero-padded to `max_examples` rows: x [M, N, ...] (the old layout)."""
  every = ragged.cohorts(np.arange(ragged.num_clients))
  return FederatedData(x=every.x, y=every.y, counts=every.counts)


def fiarse_config(data_dir):
  """FIARSE on the 4 writers of `nw.write_emnist`, evaluated on their local test shards
  (per client, and concatenated as the global set: `global_test='client_shards'`)."""
  config = base_config()
  config.update(algorithm='fiarse', dataset='fed_emnist', partition='natural',
                data_dir=str(data_dir), num_clients=NUM_CLIENTS, clients_per_round=2,
                local_steps=2, batch_size=2, rounds=2, model='mlp', capacities=(0.25, 1.0),
                local_test=True)
  config.model_options.hidden = (8,)
  config.submodel.global_test = 'client_shards'
  config_lib.validate(config)
  return config


def trained(config, split, params, model):
  """(final params, evaluation) of 2 rounds on `split.train` placed on the device as is."""
  algorithm = methods.create_algorithm(config.algorithm, config, model, split.train)
  runner = run.make_runner(config, algorithm)
  state = runner.place(algorithm.init(params, jax.random.PRNGKey(config.seed)))
  state, _ = runner.run(state, runner.place(split.train.to_device()), 2)
  return state.params, algorithm.state_evaluator(split)(state)


def test_a_natural_run_trains_and_evaluates_bit_identically_ragged_and_padded(tmp_path):
  nw.write_emnist(tmp_path, 'fedjax_sqlite')
  config = fiarse_config(tmp_path)
  split, model, params, _ = run.build_experiment(config)
  assert isinstance(split.train, RaggedData) and isinstance(split.local_test, RaggedData)
  assert split.train.x.shape == (11, 28, 28, 1)  # 3 + 1 + 5 + 2 rows, not 4 x 5
  old = dataclasses.replace(split, train=padded(split.train),
                            local_test=padded(split.local_test))
  assert old.train.x.shape == (NUM_CLIENTS, 5, 28, 28, 1)
  got, expected = trained(config, split, params, model), trained(config, old, params, model)
  chex.assert_trees_all_equal(got, expected)
  assert {'local_accuracy', 'loss@1'} <= set(got[1])
  # The warnings read the labels of either layout: 11 train images hold few of 62 classes.
  warnings = sanity.data_warnings(split, config.batch_size)
  assert warnings == sanity.data_warnings(old, config.batch_size)
  held = len(np.unique(split.train.y))
  assert f'{62 - held} of 62 classes are held by no client' in warnings[-1]


def test_the_cache_holds_the_rows_back_to_back(tmp_path):
  data = tmp_path / 'data'
  data.mkdir()
  nw.write_emnist(data, 'fedjax_sqlite')
  load = lambda **kw: load_natural('fed_emnist', str(data), num_clients=NUM_CLIENTS, seed=0,
                                   local_test=True, options=options(**kw))
  memory = load()
  cached = load(cache_dir=str(tmp_path / 'cache'))
  for name in ('train', 'local_test'):
    got, want = getattr(cached, name), getattr(memory, name)
    assert isinstance(got.x, np.memmap) and isinstance(got.y, np.memmap)
    chex.assert_trees_all_equal(jax.tree.map(np.asarray, got), want)
    assert got.max_examples == want.max_examples
  train = cached.train
  np.testing.assert_array_equal(train.counts, [3, 1, 5, 2])
  np.testing.assert_array_equal(train.offsets, [0, 3, 4, 9])
  # 11 images of 28 x 28 float32 and 11 int32 labels, counts and offsets of 4 int32: not the
  # padded 4 x 5 rows.
  row = 28 * 28 * 4 + 4
  assert train.nbytes == 11 * row + 2 * NUM_CLIENTS * 4
  # On disk: the .npy header, then the rows.
  assert os.path.getsize(train.x.filename) == train.x.offset + 11 * 28 * 28 * 4
  local_y = cached.local_test.y
  assert os.path.getsize(local_y.filename) == local_y.offset + 5 * 4  # 1 + 1 + 2 + 1 labels
  directory = cached.summary['cache']
  with open(os.path.join(directory, 'manifest.json')) as f:
    assert json.load(f)['layout'] == 'ragged'


def test_a_padded_cache_of_an_earlier_version_is_rebuilt(tmp_path):
  data = tmp_path / 'data'
  data.mkdir()
  nw.write_emnist(data, 'fedjax_sqlite')
  load = lambda: load_natural('fed_emnist', str(data), num_clients=NUM_CLIENTS, seed=0,
                              options=options(cache_dir=str(tmp_path / 'cache')))
  fresh = load()
  directory = fresh.summary['cache']
  want = jax.tree.map(np.array, fresh.train)  # copies: the files are written over below
  # What the padded writer left: train_{x,y,counts}.npy [M, N, ...] and a manifest without
  # `layout` (its sources and summary still valid).
  old = padded(want)
  for name in ('x', 'y', 'counts'):
    np.save(os.path.join(directory, f'train_{name}.npy'), getattr(old, name))
  os.remove(os.path.join(directory, 'train_layout.json'))
  manifest_path = os.path.join(directory, 'manifest.json')
  with open(manifest_path) as f:
    manifest = json.load(f)
  del manifest['layout']
  with open(manifest_path, 'w') as f:
    json.dump(manifest, f)
  rebuilt = load()
  assert rebuilt.summary['from_cache'] is False  # decoded again from the sources
  assert rebuilt.train.x.shape == (11, 28, 28, 1)
  chex.assert_trees_all_equal(jax.tree.map(np.asarray, rebuilt.train), want)
  assert load().summary['from_cache'] is True  # and read back from then on
