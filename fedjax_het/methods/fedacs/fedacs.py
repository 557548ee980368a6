"""FedACS: heterogeneity-aware client sampling (Weng, Ren, Xiao, Skoglund).

Clients whose uploads often fail (q_m large) or who do little local work
(‖a_m‖₁ small) are under-represented in FedAvg's expected update. FedACS
corrects this by the sampling distribution alone, recomputed every round from
the round's q^(r) and ‖a^(r)‖₁ of all M clients (Eq. (15), Alg. 1):

    p_m^(r) = [ω_m / ((1 − q_m^(r))‖a_m^(r)‖₁)] / Σ_j ω_j / ((1 − q_j^(r))‖a_j^(r)‖₁),

K draws with replacement, and the plain anonymous rule (3)
X ← X + (1/K) Σ_{received} U_m (no reweighting, no client identities). Then
E[update] = −η Σ_m ω_m ∇F̄_m / Σ_j ω_j/((1 − q_j)‖a_j‖₁) (Eq. (16)): the
surrogate objective is the true one in every round, static or dynamic.

Calibration (App. I.2, Eq. (112)): η₂ = η₁ Σ ω(1 − q)‖a(η₁)‖₁ · Σ ω/((1 − q)‖a(η₂)‖₁),
so FedACS's expected step equals FedAvg's (FedAvg's ‖a‖₁ at its rate η₁,
FedACS's at η₂, which p also uses).

Under client availability ω is ω^A, restricted to the clients online and
renormalised, in p and in both sums of η₂ (`systems_aware`): Eq. (16) then
holds given who is online, for Σ_{A_r} ω_m ∇F̄_m / Σ_{A_r} ω_m.
"""
import jax
import jax.numpy as jnp

from fedjax_het.methods.fedacs.systems_aware import OnlineRound, \
    SystemsAwareAlgorithm, fedavg_step_length
from fedjax_het.core.state import ServerState


class FedACS(SystemsAwareAlgorithm):
  """Samples ∝ ω/((1 − q)‖a‖₁) (Eq. (15)) and aggregates by rule (3)."""

  name = 'fedacs'
  display_name = 'FedACS'
  participations = ('with_replacement',)
  divides_by_success = True

  def inverse_effort(self, rnd: OnlineRound, a_norm: jax.Array | None = None,
                     omega: jax.Array | None = None) -> jax.Array:
    """ω_m / ((1 − q_m)‖a_m‖₁), the unnormalised Eq. (15), with ‖a‖₁
    `a_norm` (default: at the clients' rate) and ω `omega` (default ω^A,
    the clients online). [M]."""
    a_norm = self.work_norms(rnd) if a_norm is None else a_norm
    omega = rnd.omega if omega is None else omega
    return omega / ((1 - rnd.failure_prob) * a_norm)

  def sampling_probs(self, rnd: OnlineRound) -> jax.Array:
    """Eq. (15) among the clients online (0 offline; all 0 when nobody is)."""
    a_norm = self.work_norms(rnd)
    total = rnd.weighted_sum(lambda w: self.inverse_effort(rnd, a_norm, w))
    return (self.inverse_effort(rnd, a_norm) /
            jnp.maximum(total, jnp.finfo(total.dtype).tiny))

  def client_coefficients(self, state: ServerState,
                          rnd: OnlineRound) -> jax.Array:
    """1 for every client: rule (3) as is; all correction is in p."""
    del state
    return jnp.ones((self.num_clients,), jnp.float32)

  def lr_scale(self, rnd: OnlineRound, a_norm: jax.Array) -> jax.Array:
    """η₂/η₁ = Σ ω(1 − q)‖a(η₁)‖₁ · Σ ω/((1 − q)‖a(η₂)‖₁) (Eqs. (111), (112))."""
    return (fedavg_step_length(rnd, self.fedavg_norms(rnd)) *
            rnd.weighted_sum(lambda w: self.inverse_effort(rnd, a_norm, w)))


# The paper's methods: FedACS, then its baselines in Table 1's order.
FEDACS_FAMILY = ('fedacs', 'fedavg_het', 'ca_fedavg', 'fedvarp', 'fednova',
                 'fedau', 'os')
