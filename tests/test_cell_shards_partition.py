"""HIST's cell-i.i.d., client-non-i.i.d. split (`partition='cell_shards'`)."""
import numpy as np
import pytest

from fedjax_het import config as config_lib
from fedjax_het import data as data_lib
from fedjax_het import run
from fedjax_het.data.partition import partition
from fedjax_het.methods import ALGORITHMS
from fedjax_het.parts import cells as cells_lib


def test_cells_iid_and_clients_sharded():
  labels = np.repeat(np.arange(10), 240)  # 2400 examples, 240 per class
  clients = partition(labels, 20, 'cell_shards', seed=0, shards_per_client=2, num_cells=2)
  assert len(clients) == 20
  together = np.concatenate(clients)
  assert np.array_equal(np.sort(together), np.arange(labels.size))  # each example once
  for cell in range(2):
    members = clients[10 * cell:10 * cell + 10]  # contiguous blocks, as hierarchy's cells
    cell_labels = labels[np.concatenate(members)]
    assert cell_labels.size == 1200
    counts = np.bincount(cell_labels, minlength=10)
    assert counts.min() > 80 and counts.max() < 160  # ≈ 120 per class: cell-i.i.d.
    for idx in members:  # 2 shards of 60 < a class's ~120: at most 2 classes per shard
      assert np.unique(labels[idx]).size <= 4


def test_cells_must_divide_clients():
  with pytest.raises(ValueError, match='num_cells must divide'):
    partition(np.arange(100) % 10, 10, 'cell_shards', seed=0, shards_per_client=2, num_cells=4)


@pytest.mark.parametrize('algorithm,hierarchy,cells', [
    ('hist', {}, 2),                       # HIST's own N = 2 (num_cells 0)
    ('hist', {'num_cells': 3}, 3),
    ('fedavg', {}, 1),                     # the part off: one cell
    ('fedavg', {'num_cells': 3}, 3),
    ('fedvarp', {}, 1),                    # no cells section: one cell
])
def test_the_trainer_splits_the_data_along_the_methods_cells(
    algorithm, hierarchy, cells):
  """The cells of `partition='cell_shards'` are the method's
  (`parts.cells.data_cells`): every client holds the labels that
  `partition` gives it with that many cells."""
  config = config_lib.base_config()
  config.update(dict(algorithm=algorithm, dataset='digits', num_clients=6,
                     clients_per_round=6, partition='cell_shards'))
  config.hierarchy.update(hierarchy)
  assert cells_lib.data_cells(ALGORITHMS[algorithm], config) == cells
  split = run.build_experiment(config_lib.resolve(config))[0]
  labels = data_lib.load_dataset('digits', seed=config.seed).y_train
  expected = partition(labels, 6, 'cell_shards', seed=config.seed,
                       shards_per_client=config.shards_per_client,
                       num_cells=cells)
  for client, idx in enumerate(expected):
    held = split.train.y[client, :split.train.counts[client]]
    assert np.array_equal(np.sort(held), np.sort(labels[idx]))
