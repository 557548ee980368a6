"""Secure aggregation's numerics as a part: fixed-point encodings summed
modulo 2^b (Bonawitz et al. 2017's ring, as TFF's and FLSim's simulators).

The format: b bits (`secagg.bits`), range c (`secagg.clip_range`, a power of
two), step s = c/2^(b−1); an encoding is an integer q ∈ [−2^(b−1), 2^(b−1))
(two's complement in Z_{2^b}), the value q·s ∈ [−c, c − s].

1. every client encodes its term of the method's numerator, x = w_n Δ_n
   (its weight times its — clipped, `parts.dp` — update, zero outside its
   submodel), coordinate by coordinate, at the end of its program
   (`upload`): q = clip(round(x/s), −2^(b−1), 2^(b−1) − 1); the coordinates
   the clip changed are counted (`secagg_clipped`). What it uploads is q·s/w_n,
   so the method's sum Σ w_n (q_n s/w_n) is s·Σ q_n: with a power-of-two step
   and weights 0/1 (`aggregation_weights='uniform'`) exactly, as long as
   K·2^(b−1) ≤ 2^24 (the float32 segment sums hold every integer below 2^24;
   more bits are refused in one line); with other weights each term carries
   float32's relative rounding 2^−24, far below half a step;
2. the server decodes the segment sums (`release_sums`): Q = round(Σ/s), then
   Q mod 2^b read as a signed integer, times s. A coordinate whose integer sum
   Q lies outside [−2^(b−1), 2^(b−1)) wraps around: it is counted in
   `secagg_wraps` (per segment and coordinate, from the clients' encodings,
   `integer_sums`) and decoded off by a multiple of 2c;
3. a dropout threshold t (`secagg.dropout_threshold`): a round in which fewer
   than t cohort members deliver (a slot idle, or its upload lost on a lossy
   link, is a dropout) aggregates nothing: the server's params and optimiser
   state stay as they were (`finish`), counted in `secagg_aborted`. So does
   the state of the parts that move from what the round releases
   (`MOVED_BY_RELEASE`): dp's adaptive S, whose count of unclipped clients
   is summed in the same secure aggregation (each client's 0/1 is one more
   coordinate of its term, Andrew et al. 2021 Sec. 4), so an aborted round
   releases no count either and its noise is not drawn into S.

Quantisation bound: within the range and without wraps, each delivering
client's encoding is off by at most s/2 per coordinate, so the decoded sum is
within K·s/2 of the exact sum and the mean within K·s/2 / Σ w_n m_nj (s/2
with uniform weights and the full model).

With `parts.dp` (registered before this part, so its hooks act first): the
update is clipped to S before it is encoded; the Gaussian noise is added to
the sum before the modular decode, as distributed DP's client shares enter
the ring (the server of secure aggregation sees only the decoded sum, so
noise added after decoding would need the trusted server secure aggregation
removes): the noise is quantised to the step and takes its share of the
ring's range. The decode is post-processing of the noised sum, so the ε is
the dp part's. `secagg_wraps` counts the clients' sum only; noise near the
range's edge can wrap a coordinate more. The accountant charges every one of
the run's T rounds, fixed before the run (σ is calibrated from T), an aborted
round included: it releases nothing, so the ε reported is an upper bound of
the ε of the rounds that released (`privacy.accounting`).

The part runs where the dp part does except FedACS's OS (its weights follow
from every client's update norm, which secure aggregation hides); the clock
and cells are refused beside it (`core.parts.REFUSED_TOGETHER`).
"""
import dataclasses
import math

import jax
import jax.numpy as jnp

from fedjax_het.core import parts
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState
from fedjax_het.options import (ConfigError, OptionGroup, non_negative_int,
                                option, positive)

# The float32 segment sums hold every integer up to 2^24 exactly.
EXACT_INTEGERS = 2**24
# The parts whose server state (`extras[name]`) moves from what a round
# releases, kept with the params in an aborted round: dp's adaptive S.
MOVED_BY_RELEASE = ('dp',)


@dataclasses.dataclass(frozen=True)
class SecaggOptions(OptionGroup):
  """`config.secagg`: secure aggregation's fixed-point ring (`parts.secagg`)."""
  key = 'secagg'
  bits: int = option(0, 'b: every client term encoded in b-bit fixed point and summed modulo 2^b (0: the secagg part is off)', check=non_negative_int)
  clip_range: float = option(1.0, 'c, a power of two: the encodings\' range [−c, c), step c/2^(b−1); a client\'s coordinate outside it is clipped to it, a sum outside it wraps around', check=positive)
  dropout_threshold: int = option(0, 't: a round in which fewer than t cohort members deliver aggregates nothing (0: none)', check=non_negative_int)

  def validate(self) -> None:
    if self.bits == 0:
      self.refuse_set_while_off('bits')
      return
    if self.bits < 2:
      raise ConfigError(f'secagg.bits must be at least 2, got {self.bits}.')
    mantissa, _ = math.frexp(self.clip_range)
    if mantissa != 0.5:
      raise ConfigError(f'secagg.clip_range must be a power of two (a '
                        f'fixed-point range), got {self.clip_range}.')


def max_bits(cohort: int) -> int:
  """The most bits whose sum over `cohort` encodings stays exact in float32:
  cohort·2^(b−1) ≤ 2^24."""
  return 25 - math.ceil(math.log2(max(cohort, 1)))


class SecureSum(parts.Part):
  """The part (module docstring). On where `secagg.bits` > 0."""
  name = 'secagg'

  def __init__(self, options: SecaggOptions, *, cohort: int):
    if options.bits > max_bits(cohort):
      raise ConfigError(
          f'secagg.bits = {options.bits} with {cohort} clients a round: the '
          'sum of their encodings must stay below 2^24 to be exact in the '
          f'float32 segment sums; set secagg.bits ≤ {max_bits(cohort)}.')
    if options.dropout_threshold > cohort:
      raise ConfigError(
          f'secagg.dropout_threshold = {options.dropout_threshold} exceeds '
          f'the cohort ({cohort} clients): no round would aggregate.')
    self.options = options
    self.half = 2.0**(options.bits - 1)   # 2^(b−1)
    self.step = options.clip_range / self.half

  @classmethod
  def check(cls, method, config):
    SecaggOptions.from_config(config)
    return config

  @classmethod
  def build(cls, method, config, data) -> 'SecureSum | None':
    del method, data
    options = SecaggOptions.from_config(config)
    if options.bits == 0:
      return None
    return cls(options, cohort=int(config.clients_per_round))

  def facts(self) -> dict:
    """summary.json: the ring and its step."""
    return {'secagg': {'bits': self.options.bits,
                       'clip_range': self.options.clip_range,
                       'step': self.step,
                       'dropout_threshold': self.options.dropout_threshold}}

  def encode(self, term: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(q, clipped): float32 integers q = clip(round(term/s)) like `term`,
    and the int32 count of coordinates the clip changed."""
    q = jnp.round(term.astype(jnp.float32) / self.step)
    clipped = jnp.sum((q < -self.half) | (q > self.half - 1))
    return jnp.clip(q, -self.half, self.half - 1), clipped

  def upload(self, method, plan: ClientPlan,
             output: ClientOutput) -> ClientOutput:
    """Δ replaced by q·s/w (q the encoding of w·Δ; 0 where w = 0), the count
    of clipped coordinates in `output.parts['secagg']`."""
    del method
    weight = plan.active_weight()
    safe = jnp.where(weight > 0, weight, 1.0)
    leaves, tree = jax.tree.flatten(output.delta)
    encoded = [self.encode(leaf * weight) for leaf in leaves]
    sent = [jnp.where(weight > 0, q * self.step / safe, 0.0).astype(leaf.dtype)
            for leaf, (q, _) in zip(leaves, encoded)]
    clipped = sum(count for _, count in encoded).astype(jnp.float32)
    return output.replace(delta=jax.tree.unflatten(tree, sent),
                          parts={**(output.parts or {}), 'secagg': clipped})

  def decode(self, total: jax.Array) -> jax.Array:
    """A segment sum Σ q_n·s decoded from the ring: Q = round(total/s) mod 2^b
    as a signed integer, times s."""
    q = jnp.round(total / self.step)
    modulus = 2 * self.half
    wrapped = q - modulus * jnp.floor((q + self.half) / modulus)
    return (wrapped * self.step).astype(total.dtype)

  def release_sums(self, state, weights, sums):
    """The numerator decoded from the ring (`decode`); the denominator, the
    cohort's public weights, as it is."""
    del state, weights
    numerator, denominator = sums
    return jax.tree.map(self.decode, numerator), denominator

  def integer_sums(self, plans: ClientPlan, outputs: ClientOutput):
    """int32 leaves [S, ...]: Σ_n q_n per segment and coordinate, from the
    sums made in the map, or from the stacked uploads [K, ...] (the methods
    that stack them sum one segment)."""
    if outputs.delta_sums is not None:
      return jax.tree.map(
          lambda n: jnp.round(n / self.step).astype(jnp.int32),
          outputs.delta_sums[0])
    weight = plans.active_weight()

    def one_leaf(delta):
      w = weight.reshape(weight.shape + (1,) * (delta.ndim - 1))
      q = jnp.round(w * delta.astype(jnp.float32) / self.step)
      return jnp.sum(q.astype(jnp.int32), axis=0, keepdims=True)
    return jax.tree.map(one_leaf, outputs.delta)

  def wraps(self, plans: ClientPlan, outputs: ClientOutput) -> jax.Array:
    """int32: coordinates (per segment) whose integer sum leaves
    [−2^(b−1), 2^(b−1)), the ring's range."""
    half = int(self.half)
    return sum(jnp.sum((q < -half) | (q >= half))
               for q in jax.tree.leaves(self.integer_sums(plans, outputs)))

  def aborted(self, plans: ClientPlan) -> jax.Array:
    """bool: fewer than t cohort members deliver."""
    return jnp.sum(plans.delivers()) < self.options.dropout_threshold

  def finish(self, before: ServerState, after: ServerState,
             plans: ClientPlan, outputs) -> ServerState:
    """An aborted round leaves the server's params, optimiser state and the
    parts' state that moves from the release (`MOVED_BY_RELEASE`)."""
    del outputs
    if not self.options.dropout_threshold:
      return after
    aborted = self.aborted(plans)
    keep = lambda b, a: jax.tree.map(
        lambda x, y: jnp.where(aborted, x, y), b, a)
    moved = {name: keep(before.extras[name], after.extras[name])
             for name in MOVED_BY_RELEASE if name in (after.extras or {})}
    return after.replace(params=keep(before.params, after.params),
                         opt_state=keep(before.opt_state, after.opt_state),
                         extras={**after.extras, **moved} if moved
                         else after.extras)

  def metrics(self, metrics, plans, outputs):
    """`secagg_clipped`: coordinates of delivered terms clipped to the range;
    `secagg_wraps`: coordinates of the sum that wrapped around;
    `secagg_aborted`: 1 where the round fell below the dropout threshold."""
    clipped = jnp.sum(jnp.where(plans.delivers(), outputs.parts['secagg'], 0))
    return {**metrics, 'secagg_clipped': clipped,
            'secagg_wraps': self.wraps(plans, outputs).astype(jnp.float32),
            'secagg_aborted': self.aborted(plans).astype(jnp.float32)}
