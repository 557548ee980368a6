"""Differential privacy as a part: DP-FedAvg's Gaussian mechanism on the cohort sum.

McMahan et al. 2018 (DP-FedAvg), inside the compiled round:

1. every client's update Δ_n is clipped to L2 norm S at the end of its
   program (`upload`): Δ_n ← Δ_n · min(1, S/‖Δ_n‖₂). For a submodel method
   Δ_n is the update embedded in the full model (zero outside the client's
   mask, as `core.program.run_program` returns it), so ‖Δ_n‖ is the norm of
   what the client uploads;
2. the method sums the clipped updates as it does, Σ w_n Δ_n (per segment,
   masked), and the part adds N(0, (σ·S·w_max·K/C)²) to every coordinate of
   the sum once (`release_sums`, the round key's DP_NOISE stream, one key per
   leaf; where the method averages only parts of its model,
   `averaged_parts`, those parts), before the method divides: FedAvg and the submodel family by
   their own denominator Σ w_n m_nj (the cohort's delivered weight, per
   coordinate for submodels), the FedACS family by K (rule (3): McMahan et
   al.'s fixed denominator);
3. the accountant (`privacy.accounting`, host only) reports ε at δ of the
   run in summary.json (`epsilon`), or calibrates σ from `dp.target_epsilon`.

The weights. One client changes Σ w_n Δ_n by at most w_n·S, so the noise is
scaled by w_max, the largest weight of a slot in the round: with uniform
weights (`aggregation_weights='uniform'`, w = 1) it is σS, McMahan et al.'s
mechanism. With weights ∝ examples, or the FedACS family's coefficients
(importance over sampling probability, calibrations), the largest
coefficient sets the noise of every coordinate: weighted means pay for their
heaviest client. The denominator is not noised: the cohort's delivered
weight and masks are treated as public (the cohort is drawn, links drop and
submodels are assigned independently of the clients' data); the released
quantity the ε counts is the noised sum.

Noise cohort (pfl-research): with `dp.noise_cohort_size` C > K the sum's
noise is σS·w_max·K/C, so the mean's noise is that of a cohort of C clients
while K are simulated; the ε reported is that of the mechanism simulated
(multiplier σK/C at q = K/N).

Adaptive clipping (Andrew et al. 2021, `dp.adaptive_quantile` γ > 0): S is
server state (`extras['dp']['clip_norm']`); after each round the count b of
delivering clients whose update was not clipped is released with N(0, σ_b²)
noise (DP_COUNT stream), b̄ = b̃ / (clients delivering), and
S ← S·exp(−η_C (b̄ − γ)) (`finish`). A secure-aggregation round that
releases nothing (below `secagg.dropout_threshold`) keeps S
(`parts.secagg.MOVED_BY_RELEASE`).

The part runs under FedAvg, the submodel family, the FedACS family except
FedVarp (its memory of past updates enters every aggregate un-noised) and
split learning's client part: CSE-FSL and FSL_AN clip and noise the client
part and aux head (x_c, a_c) they upload, FSL_MC its composed delta (x_c and
its server copy); FSL_OC refuses (its one server model carries every earlier
client's data into the next client's update). What the ε covers is the
method's `dp_release` (summary.json's `dp.epsilon_covers`): under split
learning the smashed activations the server trains on are neither clipped
nor noised, so the ε covers the client part's release only (CSE-FSL, FSL_AN:
not x_s). The clock and cells are refused beside the part
(`core.parts.REFUSED_TOGETHER`), other methods do not read the `dp` section
(one line).
"""
import dataclasses
import math

import jax
import jax.numpy as jnp
import optax

from fedjax_het.core import parts
from fedjax_het.core.key_streams import Stream
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState, \
    round_key
from fedjax_het.options import (ConfigError, OptionGroup, in_range,
                                non_negative, non_negative_int, option,
                                positive)
from fedjax_het.privacy import accounting


@dataclasses.dataclass(frozen=True)
class DPOptions(OptionGroup):
  """`config.dp`: DP-FedAvg's clipping, noise and accountant (`parts.dp`)."""
  key = 'dp'
  clip_norm: float = option(0.0, 'S: every client update clipped to L2 norm S before the sum, in the full model (split learning: the client part\'s upload, so the ε covers its release only, not the server part trained on smashed activations; 0: the dp part is off; inf: no clipping; adaptive clipping: the initial S)', check=non_negative)
  noise_multiplier: float = option(0.0, 'σ: N(0, (σ·S·w_max)²) added once to every coordinate of the cohort sum (w_max: the round\'s largest client weight, 1 with uniform weights)', check=non_negative)
  target_epsilon: float = option(0.0, 'ε: σ calibrated so that the run ends at (ε, dp.delta) (needs the [dp] extra; 0: σ = dp.noise_multiplier)', check=non_negative)
  delta: float = option(0.0, 'δ of the reported ε (0: 1/N^1.1, N = num_clients)', check=in_range(0, 1, closed_high=False))
  accountant: str = option('rdp', "dp-accounting's accountant of the reported ε: rdp | pld | none (no ε, no [dp] extra needed)", choices=('rdp', 'pld', 'none'))
  adaptive_quantile: float = option(0.0, 'γ: adaptive clipping moves S toward the γ-quantile of the update norms (Andrew et al. 2021; 0: S fixed)', check=in_range(0, 1, closed_high=False))
  adaptive_lr: float = option(0.2, 'η_C: S ← S·exp(−η_C (b̄ − γ)), b̄ the noised fraction of unclipped updates', check=positive)
  count_noise: float = option(0.0, 'σ_b: std of the noise on the count of unclipped updates (Andrew et al.: K/20; accounted with σ)', check=non_negative)
  noise_cohort_size: int = option(0, 'C ≥ K: the noise computed for a nominal cohort of C clients, std σS·w_max·K/C on the sum (pfl-research\'s noise cohort; 0: C = K)', check=non_negative_int)

  def validate(self) -> None:
    if self.clip_norm == 0:
      self.refuse_set_while_off('clip_norm', ' (S > 0)')
      return
    if self.noise_multiplier and self.target_epsilon:
      raise ConfigError('dp.noise_multiplier and dp.target_epsilon are both '
                        'set; set one (σ, or the ε σ is calibrated to).')
    if self.target_epsilon and self.accountant == 'none':
      raise ConfigError("dp.target_epsilon needs an accountant; set "
                        "dp.accountant to 'rdp' or 'pld'.")
    if math.isinf(self.clip_norm) and (self.noise_multiplier or
                                       self.target_epsilon or
                                       self.adaptive_quantile):
      raise ConfigError('dp.clip_norm = inf (no clipping) leaves the '
                        'sensitivity unbounded: noise σ·S and adaptive '
                        'clipping need a finite S.')
    if not self.adaptive_quantile:
      for key in ('adaptive_lr', 'count_noise'):
        if getattr(self, key) != DPOptions.defaults()[key]:
          raise ConfigError(f'dp.{key} is read by adaptive clipping only; set '
                            'dp.adaptive_quantile or leave it unset.')
    elif (self.noise_multiplier or self.target_epsilon) and not self.count_noise:
      raise ConfigError('adaptive clipping releases the count of unclipped '
                        'updates: with noise on the sum it needs '
                        'dp.count_noise > 0 (σ_b) for the ε to hold.')


def no_amplification(method, config) -> str | None:
  """Why the run's cohort is not a uniform sample of the clients (then the
  accountant claims no amplification by subsampling), or None."""
  if method.reads_draws:
    return (f'{method.name} samples its cohort by its own rule (FedACS '
            'sampling), not uniformly')
  systems = config.get('systems')
  if systems is not None and systems.availability != 'always':
    return ('the cohort is drawn among the clients online '
            f'(systems.availability = {systems.availability!r}), not '
            'uniformly from all clients')
  if config.client_sampling != 'uniform':
    return (f"client_sampling = {config.client_sampling!r} draws clients "
            'with replacement ∝ examples, not uniformly')
  return None


def default_delta(num_clients: int) -> float:
  """δ = 1/N^1.1, below 1/N as a user-level δ must be."""
  return float(num_clients)**-1.1


class ClipAndNoise(parts.Part):
  """The part (module docstring). On where `dp.clip_norm` > 0."""
  name = 'dp'

  def __init__(self, options: DPOptions, *, cohort: int, num_clients: int,
               rounds: int, why_not_amplified: str | None,
               covers: str,
               averaged_parts: tuple[str, ...] | None = None):
    self.options = options
    self.covers = covers
    self.averaged_parts = averaged_parts
    self.cohort = cohort
    self.noise_cohort = options.noise_cohort_size or cohort
    if self.noise_cohort < cohort:
      raise ConfigError(f'dp.noise_cohort_size ({options.noise_cohort_size}) '
                        f'must be at least the cohort ({cohort} clients).')
    self.delta = options.delta or default_delta(num_clients)
    self.why_not_amplified = why_not_amplified
    scale = cohort / self.noise_cohort   # the simulated σ is σ·K/C
    self.mechanism = accounting.Mechanism(
        noise_multiplier=options.noise_multiplier * scale,
        sampling_prob=min(cohort / num_clients, 1.0), rounds=rounds,
        amplified=why_not_amplified is None,
        count_noise_multiplier=options.count_noise)
    if options.target_epsilon:
      self.mechanism = self.mechanism.with_noise(accounting.calibrate(
          self.mechanism, options.target_epsilon, self.delta,
          options.accountant))
    # σ of the nominal cohort C: the sum's noise std is σ·S·w_max·K/C.
    self.noise_multiplier = self.mechanism.noise_multiplier / scale
    self.epsilon = (None if options.accountant == 'none' else
                    accounting.epsilon(self.mechanism, self.delta,
                                       options.accountant))

  @classmethod
  def check(cls, method, config):
    DPOptions.from_config(config)
    return config

  @classmethod
  def build(cls, method, config, data) -> 'ClipAndNoise | None':
    options = DPOptions.from_config(config)
    if options.clip_norm == 0:
      return None
    return cls(options, cohort=int(config.clients_per_round),
               num_clients=int(data.counts.shape[0]),
               rounds=int(config.rounds),
               why_not_amplified=no_amplification(method, config),
               covers=method.dp_release,
               averaged_parts=method.averaged_parts)

  @property
  def adaptive(self) -> bool:
    return bool(self.options.adaptive_quantile)

  @property
  def clips(self) -> bool:
    return self.adaptive or math.isfinite(self.options.clip_norm)

  def facts(self) -> dict:
    """summary.json: `epsilon` at δ and the mechanism it counts."""
    return {'epsilon': self.epsilon, 'dp': {
        'clip_norm': self.options.clip_norm,
        'noise_multiplier': self.noise_multiplier,
        'noise_cohort_size': self.noise_cohort,
        'delta': self.delta, 'accountant': self.options.accountant,
        'sampling_prob': self.mechanism.sampling_prob,
        'amplification_by_sampling': self.mechanism.amplified,
        'no_amplification_because': self.why_not_amplified,
        'epsilon_covers': self.covers}}

  def init_extras(self, params, extras):
    del params
    if not self.adaptive:
      return extras
    clip = jnp.asarray(self.options.clip_norm, jnp.float32)
    return {**(extras or {}), 'dp': {'clip_norm': clip}}

  def clip_norm(self, state: ServerState) -> jax.Array:
    """float32 scalar: the round's S (adaptive: the server state's)."""
    if self.adaptive:
      return state.extras['dp']['clip_norm']
    return jnp.asarray(self.options.clip_norm, jnp.float32)

  def adjust(self, state: ServerState, plans: ClientPlan) -> ClientPlan:
    """Every slot's plan carries the round's S (`plan.parts['dp']`)."""
    clip = jnp.broadcast_to(self.clip_norm(state), plans.weight.shape)
    return plans.replace(parts={**(plans.parts or {}), 'dp': clip})

  def upload(self, method, plan: ClientPlan,
             output: ClientOutput) -> ClientOutput:
    """Δ clipped to S, its norm before the clip in `output.parts['dp']`."""
    del method
    norm = optax.global_norm(output.delta)
    recorded = output.replace(parts={**(output.parts or {}), 'dp': norm})
    if not self.clips:
      return recorded
    clip = plan.parts['dp']
    factor = clip / jnp.maximum(norm, clip)
    return recorded.replace(delta=jax.tree.map(
        lambda d: (d * factor).astype(d.dtype), output.delta))

  def noise_std(self, state: ServerState, weights: jax.Array) -> jax.Array:
    """σ·S·w_max·K/C: the std of the noise on every coordinate of the sum."""
    scale = self.noise_multiplier * self.cohort / self.noise_cohort
    return scale * self.clip_norm(state) * jnp.max(jnp.abs(weights))

  def released(self, path) -> bool:
    """Whether the leaf at `path` is of the model the method averages (its
    `averaged_parts`, by top-level key; None: all of it)."""
    return self.averaged_parts is None or path[0].key in self.averaged_parts

  def release_sums(self, state, weights, sums):
    """The numerator plus N(0, noise_std²) on every coordinate the method
    averages (leaf i's noise from key i of the round's DP_NOISE stream, i
    its index among all leaves)."""
    if not self.noise_multiplier:
      return sums
    numerator, denominator = sums
    std = self.noise_std(state, weights)
    key = round_key(state, Stream.DP_NOISE)
    leaves, tree = jax.tree_util.tree_flatten_with_path(numerator)
    noised = [leaf + std * jax.random.normal(jax.random.fold_in(key, i),
                                             leaf.shape, leaf.dtype)
              if self.released(path) else leaf
              for i, (path, leaf) in enumerate(leaves)]
    return jax.tree.unflatten(tree, noised), denominator

  def unclipped(self, plans: ClientPlan, outputs: ClientOutput) -> jax.Array:
    """bool [K]: delivering slots whose update was within S."""
    return plans.delivers() & (outputs.parts['dp'] <= plans.parts['dp'])

  def finish(self, before, after, plans, outputs):
    """Adaptive clipping: S ← S·exp(−η_C (b̄ − γ)), b̄ the noised fraction of
    delivered updates left unclipped."""
    if not self.adaptive:
      return after
    count = jnp.sum(self.unclipped(plans, outputs)).astype(jnp.float32)
    noise = self.options.count_noise * jax.random.normal(
        round_key(before, Stream.DP_COUNT))
    delivered = jnp.maximum(jnp.sum(plans.delivers()), 1)
    fraction = (count + noise) / delivered
    clip = self.clip_norm(before) * jnp.exp(
        -self.options.adaptive_lr * (fraction - self.options.adaptive_quantile))
    return after.replace(extras={**after.extras, 'dp': {'clip_norm': clip}})

  def metrics(self, metrics, plans, outputs):
    """`dp_clipped`: delivered updates the clip shortened."""
    clipped = plans.delivers() & ~self.unclipped(plans, outputs)
    return {**metrics, 'dp_clipped': jnp.sum(clipped).astype(jnp.float32)}
