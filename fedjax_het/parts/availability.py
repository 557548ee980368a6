"""Client availability: which of the M clients can be selected in round r.

Cross-device clients are online only some of the time (a phone joins when it
is idle, charging and on Wi-Fi; FedScale's device traces); the server samples
its cohort among those online. `Availability.draw` gives the round's bool [M]
inside the compiled round, from the round's AVAILABILITY key stream
(`core.key_streams`), so every method run with the same seed sees the same
clients online and a resumed run the same sequence.

Models (`systems.availability`):

- `always`: every client, every round (the default; the part is off).
- `bernoulli`: client m is online with probability p_m, independently per
  round (`systems.available_p`: one value for every client, or one per
  client).
- `diurnal`: a day of `diurnal_period` rounds; client m is online with
  probability p_m(r) = low + (1 − low)·(1 + cos(2π(r/period − φ_m)))/2,
  peaking at 1 when r/period = φ_m (mod 1) and falling to `diurnal_low` half
  a day later. The phases φ_m ~ U[0, 1) (time zones) are drawn once from the
  run's seed.
- `trace`: a user-given bool array `available` [R', M] in an .npz file
  (`systems.availability_trace`, e.g. converted from FedScale's
  client_behave_trace); round r uses row r mod R'.

On the virtual clock (`parts.clock.OnClock`, which hosts this part) the
clock dispatches only the idle clients online at a round's start, from
`Availability.rounds_online` evaluated on the host (`systems.clock`); the
hooks below are then not used.

As a part (`OnlineClients`), it gives the sampler the round's online clients
(`online`) and marks a slot active only when its client is online (`adjust`).
Sampling among the online clients is the sampler's: FedAvg's and the
submodel methods' (`methods.base`) draw K of them uniformly, or with
replacement in proportion to their data; the FedACS family's
(`methods.fedacs.systems_aware`) draws by its own rule with the importance
restricted to the online clients and renormalised, its weights unbiased
given who is online. When fewer than K are online, the cohort's other slots
stay idle (no steps, no upload).
The uniform draw among the online clients (`core.sampling.uniform_among`)
takes them in the order of the permutation the draw without the part takes,
so with every client online (`bernoulli` at p = 1) a round is the round
without the part, bit for bit.
"""
import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_het.core import key_streams, parts
from fedjax_het.core.key_streams import Stream
from fedjax_het.core.state import ClientPlan, ServerState, round_key
from fedjax_het.options import ConfigError

MODELS = ('always', 'bernoulli', 'diurnal', 'trace')
# The `systems` keys this part reads (the links-and-work part reads the rest).
KEYS = ('availability', 'available_p', 'diurnal_period', 'diurnal_low',
        'availability_trace')


@dataclasses.dataclass(frozen=True)
class Availability:
  """Which clients are online each round; build it with `from_section`.

  Attributes:
    model: one of MODELS other than 'always'.
    p: float [M], P(online) per round (bernoulli).
    period: rounds per day, low: the trough probability, phase: float [M]
      each client's peak as a fraction of the day (diurnal).
    trace: bool [R', M] (trace).
  """
  model: str
  p: np.ndarray | None = None
  period: int = 0
  low: float = 0.0
  phase: np.ndarray | None = None
  trace: np.ndarray | None = None

  @classmethod
  def from_section(cls, section, num_clients: int,
                   seed: int) -> 'Availability | None':
    """The model `section` (a validated `SystemsOptions`) sets for
    `num_clients` clients; None for 'always'. ValueError names a bad key."""
    if section.availability == 'always':
      return None
    if section.availability == 'bernoulli':
      p = np.asarray(section.available_p, np.float64)
      if p.ndim != 1 or p.size not in (1, num_clients):
        raise ValueError(
            f'systems.available_p needs one value or one per client '
            f'({num_clients}), got {np.shape(section.available_p)}.')
      if np.any(~((p > 0) & (p <= 1))):
        raise ValueError('systems.available_p must be probabilities in '
                         f'(0, 1], got {section.available_p!r}.')
      return cls('bernoulli', p=np.broadcast_to(p, (num_clients,)).copy())
    if section.availability == 'diurnal':
      phase = np.random.default_rng(seed).random(num_clients)
      return cls('diurnal', period=int(section.diurnal_period),
                 low=float(section.diurnal_low), phase=phase)
    return cls('trace', trace=_read_trace(section.availability_trace,
                                          num_clients))

  def online_prob(self, round_index: jax.Array) -> jax.Array:
    """float32 [M]: each client's probability of being online in the round."""
    if self.model == 'bernoulli':
      return jnp.asarray(self.p, jnp.float32)
    day = round_index.astype(jnp.float32) / self.period
    wave = (1 + jnp.cos(2 * jnp.pi * (day - jnp.asarray(self.phase,
                                                         jnp.float32)))) / 2
    return (self.low + (1 - self.low) * wave).astype(jnp.float32)

  def draw(self, key: jax.Array, round_index: jax.Array) -> jax.Array:
    """bool [M]: who is online in round `round_index` (key: the round's
    AVAILABILITY stream)."""
    if self.model == 'trace':
      return jnp.asarray(self.trace)[round_index % self.trace.shape[0]]
    num_clients = (self.p if self.model == 'bernoulli' else self.phase).shape[0]
    return jax.random.uniform(key, (num_clients,)) < self.online_prob(
        round_index)


  def rounds_online(self, key: jax.Array, rounds: int) -> np.ndarray:
    """bool [rounds, M]: `draw` of rounds 0 … rounds − 1 on the host, each
    from the AVAILABILITY stream of round r of `key` (`round_key`'s: with
    the run's state key, the clients a synchronous round r finds online)."""
    def row(r):
      round_key_ = key_streams.fold(jax.random.fold_in(key, r),
                                    Stream.AVAILABILITY)
      return self.draw(round_key_, r)

    return np.asarray(jax.jit(jax.vmap(row))(jnp.arange(rounds)))


class OnlineClients(parts.Part):
  """The part: who is online each round (`model.draw` from the round key's
  AVAILABILITY stream). On unless `systems.availability` is 'always'; a
  method whose sampler does not draw among the online clients
  (`samples_available_clients` False) refuses it in one line."""
  name = 'availability'

  def __init__(self, model: Availability):
    self.model = model

  @classmethod
  def check(cls, method, config):
    """`config`; ConfigError where it sets availability for a method whose
    sampler does not draw among the online clients."""
    if (not method.samples_available_clients and
        config.systems.availability != 'always'):
      raise ConfigError(
          f'systems.availability = {config.systems.availability!r} is set, but '
          f'{method.name} samples among all clients by its own rule; leave it '
          "'always' or choose fedavg, a submodel method or the FedACS "
          'family, whose samplers draw among the online clients.')
    return config

  @classmethod
  def build(cls, method, config, data) -> 'OnlineClients | None':
    from fedjax_het.parts import links_work  # pylint: disable=g-import-not-at-top
    cls.check(method, config)
    try:
      model = Availability.from_section(
          links_work.SystemsOptions.from_config(config),
          int(data.counts.shape[0]), config.seed)
    except ValueError as e:
      raise ConfigError(str(e)) from e
    return None if model is None else cls(model)

  def online(self, state: ServerState) -> jax.Array:
    """bool [M]: the clients online in round `state.round` (a pure function
    of the state's key and round, so streaming can draw cohorts ahead)."""
    return self.model.draw(round_key(state, Stream.AVAILABILITY), state.round)

  def adjust(self, state: ServerState, plans: ClientPlan) -> ClientPlan:
    return plans.replace(active=self.online(state)[plans.client_id])


def _read_trace(path: str, num_clients: int) -> np.ndarray:
  """bool [R', M] from an .npz holding `available`, with every round's row
  online for at least one client."""
  if not path or not os.path.isfile(path):
    raise ValueError(
        'systems.availability_trace must name an .npz file with a bool array '
        f'available of shape [rounds, {num_clients}], got {path!r}.')
  try:
    with np.load(path, allow_pickle=False) as archive:
      if 'available' not in archive.files:
        raise ValueError(f'systems.availability_trace file {path} must hold '
                         f'an array available, found {sorted(archive.files)}.')
      trace = np.asarray(archive['available'])
  except (OSError, AttributeError) as e:
    raise ValueError(f'systems.availability_trace file {path} is not an .npz '
                     f'archive ({e.__class__.__name__}).') from e
  if trace.ndim != 2 or trace.shape[1] != num_clients or trace.shape[0] < 1:
    raise ValueError(f'systems.availability_trace array available '
                     f'{trace.shape} must be [rounds, {num_clients}].')
  if not np.isin(trace, (0, 1)).all():
    raise ValueError('systems.availability_trace array available must hold '
                     'booleans (0 or 1).')
  return trace.astype(bool)
