"""Baselines of FedACS that reweight the received updates: c-a-FedAvg, FedNova, OS.

All three sample p = ω (OS: p ∝ ω‖U‖) and change only the aggregation
coefficient c_k of rule (3):

- c-a-FedAvg (communication-aware FedAvg, Perazzone et al.; Eq. (113)):
  c = (ω/π)/(1 − q_m). E[update] = −η₃ Σ ω_m Δ_m: fixes the statistical
  (link) distortion, not the structural one (Ω ∝ ω‖a‖₁). Calibrated lr
  η₃ = η₁ Σ ω(1 − q)‖a(η₁)‖₁ / Σ ω‖a(η₃)‖₁ (Eq. (113d)).
- FedNova (Wang et al. 2020; Eq. (116)): c = (ω/π) τ_eff/‖a_m‖₁ with
  τ_eff = Σ_m γ̃_m ‖a_m‖₁, γ̃ = ω(1 − q)/Σ ω(1 − q), from the round's q and
  ‖a‖₁ of all clients, so the expected step is FedAvg's (η₅ = η₁) and
  Ω ∝ ω(1 − q): fixes the structural distortion, not the statistical one.
  (FedNova's code normalises by the mean ‖a‖₁ of the received clients,
  `fedacs.fednova_tau='received'`; the expected-τ default is the one that
  reproduces Eq. (116) exactly, and `expected_weights` assumes it.)
- OS (optimal client sampling, Chen et al.; Eq. (20)): every client computes
  its update, the server draws K slots with replacement from
  p_m ∝ ω_m‖U_m‖ and aggregates (1/K) Σ_{received} (ω_m/p_m) U_m: unbiased
  for Σ ω(1 − q)U (Eq. (25)), so Ω is FedAvg's; lr η₁. Computation and
  communication are counted for the K draws only; the
  simulation trains all M clients each round. Not in cells
  (`hierarchy.*` is refused in one line): its draws follow the training of
  every client from the global model, so in cells each edge round would
  need its own draw among a cell's updates, which the method does not
  define.

c-a-FedAvg and FedNova run in cells (the family's rule (3) per cell,
`systems_aware`). Under client availability ω is ω^A, restricted to the
clients online and renormalised, in p, c, τ_eff and the calibration
(`systems_aware`); OS trains and draws among the clients online.
"""
import jax
import jax.numpy as jnp

from fedjax_het.methods.fedacs.systems_aware import FLAT_OPTION_GROUPS, \
    OnlineRound, SystemsAwareAlgorithm, fedavg_step_length
from fedjax_het.core import sampling
from fedjax_het.core.key_streams import Stream
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState, \
    round_key


def communication_aware_lr_scale(rnd: OnlineRound, fedavg_norm: jax.Array,
                                 a_norm: jax.Array) -> jax.Array:
  """η₃/η₁ = Σ ω(1 − q)‖a(η₁)‖₁ / Σ ω‖a(η₃)‖₁ (Eqs. (111), (113d); FedVarp's η₄ too)
  with ω^A (0 when nobody is online)."""
  work = rnd.weighted_sum(lambda omega: omega * a_norm)
  return (fedavg_step_length(rnd, fedavg_norm) /
          jnp.maximum(work, jnp.finfo(work.dtype).tiny))


class CaFedAvg(SystemsAwareAlgorithm):
  """c-a-FedAvg: received updates divided by their success probability."""

  name = 'ca_fedavg'
  display_name = 'c-a-FedAvg'
  divides_by_success = True

  def client_coefficients(self, state: ServerState,
                          rnd: OnlineRound) -> jax.Array:
    return super().client_coefficients(state, rnd) / (1 - rnd.failure_prob)

  def lr_scale(self, rnd: OnlineRound, a_norm: jax.Array) -> jax.Array:
    return communication_aware_lr_scale(rnd, self.fedavg_norms(rnd), a_norm)


class FedNova(SystemsAwareAlgorithm):
  """FedNova: updates normalised by ‖a_m‖₁ and rescaled by τ_eff (Eq. (116))."""

  name = 'fednova'
  display_name = 'FedNova'

  def client_coefficients(self, state: ServerState,
                          rnd: OnlineRound) -> jax.Array:
    a_norm = self.work_norms(rnd)
    success = lambda omega: omega * (1 - rnd.failure_prob)
    tau_eff = (rnd.weighted_sum(lambda w: success(w) * a_norm) /
               jnp.maximum(rnd.weighted_sum(success), 1e-30))
    return super().client_coefficients(state, rnd) * tau_eff / a_norm

  def slot_coefficients(self, state: ServerState, rnd: OnlineRound,
                        client_ids: jax.Array) -> jax.Array:
    """With fednova_tau='received': (ω/π)_k τ_r/‖a_k‖₁, τ_r the mean ‖a‖₁
    over the slots whose upload arrives (1 if none does)."""
    if self.options.fednova_tau == 'expected':
      return super().slot_coefficients(state, rnd, client_ids)
    a_norm = self.work_norms(rnd)[client_ids]
    received = rnd.link_up[client_ids].astype(jnp.float32)
    tau = jnp.sum(received * a_norm) / jnp.maximum(jnp.sum(received), 1.0)
    importance = SystemsAwareAlgorithm.client_coefficients(self, state, rnd)
    return importance[client_ids] * tau / a_norm


class OptimalSampling(SystemsAwareAlgorithm):
  """OS: K draws ∝ ω‖U‖ after local training, importance-weighted (Eq. (20))."""

  name = 'os'
  display_name = 'OS'
  # Not in cells (module docstring), nor under secure aggregation.
  option_groups = tuple(g for g in FLAT_OPTION_GROUPS if g.key != 'secagg')
  unread_sections = {'secagg': 'its weights follow from every client\'s '
                               'update norm, which secure aggregation hides'}
  participations = ('with_replacement',)

  def __init__(self, config, model, data):
    super().__init__(config, model, data)
    self.cohort_size = self.num_clients  # every client computes U_m

  def sample_clients(self, state: ServerState, key: jax.Array) -> jax.Array:
    del state, key
    return jnp.arange(self.num_clients, dtype=jnp.int32)

  def slot_coefficients(self, state: ServerState, rnd: OnlineRound,
                        client_ids: jax.Array) -> jax.Array:
    """Placeholder 1: the coefficients ω/p follow from the updates."""
    del state, rnd
    return jnp.ones(client_ids.shape, jnp.float32)

  def slot_weights(self, state: ServerState, plans: ClientPlan,
                   outputs: ClientOutput) -> tuple[jax.Array, jax.Array]:
    """Draws K slots from p ∝ ω^A‖U‖ (the clients online); weight
    n_m Z_m ω^A_m/p_m, copies n_m. An offline client's slot is idle (no
    steps, ‖U‖ = 0), so p ∝ ω‖U‖ is p ∝ ω^A‖U‖, and ω^A/p = (ω/p)·scale."""
    rnd = self.systems(state)
    squares = jax.tree.map(
        lambda d: jnp.sum(jnp.square(d.reshape(d.shape[0], -1)), axis=1),
        outputs.delta)
    norms = jnp.sqrt(sum(jax.tree.leaves(squares)))
    scores = self.omega * norms
    total = jnp.sum(scores)
    probs = jnp.where(total > 0, scores / jnp.where(total > 0, total, 1.0),
                      rnd.omega)
    draws = sampling.with_replacement(
        round_key(state, Stream.SELECTION), probs, self.num_draws)
    copies = jnp.zeros((self.num_clients,), jnp.float32).at[draws].add(1.0)
    importance = jnp.where(probs > 0,
                           self.omega / jnp.where(probs > 0, probs, 1.0), 0.0)
    importance = importance * rnd.scale
    return copies * plans.extras['link_up'] * importance, copies

  def expected_weights(self, state: ServerState,
                       rnd: OnlineRound) -> jax.Array:
    """ω^A_m (1 − q_m), whatever the norms (Eq. (25b))."""
    del state
    return rnd.omega * (1 - rnd.failure_prob)
