"""The heterogeneity simulator: per-round link reliability and local work of every client.

Each round r every client m has an upload failure probability q_m^(r) and an
amount of local work T_m^(r) (FedACS §2, "communication" and "computation"
heterogeneity). `Heterogeneity.draw` returns these arrays for all M clients
together with the round's link outcomes Z_m^r ~ Bernoulli(1 − q_m^(r))
(Z = 1: the upload reaches the server; the paper's Section-2 convention,
App. B's Z = 0-is-success being a typo). Everything is drawn
inside the compiled round from the round's key, so the draws cost no host
work, are identical for every method run with the same seed (a fair
comparison), and a resumed run sees the same sequence.

Models (`systems.model`):

- `static`: fixed per-client q_m and T_m (user-given lists, one value = every
  client), optionally assigned to clients by seeded random permutations
  (the paper's static setting, App. I.3.1, leaves the pairing open).
- `dynamic`: clients form equal contiguous groups; every round each client
  redraws q ~ U(lo, hi) and T ~ U{lo, …, hi} from its group's ranges, i.i.d.
  over rounds and clients (App. I.3.1: half the clients T ~ U{1..10},
  q ~ U(0.4, 0.5), the other half T ~ U{20..30}, q ~ U(0, 0.1)).
- `markov`: on/off links (a Gilbert channel per client): a link that is on
  goes off with probability `markov_fail`, one that is off comes back with
  probability `markov_recover`. The round's q_m^(r) is the failure
  probability given the previous state, so the Bernoulli draw of Z_m^r *is*
  the chain's transition; the state is the previous round's Z (all links on
  before round 0). T is static.
- `trace`: user-given per-round arrays q [R', M] and T [R', M] from an .npz
  file; round r uses row r mod R'.

Local work is counted in optimiser steps or epochs (`work_unit`); the round
also reports the steps each client takes.
"""
import dataclasses
import os

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from fedjax_het.core import parts
from fedjax_het.core.key_streams import Stream
from fedjax_het.core.state import ClientPlan, ServerState, round_key
from fedjax_het.options import (ConfigError, OptionGroup, changed_key,
                                in_range, is_bool, option, positive_int)
from fedjax_het.parts import availability as availability_lib
from fedjax_het.parts import local_work

MODELS = ('static', 'dynamic', 'markov', 'trace')


@dataclasses.dataclass(frozen=True)
class SystemsOptions(OptionGroup):
  """`config.systems`: every round each client m has an upload failure
  probability q_m and local work T_m, and is online or not (the links-and-work
  and availability parts of every method listing this section: the
  README's parts table says which); checked against the clients by
  `Heterogeneity.from_config` and `Availability.from_section`."""
  key = 'systems'
  model: str = option('static', 'how q and T evolve: static | dynamic | markov | trace', choices=MODELS)
  q: tuple = option((0.0,), 'static: q_m per client (one value = every client)')
  local_work: tuple = option((), 'static/markov: T_m per client (() = local_steps for all)')
  shuffle: bool = option(False, 'static: assign q and T to clients by seeded random permutations', check=is_bool)
  work_unit: str = option('steps', 'unit of T: steps, or epochs (T epochs = T·⌈n_m/B⌉ steps)', choices=('steps', 'epochs'))
  dynamic_q: tuple = option(((0.4, 0.5), (0.0, 0.1)), 'dynamic: q ~ U(lo, hi) per equal client group, redrawn every round')
  dynamic_work: tuple = option(((1, 10), (20, 30)), 'dynamic: T ~ U{lo..hi} per group, redrawn every round')
  markov_fail: tuple = option((0.1,), 'markov: P(link on → off) per round, per client (one value = all)')
  markov_recover: tuple = option((0.5,), 'markov: P(link off → on) per round')
  trace: str = option('', 'trace: .npz with q and local_work [rounds, M]; round r uses row r mod rounds')
  availability: str = option('always', 'who can be sampled each round: always | bernoulli | diurnal | trace (parts/availability.py)', choices=availability_lib.MODELS)
  available_p: tuple = option((1.0,), 'bernoulli: P(online) per round, per client (one value = every client)')
  diurnal_period: int = option(24, 'diurnal: rounds per day', check=positive_int)
  diurnal_low: float = option(0.1, 'diurnal: P(online) at the trough, half a day from each client\'s peak', check=in_range(0, 1))
  availability_trace: str = option('', 'trace: .npz with bool available [rounds, M]; round r uses row r mod rounds')



@flax.struct.dataclass
class SystemsRound:
  """The systems' state of all M clients in one round.

  Attributes:
    failure_prob: float32 [M], q_m^(r), probability that m's upload fails.
    work: int32 [M], T_m^(r) in the configured unit (steps or epochs).
    steps: int32 [M], local optimiser steps T_m^(r) amounts to.
    link_up: bool [M], Z_m^r: whether an upload of m reaches the server this
      round. One draw per client and round (the paper's Z_m^r), so a client
      sampled twice in a round succeeds or fails on both uploads.
  """
  failure_prob: jax.Array
  work: jax.Array
  steps: jax.Array
  link_up: jax.Array


def _per_client(name: str, values, num_clients: int) -> np.ndarray:
  """One value per client from a list of one or M values. float64 [M]."""
  array = np.asarray(values, np.float64)
  if array.ndim != 1 or array.size not in (1, num_clients):
    raise ValueError(f'systems.{name} needs one value or one per client '
                     f'({num_clients}), got {np.shape(values)}.')
  return np.broadcast_to(array, (num_clients,)).copy()


def _check_probabilities(name: str, p: np.ndarray) -> None:
  bad = p[~((p >= 0) & (p <= 1))]
  if bad.size:
    raise ValueError(f'systems.{name} must be probabilities in [0, 1], got '
                     f'{float(bad[0])!r}.')


def _check_work(name: str, work: np.ndarray) -> np.ndarray:
  if work.size == 0 or np.any(work != np.round(work)) or np.any(work < 1):
    raise ValueError(f'systems.{name} must be positive integers (local work '
                     f'T ≥ 1), got {np.asarray(work).ravel().tolist()[:8]}.')
  return work.astype(np.int64)


def _ranges(name: str, ranges) -> np.ndarray:
  array = np.asarray(ranges, np.float64)
  if array.ndim != 2 or array.shape[1] != 2 or np.any(array[:, 0] > array[:, 1]):
    raise ValueError(f'systems.{name} must be a list of (lo, hi) pairs with '
                     f'lo ≤ hi, got {ranges!r}.')
  return array


@dataclasses.dataclass(frozen=True)
class Heterogeneity:
  """A systems model of M clients; `draw` gives one round's `SystemsRound`.

  Build it with `from_config`. Arrays are host numpy constants of the
  compiled round (a few per client).

  Attributes:
    model: one of MODELS.
    steps_per_work: int [M], optimiser steps per unit of work.
    failure_prob: float [M], static q (static model).
    work: int [M], static T (static and markov models).
    group: int [M], client group (dynamic model).
    q_ranges: float [G, 2] and work_ranges: int [G, 2], per-group (lo, hi)
      (dynamic model).
    markov_fail, markov_recover: float [M], on→off and off→on probabilities.
    trace_q: float [R', M] and trace_work: int [R', M] (trace model).
  """
  model: str
  steps_per_work: np.ndarray
  failure_prob: np.ndarray | None = None
  work: np.ndarray | None = None
  group: np.ndarray | None = None
  q_ranges: np.ndarray | None = None
  work_ranges: np.ndarray | None = None
  markov_fail: np.ndarray | None = None
  markov_recover: np.ndarray | None = None
  trace_q: np.ndarray | None = None
  trace_work: np.ndarray | None = None

  @classmethod
  def from_config(cls, section: ml_collections.ConfigDict, *,
                  client_counts: np.ndarray, batch_size: int,
                  default_work: int, seed: int) -> 'Heterogeneity':
    """Validates `config.systems` and builds the model for these clients.

    Args:
      section: the `systems` config section (keys in `fedjax_het.config`).
      client_counts: int [M] examples per client (epoch lengths).
      batch_size: local batch size B (epoch lengths).
      default_work: T for every client when `systems.local_work` is empty
        (the run's `local_steps`).
      seed: seed of the static model's random assignment.

    Raises:
      ValueError: with one sentence naming the bad key.
    """
    section = SystemsOptions.from_section(section)
    m = int(np.shape(client_counts)[0])
    spw = local_work.steps_per_unit(section.work_unit, client_counts,
                                    batch_size)
    work_list = section.local_work or (default_work,)
    if section.model == 'static':
      q = _per_client('q', section.q, m)
      _check_probabilities('q', q)
      work = _check_work('local_work', _per_client('local_work', work_list, m))
      if section.shuffle:
        rng = np.random.default_rng(seed)
        q, work = q[rng.permutation(m)], work[rng.permutation(m)]
      model = cls('static', spw, failure_prob=q, work=work)
    elif section.model == 'dynamic':
      q_ranges = _ranges('dynamic_q', section.dynamic_q)
      _check_probabilities('dynamic_q', q_ranges.ravel())
      work_ranges = _check_work('dynamic_work',
                                _ranges('dynamic_work', section.dynamic_work))
      if len(q_ranges) != len(work_ranges) or len(q_ranges) > m:
        raise ValueError(
            'systems.dynamic_q and systems.dynamic_work must list the same '
            f'number of client groups (at most {m}), got {len(q_ranges)} and '
            f'{len(work_ranges)}.')
      group = np.arange(m) * len(q_ranges) // m
      model = cls('dynamic', spw, group=group, q_ranges=q_ranges,
                  work_ranges=work_ranges)
    elif section.model == 'markov':
      fail = _per_client('markov_fail', section.markov_fail, m)
      recover = _per_client('markov_recover', section.markov_recover, m)
      _check_probabilities('markov_fail', fail)
      _check_probabilities('markov_recover', recover)
      work = _check_work('local_work', _per_client('local_work', work_list, m))
      model = cls('markov', spw, work=work, markov_fail=fail,
                  markov_recover=recover)
    else:
      model = cls('trace', spw, **_read_trace(section.trace, m))
    lo, _ = model.failure_prob_bounds()
    if np.all(lo >= 1):
      raise ValueError('every client\'s upload fails with probability 1 '
                       '(q = 1 for all clients), so no update could ever '
                       'reach the server.')
    return model

  @property
  def num_clients(self) -> int:
    return int(self.steps_per_work.shape[0])

  def failure_prob_bounds(self) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest q_m^(r) each client can have. float [M] each."""
    if self.model == 'static':
      return self.failure_prob, self.failure_prob
    if self.model == 'dynamic':
      return self.q_ranges[self.group, 0], self.q_ranges[self.group, 1]
    if self.model == 'markov':
      q = np.stack([self.markov_fail, 1 - self.markov_recover])
      return q.min(0), q.max(0)
    return self.trace_q.min(0), self.trace_q.max(0)

  def max_steps(self) -> int:
    """Largest number of local steps any client can take in a round."""
    if self.model == 'dynamic':
      work = self.work_ranges[self.group, 1]
    elif self.model == 'trace':
      work = self.trace_work.max(0)
    else:
      work = self.work
    return int(np.max(work * self.steps_per_work))

  def init_link_state(self) -> jax.Array | None:
    """Markov link states before round 0 (all on, int32 [M]); None otherwise."""
    if self.model != 'markov':
      return None
    return jnp.ones((self.num_clients,), jnp.int32)

  def draw(self, key: jax.Array, round_index: jax.Array,
           link_state: jax.Array | None = None) -> SystemsRound:
    """Round `round_index`'s q, T, steps and link outcomes of all clients.

    Args:
      key: the round's systems key.
      round_index: int32 scalar (trace rows).
      link_state: int32 [M], the Markov model's previous link states (1 =
        on); None for the other models.
    """
    m = self.num_clients
    q_key, work_key, link_key = jax.random.split(key, 3)
    if self.model == 'static':
      q, work = jnp.asarray(self.failure_prob), jnp.asarray(self.work)
    elif self.model == 'dynamic':
      q_lo, q_hi = (jnp.asarray(self.q_ranges[self.group, i]) for i in (0, 1))
      q = q_lo + (q_hi - q_lo) * jax.random.uniform(q_key, (m,))
      w_lo, w_hi = (jnp.asarray(self.work_ranges[self.group, i])
                    for i in (0, 1))
      work = jax.random.randint(work_key, (m,), w_lo, w_hi + 1)
    elif self.model == 'markov':
      q = jnp.where(link_state == 1, jnp.asarray(self.markov_fail),
                    1 - jnp.asarray(self.markov_recover))
      work = jnp.asarray(self.work)
    else:
      row = round_index % self.trace_q.shape[0]
      q = jnp.asarray(self.trace_q)[row]
      work = jnp.asarray(self.trace_work)[row]
    q = q.astype(jnp.float32)
    work = work.astype(jnp.int32)
    # u ∈ [0, 1): q = 0 always succeeds, q = 1 never does.
    link_up = jax.random.uniform(link_key, (m,)) >= q
    steps = work * jnp.asarray(self.steps_per_work, jnp.int32)
    return SystemsRound(failure_prob=q, work=work, steps=steps,
                        link_up=link_up)


class LinksWork(parts.Part):
  """The part: each round's draws of `model` (`Heterogeneity.draw`, from the
  round key's SYSTEMS stream) give every planned client T_m local steps (the
  program freezes it after them) and weight w_m·Z_m, so a dropped update adds
  nothing to any segment sum and its upload is not counted in `bytes_up`.
  The Markov model's link states are the part's state (`extras['links']`,
  int32 [M], the previous round's Z), so every method runs it.

  On when `config.systems`' links-and-work keys leave their defaults (q = 0,
  every client `local_steps`), or always for a method whose own rule reads
  the draws (`reads_draws`: the FedACS family's sampling and calibration read
  q and T, reading them through `Parts.draws`).
  """
  name = 'links_work'

  def __init__(self, model: Heterogeneity):
    self.model = model

  @classmethod
  def build(cls, method, config, data) -> 'LinksWork | None':
    links_and_work = {key: default for key, default in
                      SystemsOptions.defaults().items()
                      if key not in availability_lib.KEYS}
    if not method.reads_draws and changed_key(config.systems,
                                              links_and_work) is None:
      return None
    try:
      model = Heterogeneity.from_config(
          config.systems, client_counts=np.asarray(data.counts),
          batch_size=config.batch_size, default_work=config.local_steps,
          seed=config.seed)
    except ValueError as e:
      raise ConfigError(str(e)) from e
    if method.divides_by_success:
      _, q_max = model.failure_prob_bounds()
      if np.any(q_max >= 1):
        m = int(np.argmax(q_max >= 1))
        raise ConfigError(
            f'{method.name} divides by the upload success probability 1 − q, '
            f'so every client needs q < 1, but client {m} can have q = 1.')
    return cls(model)

  def init_extras(self, params, extras):
    del params
    links = self.model.init_link_state()
    return extras if links is None else {**(extras or {}), 'links': links}

  def draws(self, state: ServerState) -> SystemsRound:
    """q, T, steps and link outcomes of all clients in round `state.round`:
    a pure function of the state (key, round, Markov link states), so the
    plan and aggregation phases of a round see the same draws."""
    links = state.extras['links'] if self.model.model == 'markov' else None
    return self.model.draw(round_key(state, Stream.SYSTEMS), state.round,
                           links)

  def max_steps(self, steps: int) -> int:
    del steps
    return self.model.max_steps()

  def adjust(self, state: ServerState, plans: ClientPlan) -> ClientPlan:
    rnd = self.draws(state)
    return plans.replace(
        num_steps=rnd.steps[plans.client_id],
        weight=plans.weight * rnd.link_up[plans.client_id].astype(jnp.float32))

  def finish(self, before: ServerState, after: ServerState,
             plans: ClientPlan, outputs) -> ServerState:
    """Markov: the round's link outcomes are the next round's states."""
    del plans, outputs
    if self.model.model != 'markov':
      return after
    links = self.draws(before).link_up.astype(jnp.int32)
    return after.replace(extras={**(after.extras or {}), 'links': links})


def _read_trace(path: str, num_clients: int) -> dict:
  """Per-round arrays from an .npz with `q` and `local_work`, both [R', M]."""
  if not path or not os.path.isfile(path):
    raise ValueError(f'systems.trace must name an .npz file with arrays q and '
                     f'local_work of shape [rounds, {num_clients}], got '
                     f'{path!r}.')
  try:
    archive = np.load(path, allow_pickle=False)
  except (ValueError, OSError) as e:
    raise ValueError(f'systems.trace file {path} is not an .npz archive '
                     f'({e.__class__.__name__}).') from e
  if not isinstance(archive, np.lib.npyio.NpzFile):
    raise ValueError(f'systems.trace file {path} is not an .npz archive '
                     '(it holds a single array).')
  with archive as f:
    if 'q' not in f or 'local_work' not in f:
      raise ValueError(f'systems.trace file {path} must hold arrays q and '
                       f'local_work, found {sorted(f.files)}.')
    q = np.asarray(f['q'], np.float64)
    work = np.asarray(f['local_work'], np.float64)
  if q.ndim != 2 or q.shape != work.shape or q.shape[1] != num_clients:
    raise ValueError(f'systems.trace arrays q {q.shape} and local_work '
                     f'{work.shape} must both be [rounds, {num_clients}].')
  _check_probabilities('trace q', q.ravel())
  return {'trace_q': q, 'trace_work': _check_work('trace local_work', work)}
