"""HIST's cell-i.i.d., client-non-i.i.d. split (`partition='cell_shards'`)."""
import numpy as np
import pytest

from fedjax_het.data.partition import partition


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
