"""Reliability II (issue 26): federations validated where they meet a model,
checkpoints and run files checked when read back, warnings for runs that are
valid but almost certainly not meant."""
import numpy as np
import pytest

from fedjax_het import algorithms, models
from fedjax_het.data import FederatedData
from engine_utils import tiny_config


def memmapped(tmp_path, **changes) -> FederatedData:
  """A 4-client, 3-row federation of 5 classes in np.memmap files, with the
  leaves in `changes` (name → array) replacing the good ones."""
  leaves = {'x': np.ones((4, 3, 2), np.float32),
            'y': np.tile(np.arange(3, dtype=np.int32), (4, 1)),
            'counts': np.array([3, 2, 3, 1], np.int32)}
  leaves.update(changes)
  for name, array in leaves.items():
    mapped = np.lib.format.open_memmap(tmp_path / f'{name}.npy', 'w+',
                                       array.dtype, array.shape)
    mapped[:] = array
    mapped.flush()
  return FederatedData(**{name: np.load(tmp_path / f'{name}.npy', mmap_mode='r')
                          for name in leaves})


def bad_labels(value):
  y = np.tile(np.arange(3, dtype=np.int32), (4, 1))
  y[2, 1] = value
  return y


@pytest.mark.parametrize('changes, message', [
    ({'y': bad_labels(5)}, 'client 2, row 1: label 5 lies outside [0, 5)'),
    ({'y': bad_labels(-1)}, 'client 2, row 1: label -1 lies outside [0, 5)'),
    ({'counts': np.array([3, 2, 4, 1], np.int32)},
     'client 2 has counts 4, outside [1, 3] (its padded rows)'),
    ({'x': np.where(np.arange(3)[:, None] == 2, np.nan, 1).astype(
        np.float32)[None].repeat(4, 0)},
     'client 0, row 2: its features are not finite'),
    ({'y': np.zeros((4, 3), np.float32)},
     'y are float32; they must be integers'),
])
def test_a_memmapped_federation_is_checked_where_it_meets_the_model(
    tmp_path, changes, message):
  data = memmapped(tmp_path, **changes)
  model = models.create_model('mlp', 5, hidden=(4,))
  with pytest.raises(ValueError, match='federated data: ') as raised:
    algorithms.create_algorithm('fedavg', tiny_config(), model, data)
  assert message in str(raised.value) and '\n' not in str(raised.value)


def test_padding_rows_are_not_checked_and_blocks_keep_client_numbers(tmp_path):
  y = bad_labels(1)
  y[3, 2] = 7  # client 3 holds 1 row: row 2 is padding
  memmapped(tmp_path, y=y).validate(5, chunk_bytes=1)  # one client a block
  y[3, 0] = 12
  with pytest.raises(ValueError, match='client 3, row 0: label 12'):
    memmapped(tmp_path, y=y).validate(5, chunk_bytes=1)


def test_token_labels_are_checked_against_the_vocabulary():
  y = np.zeros((2, 2, 4), np.int32)  # next tokens, PAD = 0
  y[1, 0, 3] = 90
  data = FederatedData(x=np.zeros((2, 2, 4), np.int32), y=y,
                       counts=np.array([2, 2], np.int32))
  data.validate(91)
  with pytest.raises(ValueError, match="token 90 lies outside .0, 90., the "
                     "model's vocabulary"):
    data.validate(90)
