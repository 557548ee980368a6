"""Semi-asynchronous round clock of Co-S²P (Alg. 1): who arrives in which round.

A discrete-event simulation on the host (numpy only). At the start of round q
every idle client is dispatched with the global model w_q (dispatch happens
only at round start). The server waits until ⌈μN⌉ updates have arrived (an
update may come from a straggler dispatched in an earlier round), then waits
T_clk more seconds accepting further arrivals, then aggregates and the round
ends:

    t = 0; q = 0
    while q < Q:
      for n idle: k_n = q; finish_n = t + T_n(q); mark busy
      buffer = []
      while len(buffer) < ⌈μN⌉: n = argmin_busy finish_n; t = finish_n;
                                 buffer.append(n, τ = q − k_n); mark idle
      t_end = t + T_clk
      for busy n with finish_n ≤ t_end, in time order: buffer.append(n); mark idle
      t = t_end; aggregate; q += 1

Stragglers are never dropped: a client still training keeps going and its
update counts in the round in which it arrives, with staleness τ = q − k_n.
With `tau_max` set, an arrival with τ > τ_max is discarded (`dropped`; it
does not count towards ⌈μN⌉) and the client becomes idle. Clients that
finish during the window stay idle until the next round starts.

Tie rule: arrivals are taken in order of finishing time, equal times in order
of client index; an update finishing exactly at t_end is accepted. ⌈μN⌉ is
taken with a 1e-9 tolerance (μ = 0.3, N = 10 needs 3 updates, not 4).

Availability (`online`, bool [Q, N], optional): only an idle client online
in round q is dispatched at its start (an offline one stays idle until a
round in which it is online); a client once dispatched finishes its update
(availability here is per round, with no time within it). The round then
waits for min(⌈μN⌉, clients running) arrivals, so it never waits for a
client that is not training; a round in which no client runs closes at
once (zero seconds) and aggregates nothing. Without `online` every idle
client is dispatched (Alg. 1).

Special cases: fully asynchronous Co-S²P(Async.) is μ = 1/N, T_clk = 0 (every
arrival closes a round and the client is re-dispatched at once); synchronous
FedAvg is μ = 1, T_clk = 0.

Resource utilisation (RU), three forms:

- Eq. 17 of the paper, per round over its arrivals A_q (N_q = |A_q|):
  RU_q = Σ_{n∈A_q} Time(n) / (N_q · max_{n∈A_q} Time(n)), Time(n) the
  arriving update's duration; ill-defined for stragglers spanning rounds.
- busy form: RU_q = Σ_n busy_n(window_q) / (N · |window_q|), window_q =
  [start of round q, end of round q], a client being busy from its dispatch
  to its finish (a dropped update was busy too).
- time-weighted: Σ busy / (N · total time).

For synchronous FedAvg the busy form equals Eq. 17; fully asynchronous
training is 100% busy.
"""
import dataclasses
import math
from typing import Callable, Sequence

import numpy as np

from fedjax_het.options import (ConfigError, finite, in_range, non_negative,
                                non_negative_int, positive_int)

# duration(client, dispatch_round, dispatch_index) -> seconds; dispatch_index
# counts the client's earlier dispatches.
Duration = Callable[[int, int, int], float]


@dataclasses.dataclass(frozen=True)
class Schedule:
  """The simulated rounds; arrays over Q rounds and N clients.

  Attributes:
    arrivals: bool [Q, N], client n's update is aggregated in round q.
    dispatch_round: int32 [Q, N], round whose model the arriving update
      trained from; -1 where no arrival.
    dispatched: bool [Q, N], client n was dispatched at the start of round q.
    dropped: bool [Q, N], an update arrived in round q with τ > τ_max and was
      discarded.
    start_time: float64 [Q] seconds, start of each round.
    end_time: float64 [Q] seconds, end of each round (aggregation).
    busy: float64 [Q, N], seconds client n was busy within round q's window.
    update_seconds: float64 [Q, N], duration of the arriving update (dispatch
      to finish), 0 elsewhere.
  """
  arrivals: np.ndarray
  dispatch_round: np.ndarray
  dispatched: np.ndarray
  dropped: np.ndarray
  start_time: np.ndarray
  end_time: np.ndarray
  busy: np.ndarray
  update_seconds: np.ndarray

  @property
  def staleness(self) -> np.ndarray:
    """int32 [Q, N]: τ = q − dispatch_round where an update arrives, else 0."""
    return self.staleness_of(slice(0, self.arrivals.shape[0]))

  def staleness_of(self, rows: slice) -> np.ndarray:
    """`staleness[rows]`, computed for those rounds alone (a chunk's inputs
    must not cost O(Q) on the host)."""
    rounds = np.arange(rows.start, rows.stop)[:, None]
    return np.where(self.arrivals[rows], rounds - self.dispatch_round[rows],
                    0).astype(np.int32)

  @property
  def max_staleness(self) -> int:
    return int(self.staleness.max())

  @property
  def num_dropped(self) -> int:
    return int(self.dropped.sum())

  def mean_update_seconds(self) -> np.ndarray:
    """float64 [N]: each client's mean seconds per arriving update (0 where
    none arrived)."""
    return self.update_seconds.sum(0) / np.maximum(self.arrivals.sum(0), 1)

  def ru_eq17_per_round(self) -> np.ndarray:
    """float64 [Q], Eq. 17 per round; NaN where no arrival took positive time."""
    return ru_eq17_rounds(self.update_seconds.sum(axis=1),
                          self.arrivals.sum(axis=1),
                          self.update_seconds.max(axis=1))

  def ru_eq17(self) -> float:
    """Eq. 17: the per-round values averaged over rounds (NaN rounds skipped)."""
    return mean_defined(self.ru_eq17_per_round())

  def ru_busy_per_round(self) -> np.ndarray:
    """float64 [Q], busy fraction of each window; NaN for an empty window."""
    return ru_busy_rounds(self.busy.sum(axis=1), self.busy.shape[1],
                          self.end_time - self.start_time)

  def ru_busy(self) -> float:
    """Busy-form RU averaged over the rounds with a window of positive length."""
    return mean_defined(self.ru_busy_per_round())

  def ru_time_weighted(self) -> float:
    """Σ busy / (N · total simulated time); NaN if no time passed."""
    return ru_time_weighted(self.busy.sum(), self.busy.shape[1],
                            self.start_time, self.end_time)

  def round_inputs(self, first: int, count: int) -> dict[str, np.ndarray]:
    """Rounds [first, first + count) as data for compiled rounds.

    Returns:
      'arrives': bool [count, N]; 'staleness': int32 [count, N];
      'dispatch_round': int32 [count, N], 0 where no arrival.
    """
    non_negative_int('first', first)
    positive_int('count', count)
    if first + count > self.arrivals.shape[0]:
      raise ConfigError(f'rounds [{first}, {first + count}) run past the '
                        f'{self.arrivals.shape[0]} simulated rounds.')
    rows = slice(first, first + count)
    arrives = self.arrivals[rows].copy()
    return {'arrives': arrives,
            'staleness': self.staleness_of(rows),
            'dispatch_round': np.where(arrives, self.dispatch_round[rows],
                                       0).astype(np.int32)}


def mean_defined(values: np.ndarray) -> float:
  """The mean of the values that are not NaN (NaN where none is)."""
  defined = values[~np.isnan(values)]
  return float(defined.mean()) if defined.size else math.nan


# ---- RU from per-round sums (a `Schedule`'s, or a buffered schedule's) ---------
def ru_eq17_rounds(seconds: np.ndarray, arrivals: np.ndarray,
                   longest: np.ndarray) -> np.ndarray:
  """float64 [Q], Eq. 17 per round from the round's summed update seconds,
  its arrivals and its longest update; NaN where none took positive time."""
  with np.errstate(invalid='ignore', divide='ignore'):
    ru = seconds / (arrivals * longest)
  return np.where(longest > 0, ru, np.nan)


def ru_busy_rounds(busy: np.ndarray, num_clients: int,
                   window: np.ndarray) -> np.ndarray:
  """float64 [Q], the busy fraction Σ_n busy / (N · window) of each round;
  NaN for an empty window."""
  with np.errstate(invalid='ignore', divide='ignore'):
    ru = busy / (num_clients * window)
  return np.where(window > 0, ru, np.nan)


def ru_time_weighted(busy: float, num_clients: int, start_time: np.ndarray,
                     end_time: np.ndarray) -> float:
  """Σ busy / (N · total simulated time); NaN if no time passed."""
  total = end_time[-1] - start_time[0]
  if total <= 0:
    return math.nan
  return float(busy / (num_clients * total))


def _check_options(num_clients, rounds, mu, t_clk, tau_max) -> None:
  positive_int('num_clients', num_clients)
  positive_int('rounds', rounds)
  in_range(0, 1, closed_low=False)('mu', mu)
  finite('t_clk', t_clk)
  non_negative('t_clk', t_clk)
  if tau_max is not None:
    non_negative_int('tau_max', tau_max)


def simulate(duration: Duration, *, num_clients: int, rounds: int, mu: float,
             t_clk: float, tau_max: int | None = None,
             online: np.ndarray | None = None) -> Schedule:
  """Runs Alg. 1's clock for `rounds` rounds; deterministic given `duration`.

  Args:
    duration: seconds of one update, `duration(client, dispatch_round,
      dispatch_index)`; finite and ≥ 0.
    num_clients: N.
    rounds: Q.
    mu: μ ∈ (0, 1]; a round needs ⌈μN⌉ arrivals before its window opens.
    t_clk: T_clk ≥ 0, seconds the server keeps accepting after that.
    tau_max: discard arrivals with staleness above it (None: keep all).
    online: bool [≥ Q, N], who can be dispatched in each round (module
      docstring); None: every client, every round.
  """
  _check_options(num_clients, rounds, mu, t_clk, tau_max)
  if online is None:
    online = np.ones((rounds, num_clients), bool)
  elif online.shape[0] < rounds or online.shape[1:] != (num_clients,):
    raise ConfigError(f'online {online.shape} must be [≥ {rounds}, '
                      f'{num_clients}].')
  need = math.ceil(mu * num_clients - 1e-9)
  shape = (rounds, num_clients)
  arrivals = np.zeros(shape, bool)
  dispatched = np.zeros(shape, bool)
  dropped = np.zeros(shape, bool)
  dispatch_round = np.full(shape, -1, np.int32)
  update_seconds = np.zeros(shape)
  start_time, end_time = np.zeros(rounds), np.zeros(rounds)
  running = np.zeros(num_clients, bool)
  started = np.zeros(num_clients)
  finish = np.zeros(num_clients)
  model_round = np.zeros(num_clients, np.int64)
  times_dispatched = np.zeros(num_clients, np.int64)
  intervals = []  # (client, dispatch time, finish time)

  def receive(q: int, n: int) -> bool:
    """Takes client n's update in round q; True if it counts."""
    running[n] = False
    if tau_max is not None and q - model_round[n] > tau_max:
      dropped[q, n] = True
      return False
    arrivals[q, n] = True
    dispatch_round[q, n] = model_round[n]
    update_seconds[q, n] = finish[n] - started[n]
    return True

  def next_finisher() -> int:
    pending = np.where(running, finish, np.inf)
    return int(np.argmin(pending))  # first minimum: lower index on ties

  t = 0.0
  for q in range(rounds):
    start_time[q] = t
    for n in np.flatnonzero(~running & online[q]):
      seconds = float(duration(int(n), q, int(times_dispatched[n])))
      if not (math.isfinite(seconds) and seconds >= 0):
        raise ConfigError(f'the duration of client {n} dispatched in round {q} '
                          f'must be finite and ≥ 0, got {seconds!r}.')
      running[n], started[n], finish[n] = True, t, t + seconds
      model_round[n] = q
      times_dispatched[n] += 1
      dispatched[q, n] = True
      intervals.append((n, t, t + seconds))
    if not running.any():   # nobody training: the round closes at once
      end_time[q] = t
      continue
    received, wait_for = 0, min(need, int(running.sum()))
    while received < wait_for and running.any():
      n = next_finisher()
      t = finish[n]
      received += receive(q, n)
    t_end = t + t_clk
    while running.any() and finish[n := next_finisher()] <= t_end:
      receive(q, n)
    end_time[q] = t = t_end

  busy = np.zeros(shape)
  for n, begin, end in intervals:
    busy[:, n] += np.clip(np.minimum(end, end_time) -
                          np.maximum(begin, start_time), 0, None)
  return Schedule(arrivals=arrivals, dispatch_round=dispatch_round,
                  dispatched=dispatched, dropped=dropped,
                  start_time=start_time, end_time=end_time, busy=busy,
                  update_seconds=update_seconds)


def with_jitter(duration: Duration, sigma: float, seed: int) -> Duration:
  """`duration` times lognormal noise exp(σ·z), z ~ N(0, 1) (median 1).

  z comes from a numpy Generator seeded with (seed, client, dispatch_index),
  so a value does not depend on the order of calls.
  """
  finite('sigma', sigma)
  non_negative('sigma', sigma)
  non_negative_int('seed', seed)

  def jittered(client: int, dispatch_round: int, dispatch_index: int) -> float:
    z = np.random.default_rng([seed, client, dispatch_index]).standard_normal()
    return duration(client, dispatch_round, dispatch_index) * math.exp(
        sigma * z)

  return jittered


def fixed_durations(lists: Sequence[Sequence[float]]) -> Duration:
  """Durations from a table: client n's j-th dispatch takes lists[n][j] seconds."""
  table = [[float(seconds) for seconds in row] for row in lists]

  def duration(client: int, dispatch_round: int, dispatch_index: int) -> float:
    del dispatch_round
    if client >= len(table):
      raise ConfigError(f'the fixed durations cover {len(table)} clients, not '
                        f'client {client}.')
    if dispatch_index >= len(table[client]):
      raise ConfigError(f'client {client} has {len(table[client])} fixed '
                        f'durations but was dispatched {dispatch_index + 1} '
                        f'times.')
    return table[client][dispatch_index]

  return duration
