"""The semi-asynchronous virtual clock as a part (`config.clock`).

`systems.clock.simulate` (Co-S²P's Alg. 1, host numpy) decides who arrives
in which round: every idle client is dispatched at a round's start with the
global model w_q, the round closes ⌈μN⌉ arrivals plus T_clk seconds later,
and a straggler's update arrives in a later round q with staleness
τ = q − k_n (k_n its dispatch round; above `tau_max` it is dropped and the
client dispatched again). This module turns a schedule into what compiled
rounds read, and keeps the stale-model table:

- round inputs (`schedule_inputs`), leaves [count, N]: 'arrives',
  'staleness', 'dispatch_round', 'busy_seconds', 'window_seconds',
  'dropped', 'lost' and 'redispatch' (dispatched while w_{q+1} is the
  global model: the next row of the schedule's `dispatched`);
- the start table (`start_table`, `redispatch`): row n is the global model
  client n was dispatched with, w_{k_n}; a client trains from its row, so a
  stale client starts from the model of its dispatch round;
- `dispatch_key`: the key a client's work gets is the one
  `FederatedAlgorithm.plan_round` gives it in its dispatch round, so training
  lazily at arrival equals training at dispatch (a busy client's inputs
  cannot change);
- `weigh_arrival`: an arriving update's delta and weight in the round's
  mean Σ w_n Δ_n / Σ w_n: 'none' (constant) as they are; 'polynomial'
  s(τ) = (1 + τ)^−a (FedAsync), 'fedscale' s(τ) = 1/√(1 + τ) (FedScale's
  FedBuff), 'hinge' (FedAsync's) and 'threshold' (FLSim's: 1 up to a
  cutoff, a constant c after it; `systems.buffered`), normalised by
  `staleness_normalisation`: 'mean' the delta scaled, Σ w_n s(τ_n) Δ_n /
  Σ w_n (FedBuff's (1/K) Σ s Δ with uniform weights; a lone stale arrival
  moves the model by s(τ)·Δ); 'flsim' the same with s(τ)/s(1) (FLSim's
  w(1) = 1); 'sum' the weight scaled, Σ w_n s_n Δ_n / Σ w_n s_n (FedScale's
  weighted mean); 'cos2p' the weight scaled by Co-S²P's Eq. 4 with the
  whole model as one segment,
      γ_n = ‖Δ_n‖₁ / (‖w_q − w_{k_n}‖₁ + size(w)),
  so the mean Σ w_n γ_n Δ_n / Σ w_n γ_n is Eq. 5 (with uniform weights
  w_n; γ only weighs arrivals of one round against each other);
- the clock's round metrics and summary facts (virtual time, RU in the
  three forms of `systems.clock`, the largest staleness, updates dropped
  and lost, and in buffered mode the server steps).

Buffered mode (`clock.buffer_size` K > 0): FedBuff's clock
(`systems.buffered.simulate`, seeded by `config.seed`) instead of Alg. 1:
C = `clock.concurrency` clients in flight (0: N), each finished one
replaced by a uniformly sampled eligible client, and a server step on every
K arrivals; a "round" of the run is a server step, the schedule's row q,
compiled as K slots (clients_per_round = K), not N: slot j holds the step's
j-th arriving client in client order (`slot_inputs`, leaves [count, K]).
A client trains from the model of the version it was dispatched with, read
from a version table of the last τ_max + 1 global models (row v mod
(τ_max + 1) = w_v, `store_version`; an update staler than τ_max is dropped,
so no older version is read), and its arrival is weighed by its staleness;
nothing compiled is [N, ...] but the data, and on the host the schedule
is kept per event and per step (`systems.buffered.BufferedSchedule`,
O(Q·K + N); `VirtualClock.simulated`), its [Q, N] `clock.Schedule` built
only where asked (`VirtualClock.schedule`). Buffered mode needs `tau_max`
≥ 0 (the table's size; −1, never drop, is refused). C = K = N with the
constant weight is Alg. 1 at μ = 1, bit for bit (K = N: slot n is client n,
ordered as the sampler draws the cohort, Alg. 1's order). `mu` and `t_clk`
are Alg. 1's and refused there; `tau_max` bounds the staleness in steps.

Device traces (`clock.device_trace`, the .npz of `fedjax-het traces`): a
client's round time is FedScale's completion time on device n mod D
(`systems.traces.trace_durations`: 3 × ms per sample × local steps ×
batch_size, plus the float32 model down and its update up over the link),
times the jitter, in place of the method's round-time model; where the file
holds the behaviour trace (buffered mode only), a client is dispatched only
while online and one going offline mid-round loses its update (counted,
'lost_updates'). Per-round availability (`systems.availability`) and
`client_seconds` do not combine with it (one line).

Client round times are the method's round-time model `duration(client,
dispatch_round, index) -> seconds` (`round_durations`), which `VirtualClock`
takes: by default (`step_durations`) `client_seconds` (default one second
per local step: `local_steps` for every client, FedAvg's clients do equal
work; a method whose clients run unequal steps gives its own,
`clock_default_steps`) times the lognormal jitter; they are host-made
before the rounds, so the systems part's T_m (drawn in the compiled round)
sets a client's steps, not its seconds.

Availability (`systems.availability`) composes with the clock, which hosts
it (`core.parts`' `hosts`): a client is dispatched at a round's start only
if it is online in that round, and the round waits for min(⌈μN⌉, clients
training) arrivals (`systems.clock`). Our reading for per-round models: a
client dispatched while online finishes its update (the models have no
time within a round).

The ViT engine of Co-S²P and its baselines (`methods/cos2p/vit_engine.py`)
reads the same section (`clock.mu`, `t_clk`, `tau_max`, `client_seconds`,
`jitter`, and buffered mode's `buffer_size`, `concurrency`, `device_trace`)
and is always on the clock (`always_on_clock`), composed like any method's,
with its own round-time model (the analytic ViT cost model where
`client_seconds` is empty, `fixed_seconds` where it is set, times the
jitter); Co-S²P's model charges the masks its clients learn and changes as
rounds are charged, so it simulates the clock again after each charge
(`VirtualClock.simulate`; in buffered mode too: the event loop is a pure
function of the seed and the durations, and a step's events read only the
durations of dispatches of earlier versions, which are recorded, so the
steps already run are simulated again as they ran). The engine plans its
rounds itself from the part's inputs, a round's slots read through
`OnClock.slot_clients` as the part's own plans are (slot n is client n
under Alg. 1, the step's j-th arrival in buffered mode, starting from its
version's row of the table); it refuses `staleness_weight` and
`staleness_exponent` (Co-S²P weighs stale updates by its Eq. 4,
`cos2p.weighting`, against the start model of the slot: its version's row
in buffered mode). On a device trace a ViT client's work is FedScale's, the
samples of its round (S_n·B, the engine's `round_steps` times the batch
size) at the device's ms per sample, plus the full float32 ViT down and up:
the trace measures a device per sample, not per FLOP, so the analytic
model's window and width do not enter (a client of budget ¼ pays what a
full one does) and Co-S²P's clock charges no masks.
`FederatedAlgorithm` runs any other method that lists `ClockOptions` under
the clock when the section is not at its defaults (`base.py`'s module
docstring gives the reading).
"""
import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_het import models
from fedjax_het.core import parts
from fedjax_het.data import augment
from fedjax_het.options import (ConfigError, OptionGroup, changed_key, each, finite,
                                in_range, non_negative, non_negative_int, option,
                                positive, positive_int)
from fedjax_het.systems import buffered, clock, traces

PyTree = Any
STALENESS_WEIGHTS = ('none', 'polynomial', 'fedscale', 'hinge', 'threshold',
                     'cos2p')
# The weights w(τ) of `systems.buffered`, which the normalisations act on.
STALENESS_FUNCTIONS = ('polynomial', 'fedscale', 'hinge', 'threshold')
NORMALISATIONS = ('mean', 'flsim', 'sum')


@dataclasses.dataclass(frozen=True)
class ClockOptions(OptionGroup):
  """`config.clock`: the virtual clock a method runs under (module docstring);
  one section for every method on the clock, the ViT methods
  (`methods/cos2p`) included, which are always on it."""
  key = 'clock'
  mu: float = option(1.0, 'μ: the server waits for ⌈μN⌉ updates (1/N with t_clk = 0: fully asynchronous)', check=in_range(0, 1, closed_low=False))
  t_clk: float = option(0.0, 'T_clk: seconds the server keeps accepting after ⌈μN⌉ arrivals', check=non_negative)
  tau_max: int = option(-1, 'drop updates staler than τ_max rounds, or server steps in buffered mode (−1: never; buffered mode needs ≥ 0, its version table holds τ_max + 1 models)', check=in_range(-1, math.inf))
  buffer_size: int = option(0, 'K: buffered asynchronous mode (FedBuff): the server steps on every K arriving updates, a round of K slots (clients_per_round = K) (0: off, Alg. 1 rounds)', check=in_range(0, math.inf))
  concurrency: int = option(0, 'C: clients in flight in buffered mode, a finished one replaced by a uniformly sampled idle one (0: every client)', check=in_range(0, math.inf))
  device_trace: str = option('', "a .npz of `fedjax-het traces` (FedScale's device files): round times from the devices' compute and bandwidth, and, with the behaviour trace, who is online (buffered mode); empty: off")
  client_seconds: tuple = option((), "fixed seconds of a client round, one value for every client or one per client; empty: the method's own cost model (local_steps seconds for FedAvg-like methods, equal work; the analytic ViT model for the ViT methods), times the jitter", check=each(positive))
  jitter: float = option(0.05, 'σ of the lognormal jitter exp(σ·z) of client round times (every method on the clock, the ViT methods included)', check=non_negative)
  staleness_weight: str = option('none', "w(τ) of an update of staleness τ in the round's mean (not read by the ViT methods, whose rule is their own, e.g. cos2p.weighting): none (constant) | polynomial (1 + τ)^−a | fedscale 1/√(1 + τ) (FedScale's FedBuff) | hinge 1 for τ ≤ b, else 1/(slope·(τ − b) + 1) (FedAsync) | threshold 1 for τ ≤ b, else c = staleness_value (FLSim's ThresholdStalenessWeight) | cos2p (its weight times Co-S²P's Eq. 4 γ, the model as one segment; Eq. 5's normalised mean)", choices=STALENESS_WEIGHTS)
  staleness_exponent: float = option(0.5, "a of staleness_weight='polynomial' (FedAsync; FLSim's a ∈ [0, 1])", check=non_negative)
  staleness_slope: float = option(10.0, "slope of staleness_weight='hinge' (FedAsync's a = 10)", check=non_negative)
  staleness_cutoff: int = option(4, "b of staleness_weight='hinge' or 'threshold': updates up to b stale weigh 1 (FedAsync's b = 4; FLSim's cutoff)", check=in_range(0, math.inf))
  staleness_value: float = option(0.5, "c of staleness_weight='threshold': the weight of an update staler than the cutoff (FLSim's value_after_cutoff)", check=in_range(0, 1, closed_low=False, closed_high=False))
  staleness_normalisation: str = option('mean', "how polynomial / fedscale / hinge / threshold weights enter the mean Σ c_n Δ_n: mean (c_n = u_n w(τ_n) / Σ u: the delta scaled, FedBuff's (1/K) Σ w Δ with uniform u) | flsim (w(τ)/w(1) in that mean, FLSim's w(1) = 1) | sum (c_n = u_n w(τ_n) / Σ u w: a weighted mean, FedScale's), u_n the method's weights", choices=NORMALISATIONS)

  @property
  def buffered(self) -> bool:
    """FedBuff's buffered asynchronous mode (`systems.buffered`)."""
    return self.buffer_size > 0

  def slots(self, num_clients: int) -> int:
    """S, the slots of a compiled round: N (Alg. 1 dispatches every idle
    client), or K in buffered mode (a server step takes K arrivals)."""
    return self.buffer_size or num_clients

  def validate(self) -> None:
    finite('clock.t_clk', self.t_clk)
    self.refuse_unread()
    refuse_equal_times(self, default_equal=False)
    if self.buffered:
      if self.tau_max < 0:
        raise ConfigError(
            'clock.buffer_size > 0 needs a staleness bound clock.tau_max ≥ 0 '
            '(the start models are a table of the last τ_max + 1 global '
            "models; FedScale's FedBuff: 5), got -1 (never drop).")
      return
    # At μ = 1 every update arrives in its dispatch round (τ = 0); Eq. 4's
    # γ still weighs the arrivals by their deltas, the others act on τ only.
    for key, value, unset in (('tau_max', self.tau_max, -1),
                              ('staleness_weight', self.staleness_weight,
                               'none')):
      if self.mu == 1 and value not in (unset, 'cos2p'):
        raise ConfigError(
            f'clock.{key} = {value!r} acts on stale updates, but at clock.mu '
            '= 1 every update arrives in the round it was dispatched in '
            '(τ = 0); set clock.mu < 1 (or clock.buffer_size > 0) or leave '
            'it unset.')

  def refuse_unread(self) -> None:
    """ConfigError naming a key set away from its default where the chosen
    mode or weight does not read it."""
    defaults = ClockOptions.defaults()
    unread = {
        'staleness_exponent': (self.staleness_weight != 'polynomial',
                               "clock.staleness_weight='polynomial'"),
        'staleness_slope': (self.staleness_weight != 'hinge',
                            "clock.staleness_weight='hinge'"),
        'staleness_cutoff': (self.staleness_weight not in ('hinge',
                                                           'threshold'),
                             "clock.staleness_weight 'hinge' or 'threshold'"),
        'staleness_value': (self.staleness_weight != 'threshold',
                            "clock.staleness_weight='threshold'"),
        'staleness_normalisation': (
            self.staleness_weight not in STALENESS_FUNCTIONS,
            'clock.staleness_weight ' + ', '.join(STALENESS_FUNCTIONS[:-1]) +
            ' or ' + STALENESS_FUNCTIONS[-1]),
        'concurrency': (not self.buffered, 'clock.buffer_size > 0'),
        'mu': (self.buffered, 'clock.buffer_size = 0 (Alg. 1 rounds; a '
               'buffered server steps on K updates)'),
        't_clk': (self.buffered, 'clock.buffer_size = 0 (Alg. 1 rounds; a '
                  'buffered server steps on K updates)'),
    }
    for key, (not_read, where) in unread.items():
      value = getattr(self, key)
      if not_read and value != defaults[key]:
        raise ConfigError(f'clock.{key} = {value!r} is read only with '
                          f'{where}; leave it unset.')

  def staleness_function(self, tau: jax.Array) -> jax.Array:
    """w(τ) of the chosen `staleness_weight` among `STALENESS_FUNCTIONS`
    (`systems.buffered`'s functions), float32."""
    if self.staleness_weight == 'polynomial':
      return buffered.polynomial_weight(tau, self.staleness_exponent)
    if self.staleness_weight == 'fedscale':
      return buffered.fedscale_weight(tau)
    if self.staleness_weight == 'threshold':
      return buffered.threshold_weight(tau, self.staleness_cutoff,
                                       self.staleness_value)
    return buffered.hinge_weight(tau, self.staleness_slope,
                                 self.staleness_cutoff)


def refuse_equal_times(options: ClockOptions, *, default_equal: bool) -> None:
  """ConfigError where μ < 1 keeps every round synchronous: no jitter and
  every client round equally long, by one `client_seconds` value, or by an
  empty one where the method's own cost model is equal work
  (`default_equal`: `local_steps` seconds, the generic part's default,
  checked where a method builds it, `FederatedAlgorithm`; the ViT methods'
  analytic model is not equal work)."""
  equal = len(set(options.client_seconds)) == 1 or (
      default_equal and not options.client_seconds)
  if options.mu < 1 and options.jitter == 0 and equal:
    raise ConfigError(
        f'clock.mu = {options.mu!r} with equal client times (clock.jitter = '
        '0, one clock.client_seconds) keeps every round synchronous; set '
        'unequal clock.client_seconds or a clock.jitter > 0.')


def per_client(key: str, values: tuple, num_clients: int) -> tuple:
  """One value per client: `values` as given, or its single value repeated."""
  if len(values) == 1:
    return tuple(values) * num_clients
  if len(values) != num_clients:
    raise ConfigError(f'{key} must hold 1 or num_clients ({num_clients}) '
                      f'values, got {len(values)}.')
  return tuple(values)


def fixed_seconds(options: ClockOptions, *, num_clients: int, rounds: int,
                  default: tuple = ()) -> clock.Duration:
  """Fixed client round times before the jitter: `clock.client_seconds`,
  or `default` where it is empty (one value for every client, or one per
  client)."""
  seconds = per_client('clock.client_seconds',
                       options.client_seconds or default, num_clients)
  return clock.fixed_durations([[s] * rounds for s in seconds])


def step_durations(options: ClockOptions, *, num_clients: int, rounds: int,
                   local_steps: int | tuple, seed: int) -> clock.Duration:
  """The generic part's round-time model: `fixed_seconds` with one second
  per local step by default (`local_steps`: one value for every client, or
  one per client), times the lognormal jitter seeded by `seed`."""
  steps = tuple(float(s) for s in np.atleast_1d(local_steps))
  return clock.with_jitter(
      fixed_seconds(options, num_clients=num_clients, rounds=rounds,
                    default=steps), options.jitter, seed)


class VirtualClock:
  """The host side of the part: the schedule of a run's rounds (Alg. 1's
  rounds, or FedBuff's server steps in buffered mode).

  Args:
    options: the `clock` section.
    num_clients: N (every idle client is dispatched, or every idle client
      online in the round where `online` is set; in buffered mode C of them
      are in flight).
    rounds: Q, the rounds (server steps) simulated.
    duration: the round-time model, `duration(client, dispatch_round,
      index) -> seconds` with its jitter (`step_durations`, `trace_seconds`,
      or e.g. the ViT engine's analytic one); it may change as rounds are
      charged, and `simulate` follows it.
    online: bool [Q, N], who can be dispatched in each round (the hosted
      availability part's draws); None: every client.
    seed: seeds the buffered mode's client sampling (`systems.buffered`).
    availability: buffered mode: the clients' online intervals in virtual
      time (a device trace's behaviour); None: always online.
  """

  def __init__(self, options: ClockOptions, *, num_clients: int, rounds: int,
               duration: clock.Duration, online: np.ndarray | None = None,
               seed: int = 0,
               availability: traces.Availability | None = None):
    self.options = options
    self.num_clients = num_clients
    self.rounds = rounds
    self.duration = duration
    self.online = online
    self.seed = seed
    self.availability = availability
    self._simulated = None

  @property
  def simulated(self) -> 'clock.Schedule | buffered.BufferedSchedule':
    """The last `simulate`'s result (simulated on first use): Alg. 1's
    `clock.Schedule`, or in buffered mode the `buffered.BufferedSchedule`
    (per event and per step: no [Q, N] array)."""
    if self._simulated is None:
      self.simulate()
    return self._simulated

  @property
  def schedule(self) -> clock.Schedule:
    """The schedule as `clock.Schedule`'s [Q, N] arrays (in buffered mode
    built from the events on first use: O(Q·N), which a run itself never
    asks for)."""
    simulated = self.simulated
    if isinstance(simulated, buffered.BufferedSchedule):
      return simulated.schedule
    return simulated

  def simulate(self) -> 'clock.Schedule | buffered.BufferedSchedule':
    """`simulated`: Alg. 1 over the Q rounds, or FedBuff's Q server steps in
    buffered mode, with the round-time model as it is now (a model that
    charges what clients learn, Co-S²P's realised masks, is simulated again
    after each charge); returned as well."""
    o = self.options
    tau_max = None if o.tau_max < 0 else o.tau_max
    if not o.buffered:
      self._simulated = clock.simulate(
          self.duration, num_clients=self.num_clients, rounds=self.rounds,
          mu=o.mu, t_clk=o.t_clk, tau_max=tau_max, online=self.online)
    else:
      self._simulated = buffered.simulate(
          self.duration, num_clients=self.num_clients, steps=self.rounds,
          concurrency=o.concurrency or self.num_clients,
          buffer_size=o.buffer_size, seed=self.seed, tau_max=tau_max,
          availability=self.availability)
    return self._simulated

  @property
  def slots(self) -> int:
    """S, the slots of a compiled round (`ClockOptions.slots`)."""
    return self.options.slots(self.num_clients)

  def round_inputs(self, first: int, count: int) -> dict[str, np.ndarray]:
    """`schedule_inputs` (Alg. 1), or `slot_inputs` in buffered mode."""
    if self.options.buffered:
      return slot_inputs(self.simulated, first, count, self.slots)
    return schedule_inputs(self.simulated, first, count)

  def summary_facts(self) -> dict:
    facts = schedule_facts(self.simulated)
    facts['lost_updates'] = 0   # Alg. 1: a dispatched client finishes
    if self.options.buffered:
      facts['lost_updates'] = self.simulated.num_lost
      facts['server_steps'] = self.rounds
    return facts


# ---- host: schedule → round inputs and facts --------------------------------
def schedule_inputs(schedule: clock.Schedule, first: int,
                    count: int) -> dict[str, np.ndarray]:
  """Rounds [first, first + count) of `schedule` as compiled-round xs, leaves
  [count, N]: `Schedule.round_inputs`, the seconds each client was busy in
  the round's window, the window's length (per client, for the map),
  'dropped' (an update staler than τ_max discarded), 'lost' (zeros: Alg. 1's
  availability is per round, a dispatched client finishes) and
  'redispatch': dispatched (at least once) while w_{q+1} is the global
  model, the next row of `dispatched` (Alg. 1: at the next round's start,
  the clients that arrived or were dropped and are online; none after the
  last row)."""
  inputs = schedule.round_inputs(first, count)
  rows = slice(first, first + count)
  busy = schedule.busy[rows]
  window = (schedule.end_time - schedule.start_time)[rows]
  following = np.zeros_like(busy, bool)
  nxt = schedule.dispatched[first + 1:first + count + 1]
  following[:nxt.shape[0]] = nxt
  return {**inputs, 'busy_seconds': busy.astype(np.float32),
          'window_seconds': np.broadcast_to(
              window[:, None], busy.shape).astype(np.float32),
          'dropped': schedule.dropped[rows].copy(),
          'lost': np.zeros(busy.shape, np.int32),
          'redispatch': following}


def slot_inputs(steps: buffered.BufferedSchedule, first: int, count: int,
                slots: int) -> dict[str, np.ndarray]:
  """Server steps [first, first + count) of a buffered schedule as
  compiled-round xs, leaves [count, S] (S = `slots`), read from its events
  (O(count · S), nothing per client): slot j holds the step's j-th arriving
  client in client order, 'client_id' with its 'arrives', 'staleness',
  'dispatch_round' and the step's 'window_seconds' (where fewer than S
  arrive, the remaining slots hold the lowest clients that do not arrive:
  idle, staleness and dispatch round 0); the step's totals 'busy_seconds'
  (Σ_n of the float32 seconds, `BufferedSchedule.busy_float32`), 'dropped'
  and 'lost' sit in slot 0, zeros elsewhere (their sum over the slots,
  `round_metrics`', is the step's). With S = K = N every client arrives in
  every step: slot n is client n, as in `schedule_inputs`."""
  non_negative_int('first', first)
  positive_int('count', count)
  if first + count > steps.steps:
    raise ConfigError(f'rounds [{first}, {first + count}) run past the '
                      f'{steps.steps} simulated rounds.')
  rows = slice(first, first + count)
  arrivals = np.diff(steps.offsets)[rows]
  if arrivals.max() > slots:
    raise ConfigError(f'a server step of the schedule has {arrivals.max()} '
                      f'arrivals, more than its {slots} slots.')
  shape = (count, slots)
  inputs = {'client_id': np.zeros(shape, np.int32),
            'arrives': np.arange(slots) < arrivals[:, None],
            'staleness': np.zeros(shape, np.int32),
            'dispatch_round': np.zeros(shape, np.int32)}
  for i, q in enumerate(range(first, first + count)):
    a, b = steps.offsets[q], steps.offsets[q + 1]
    clients = steps.client[a:b]
    idle = np.setdiff1d(np.arange(slots + clients.shape[0]), clients)
    inputs['client_id'][i] = np.concatenate([clients, idle])[:slots]
    inputs['dispatch_round'][i, :b - a] = steps.version[a:b]
    inputs['staleness'][i, :b - a] = q - steps.version[a:b]
  window = (steps.end_time - steps.start_time)[rows]
  inputs['window_seconds'] = np.broadcast_to(
      window[:, None], shape).astype(np.float32)
  in_first = np.arange(slots) == 0
  for key, total, dtype in (
      ('busy_seconds', steps.busy_float32[rows], np.float32),
      ('dropped', steps.per_step(steps.dropped_step)[rows], np.int32),
      ('lost', steps.per_step(steps.lost_step)[rows], np.int32)):
    inputs[key] = np.where(in_first, total[:, None], 0).astype(dtype)
  return inputs


def schedule_facts(schedule: 'clock.Schedule | buffered.BufferedSchedule'
                   ) -> dict:
  """summary.json's clock: virtual time, RU (Eq. 17, busy, time-weighted),
  the largest staleness, the updates dropped as staler than τ_max and each
  client's mean seconds per arriving update."""
  return {'virtual_time_s': float(schedule.end_time[-1]),
          'ru_eq17': float(schedule.ru_eq17()),
          'ru_busy': float(schedule.ru_busy()),
          'ru_time_weighted': float(schedule.ru_time_weighted()),
          'max_staleness': int(schedule.max_staleness),
          'dropped_updates': schedule.num_dropped,
          'client_round_seconds': [
              float(x) for x in schedule.mean_update_seconds()]}


# ---- compiled: keys, the start table, weights, metrics ----------------------
def dispatch_key(key: jax.Array, dispatch_round: jax.Array,
                 client: jax.Array) -> jax.Array:
  """The key of client `client`'s work dispatched in `dispatch_round`: the
  one `FederatedAlgorithm.plan_round` gives it in that round (`key` the
  state's seed key)."""
  clients_key = jax.random.split(jax.random.fold_in(key, dispatch_round))[1]
  return jax.random.fold_in(jax.random.fold_in(clients_key, client), 0)


def start_table(params: PyTree, rows: int) -> PyTree:
  """The round-0 table, leaves [rows, ...], every row w_0: rows = N (every
  client dispatched with w_0) or τ_max + 1 (buffered mode's versions)."""
  return jax.tree.map(lambda p: jnp.broadcast_to(p, (rows,) + p.shape), params)


def store_version(table: PyTree, version: jax.Array, params: PyTree) -> PyTree:
  """Buffered mode's version table (leaves [τ_max + 1, ...], row v mod
  (τ_max + 1) = w_v) with `params` = w_version stored in its row: the
  oldest version it overwrites, version − τ_max − 1, is staler than any
  update that can still arrive."""
  row = version % jax.tree.leaves(table)[0].shape[0]
  return jax.tree.map(lambda t, p: t.at[row].set(p), table, params)


def redispatch(table: PyTree, client_ids: jax.Array, again: jax.Array,
               params: PyTree) -> PyTree:
  """`table` with the rows of the slots' clients `client_ids` [K] (distinct)
  that are dispatched again (`again`, bool [K]) set to `params` = w_{q+1}."""
  def leaf(t, p):
    rows = t[client_ids]
    fresh = jnp.where(again.reshape((-1,) + (1,) * p.ndim), p[None], rows)
    return t.at[client_ids].set(fresh)

  return jax.tree.map(leaf, table, params)


def weigh_arrival(options: ClockOptions, staleness: jax.Array,
                  delta: PyTree, weight: jax.Array, start: PyTree,
                  params: PyTree) -> tuple[PyTree, jax.Array]:
  """(delta, weight) of one arriving update in the round's weighted mean
  Σ weight_n delta_n / Σ weight_n (module docstring); 'none' returns them
  unchanged, bit for bit.

  Args:
    options: the `clock` section.
    staleness: τ, int scalar.
    delta: the client's delta Δ (start − end).
    weight: its aggregation weight u (0 on an idle slot).
    start: its start model w_{k_n}; params: the global model w_q.
  """
  if options.staleness_weight == 'none':
    return delta, weight
  if options.staleness_weight == 'cos2p':
    l1 = lambda tree: sum(jnp.sum(jnp.abs(x)) for x in jax.tree.leaves(tree))
    size = sum(x.size for x in jax.tree.leaves(params))
    drift = l1(jax.tree.map(jnp.subtract, params, start))
    return delta, weight * l1(delta) / (drift + size)
  scale = options.staleness_function(staleness)
  if options.staleness_normalisation == 'sum':
    return delta, weight * scale
  if options.staleness_normalisation == 'flsim':
    scale = scale / options.staleness_function(jnp.int32(1))
  return jax.tree.map(lambda d: d * scale.astype(d.dtype), delta), weight


def round_metrics(extras: dict, active: jax.Array) -> dict[str, jax.Array]:
  """The clock's round metrics from the slots' clock inputs (`extras`,
  leaves [K]): the round's virtual seconds, client busy seconds, arrivals,
  their summed staleness, the updates dropped as stale and those lost to
  clients going offline (running totals in the logs)."""
  return {
      'virtual_seconds': extras['window_seconds'][0],
      'busy_seconds': jnp.sum(extras['busy_seconds']),
      'arrivals': jnp.sum(active).astype(jnp.float32),
      'staleness': jnp.sum(jnp.where(active, extras['staleness'],
                                     0)).astype(jnp.float32),
      'dropped_updates': jnp.sum(extras['dropped']).astype(jnp.float32),
      'lost_updates': jnp.sum(extras['lost']).astype(jnp.float32),
  }


# ---- host: buffered mode and device traces ----------------------------------
def check_buffered(options: ClockOptions, num_clients: int) -> None:
  """ConfigError in one line where buffered mode cannot run: C and K at
  most N (one update per client per server step)."""
  for key in ('buffer_size', 'concurrency'):
    if getattr(options, key) > num_clients:
      raise ConfigError(f'clock.{key} = {getattr(options, key)} exceeds '
                        f'num_clients = {num_clients}.')


def model_bytes(method, config, data) -> float:
  """Bytes of the method's model (float32 parameters), shape-evaluated."""
  shape = augment.output_shape(config.augment, data.feature_shape)
  params = jax.eval_shape(lambda: models.init_params(
      method.model, jax.random.PRNGKey(0), shape))
  return float(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params)))


def trace_seconds(method, options: ClockOptions, config, data
                  ) -> tuple[clock.Duration, traces.Availability | None]:
  """The round-time model and availability of `clock.device_trace`: client
  n's round is FedScale's completion time on device n mod D
  (`traces.trace_durations`: compute of its samples, local steps ×
  batch_size, plus the model down and its update up) times the jitter; its
  online intervals are trace entry n mod M (buffered mode only)."""
  capacity, availability = traces.load_npz(options.device_trace)
  if capacity is None:
    raise ConfigError(f'clock.device_trace {options.device_trace!r} holds no '
                      'device capacities (fedjax-het traces --capacity).')
  if options.client_seconds:
    raise ConfigError('clock.client_seconds and clock.device_trace both set '
                      "a client's round time: set one of them.")
  if availability is not None and not options.buffered:
    raise ConfigError(
        f'clock.device_trace {options.device_trace!r} holds online intervals '
        'in virtual time, which only buffered mode dispatches by: set '
        'clock.buffer_size > 0 (C = K = N is Alg. 1 at μ = 1).')
  steps = np.atleast_1d(method.clock_default_steps()).astype(np.float64)
  duration = traces.trace_durations(capacity, steps * config.batch_size,
                                    model_bytes(method, config, data))
  return clock.with_jitter(duration, options.jitter, config.seed), availability


# ---- the part ---------------------------------------------------------------
class OnClock(parts.Part):
  """The part: a method's rounds on the virtual clock (module docstring).

  It takes the round's plans over: slot j is client `cohort_ids(state)[j]`
  (every client, in the order the sampler draws them; in buffered mode with
  K < N the step's j-th arriving client, `slot_inputs`), planned by the
  method's `plan_clients` as in its dispatch round k (the state's round k,
  its start model w_k and the key of round k, `dispatch_key`), its mask
  gathered from the table (slots differ in round), active when its update
  arrives. A client starts from its start-table row (row n of N under
  Alg. 1, row k mod (τ_max + 1) of the version table in buffered mode); an
  arrival is weighed by its staleness (`weigh_arrival`, on the parts of the
  model the method averages, its `averaged_parts`); after the server step
  the rows of the clients dispatched with w_{q+1} are set to it (Alg. 1),
  or version q + 1's row (buffered mode).

  On for a method listing it when `config.clock` leaves its defaults, and
  always for a method defined on the clock (`always_on_clock`: the ViT
  methods, whose engine plans the rounds itself through `slot_clients`,
  under Alg. 1 or in buffered mode). The run needs uniform sampling and
  clients_per_round = the slots: num_clients under Alg. 1 (every idle
  client is dispatched), K in buffered mode. A client's round time is the
  method's round-time model (`round_durations`: one second per local step
  by default, the analytic ViT model for the ViT methods).
  Availability, where it is on, is hosted here: only the idle clients online
  at a round's start are dispatched (`systems.clock.simulate`'s `online`,
  the availability part's draws evaluated on the host). The ViT engine plans
  its own rounds from the part's inputs (`slot_clients`; slot n is client n
  under Alg. 1) and reads the schedule (`methods/cos2p/vit_engine.py`).
  """
  name = 'clock'
  takes_over = frozenset({'plan_round'})
  weighs = True
  hosts = frozenset({'availability'})

  def __init__(self, clock_: VirtualClock, num_clients: int, seed: int,
               start_table: bool = True):
    self.clock = clock_
    self.options = clock_.options
    self.num_clients = num_clients
    self.seed = seed
    self.start_table = start_table

  @property
  def table_rows(self) -> int:
    """Rows of the start table: N (by client), or τ_max + 1 in buffered
    mode (by version mod τ_max + 1)."""
    if self.options.buffered:
      return self.options.tau_max + 1
    return self.num_clients

  @classmethod
  def check(cls, method, config):
    """Equal client times at μ < 1 refused (where the method's default round
    times are equal work, `round_times_equal_work`)."""
    refuse_equal_times(ClockOptions.from_config(config),
                       default_equal=method.round_times_equal_work)
    return config

  @classmethod
  def build(cls, method, config, data) -> 'OnClock | None':
    if (not method.always_on_clock and
        changed_key(config.clock, ClockOptions.defaults()) is None):
      return None
    options = ClockOptions.from_config(config)
    refuse_equal_times(options, default_equal=method.round_times_equal_work)
    num_clients = int(data.counts.shape[0])
    check_buffered(options, num_clients)
    slots = options.slots(num_clients)
    if (config.clients_per_round != slots or
        config.client_sampling != 'uniform'):
      why, size = (('a server step has a slot per arrival', 'clock.buffer_size')
                   if options.buffered else
                   ('Alg. 1 dispatches every idle client', 'num_clients'))
      raise ConfigError(
          f'on the virtual clock {why}, so {method.name} needs '
          f'clients_per_round = {size} ({slots}) and uniform client_sampling, '
          f'got {config.clients_per_round} and {config.client_sampling}.')
    duration, availability = method.round_durations(), None
    if options.device_trace:
      duration, availability = trace_seconds(method, options, config, data)
    return cls(VirtualClock(options, num_clients=num_clients,
                            rounds=config.rounds, duration=duration,
                            seed=config.seed, availability=availability),
               num_clients, config.seed, method.trains_weights)

  def host(self, guest) -> None:
    """Availability: the clock dispatches only the clients `guest` (an
    `OnlineClients`) draws online in each round, drawn on the host from the
    run's key (`jax.random.PRNGKey(seed)`, the runner's state key) as a
    synchronous round draws them (`Availability.rounds_online`). Refused in
    buffered mode and with a device trace, whose availability is in virtual
    time."""
    if self.options.buffered or self.options.device_trace:
      raise ConfigError(
          'systems.availability draws who is online per round; with '
          'clock.buffer_size > 0 or clock.device_trace the clock is in '
          "virtual time (a device trace's behaviour gives who is online): "
          'set one of them.')
    self.clock.online = guest.model.rounds_online(
        jax.random.PRNGKey(self.seed), self.clock.rounds)
    self.clock.simulate()

  def round_inputs(self, first: int, count: int) -> dict[str, np.ndarray]:
    return self.clock.round_inputs(first, count)

  def facts(self) -> dict:
    return self.clock.summary_facts()

  def init_extras(self, params: PyTree, extras: PyTree) -> PyTree:
    """'start': the start table (`table_rows` rows), every row w_0 (none
    where the clients train no weights, `trains_weights`)."""
    if not self.start_table:
      return extras
    return {**(extras or {}),
            'start': start_table(params, self.table_rows)}

  def slot_clients(self, inputs: dict, cohort: jax.Array | None = None
                   ) -> tuple[jax.Array, dict, jax.Array]:
    """(client ids [S], the round's clock row by slot, start rows [S]) of a
    round: `inputs['clock']` is its row of the clock's inputs, leaves [S],
    by client where S = N (slot j is then client `cohort[j]`; None: client
    j), else by slot (`slot_inputs`' 'client_id'); a slot's start row is
    its client's (Alg. 1) or its dispatch version's, k mod (τ_max + 1)
    (buffered mode). The part's `plan_round` and the ViT engine's read a
    round through it."""
    row = jax.tree.map(jnp.asarray, inputs[self.name])
    if self.clock.slots != self.num_clients:
      ids = row['client_id']
    elif cohort is None:
      ids = jnp.arange(self.num_clients)
    else:
      ids = cohort
      row = jax.tree.map(lambda x: x[ids], row)
    rows = ids
    if self.options.buffered:
      rows = row['dispatch_round'] % self.table_rows
    return ids, row, rows

  def plan_round(self, method, state, inputs: dict):
    """The round's plans (class docstring), slot j the sampler's j-th
    client (`cohort_ids`) where S = N (`slot_clients`)."""
    ids, row, rows = self.slot_clients(inputs, method.cohort_ids(state))
    keys = jax.vmap(dispatch_key, in_axes=(None, 0, 0))(
        state.key, row['dispatch_round'], ids)

    def plan_at_dispatch(dispatch_round, client, key, start_row):
      start = jax.tree.map(lambda t: t[start_row], state.extras['start'])
      plan = method.plan_clients(
          state.replace(round=dispatch_round, params=start), client[None],
          key[None])
      plan = plan.replace(mask=plan.client_masks(), mask_table=None,
                          mask_row=None)
      return jax.tree.map(lambda x: x[0], plan)

    plans = jax.vmap(plan_at_dispatch)(row['dispatch_round'], ids, keys, rows)
    return plans.replace(active=row['arrives'], start_model=rows,
                         extras={**(plans.extras or {}), 'clock': row})

  def start_models(self, state) -> PyTree:
    """Row n = w_{k_n}, the model client n was dispatched with (Alg. 1), or
    row v mod (τ_max + 1) = w_v (buffered mode)."""
    return state.extras['start'] if self.start_table else None

  def weigh(self, method, plan, delta: PyTree, weight: jax.Array,
            table: PyTree, params: PyTree) -> tuple[PyTree, jax.Array]:
    """One slot's (delta, weight) in the round's mean: `weigh_arrival` with
    its staleness τ and start model w_{k_n} (its row of `table`), on the
    method's `averaged_parts` of the model (None: all of it); `params` is
    w_q."""
    start = jax.tree.map(lambda t: t[plan.start_model], table)
    staleness = plan.extras[self.name]['staleness']
    if method.averaged_parts is None:
      return weigh_arrival(self.options, staleness, delta, weight, start,
                           params)
    pick = lambda tree: {part: tree[part] for part in method.averaged_parts}
    weighed, weight = weigh_arrival(self.options, staleness, pick(delta),
                                    weight, pick(start), pick(params))
    return {**delta, **weighed}, weight

  def finish(self, before, after, plans, outputs):
    """The start table after the server step: w_{q+1} in the rows of the
    clients dispatched while it is the global model ('redispatch'), or in
    buffered mode in version q + 1's row (`store_version`)."""
    del outputs
    if not self.start_table:
      return after
    table = after.extras['start']
    if self.options.buffered:
      table = store_version(table, before.round + 1, after.params)
    else:
      table = redispatch(table, plans.client_id,
                         plans.extras[self.name]['redispatch'], after.params)
    return after.replace(extras={**after.extras, 'start': table})

  def metrics(self, metrics, plans, outputs):
    del outputs
    return {**metrics, **round_metrics(plans.extras[self.name],
                                       plans.is_active())}
