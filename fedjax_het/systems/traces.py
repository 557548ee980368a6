"""FedScale's device traces in virtual time: capacities and availability.

FedScale (Lai et al. 2022) publishes two pickled dicts keyed by an integer
client id (its repository's `benchmark/dataset/data/device_info/`):

- `client_device_capacity`: {id: {'computation': ms per sample of one
  inference pass, 'communication': kbit/s}}, about 500k devices;
- `client_behave_trace`: {id: {'active': [s], 'inactive': [s],
  'finish_time': s, 'duration': s, 'model': str}}, about 107k clients: the
  client comes online at active[i] and goes offline at inactive[i], times in
  seconds from the trace's start; the trace repeats with period finish_time
  (FedScale reads it at t mod finish_time).

This module reads both into compact numpy arrays (`DeviceCapacity`;
`Availability`, online intervals of all clients in one flat array indexed by
`offsets`), writes them back in FedScale's format, and models a round in
virtual time:

- client n of a run is device n mod D and trace entry n mod M (D, M the
  entries in id order), as FedScale maps its clients onto the files;
- online intervals are half-open, [active, inactive): `online_at(n, t)`;
  `offline_before(n, t0, t1)`: a client online at t0 goes offline before t1
  (its update of a round [t0, t1] is lost); an interval ending at the period
  joins the next period's interval starting at 0;
- `trace_durations`: a client's round seconds, FedScale's
  `get_completion_time`: compute_factor · samples · ms/1000 (3: a backward
  pass costs about twice the inference the trace measures) plus the model
  downloaded and the update uploaded, 2 · kbit / (kbit/s), kbit = bytes ·
  8 / 1024 as FedScale counts a model's size.

The pickles are read with an unpickler that builds only plain containers
and numbers (no code runs from the file). `fedjax-het traces` converts the
two files to one .npz (`save_npz`, read back by `load_npz`).
"""
import dataclasses
import math
import pickle
import sys
import numpy as np

from fedjax_het.options import ConfigError
from fedjax_het.systems import clock

CAPACITY_KEYS = ('computation', 'communication')
TRACE_KEYS = ('active', 'inactive', 'finish_time')
# Globals a FedScale pickle may name: numpy scalars, nothing that runs code.
_SAFE_GLOBALS = {('numpy.core.multiarray', 'scalar'),
                 ('numpy._core.multiarray', 'scalar'), ('numpy', 'dtype')}


@dataclasses.dataclass(frozen=True)
class DeviceCapacity:
  """Per-device speeds, arrays [D] in id order.

  Attributes:
    ids: int64, FedScale's device ids.
    ms_per_sample: float64, milliseconds of one sample's inference pass.
    kbps: float64, link bandwidth in kbit/s.
  """
  ids: np.ndarray
  ms_per_sample: np.ndarray
  kbps: np.ndarray


@dataclasses.dataclass(frozen=True)
class Availability:
  """Online intervals per client; client c's are rows offsets[c]:offsets[c+1]
  of `starts` / `ends` (sorted, disjoint, within [0, period[c]]).

  Attributes:
    ids: int64 [M], FedScale's client ids, in id order.
    period: float64 [M], finish_time: the trace repeats with this period.
    duration: float64 [M], the file's 'duration' (NaN where absent); not read.
    model: str [M], the file's 'model' ('' where absent); not read.
    offsets: int64 [M + 1].
    starts, ends: float64 [S], the 'active' and 'inactive' times.
  """
  ids: np.ndarray
  period: np.ndarray
  duration: np.ndarray
  model: np.ndarray
  offsets: np.ndarray
  starts: np.ndarray
  ends: np.ndarray

  def _stretch(self, client: int, t: float) -> tuple[float, float]:
    """(start, end) in absolute seconds of client `client`'s first online
    interval that ends after t (start ≤ t: online at t); an interval reaching
    the period's end runs on into the next period's one from 0; (inf, inf)
    if it is never online."""
    c = client % self.ids.shape[0]
    period = float(self.period[c])
    starts = self.starts[self.offsets[c]:self.offsets[c + 1]]
    ends = self.ends[self.offsets[c]:self.offsets[c + 1]]
    tau = math.fmod(t, period)
    base = t - tau
    i = int(np.searchsorted(ends, tau, side='right'))
    if i == ends.shape[0]:  # none left this period: the next one's first
      base, i = base + period, int(np.searchsorted(ends, 0.0, side='right'))
      if i == ends.shape[0]:
        return math.inf, math.inf
    start, end = base + starts[i], base + ends[i]
    if ends[i] == period and starts[0] == 0:
      end = math.inf if i == 0 else base + period + ends[0]
    return float(start), float(end)

  def online_at(self, client: int, t: float) -> bool:
    """Client `client` is online at t ≥ 0 (some active ≤ t mod period <
    inactive)."""
    return self._stretch(client, t)[0] <= t

  def online_until(self, client: int, t: float) -> float:
    """When client `client`, online at t, goes offline (inf: never); t if it
    is offline at t."""
    start, end = self._stretch(client, t)
    return end if start <= t else t

  def offline_before(self, client: int, t0: float, t1: float) -> bool:
    """Client `client` is offline at t0 or goes offline before t1 ≥ t0: an
    update it trains over [t0, t1] is lost."""
    return self.online_until(client, t0) < t1

  def next_online(self, client: int, t: float) -> float:
    """The first time ≥ t client `client` is online (inf: never again)."""
    return max(t, self._stretch(client, t)[0])


# ---- round times ------------------------------------------------------------
def trace_durations(capacity: DeviceCapacity, samples, model_bytes: float, *,
                    compute_factor: float = 3.0) -> clock.Duration:
  """Round seconds of client n on device n mod D (module docstring):
  compute_factor · samples_n · ms_per_sample / 1000 + 2 · model_bytes · 8 /
  1024 / kbps; the same for every dispatch.

  Args:
    capacity: the devices.
    samples: samples a client processes in a round (local steps × batch
      size), one value for every client or one per client [N].
    model_bytes: bytes of the model (downloaded) and of its update (uploaded).
    compute_factor: seconds of a training sample per second of inference.
  """
  samples = np.atleast_1d(np.asarray(samples, np.float64))
  if not (np.all(np.isfinite(samples)) and np.all(samples >= 0)):
    raise ConfigError('the samples of a client round must be finite and ≥ 0.')
  for key, value in (('model_bytes', model_bytes),
                     ('compute_factor', compute_factor)):
    if not (math.isfinite(value) and value >= 0):
      raise ConfigError(f'{key} must be finite and ≥ 0, got {value!r}.')
  kbit = model_bytes * 8 / 1024

  def duration(client: int, dispatch_round: int, dispatch_index: int) -> float:
    del dispatch_round, dispatch_index
    d = client % capacity.ids.shape[0]
    work = samples[client % samples.shape[0]]
    return float(compute_factor * work * capacity.ms_per_sample[d] / 1000 +
                 2 * kbit / capacity.kbps[d])

  return duration


# ---- FedScale's pickles -------------------------------------------------------
class _PlainUnpickler(pickle.Unpickler):
  """Builds containers, numbers, strings and numpy scalars; refuses any other
  global (a pickle can name code to run)."""

  def find_class(self, module: str, name: str):
    if (module, name) in _SAFE_GLOBALS:
      return super().find_class(module, name)
    raise pickle.UnpicklingError(f'it names {module}.{name}')


def _load_dict(path: str, what: str) -> dict:
  """The pickled dict of `path`, or a ConfigError saying why not."""
  try:
    with open(path, 'rb') as f:
      data = _PlainUnpickler(f).load()
  except OSError as e:
    raise ConfigError(f'cannot read the {what} file {path!r}: '
                      f'{e.strerror}.') from e
  except Exception as e:  # pylint: disable=broad-exception-caught
    raise ConfigError(f'{path!r} is not a FedScale {what} file (a pickled '
                      f'dict of plain values): {e}.') from e
  if not isinstance(data, dict) or not data:
    raise ConfigError(f'{path!r} is not a FedScale {what} file: it holds a '
                      f'{type(data).__name__}, not a non-empty dict by client id.')
  return data


def _sorted_ids(path: str, data: dict) -> list:
  """The file's client ids in order, checked to be integers."""
  for key in data:
    if isinstance(key, bool) or not isinstance(key, (int, np.integer)):
      raise ConfigError(f'{path!r}: client id {key!r} is not an integer.')
  return sorted(data)


def _entry(path: str, key, value, required: tuple) -> dict:
  """One entry of a file: a dict holding the `required` keys."""
  if not isinstance(value, dict) or not set(required) <= set(value):
    got = (f'the keys {", ".join(map(str, value))}' if isinstance(value, dict)
           else f'a {type(value).__name__}')
    raise ConfigError(f'{path!r}: the entry of client {key} must be a dict '
                      f'with the keys {", ".join(required)}, got {got}.')
  return value


def _numbers(path: str, key, field: str, values) -> np.ndarray:
  """float64 array of an entry's `field`, or a ConfigError."""
  try:
    array = np.asarray(values, np.float64)
  except (TypeError, ValueError) as e:
    raise ConfigError(f'{path!r}: {field!r} of client {key} is not numeric, '
                      f'got {values!r}.') from e
  if not np.all(np.isfinite(array)):
    raise ConfigError(f'{path!r}: {field!r} of client {key} must be finite, '
                      f'got {values!r}.')
  return array


def read_capacity(path: str) -> DeviceCapacity:
  """FedScale's `client_device_capacity` file as arrays (speeds > 0)."""
  data = _load_dict(path, 'device-capacity')
  ids = _sorted_ids(path, data)
  rows = []
  for key in ids:
    entry = _entry(path, key, data[key], CAPACITY_KEYS)
    row = [_numbers(path, key, f, entry[f]) for f in CAPACITY_KEYS]
    if any(x.ndim or not x > 0 for x in row):
      raise ConfigError(f'{path!r}: client {key} needs one positive '
                        f"'computation' and 'communication', got {entry!r}.")
    rows.append(row)
  speeds = np.asarray(rows, np.float64).reshape(len(ids), 2)
  return DeviceCapacity(ids=np.asarray(ids, np.int64),
                        ms_per_sample=speeds[:, 0], kbps=speeds[:, 1])


def _intervals(path: str, key, entry: dict) -> tuple[float, np.ndarray,
                                                     np.ndarray]:
  """(period, starts, ends) of one trace entry, checked: 0 ≤ active[i] ≤
  inactive[i] ≤ active[i+1], inactive ≤ finish_time > 0."""
  period = _numbers(path, key, 'finish_time', entry['finish_time'])
  starts = _numbers(path, key, 'active', entry['active'])
  ends = _numbers(path, key, 'inactive', entry['inactive'])
  if period.ndim or not period > 0:
    raise ConfigError(f"{path!r}: 'finish_time' of client {key} must be one "
                      f"positive number, got {entry['finish_time']!r}.")
  if starts.ndim != 1 or starts.shape != ends.shape:
    raise ConfigError(f"{path!r}: 'active' and 'inactive' of client {key} "
                      'must be lists of equal length.')
  times = np.stack([starts, ends], 1).ravel()
  if np.any(np.diff(times) < 0) or times.size and not (
      times[0] >= 0 and times[-1] <= period):
    raise ConfigError(f"{path!r}: the intervals ['active', 'inactive'] of "
                      f'client {key} must be sorted, disjoint and within '
                      f'[0, finish_time = {float(period):g}].')
  return float(period), starts, ends


def read_behaviour(path: str) -> Availability:
  """FedScale's `client_behave_trace` file as arrays (checked intervals)."""
  data = _load_dict(path, 'behaviour-trace')
  ids = _sorted_ids(path, data)
  periods, durations, models, starts, ends = [], [], [], [], []
  for key in ids:
    entry = _entry(path, key, data[key], TRACE_KEYS)
    period, s, e = _intervals(path, key, entry)
    periods.append(period)
    durations.append(float(entry.get('duration', math.nan)))
    models.append(str(entry.get('model', '')))
    starts.append(s)
    ends.append(e)
  counts = [s.shape[0] for s in starts]
  return Availability(
      ids=np.asarray(ids, np.int64), period=np.asarray(periods),
      duration=np.asarray(durations), model=np.asarray(models, dtype=str),
      offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
      starts=np.concatenate(starts), ends=np.concatenate(ends))


def write_capacity(path: str, capacity: DeviceCapacity) -> None:
  """`capacity` in FedScale's format (floats), readable by `read_capacity`."""
  data = {int(i): {'computation': float(c), 'communication': float(b)}
          for i, c, b in zip(capacity.ids, capacity.ms_per_sample,
                             capacity.kbps)}
  with open(path, 'wb') as f:
    pickle.dump(data, f)


def write_behaviour(path: str, availability: Availability) -> None:
  """`availability` in FedScale's format; 'duration' and 'model' only where
  present."""
  a = availability
  data = {}
  for c, key in enumerate(a.ids):
    rows = slice(a.offsets[c], a.offsets[c + 1])
    entry = {'active': a.starts[rows].tolist(),
             'inactive': a.ends[rows].tolist(),
             'finish_time': float(a.period[c])}
    if not math.isnan(a.duration[c]):
      entry['duration'] = float(a.duration[c])
    if a.model[c]:
      entry['model'] = str(a.model[c])
    data[int(key)] = entry
  with open(path, 'wb') as f:
    pickle.dump(data, f)


# ---- the converter's .npz -----------------------------------------------------
_NPZ_KINDS = {'capacity_': DeviceCapacity, 'trace_': Availability}


def save_npz(path: str, capacity: DeviceCapacity | None,
             availability: Availability | None) -> None:
  """Both (or either) as one .npz: fields prefixed 'capacity_' / 'trace_'."""
  arrays = {}
  for (prefix, kind), value in zip(_NPZ_KINDS.items(),
                                   (capacity, availability)):
    if value is not None:
      arrays.update({prefix + f.name: getattr(value, f.name)
                     for f in dataclasses.fields(kind)})
  np.savez(path, **arrays)


def load_npz(path: str) -> tuple[DeviceCapacity | None, Availability | None]:
  """(capacity, availability) from `save_npz`'s file, None where absent."""
  try:
    with np.load(path, allow_pickle=False) as npz:
      arrays = dict(npz)
  except (OSError, ValueError) as e:
    raise ConfigError(f'cannot read the traces file {path!r}: {e}.') from e
  loaded = []
  for prefix, kind in _NPZ_KINDS.items():
    names = [f.name for f in dataclasses.fields(kind)]
    present = [prefix + n in arrays for n in names]
    if any(present) and not all(present):
      raise ConfigError(f'{path!r} holds part of the {prefix[:-1]} arrays; '
                        'write it again with fedjax-het traces.')
    loaded.append(kind(**{n: arrays[prefix + n] for n in names})
                  if all(present) else None)
  return loaded[0], loaded[1]


# ---- fedjax-het traces ----------------------------------------------------------
TRACES_USAGE = """usage: fedjax-het traces [--capacity FILE] [--behaviour FILE] --out FILE.npz

  converts FedScale's device traces (benchmark/dataset/data/device_info/ of
  its repository) to one .npz that `systems.traces.load_npz` reads:
  --capacity FILE    client_device_capacity: compute ms/sample and kbit/s per device
  --behaviour FILE   client_behave_trace: online/offline intervals per client
  --out FILE.npz     where the arrays go
"""


def _parse_traces_args(argv: list[str]) -> dict[str, str]:
  """{'capacity', 'behaviour', 'out'} from `--flag VALUE` pairs."""
  flags = {'--capacity': 'capacity', '--behaviour': 'behaviour', '--out': 'out'}
  args = {}
  pairs = iter(argv)
  for flag in pairs:
    if flag not in flags or flags[flag] in args:
      raise ConfigError(f'unexpected argument {flag!r} (fedjax-het traces '
                        '--help).')
    value = next(pairs, None)
    if value is None:
      raise ConfigError(f'{flag} needs a value.')
    args[flags[flag]] = value
  if 'out' not in args or len(args) < 2:
    raise ConfigError('give --out and at least one of --capacity, '
                      '--behaviour (fedjax-het traces --help).')
  return args


def traces_command(argv: list[str]) -> int:
  """`fedjax-het traces`: FedScale's pickles → one .npz; prints what it
  holds. Bad input: one line on stderr, exit 2."""
  if argv[:1] in (['--help'], ['-h']):
    print(TRACES_USAGE, end='')
    return 0
  try:
    args = _parse_traces_args(argv)
    capacity = (read_capacity(args['capacity']) if 'capacity' in args
                else None)
    availability = (read_behaviour(args['behaviour']) if 'behaviour' in args
                    else None)
    save_npz(args['out'], capacity, availability)
  except ConfigError as e:
    print(f'fedjax-het traces: error: {e}', file=sys.stderr)
    return 2
  if capacity is not None:
    print(f'{capacity.ids.shape[0]} devices: median '
          f'{np.median(capacity.ms_per_sample):g} ms/sample, '
          f'{np.median(capacity.kbps):g} kbit/s')
  if availability is not None:
    print(f'{availability.ids.shape[0]} clients, '
          f'{availability.starts.shape[0]} online intervals')
  print(f'wrote {args["out"]}')
  return 0
