"""Buffered asynchronous aggregation (FedBuff, Nguyen et al. 2022) on the host.

A discrete-event simulation (numpy and a heap) of who trains from which model
version and whose update goes into which server step. C clients are in
flight; each finished update goes into the buffer; the K-th update of the
buffer triggers a server step, version q → q + 1:

    t = 0; q = 0; dispatch C clients with version 0
    loop over events in order (the heap pops the earliest):
      client n finishes at t: τ = q − k_n (k_n: the version it trained from)
        τ > τ_max: dropped (counted; it does not fill the buffer)
        else: into the buffer; K updates: server step at t, q += 1, the
              buffer's clients become idle again
      refill: while fewer than C in flight, sample an idle client and
              dispatch it at t with version q

Rules:
- sampling: uniform among the eligible clients (`UniformPool`), or
  proportional to a method's probabilities p_n (`WeightedPool`), from a
  numpy Generator seeded by `seed`; eligible means idle, not in the current
  buffer (one update per client per server step, so the `Schedule`'s bool
  [Q, N] arrivals hold) and, with an availability trace, online at t for a
  positive time (`traces.Availability`: dispatch only online clients);
- ties: events in order of time, equal times in order of client index (a
  client coming back online after those); after each event the free slots
  are refilled, so a client finishing at the same time as another is
  replaced before the other's event;
- the server never reads a completion time before it happens: the loop pops
  the earliest event, and the time a client goes offline is an event too;
- a client that goes offline mid-round (`Availability.online_until` before
  its finish) loses its update: at the time it goes offline its slot frees,
  and the loss is counted (`BufferedSchedule.lost_*`); it is sampled again
  once it is back online.

The output is a `BufferedSchedule`, kept per event and per server step
(host memory O(Q·K + D + N), D the dispatches, ≈ Q·K plus the dropped and
lost updates; not O(Q·N)): each step's K arrivals (client, version trained
from, seconds), the steps' times and busy seconds, the dispatches, drops and
losses. Its `schedule` is the `systems.clock.Schedule` of the same steps,
built on demand ([Q, N] arrays, for small runs and tests), whose row q is
server step q (the step from version q to q + 1): arrivals[q, n] (n's update
is in buffer q), dispatch_round[q, n] (the version it trained from),
dispatched[q, n] (n was dispatched at least once while the version was q),
dropped[q, n] (an update of n arrived while the version was q with τ >
τ_max), start_time[q] (when version q became current), end_time[q] (server
step q), busy, update_seconds as in `systems.clock`. With C = K = N it is
`systems.clock.simulate(mu=1, t_clk=0)`'s schedule, array by array. The
RU forms and sums a `Schedule` gives are computed from the events, bit for
bit as numpy sums the [Q, N] arrays (`numpy_sum`).

The staleness weights w(τ) an aggregation applies to a buffer's updates, and
the two ways peers normalise them, are pure jax.numpy functions below, for
the compiled round.
"""
import dataclasses
import functools
import heapq
import math
from typing import Protocol

import jax.numpy as jnp
import numpy as np

from fedjax_het.options import ConfigError, non_negative_int, positive_int
from fedjax_het.systems import clock
from fedjax_het.systems.traces import Availability

# Heap entries (time, kind, client): a finish or loss, then a client back online.
_FINISH, _ONLINE = 0, 1


# ---- samplers -----------------------------------------------------------------
class Sampler(Protocol):
  """The pool of eligible clients a free slot draws from (the simulator adds
  and removes clients as they become idle or busy)."""
  num_clients: int

  def add(self, client: int) -> None: ...

  def remove(self, client: int) -> None: ...

  def draw(self, rng: np.random.Generator) -> int | None:
    """A client of the pool (left in it), or None where none can be drawn."""


class UniformPool:
  """Uniform draws among the pool in O(1): an array with swap-removal; starts
  with every client."""

  def __init__(self, num_clients: int):
    self.num_clients = num_clients
    self.members = list(range(num_clients))
    self.position = list(range(num_clients))  # -1: not in the pool

  def add(self, client: int) -> None:
    self.position[client] = len(self.members)
    self.members.append(client)

  def remove(self, client: int) -> None:
    i, last = self.position[client], self.members.pop()
    if last != client:
      self.members[i], self.position[last] = last, i
    self.position[client] = -1

  def draw(self, rng: np.random.Generator) -> int | None:
    if not self.members:
      return None
    return self.members[int(rng.integers(len(self.members)))]


class WeightedPool:
  """Draws client n of the pool with probability p_n / Σ_pool p in
  O(log N) (a Fenwick tree of the pool's weights); starts with every client.
  Clients with p_n = 0 are never drawn.

  Args:
    p: float [N], the method's sampling weights p_n ≥ 0 (any scale).
  """

  def __init__(self, p):
    p = np.asarray(p, np.float64)
    if p.ndim != 1 or not (np.all(np.isfinite(p)) and np.all(p >= 0)
                           and p.sum() > 0):
      raise ConfigError('the sampling weights p_n must be a vector of finite '
                        'values ≥ 0 with a positive sum.')
    self.num_clients = p.shape[0]
    self.p = p
    self.weight = np.zeros(self.num_clients)
    self.tree = np.zeros(self.num_clients + 1)
    self.drawable = 0  # clients of the pool with p_n > 0
    self.top = 1 << (self.num_clients.bit_length() - 1)
    for n in range(self.num_clients):
      self.add(n)

  def _update(self, client: int, change: float) -> None:
    self.drawable += int(self.weight[client] + change > 0) - int(
        self.weight[client] > 0)
    self.weight[client] += change
    i = client + 1
    while i <= self.num_clients:
      self.tree[i] += change
      i += i & -i

  def add(self, client: int) -> None:
    self._update(client, self.p[client] - self.weight[client])

  def remove(self, client: int) -> None:
    self._update(client, -self.weight[client])

  def draw(self, rng: np.random.Generator) -> int | None:
    """Descends the tree to the client whose cumulative weight passes
    u ~ U[0, Σ_pool p)."""
    if not self.drawable:
      return None
    i, total = self.num_clients, 0.0
    while i:  # Σ_pool p from the tree
      total += self.tree[i]
      i -= i & -i
    u, step = rng.random() * total, self.top
    while step:
      if i + step <= self.num_clients and self.tree[i + step] <= u:
        i += step
        u -= self.tree[i]
      step >>= 1
    if i < self.num_clients and self.weight[i] > 0:
      return i
    # Rounding landed on a zero weight or past the end: the next drawable.
    drawable = np.flatnonzero(self.weight > 0)
    return int(drawable[min(np.searchsorted(drawable, i), drawable.size - 1)])


# ---- the simulation -------------------------------------------------------------
# Blocks up to this length are summed dense (numpy's pairwise sum of a block
# is the sum of its part of the whole vector, numpy's own halves).
_DENSE = 4096
# numpy's buffer: a sum that casts its input runs over chunks of this size.
_NUMPY_BUFFER = 8192


def numpy_sum(length: int, positions: np.ndarray, values: np.ndarray,
              chunk: int | None = None) -> float:
  """`np.sum` of a float64 vector of `length` that is 0 but at `positions`,
  bit for bit, without holding the vector: numpy's pairwise summation
  (halves cut at a multiple of 8, blocks of ≤ 128 summed by numpy itself),
  and with `chunk` the sum of a cast input (float32 summed in float64),
  which numpy buffers: the chunks' pairwise sums added in order.

  Args:
    length: the vector's length.
    positions: int [P], sorted, distinct.
    values: float64 [P], the values there.
    chunk: numpy's buffer (8192 elements) where the sum casts; None: none.
  """
  positions = np.asarray(positions, np.int64)
  values = np.asarray(values, np.float64)

  def pairwise(lo: int, n: int) -> float:
    i, j = np.searchsorted(positions, (lo, lo + n))
    if i == j:
      return 0.0
    if n <= _DENSE:   # as numpy sums it: on the dense block
      block = np.zeros(n)
      block[positions[i:j] - lo] = values[i:j]
      return float(np.sum(block))
    half = n // 2
    half -= half % 8
    return pairwise(lo, half) + pairwise(lo + half, n - half)

  if chunk is None:
    return pairwise(0, length)
  total = 0.0
  for lo in range(0, length, chunk):
    total += pairwise(lo, min(chunk, length - lo))
  return total


@dataclasses.dataclass(frozen=True)
class BufferedSchedule:
  """The simulated server steps, kept per event and per step: host memory
  O(Q·K + N), not the [Q, N] arrays of `clock.Schedule` (`schedule` builds
  them on demand, for small runs and tests).

  Attributes:
    num_clients: N.
    offsets: int64 [Q + 1]: step q's arrivals are [offsets[q],
      offsets[q + 1]) of the arrival arrays, in client order.
    client: int32 [A], the arriving client.
    version: int32 [A], the version its update trained from.
    update_seconds: float64 [A], the update's duration (dispatch to finish).
    start_time: float64 [Q], when version q became current.
    end_time: float64 [Q], server step q.
    busy: float64 [Q], Σ_n seconds client n was busy in step q's window
      (`clock.Schedule.busy`'s row sums, as numpy sums them).
    busy_float32: float64 [Q], the same sum over the float32 values (what
      the compiled rounds' per-client float32 inputs summed to).
    busy_total: Σ over steps and clients of the busy seconds (numpy's sum of
      `clock.Schedule.busy`).
    dropped_step, dropped_client: int32 [X], the step and client of each
      update dropped as staler than τ_max.
    lost_step: int32 [L], the version current when each lost update was lost.
    lost_client: int32 [L], its client.
    lost_time: float64 [L], when the client went offline.
    dispatch_client, dispatch_version: int32 [D], each dispatch's client and
      version; dispatch_time, dispatch_end: float64 [D], its start and its
      finish (or the time the client went offline).
  """
  num_clients: int
  offsets: np.ndarray
  client: np.ndarray
  version: np.ndarray
  update_seconds: np.ndarray
  start_time: np.ndarray
  end_time: np.ndarray
  busy: np.ndarray
  busy_float32: np.ndarray
  busy_total: float
  dropped_step: np.ndarray
  dropped_client: np.ndarray
  lost_step: np.ndarray
  lost_client: np.ndarray
  lost_time: np.ndarray
  dispatch_client: np.ndarray
  dispatch_version: np.ndarray
  dispatch_time: np.ndarray
  dispatch_end: np.ndarray

  @property
  def steps(self) -> int:
    return int(self.end_time.shape[0])

  @property
  def step(self) -> np.ndarray:
    """int32 [A], the server step of each arrival."""
    return np.repeat(np.arange(self.steps, dtype=np.int32),
                     np.diff(self.offsets))

  @property
  def staleness(self) -> np.ndarray:
    """int32 [A], τ = step − version of each arrival."""
    return (self.step - self.version).astype(np.int32)

  @property
  def max_staleness(self) -> int:
    return int(self.staleness.max(initial=0))

  @property
  def num_dropped(self) -> int:
    return int(self.dropped_client.shape[0])

  @property
  def num_lost(self) -> int:
    return int(self.lost_client.shape[0])

  def per_step(self, steps: np.ndarray) -> np.ndarray:
    """int32 [Q]: how many of the events of `steps` (int [E]) each step has."""
    return np.bincount(steps, minlength=self.steps).astype(np.int32)

  def ru_eq17(self) -> float:
    """`clock.Schedule.ru_eq17` of this schedule."""
    arrivals = self.per_step(self.step)
    sums = np.array([
        numpy_sum(self.num_clients, self.client[a:b], self.update_seconds[a:b])
        for a, b in zip(self.offsets[:-1], self.offsets[1:])])
    longest = np.zeros(self.steps)
    np.maximum.at(longest, self.step, self.update_seconds)
    return clock.mean_defined(clock.ru_eq17_rounds(sums, arrivals, longest))

  def ru_busy(self) -> float:
    """`clock.Schedule.ru_busy` of this schedule."""
    return clock.mean_defined(clock.ru_busy_rounds(
        self.busy, self.num_clients, self.end_time - self.start_time))

  def ru_time_weighted(self) -> float:
    """`clock.Schedule.ru_time_weighted` of this schedule."""
    return clock.ru_time_weighted(self.busy_total, self.num_clients,
                                  self.start_time, self.end_time)

  def mean_update_seconds(self) -> np.ndarray:
    """float64 [N]: each client's mean seconds per arriving update (0 where
    none arrived), summed in step order as numpy sums `Schedule`'s rows."""
    total = np.zeros(self.num_clients)
    np.add.at(total, self.client, self.update_seconds)
    count = np.bincount(self.client, minlength=self.num_clients)
    return total / np.maximum(count, 1)

  @functools.cached_property
  def schedule(self) -> clock.Schedule:
    """The `clock.Schedule` of these steps, arrays [Q, N] (O(Q·N): for small
    runs and tests), as the module docstring reads it."""
    shape = (self.steps, self.num_clients)
    arrivals, dispatched, dropped = (np.zeros(shape, bool) for _ in range(3))
    dispatch_round = np.full(shape, -1, np.int32)
    update_seconds = np.zeros(shape)
    arrivals[self.step, self.client] = True
    dispatch_round[self.step, self.client] = self.version
    update_seconds[self.step, self.client] = self.update_seconds
    dispatched[self.dispatch_version, self.dispatch_client] = True
    dropped[self.dropped_step, self.dropped_client] = True
    busy = np.zeros(shape)
    row, client, seconds = busy_pieces(
        self.dispatch_client, self.dispatch_time, self.dispatch_end,
        self.start_time, self.end_time)
    np.add.at(busy, (row, client), seconds)   # in dispatch order
    return clock.Schedule(
        arrivals=arrivals, dispatch_round=dispatch_round,
        dispatched=dispatched, dropped=dropped, start_time=self.start_time,
        end_time=self.end_time, busy=busy, update_seconds=update_seconds)


def busy_pieces(client, begin, end, start_time, end_time):
  """Each dispatch's seconds within each step window it overlaps, in
  dispatch order: (step int64 [P], client int32 [P], seconds float64 [P]).

  Args:
    client, begin, end: [D], each dispatch's client, start and end.
    start_time, end_time: float64 [Q], the steps' windows.
  """
  first = np.searchsorted(end_time, begin, side='right')
  count = np.maximum(np.searchsorted(start_time, end, side='left') - first, 0)
  which = np.repeat(np.arange(client.shape[0]), count)
  row = first[which] + (np.arange(which.shape[0]) -
                        np.repeat(np.cumsum(count) - count, count))
  seconds = np.clip(np.minimum(end[which], end_time[row]) -
                    np.maximum(begin[which], start_time[row]), 0, None)
  return row, client[which], seconds


def busy_sums(num_clients, row, client, seconds, steps):
  """(busy float64 [Q], busy_float32 float64 [Q], busy_total): the sums
  numpy takes of the busy table [Q, N] whose cell (q, n) is the pieces of
  (q, n) added in order (`BufferedSchedule`'s attributes of these names)."""
  key = row * num_clients + client
  order = np.argsort(key, kind='stable')   # a cell's pieces keep their order
  cells, first = np.unique(key[order], return_index=True)
  value = np.zeros(cells.shape[0])
  np.add.at(value, np.repeat(np.arange(cells.shape[0]),
                             np.diff(np.append(first, order.shape[0]))),
            seconds[order])
  bounds = np.searchsorted(cells, np.arange(steps + 1) * num_clients)
  rounded = value.astype(np.float32).astype(np.float64)
  by_row = lambda values, chunk: np.array([
      numpy_sum(num_clients, cells[a:b] - q * num_clients, values[a:b], chunk)
      for q, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))])
  return (by_row(value, None), by_row(rounded, _NUMPY_BUFFER),
          numpy_sum(steps * num_clients, cells, value))


def _check_options(num_clients, steps, concurrency, buffer_size, tau_max,
                   seed) -> None:
  positive_int('num_clients', num_clients)
  non_negative_int('seed', seed)
  positive_int('steps', steps)
  positive_int('concurrency', concurrency)
  positive_int('buffer_size', buffer_size)
  if tau_max is not None:
    non_negative_int('tau_max', tau_max)
  for key, value in (('concurrency', concurrency),
                     ('buffer_size', buffer_size)):
    if value > num_clients:
      raise ConfigError(f'{key} = {value} exceeds num_clients = '
                        f'{num_clients} (one update per client per server '
                        'step).')


class _Simulation:
  """The event loop's state (`simulate` runs it): logs of events (arrivals,
  drops, losses, dispatches) and per-step times, nothing per client and
  step."""

  def __init__(self, duration, num_clients, steps, concurrency, buffer_size,
               tau_max, seed, sampler, availability):
    self.duration, self.concurrency = duration, concurrency
    self.num_clients, self.steps = num_clients, steps
    self.buffer_size, self.tau_max = buffer_size, tau_max
    self.rng = np.random.default_rng(seed)
    self.sampler, self.availability = sampler, availability
    self.start_time, self.end_time = np.zeros(steps), np.zeros(steps)
    self.version = np.zeros(num_clients, np.int64)
    self.started = np.zeros(num_clients)
    self.times_dispatched = np.zeros(num_clients, np.int64)
    self.loses = np.zeros(num_clients, bool)
    self.arrived = []  # (step, client, version, seconds)
    self.dispatches = []  # (client, version, dispatch time, finish or offline)
    self.dropped = []  # (step, client)
    self.lost = []  # (step, client, time)
    self.events = []
    self.buffer = []
    self.in_flight = 0
    self.q = 0

  def run(self) -> None:
    self.refill(0.0)
    while self.q < self.steps:
      if not self.events:
        raise ConfigError(
            f'the buffered clock stalls after {self.q} of {self.steps} server '
            'steps: no client is in flight and none can be dispatched again '
            '(never online again, or sampling weight 0).')
      t, kind, n = heapq.heappop(self.events)
      if kind == _ONLINE:
        self.sampler.add(n)
      else:
        self.finish(n, t)
      self.refill(t)

  def refill(self, t: float) -> None:
    """Dispatches sampled eligible clients at t until C are in flight (none
    after the last server step)."""
    while self.in_flight < self.concurrency and self.q < self.steps:
      n = self.draw(t)
      if n is None:
        return
      self.dispatch(n, t)
  def draw(self, t: float) -> int | None:
    """An eligible client, removed from the pool; a drawn client that is
    offline at t leaves the pool until it is back online (an event)."""
    while (n := self.sampler.draw(self.rng)) is not None:
      self.sampler.remove(n)
      if self.availability is None or self.availability.online_at(n, t):
        return n
      back = self.availability.next_online(n, t)
      if math.isfinite(back):
        heapq.heappush(self.events, (back, _ONLINE, n))
    return None

  def dispatch(self, n: int, t: float) -> None:
    """Client n starts at t from the current version; its event is its
    finish, or the time it goes offline if that comes first."""
    seconds = float(self.duration(n, self.q, int(self.times_dispatched[n])))
    if not (math.isfinite(seconds) and seconds >= 0):
      raise ConfigError(f'the duration of client {n} dispatched at version '
                        f'{self.q} must be finite and ≥ 0, got {seconds!r}.')
    end = t + seconds
    offline = (math.inf if self.availability is None else
               self.availability.online_until(n, t))
    self.loses[n] = offline < end
    end = min(end, offline)
    heapq.heappush(self.events, (end, _FINISH, n))
    self.version[n], self.started[n] = self.q, t
    self.times_dispatched[n] += 1
    self.dispatches.append((n, self.q, t, end))
    self.in_flight += 1

  def finish(self, n: int, t: float) -> None:
    """Client n's event at t: lost, dropped (τ > τ_max) or into the buffer."""
    self.in_flight -= 1
    q = self.q
    if self.loses[n]:
      self.lost.append((q, n, t))
      self.sampler.add(n)
    elif self.tau_max is not None and q - self.version[n] > self.tau_max:
      self.dropped.append((q, n))
      self.sampler.add(n)
    else:
      self.arrived.append((q, n, self.version[n], t - self.started[n]))
      self.buffer.append(n)
      if len(self.buffer) == self.buffer_size:
        self.server_step(t)

  def server_step(self, t: float) -> None:
    """Version q → q + 1 at t; the buffer's clients become eligible."""
    self.end_time[self.q] = t
    self.q += 1
    if self.q < self.steps:
      self.start_time[self.q] = t
    for n in self.buffer:
      self.sampler.add(n)
    self.buffer = []

  def result(self) -> BufferedSchedule:
    """The logs as arrays; the arrivals of a step in client order."""
    step, client, version, seconds = _columns(self.arrived, 4)
    order = np.lexsort((client, step))
    dispatch_client, dispatch_version, begin, end = _columns(
        self.dispatches, 4)
    dropped_step, dropped_client = _columns(self.dropped, 2)
    lost_step, lost_client, lost_time = _columns(self.lost, 3)
    as_int = lambda x: x.astype(np.int32)
    dispatch_client = as_int(dispatch_client)
    busy, busy_float32, busy_total = busy_sums(
        self.num_clients, *busy_pieces(dispatch_client, begin, end,
                                       self.start_time, self.end_time),
        self.steps)
    return BufferedSchedule(
        num_clients=self.num_clients,
        offsets=np.searchsorted(step[order], np.arange(self.steps + 1)),
        client=as_int(client[order]), version=as_int(version[order]),
        update_seconds=seconds[order], start_time=self.start_time,
        end_time=self.end_time, busy=busy, busy_float32=busy_float32,
        busy_total=busy_total, dropped_step=as_int(dropped_step),
        dropped_client=as_int(dropped_client), lost_step=as_int(lost_step),
        lost_client=as_int(lost_client), lost_time=lost_time,
        dispatch_client=dispatch_client,
        dispatch_version=as_int(dispatch_version), dispatch_time=begin,
        dispatch_end=end)


def _columns(rows: list, width: int) -> list[np.ndarray]:
  """A log of `width`-tuples as `width` float64 columns (exact: clients,
  versions and steps are below 2**53)."""
  table = np.asarray(rows, np.float64).reshape(-1, width)
  return [table[:, i] for i in range(width)]


def simulate(duration: clock.Duration, *, num_clients: int, steps: int,
             concurrency: int, buffer_size: int, seed: int,
             tau_max: int | None = None, sampler: Sampler | None = None,
             availability: Availability | None = None) -> BufferedSchedule:
  """Runs FedBuff's clock for `steps` server steps (module docstring);
  deterministic given the seed, `duration` and the availability.

  Args:
    duration: seconds of one update, `duration(client, version,
      dispatch_index)`; finite and ≥ 0.
    num_clients: N.
    steps: Q, server steps simulated.
    concurrency: C ≤ N clients in flight.
    buffer_size: K ≤ N updates per server step.
    seed: seeds the numpy Generator that samples clients.
    tau_max: drop updates with staleness above it (None: keep all).
    sampler: the pool free slots draw from, holding every client (consumed);
      None: `UniformPool(num_clients)`.
    availability: clients' online intervals in virtual time (client n is
      entry n mod M); None: always online.
  """
  _check_options(num_clients, steps, concurrency, buffer_size, tau_max, seed)
  sampler = UniformPool(num_clients) if sampler is None else sampler
  if sampler.num_clients != num_clients:
    raise ConfigError(f'the sampler holds {sampler.num_clients} clients, not '
                      f'num_clients = {num_clients}.')
  simulation = _Simulation(duration, num_clients, steps, concurrency,
                           buffer_size, tau_max, seed, sampler, availability)
  simulation.run()
  return simulation.result()


# ---- staleness weights (jax.numpy; numpy arrays work too) -----------------------
def constant_weight(tau):
  """w(τ) = 1 (FedBuff without a staleness function)."""
  return jnp.ones_like(jnp.asarray(tau, jnp.float32))


def polynomial_weight(tau, a: float):
  """w(τ) = (1 + τ)^−a (FedAsync's polynomial function; FLSim's, a ∈ [0, 1])."""
  return (1.0 + jnp.asarray(tau, jnp.float32)) ** -a


def fedscale_weight(tau):
  """w(τ) = 1/√(1 + τ), FedScale's FedBuff: the polynomial with a = ½."""
  return polynomial_weight(tau, 0.5)


def hinge_weight(tau, a: float, b: float):
  """w(τ) = 1 if τ ≤ b else 1/(a(τ − b) + 1) (Xie et al. 2019, FedAsync)."""
  tau = jnp.asarray(tau, jnp.float32)
  return jnp.where(tau <= b, 1.0, 1.0 / (a * (tau - b) + 1.0))


def threshold_weight(tau, cutoff: float, value: float):
  """w(τ) = 1 if τ ≤ cutoff else `value` (FLSim's threshold weight)."""
  return jnp.where(jnp.asarray(tau, jnp.float32) <= cutoff, 1.0, value)


def normalised_by_sum(weights, in_buffer):
  """Coefficients c_i = w_i / Σ_buffer w (0 outside the buffer), FedScale's:
  the step is Σ_i c_i Δ_i, a weighted mean (Σ c_i = 1).

  Args:
    weights: float [K], w(τ_i) of the slots.
    in_buffer: bool [K], the slot holds an update of this buffer.
  """
  w = jnp.where(in_buffer, weights, 0.0)
  return w / jnp.sum(w)


def normalised_at(weights, reference_weight, in_buffer):
  """Coefficients c_i = (w_i / w(τ_ref)) / K (0 outside the buffer), FLSim's:
  w scaled to 1 at a reference staleness (FLSim's avg_staleness, 1 by
  default: w(1) = 1), then FedBuff's mean over the K updates, Δ̄ = (1/K)
  Σ_i c'_i Δ_i; Σ c_i ≠ 1 in general.

  Args:
    weights: float [K], w(τ_i) of the slots.
    reference_weight: w(τ_ref), scalar.
    in_buffer: bool [K], the slot holds an update of this buffer (K of them).
  """
  w = jnp.where(in_buffer, weights / reference_weight, 0.0)
  return w / jnp.sum(in_buffer)
