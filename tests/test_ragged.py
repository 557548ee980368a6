"""Ragged client storage: rows back to back with offsets, trained on bit for bit as padded."""
import jax
import numpy as np
import pytest

from fedjax_het.data import FederatedData, open_ragged, write_ragged
from test_stream import assert_identical, host_data, on_device, streamed


def three_clients():
  """Clients of 2, 1 and 3 rows of 2 features, padded to 3 rows."""
  x = np.zeros((3, 3, 2), np.float32)
  y = np.zeros((3, 3), np.int32)
  rows = {0: 2, 1: 1, 2: 3}
  for client, count in rows.items():
    x[client, :count] = 10 * client + np.arange(2 * count).reshape(count, 2)
    y[client, :count] = client
  return FederatedData(x=x, y=y, counts=np.array([2, 1, 3], np.int32))


def test_the_ragged_layout_stores_the_rows_back_to_back():
  ragged = three_clients().ragged()
  np.testing.assert_array_equal(ragged.offsets, [0, 2, 3])
  np.testing.assert_array_equal(ragged.y, [0, 0, 1, 2, 2, 2])
  np.testing.assert_array_equal(ragged.x[:, 0], [0, 2, 10, 20, 22, 24])
  assert ragged.max_examples == 3 and ragged.feature_shape == (2,)
  # 6 rows of (2 float32 + 1 int32) bytes, counts and offsets of 3 int32: 96 bytes,
  # against the padded 9 rows (108 bytes) + counts.
  assert ragged.nbytes == 6 * 12 + 2 * 3 * 4 == 96


def test_the_stored_bytes_follow_the_counts():
  data = host_data(num_clients=8, max_examples=9)
  ragged = data.ragged()
  counts = np.asarray(data.counts)
  row = data.x[0, 0].nbytes + data.y[0, 0].nbytes
  assert ragged.nbytes == counts.sum() * row + 2 * counts.size * 4
  assert counts.sum() < counts.size * 9  # the padding it leaves out


def test_examples_reads_a_clients_rows_at_its_offset():
  data = host_data()
  ragged = data.ragged()
  for client, count in enumerate(np.asarray(data.counts)):
    idx = np.arange(count)[::-1]
    for got, padded in zip(ragged.examples(client, idx), data.examples(client, idx)):
      np.testing.assert_array_equal(got, padded)
  # The last client's draw positions past its count are clipped, not an error.
  last = data.num_clients - 1
  x, _ = ragged.examples(last, np.arange(data.max_examples))
  assert x.shape == (data.max_examples, *data.feature_shape)


def test_cohorts_of_the_ragged_layout_equal_the_padded_ones():
  data = host_data()
  ids = np.array([[5, 0, 3, 3], [1, 2, 4, 0]])
  assert_identical(data.ragged().cohorts(ids), data.cohorts(ids))


@pytest.mark.parametrize('name', ['fedavg', 'fiarse'])
@pytest.mark.parametrize('backend', ['vmap', 'map'])
def test_training_on_the_ragged_layout_is_bit_identical(name, backend):
  data = host_data()
  expected = on_device(name, backend, data, chunks=2, rounds_per_call=2)
  got = on_device(name, backend, data.ragged(), chunks=2, rounds_per_call=2)
  assert int(got[0].round) == 4
  assert_identical(got[0].params, expected[0].params)
  assert_identical(got[1], expected[1])


def blocks_of(ragged, size):
  """The rows of `ragged` in blocks of `size` rows."""
  for start in range(0, len(ragged.y), size):
    yield ragged.x[start:start + size], ragged.y[start:start + size]


def test_the_memmapped_cache_round_trips_and_streams(tmp_path):
  data = host_data()
  ragged = data.ragged()
  cached = write_ragged(str(tmp_path), ragged.counts, blocks_of(ragged, 4),
                        max_examples=ragged.max_examples)
  assert isinstance(cached.x, np.memmap) and isinstance(cached.y, np.memmap)
  assert_identical(cached, ragged)
  assert cached.max_examples == ragged.max_examples
  assert_identical(open_ragged(str(tmp_path)), ragged)
  expected = on_device('fedavg', 'map', data, chunks=2, rounds_per_call=2)
  got = streamed('fedavg', 'map', cached, chunks=2, rounds_per_call=2)
  assert_identical(got[0].params, expected[0].params)


def test_the_cache_keeps_a_longer_draw_length(tmp_path):
  ragged = three_clients().ragged()
  cached = write_ragged(str(tmp_path), ragged.counts, blocks_of(ragged, 5),
                        max_examples=7)
  assert cached.max_examples == 7
  assert cached.cohorts(np.array([2])).x.shape == (1, 7, 2)


def test_a_cache_whose_blocks_miss_rows_is_refused(tmp_path):
  ragged = three_clients().ragged()
  with pytest.raises(ValueError, match='the blocks hold 4 rows; the counts say 6'):
    write_ragged(str(tmp_path), ragged.counts, [(ragged.x[:4], ragged.y[:4])])
  with pytest.raises(ValueError, match='holds no ragged federation: .*layout.json'):
    open_ragged(str(tmp_path))


@pytest.mark.parametrize('chunk_bytes', [1, 1 << 20])
def test_validation_names_the_client_and_row(tmp_path, chunk_bytes):
  data = three_clients()
  data.y[2, 1] = 7
  cached = write_ragged(str(tmp_path), data.counts, blocks_of(data.ragged(), 2))
  message = 'client 2, row 1: label 7 lies outside \\[0, 3\\)'
  with pytest.raises(ValueError, match=message):
    data.validate(3)
  with pytest.raises(ValueError, match=message):
    cached.validate(3, chunk_bytes=chunk_bytes)
  data.y[2, 1] = 2
  data.x[1, 0, 1] = np.nan
  with pytest.raises(ValueError, match='client 1, row 0: its features are not finite'):
    data.ragged().validate(3, chunk_bytes=chunk_bytes)


def test_counts_beyond_the_draw_length_are_refused():
  ragged = three_clients().ragged().replace(max_examples=2)
  with pytest.raises(ValueError, match='client 2 has counts 3, outside \\[1, 2\\]'):
    ragged.validate(3)
