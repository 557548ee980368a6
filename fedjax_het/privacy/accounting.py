"""Privacy accounting of a DP-FedAvg run, on the host (`dp-accounting`).

A round of DP-FedAvg (`parts.dp`) releases the cohort's sum of updates
clipped to L2 norm S plus N(0, σ²S²) noise: a Gaussian mechanism of noise
multiplier σ on a sum of sensitivity S (add or remove one client). With
adaptive clipping it also releases the count of unclipped clients plus
N(0, σ_b²) (sensitivity 1); both queries read the same cohort, so a round is
one Gaussian mechanism of multiplier (σ^−2 + σ_b^−2)^−1/2 (Andrew et al.
2021, Thm. 1). T rounds compose it T times.

Amplification by subsampling is claimed only where the run's cohort is a
uniform sample of the N clients (`Mechanism.amplified`): each round is then
accounted as Poisson sampling with q = K/N (a cohort of K distinct clients
drawn uniformly, the approximation TFF, Opacus and pfl-research make). Where
participation is not uniform sampling (availability, FedACS's sampling,
sampling ∝ examples), the ε reported is the one without amplification: T
compositions of the unsampled mechanism, with the reason in the facts.

T is the run's `config.rounds`, fixed before the run (σ is calibrated from
it, on the host, once): every round is charged, one that releases nothing
(a secure-aggregation round below its dropout threshold, `parts.secagg`)
included, so the ε reported bounds the ε of the rounds that released from
above. Whether a round aborts depends on the cohort and its links, not on
the clients' data.

`dp-accounting` is an optional extra (`pip install -e ".[dp]"`): `require`
names it in one line where a run asks for ε without it.
"""
import contextlib
import dataclasses
import logging
import math

from fedjax_het.options import ConfigError

INSTALL = 'pip install -e ".[dp]"'
ACCOUNTANTS = ('rdp', 'pld')


def require():
  """The `dp_accounting` module, or ConfigError naming the extra."""
  try:
    import dp_accounting  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ConfigError(
        'the dp part reports ε with dp-accounting, which is not installed: '
        f'run {INSTALL}, or set dp.accountant=\'none\' (no ε).') from e
  return dp_accounting


@dataclasses.dataclass(frozen=True)
class Mechanism:
  """What a run releases, for the accountant.

  Attributes:
    noise_multiplier: σ of the sum's noise (its std over the sensitivity S).
    sampling_prob: q = K/N, a client's probability of being in a cohort.
    rounds: T, the rounds released.
    amplified: whether the cohort is a uniform sample (then Poisson q).
    count_noise_multiplier: σ_b of adaptive clipping's count (0: none).
  """
  noise_multiplier: float
  sampling_prob: float
  rounds: int
  amplified: bool
  count_noise_multiplier: float = 0.0

  def round_multiplier(self) -> float:
    """σ of one round's joint release: (σ^−2 + σ_b^−2)^−1/2 (σ_b = 0: σ)."""
    if not self.count_noise_multiplier:
      return self.noise_multiplier
    return (self.noise_multiplier**-2 +
            self.count_noise_multiplier**-2)**-0.5

  def with_noise(self, noise_multiplier: float) -> 'Mechanism':
    return dataclasses.replace(self, noise_multiplier=noise_multiplier)


def _event(dp, mechanism: Mechanism):
  """The run's `DpEvent`: T self-compositions of a round's Gaussian, Poisson
  subsampled at q where amplification is claimed."""
  event = dp.GaussianDpEvent(mechanism.round_multiplier())
  if mechanism.amplified and mechanism.sampling_prob < 1:
    event = dp.PoissonSampledDpEvent(mechanism.sampling_prob, event)
  return dp.SelfComposedDpEvent(event, mechanism.rounds)


@contextlib.contextmanager
def _quiet_orders():
  """dp-accounting's RDP accountant logs, through absl, one warning per
  Rényi order whose series fails to converge at large q; it drops those
  orders (ε still holds), so the warnings are silenced while it runs."""
  logger = logging.getLogger('absl')
  level = logger.level
  logger.setLevel(logging.ERROR)
  try:
    yield
  finally:
    logger.setLevel(level)


def _accountant(dp, kind: str):
  if kind == 'rdp':
    return dp.rdp.RdpAccountant()
  return dp.pld.PLDAccountant()


def epsilon(mechanism: Mechanism, delta: float, kind: str = 'rdp') -> float:
  """ε at δ of `mechanism` after its T rounds (σ = 0: ∞), by the `kind`
  accountant ('rdp' or 'pld')."""
  if mechanism.noise_multiplier <= 0:
    return math.inf
  dp = require()
  with _quiet_orders():
    return float(_accountant(dp, kind).compose(
        _event(dp, mechanism)).get_epsilon(delta))


def calibrate(mechanism: Mechanism, target_epsilon: float, delta: float,
              kind: str = 'rdp') -> float:
  """The smallest σ (to dp-accounting's tolerance) at which `mechanism`
  (its σ replaced) ends at ε ≤ `target_epsilon` at δ."""
  dp = require()
  with _quiet_orders():
    return float(dp.calibrate_dp_mechanism(
        lambda: _accountant(dp, kind),
        lambda sigma: _event(dp, mechanism.with_noise(sigma)),
        target_epsilon, delta))
