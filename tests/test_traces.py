"""FedScale's device traces (`systems.traces`): reading and writing the two
pickles, the .npz converter (`fedjax-het traces`), availability in virtual
time and the round-time model."""
import collections
import math
import pickle

import numpy as np
import pytest

from fedjax_het import cli
from fedjax_het.options import ConfigError
from fedjax_het.systems import traces

# FedScale's formats, ids 1-based as in its files.
CAPACITY = {1: {'computation': 162.0, 'communication': 5648.1},
            2: {'computation': 40.5, 'communication': 800.0},
            7: {'computation': 95.0, 'communication': 20000.0}}
BEHAVIOUR = {
    1: {'duration': 3000, 'inactive': [30, 90], 'finish_time': 100,
        'active': [10, 50], 'model': 'SM-G900F'},
    2: {'duration': 500, 'inactive': [40, 100], 'finish_time': 100,
        'active': [0, 70], 'model': 'Pixel'},
    3: {'inactive': [], 'finish_time': 60, 'active': []},
}


def _write(path, data):
  with open(path, 'wb') as f:
    pickle.dump(data, f)
  return str(path)


def _load(path):
  with open(path, 'rb') as f:
    return pickle.load(f)


def test_capacity_round_trips(tmp_path):
  capacity = traces.read_capacity(_write(tmp_path / 'cap', CAPACITY))
  np.testing.assert_array_equal(capacity.ids, [1, 2, 7])
  np.testing.assert_array_equal(capacity.ms_per_sample, [162.0, 40.5, 95.0])
  np.testing.assert_array_equal(capacity.kbps, [5648.1, 800.0, 20000.0])
  traces.write_capacity(str(tmp_path / 'again'), capacity)
  assert _load(tmp_path / 'again') == CAPACITY


def test_behaviour_round_trips(tmp_path):
  trace = traces.read_behaviour(_write(tmp_path / 'trace', BEHAVIOUR))
  np.testing.assert_array_equal(trace.ids, [1, 2, 3])
  np.testing.assert_array_equal(trace.offsets, [0, 2, 4, 4])
  np.testing.assert_array_equal(trace.starts, [10, 50, 0, 70])
  np.testing.assert_array_equal(trace.ends, [30, 90, 40, 100])
  np.testing.assert_array_equal(trace.period, [100, 100, 60])
  traces.write_behaviour(str(tmp_path / 'again'), trace)
  assert _load(tmp_path / 'again') == BEHAVIOUR


def test_npz_round_trip_and_command(tmp_path, capsys):
  cap = _write(tmp_path / 'client_device_capacity', CAPACITY)
  beh = _write(tmp_path / 'client_behave_trace', BEHAVIOUR)
  out = str(tmp_path / 'traces.npz')
  assert cli.main(['traces', '--capacity', cap, '--behaviour', beh,
                   '--out', out]) == 0
  assert capsys.readouterr().out.splitlines() == [
      '3 devices: median 95 ms/sample, 5648.1 kbit/s',
      '3 clients, 4 online intervals', f'wrote {out}']
  capacity, trace = traces.load_npz(out)
  for want, got in ((traces.read_capacity(cap), capacity),
                    (traces.read_behaviour(beh), trace)):
    for name, value in vars(want).items():
      np.testing.assert_array_equal(getattr(got, name), value, err_msg=name)
  assert cli.main(['traces', '--capacity', cap, '--out', out]) == 0
  assert traces.load_npz(out)[1] is None


@pytest.mark.parametrize('data,match', [
    ([1, 2], 'holds a list, not a non-empty dict'),
    ({1: {'computation': 1.0, 'communication': 1.0},
      'a': {'computation': 1.0, 'communication': 1.0}}, "client id 'a'"),
    ({1: {'computation': 1.0}}, 'must be a dict with the keys computation, '
     'communication, got the keys computation'),
    ({1: {'computation': 1.0, 'communication': 0.0}}, 'client 1 needs one '
     'positive'),
    ({1: {'computation': 'fast', 'communication': 1.0}}, "'computation' of "
     'client 1 is not numeric'),
    (collections.OrderedDict(), 'names collections.OrderedDict'),
])
def test_bad_capacity_files_are_one_line(tmp_path, data, match):
  with pytest.raises(ConfigError, match=match):
    traces.read_capacity(_write(tmp_path / 'cap', data))


@pytest.mark.parametrize('entry,match', [
    ({'active': [0, 5], 'inactive': [4], 'finish_time': 10}, 'equal length'),
    ({'active': [5, 0], 'inactive': [6, 4], 'finish_time': 10}, 'sorted, '
     'disjoint'),
    ({'active': [0], 'inactive': [12], 'finish_time': 10}, r'within \[0, '
     'finish_time = 10\\]'),
    ({'active': [0], 'inactive': [1], 'finish_time': 0}, "'finish_time' of "
     'client 1 must be one positive number'),
    ({'active': [0], 'inactive': [math.inf], 'finish_time': 10}, 'must be '
     'finite'),
])
def test_bad_behaviour_files_are_one_line(tmp_path, entry, match):
  with pytest.raises(ConfigError, match=match):
    traces.read_behaviour(_write(tmp_path / 'trace', {1: entry}))


def test_unreadable_files_are_one_line(tmp_path):
  (tmp_path / 'text').write_text('not a pickle')
  with pytest.raises(ConfigError, match='is not a FedScale behaviour-trace '
                     'file'):
    traces.read_behaviour(str(tmp_path / 'text'))
  with pytest.raises(ConfigError, match='cannot read the device-capacity '
                     'file'):
    traces.read_capacity(str(tmp_path / 'missing'))
  with pytest.raises(ConfigError, match='cannot read the traces file'):
    traces.load_npz(str(tmp_path / 'missing.npz'))


def test_command_errors_are_one_line(tmp_path, capsys):
  (tmp_path / 'text').write_text('not a pickle')
  assert cli.main(['traces', '--capacity', str(tmp_path / 'text'), '--out',
                   str(tmp_path / 'o.npz')]) == 2
  err = capsys.readouterr().err
  assert err.startswith('fedjax-het traces: error: ') and err.count('\n') == 1
  assert cli.main(['traces', '--out', str(tmp_path / 'o.npz')]) == 2
  assert 'at least one of --capacity' in capsys.readouterr().err
  assert cli.main(['traces', '--speed', 'x']) == 2
  assert "unexpected argument '--speed'" in capsys.readouterr().err


def _trace(tmp_path):
  return traces.read_behaviour(_write(tmp_path / 'trace', BEHAVIOUR))


def test_online_at_half_open_and_periodic(tmp_path):
  """Client 0 (id 1): online [10, 30) and [50, 90) of every 100 s; client 3
  is entry 3 mod 3 = 0."""
  trace = _trace(tmp_path)
  online = [t for t in (0, 9.5, 10, 29.9, 30, 50, 89, 90, 110, 130, 250)
            if trace.online_at(0, t)]
  assert online == [10, 29.9, 50, 89, 110, 250]
  assert trace.online_at(3, 110) and not trace.online_at(3, 130)
  assert not any(trace.online_at(2, t) for t in (0, 30, 59))  # never online


def test_online_until_and_offline_before(tmp_path):
  """Client 1 (id 2): online [0, 40) and [70, 100): its stretch from 70 runs
  on into the next period's [100, 140)."""
  trace = _trace(tmp_path)
  assert trace.online_until(0, 12) == 30
  assert trace.online_until(0, 60) == 90
  assert trace.online_until(0, 35) == 35  # offline
  assert trace.online_until(1, 75) == 140
  assert trace.online_until(1, 120) == 140
  assert not trace.offline_before(1, 75, 140)
  assert trace.offline_before(1, 75, 140.5)
  assert trace.offline_before(0, 12, 31) and not trace.offline_before(0, 12,
                                                                      30)
  assert trace.offline_before(0, 35, 36)


def test_next_online(tmp_path):
  trace = _trace(tmp_path)
  assert trace.next_online(0, 0) == 10
  assert trace.next_online(0, 12) == 12
  assert trace.next_online(0, 30) == 50
  assert trace.next_online(0, 95) == 110
  assert trace.next_online(2, 5) == math.inf


def test_trace_durations_by_hand(tmp_path):
  """3 · samples · ms / 1000 + 2 · bytes · 8 / 1024 / kbps; client 3 is
  device 3 mod 3 = 0."""
  capacity = traces.read_capacity(_write(tmp_path / 'cap', CAPACITY))
  duration = traces.trace_durations(capacity, [100, 20], model_bytes=1024 * 64)
  kbit = 64 * 8
  assert duration(0, 0, 0) == pytest.approx(3 * 100 * 0.162 +
                                            2 * kbit / 5648.1)
  assert duration(1, 5, 2) == pytest.approx(3 * 20 * 0.0405 + 2 * kbit / 800)
  assert duration(3, 0, 0) == pytest.approx(3 * 20 * 0.162 +
                                            2 * kbit / 5648.1)
  one = traces.trace_durations(capacity, 10, 0, compute_factor=1.0)
  assert one(2, 0, 0) == pytest.approx(10 * 0.095)
  with pytest.raises(ConfigError, match='model_bytes must be finite'):
    traces.trace_durations(capacity, 10, -1.0)
