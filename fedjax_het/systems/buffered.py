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

The output is a `systems.clock.Schedule` whose row q is server step q (the
step from version q to q + 1): arrivals[q, n] (n's update is in buffer q),
dispatch_round[q, n] (the version it trained from), dispatched[q, n] (n was
dispatched at least once while the version was q), dropped[q, n] (an update
of n arrived while the version was q with τ > τ_max), start_time[q] (when
version q became current), end_time[q] (server step q), busy, update_seconds
as in `systems.clock`. With C = K = N it is `systems.clock.simulate(mu=1,
t_clk=0)`'s schedule, array by array.

The staleness weights w(τ) an aggregation applies to a buffer's updates, and
the two ways peers normalise them, are pure jax.numpy functions below, for
the compiled round.
"""
import dataclasses
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
@dataclasses.dataclass(frozen=True)
class BufferedSchedule:
  """The simulated server steps and the updates lost to clients going offline.

  Attributes:
    schedule: the `clock.Schedule`, row q = server step q (module docstring).
    lost_step: int32 [L], the version current when each lost update was lost.
    lost_client: int32 [L], its client.
    lost_time: float64 [L], when the client went offline.
  """
  schedule: clock.Schedule
  lost_step: np.ndarray
  lost_client: np.ndarray
  lost_time: np.ndarray

  @property
  def num_dropped(self) -> int:
    return int(self.schedule.dropped.sum())

  @property
  def num_lost(self) -> int:
    return int(self.lost_client.shape[0])


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
  """The event loop's state (`simulate` runs it); arrays as in
  `clock.Schedule`."""

  def __init__(self, duration, num_clients, steps, concurrency, buffer_size,
               tau_max, seed, sampler, availability):
    self.duration, self.concurrency = duration, concurrency
    self.buffer_size, self.tau_max = buffer_size, tau_max
    self.rng = np.random.default_rng(seed)
    self.sampler, self.availability = sampler, availability
    shape = (steps, num_clients)
    self.arrivals = np.zeros(shape, bool)
    self.dispatched = np.zeros(shape, bool)
    self.dropped = np.zeros(shape, bool)
    self.dispatch_round = np.full(shape, -1, np.int32)
    self.update_seconds = np.zeros(shape)
    self.start_time, self.end_time = np.zeros(steps), np.zeros(steps)
    self.version = np.zeros(num_clients, np.int64)
    self.started = np.zeros(num_clients)
    self.times_dispatched = np.zeros(num_clients, np.int64)
    self.loses = np.zeros(num_clients, bool)
    self.intervals = []  # (client, dispatch time, finish or offline time)
    self.lost = []  # (step, client, time)
    self.events = []
    self.buffer = []
    self.in_flight = 0
    self.q = 0

  def run(self) -> None:
    self.refill(0.0)
    steps = self.arrivals.shape[0]
    while self.q < steps:
      if not self.events:
        raise ConfigError(
            f'the buffered clock stalls after {self.q} of {steps} server '
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
    while (self.in_flight < self.concurrency and
           self.q < self.arrivals.shape[0]):
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
    self.dispatched[self.q, n] = True
    self.intervals.append((n, t, end))
    self.in_flight += 1

  def finish(self, n: int, t: float) -> None:
    """Client n's event at t: lost, dropped (τ > τ_max) or into the buffer."""
    self.in_flight -= 1
    q = self.q
    if self.loses[n]:
      self.lost.append((q, n, t))
      self.sampler.add(n)
    elif self.tau_max is not None and q - self.version[n] > self.tau_max:
      self.dropped[q, n] = True
      self.sampler.add(n)
    else:
      self.arrivals[q, n] = True
      self.dispatch_round[q, n] = self.version[n]
      self.update_seconds[q, n] = t - self.started[n]
      self.buffer.append(n)
      if len(self.buffer) == self.buffer_size:
        self.server_step(t)

  def server_step(self, t: float) -> None:
    """Version q → q + 1 at t; the buffer's clients become eligible."""
    self.end_time[self.q] = t
    self.q += 1
    if self.q < self.start_time.shape[0]:
      self.start_time[self.q] = t
    for n in self.buffer:
      self.sampler.add(n)
    self.buffer = []

  def busy(self) -> np.ndarray:
    """float64 [Q, N]: seconds each client was busy within each step's window
    [start_time, end_time] (`clock.simulate`'s sum, over the rows an interval
    overlaps only)."""
    busy = np.zeros(self.arrivals.shape)
    for n, begin, end in self.intervals:
      rows = slice(np.searchsorted(self.end_time, begin, side='right'),
                   np.searchsorted(self.start_time, end, side='left'))
      busy[rows, n] += np.clip(
          np.minimum(end, self.end_time[rows]) -
          np.maximum(begin, self.start_time[rows]), 0, None)
    return busy

  def result(self) -> BufferedSchedule:
    schedule = clock.Schedule(
        arrivals=self.arrivals, dispatch_round=self.dispatch_round,
        dispatched=self.dispatched, dropped=self.dropped,
        start_time=self.start_time, end_time=self.end_time, busy=self.busy(),
        update_seconds=self.update_seconds)
    lost = np.asarray(self.lost, np.float64).reshape(-1, 3)
    return BufferedSchedule(schedule=schedule,
                            lost_step=lost[:, 0].astype(np.int32),
                            lost_client=lost[:, 1].astype(np.int32),
                            lost_time=lost[:, 2])


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
