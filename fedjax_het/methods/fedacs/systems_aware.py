"""Federated methods on heterogeneous systems: the shared mechanism of the FedACS family.

Every round the heterogeneity simulator (`fedjax_het.parts.links_work`)
gives each client m an upload failure probability q_m, local work T_m (hence
local steps and the accumulation norm ‖a_m‖₁ of its solver) and a link
outcome Z_m ~ Bernoulli(1 − q_m). A method is then two small pure functions,
a sampling rule and an aggregation weighting, on one aggregation rule.

Sampling (`fedacs.participation`, FedACS App. B.1):
  with_replacement: K i.i.d. draws S_r from the method's probabilities p
    (default p = ω; a client may be drawn several times and trains once per
    draw, with its own minibatches);
  uniform: K distinct clients uniformly (the US scheme, Eq. (19));
  full: all M clients (Eq. (21)).

Aggregation (Eq. (3) generalised): with c_k the method's coefficient of
slot k,

    X_{r+1} = X_r + (1/K) Σ_{k ∈ S_r} Z_{m_k} c_k U_{m_k},   U = −ηΔ,

divided by the number of draws K, not by the number received (an empty
receive set leaves X unchanged). The default coefficient is the importance
weight c = ω_m/π_m with π_m = E[draws of m]/K (π = p with replacement, 1/M
otherwise), which makes IS (p = ω, c = 1, Eq. (18)), US (c = Mω, Eq. (19)
with |S_r| as in its derivation (24a)) and full participation
(Eq. (21)) one rule. In expectation each rule moves by Σ_m e_m U_m with
e_m = π_m (1 − q_m) c_m (`expected_weights`), so plain FedAvg minimises the
surrogate Σ Ω_m F_m with Ω_m ∝ ω_m (1 − q_m) ‖a_m‖₁ (Eq. (6)) instead of
Σ ω_m F_m.

The importance ω_m of client m is `aggregation_weights`: 'examples' (ω ∝
examples held, the paper's DNN runs) or 'uniform' (ω = 1/M, its
toy problems). `client_sampling` is not used by this family.

Step-length calibration (App. I.2, `fedacs.calibrate`): every round the
client learning rate is set to η₁·`lr_scale` so that the method's expected
step η_eff·T_eff equals FedAvg's with the configured lr η₁,
η₁ Σ ω_m (1 − q_m)‖a_m(η₁)‖₁ (Eq. (111)), computed from the round's q and T
of all M clients (the server knows them, Alg. 1). The method's own ‖a‖₁ (its
sampling, coefficients and calibration) is taken at the rate its clients run,
η₂ = η₁·lr_scale(η₂): with a proximal solver ‖a‖₁ = [1 − (1 − ημ)^S]/(ημ)
depends on η, so η₂ is the fixed point of η ← η₁·lr_scale(η) from η₁
(`CALIBRATION_ITERATIONS`; SGD and momentum norms do not depend on η and the
first iterate is exact).

Local solvers: SGD, heavy-ball momentum (`client_momentum`), FedProx's
proximal SGD (`fedacs.prox_mu`) or SGD whose learning rate decays within the
round (`fedacs.lr_decay` = d: local step t = 0, 1, … runs at η(1 − d)^t, the
paper's toy solver of Fig. 4 read as a geometric per-step decay); their ‖a‖₁
is in `fedjax_het.parts.local_work` (decayed: a_t = η_t/η,
‖a‖₁ = [1 − (1 − d)^S]/d).

Each round logs, besides the train loss: `uploads` (updates received),
`bytes_up` (uploads × model bytes: communication cost), `bytes_down`,
`local_steps` (Σ local steps of the sampled clients, including those whose
upload fails: the computation load) and `examples`; the trainer keeps their
running totals (the cost to reach a target accuracy).

Availability (`systems.availability`, `fedjax_het.parts.availability`): in
round r only the clients online, A_r, can be drawn. Every rule is then the
same rule on the clients online, with the importance restricted to them and
renormalised (`online_importance`),

    ω_m^A = ω_m 1[m ∈ A_r] / Σ_{j ∈ A_r} ω_j,

in place of ω everywhere a round reads it (p, c, the calibration; ω^A = ω
when every client is online): IS draws p = ω^A, FedACS p ∝ ω^A/((1 − q)‖a‖₁),
US K distinct clients of A_r uniformly, full participation every client of
A_r. The inclusion π_m = E[draws of m | A_r]/K is p_m with replacement and
1[m ∈ A_r]/max(|A_r|, K) without (each online client is drawn once when
fewer than K are online, and the other slots stay idle: no steps, no upload,
as FedAvg's), so c = ω^A/π (0 offline) keeps rule (3), still divided by K,
unbiased given who is online:

    E[(1/K) Σ_k Z_k c_k U_k | A_r] = Σ_{m ∈ A_r} ω_m (1 − q_m) U_m / Σ_{j ∈ A_r} ω_j

for IS, US and full participation (the other methods' e_m likewise with ω^A,
`expected_weights` given A_r). The target is the global objective's weights
among the clients who can participate, at FedAvg's step length: the server
cannot weigh an offline client's update, and the unnormalised
Σ_{A_r} ω_m U_m would only shorten the step by the share of ω online. A
client's share over rounds still leans toward the clients online more often;
that statistical distortion is what FedAU's intervals remove (`fedau`: its
weights keep ω, and an offline round counts as a round without
participation). Nobody online: no slot is active and X stays.

Cells (`config.hierarchy`, `fedjax_het.parts.cells`, HIST's topology): with
more than one cell or edge round, or the AirComp edge channel, the K draws
are grouped by cell as FedAvg's cohort is (client m's cell is its block of
`hierarchy.cell_sizes`), and each cell j runs E edge rounds of rule (3)
restricted to its K_j draws: from its edge model x̄_j,

    x̄_j ← x̄_j − (1/K_j) Σ_{k∈j} Z_{m_k} c_k Δ_k      (e = 0..E−1),

with the flat round's link outcomes Z (one per global round, every edge
round), coefficients c, calibrated lr and local work T; the cloud weighs the
cells by their draws, X ← X − η_s Σ_j (K_j/K)(X − x̄_j^E) (the 'draws' edge
rule; `hierarchy.cloud_weights` is not read). With E = 1 and OMA this is
flat rule (3); under AirComp the edge sums go over the air as FedAvg's. The
proximal term of `fedacs.prox_mu` pulls towards the client's start model
(its edge model). Bytes, uploads and local steps count E exchanges per draw.
FedVarp, FedAU and OS do not list the part, so `hierarchy.*` is refused
for them in one line (their modules say why).
"""
import dataclasses
from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
import ml_collections

from fedjax_het.methods.base import FederatedAlgorithm
from fedjax_het.methods.common.accounting import mean_over_active, \
    payload_bytes
from fedjax_het.core import aggregation, program, sampling
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState, \
    StepContext
from fedjax_het.options import (ConfigError, OptionGroup, in_range, is_bool,
                                non_negative, option, positive_int)
from fedjax_het.parts import cells as cells_lib
from fedjax_het.parts import dp as dp_lib
from fedjax_het.parts import secagg as secagg_lib
from fedjax_het.parts import links_work, local_work

PyTree = Any
PARTICIPATIONS = ('with_replacement', 'uniform', 'full')
# Fixed-point iterations of the calibrated lr under a proximal solver; each
# changes η by a factor ~η·μ·S/2 of the previous change (≪ 1 in the paper's
# settings), so the iterate has converged to float32 long before.
CALIBRATION_ITERATIONS = 8


def _fedvarp_form(key: str, value) -> None:
  if value not in ('paper', 'saga'):
    raise ConfigError(f'{key} must be paper or saga, got {value!r}.')


@dataclasses.dataclass(frozen=True)
class FedAcsOptions(OptionGroup):
  """`config.fedacs`: the FedACS family's participation, calibration and solvers."""
  key = 'fedacs'
  participation: str = option(
      'with_replacement', 'with_replacement: K draws from the method\'s p, '
      'rule (3); uniform: K distinct clients, rule (19); full: all M clients, '
      'rule (21) (client_sampling is unused)', choices=PARTICIPATIONS)
  calibrate: bool = option(True, 'App. I.2: per-round client lr giving '
                           'FedAvg\'s expected step length', check=is_bool)
  prox_mu: float = option(0.0, 'FedProx local solver ½μ‖x − X‖² (0: plain '
                          'SGD)', check=non_negative)
  lr_decay: float = option(0.0, 'decayed-lr SGD: local step t = 0, 1, … of a '
                           'round runs at lr·(1 − lr_decay)^t (0: constant lr)',
                           check=in_range(0, 1, closed_high=False))
  fedvarp_form: str = option('paper', 'FedVarp: stale updates fill failed '
                             'uploads (paper, Eq. (114)) or the original '
                             'SAGA form (saga)', check=_fedvarp_form)
  fednova_tau: str = option(
      'expected', "FedNova's τ_eff: Σ_m γ̃_m‖a_m‖₁ over all M clients "
      '(expected, Eq. (116) exactly) or the mean ‖a‖₁ of the updates '
      'received this round (received, FedNova\'s code)',
      choices=('expected', 'received'))
  fedau_cutoff: int = option(100000, 'FedAU: longest participation interval '
                             'recorded (rounds)', check=positive_int)


# The family's sections without the cells part (FedVarp, FedAU, OS), with
# the dp part's (`parts.dp`; FedVarp leaves it out) and the secagg part's
# (`parts.secagg`; FedVarp and OS leave it out).
FLAT_OPTION_GROUPS = (links_work.SystemsOptions, FedAcsOptions,
                      dp_lib.DPOptions, secagg_lib.SecaggOptions)


@flax.struct.dataclass
class OnlineRound(links_work.SystemsRound):
  """The links-and-work draws of a round with who can be drawn in it.

  Attributes (besides `SystemsRound`'s):
    online: bool [M], A_r: the clients online (all of them without the
      availability part).
    importance: float32 [M], ω of all M clients.
    scale: float32 [], Σ_m ω_m / Σ_{m ∈ A_r} ω_m (exactly 1 with every client
      online, from the integer importances as Σ r / Σ_A r; 0 when nobody is
      online).
  """
  online: jax.Array
  importance: jax.Array
  scale: jax.Array

  @property
  def omega(self) -> jax.Array:
    """ω^A [M]: ω restricted to the clients online and renormalised (0
    offline, all 0 when nobody is online); ω itself, to the bit, with every
    client online."""
    return jnp.where(self.online, self.importance * self.scale, 0.0)

  def weighted_sum(self, summand: Callable[[jax.Array], jax.Array]
                   ) -> jax.Array:
    """Σ_m summand(ω^A)_m for a `summand` linear in ω (e.g. ω(1 − q)‖a‖₁),
    as (Σ_m summand(ω)_m − Σ_{m ∉ A_r} summand(ω)_m)·scale: with every client
    online it is the run without availability's Σ_m summand(ω)_m to the bit,
    whose terms of static q and T XLA folds at compile time."""
    terms = summand(self.importance)
    offline = jnp.sum(jnp.where(self.online, 0.0, terms))
    return (jnp.sum(terms) - offline) * self.scale


def fedavg_step_length(rnd: OnlineRound, a_norm: jax.Array) -> jax.Array:
  """FedAvg's expected step per unit lr, η_eff·T_eff/η₁ = Σ ω(1 − q)‖a‖₁
  (Eq. (111)), with ω^A (the clients online)."""
  return rnd.weighted_sum(lambda omega: omega * (1 - rnd.failure_prob) * a_norm)


class SystemsAwareAlgorithm(FederatedAlgorithm):
  """Shared mechanism of the FedACS family; see the module docstring.

  Subclasses override `sampling_probs` (the sampling rule),
  `client_coefficients` or `slot_coefficients` (the aggregation weighting),
  `lr_scale` (their calibration) and `expected_weights` (the E[update]
  weights the sampling and weighting imply); stateful methods extend
  `init_clients`, `pseudo_gradient` and `next_clients`. The family's
  per-client state (`ServerState.clients`: FedVarp's memory, FedAU's
  intervals) is the server's own; clients never see it.
  """

  name = 'systems_aware'
  display_name = 'systems-aware'
  # Participation schemes the method is defined for.
  participations = PARTICIPATIONS
  # The systems part, the family's options and the cells part, where each
  # cell runs rule (3) on its draws (the 'draws' edge rule).
  option_groups = FLAT_OPTION_GROUPS + (cells_lib.HierarchyOptions,)
  edge_rule = 'draws'
  per_round_metrics = cells_lib.PER_ROUND_METRICS
  # Its sampling, weights and calibration read q and T every round
  # (`systems`, the links-and-work part's draws).
  reads_draws = True
  # Its samplers draw among the clients online, with ω restricted to them
  # (module docstring, `systems`).
  samples_available_clients = True

  def __init__(self, config: ml_collections.ConfigDict, model, data):
    self.options = FedAcsOptions.from_config(config)
    super().__init__(config, model, data)
    self._check_options(config)
    m = self.num_clients
    self.full_participation = self.options.participation == 'full'
    # K of rule (3): the number of draws (all M clients with full participation).
    self.num_draws = m if self.full_participation else int(
        config.clients_per_round)
    self.cohort_size = self.num_draws
    if config.aggregation_weights == 'examples':
      self.omega = self.client_counts / jnp.sum(self.client_counts)
    else:
      self.omega = jnp.full((m,), 1 / m, jnp.float32)
    # r [M], integers with ω = r/Σr (`OnlineRound.scale`).
    self.raw_importance = (self.client_counts
                           if config.aggregation_weights == 'examples' else
                           jnp.ones((m,), jnp.int32))

  def _check_options(self, config: ml_collections.ConfigDict) -> None:
    options = self.options
    if options.participation not in self.participations:
      raise ValueError(
          f'{self.name} is defined for fedacs.participation in '
          f'{", ".join(self.participations)}, got {options.participation!r}.')
    if config.client_weight_decay:
      raise ValueError(
          f'{self.name} needs the local solver\'s ‖a‖₁, which is defined for '
          'SGD, momentum, fedacs.prox_mu and fedacs.lr_decay but not '
          'client_weight_decay.')
    local_work.accumulation_norm(1, config.client_lr,
                                 momentum=config.client_momentum,
                                 prox_mu=options.prox_mu,
                                 lr_decay=options.lr_decay)

  # ---- systems -------------------------------------------------------------
  def systems(self, state: ServerState) -> OnlineRound:
    """q, T, steps and link outcomes of all clients in round `state.round`
    (the links-and-work part's draws: the same in every phase of a round),
    the clients online A_r and ω^A (module docstring)."""
    draws = self.parts.draws(state)[links_work.LinksWork.name]
    online = self.parts.online(state)
    if online is None:
      online = jnp.ones((self.num_clients,), bool)
    raw_online = jnp.sum(jnp.where(online, self.raw_importance, 0))
    scale = jnp.where(raw_online > 0, jnp.sum(self.raw_importance) /
                      jnp.maximum(raw_online, 1), 0.0)
    return OnlineRound(
        **{f.name: getattr(draws, f.name)
           for f in dataclasses.fields(links_work.SystemsRound)},
        online=online, importance=self.omega, scale=scale.astype(jnp.float32))

  def program_client_state(self, state: ServerState,
                           plans: ClientPlan) -> PyTree:
    del state, plans
    return None

  def work_norms(self, rnd: OnlineRound,
                 lr: jax.Array | float | None = None) -> jax.Array:
    """‖a_m‖₁ of every client's local solver this round at `lr` (default:
    the rate the clients run, `client_lr(rnd)`). [M]."""
    return local_work.accumulation_norm(
        rnd.steps, self.client_lr(rnd) if lr is None else lr,
        momentum=self.config.client_momentum, prox_mu=self.options.prox_mu,
        lr_decay=self.options.lr_decay)

  def fedavg_norms(self, rnd: OnlineRound) -> jax.Array:
    """‖a_m‖₁ at η₁: FedAvg's, the reference of the calibration. [M]."""
    return self.work_norms(rnd, self.config.client_lr)

  # ---- the sampling rule ---------------------------------------------------
  def sampling_probs(self, rnd: OnlineRound) -> jax.Array:
    """p of the K draws with replacement, 0 offline (IS: p = ω^A). float32 [M]."""
    return rnd.omega

  def inclusion(self, rnd: OnlineRound) -> jax.Array:
    """π_m = E[number of draws of m | A_r]/K under the participation scheme:
    p_m with replacement, else 1[m ∈ A_r]/max(|A_r|, K) (1/M with every
    client online). [M]."""
    if self.options.participation == 'with_replacement':
      return self.sampling_probs(rnd)
    online = jnp.sum(rnd.online.astype(jnp.int32))
    return (jnp.where(rnd.online, 1.0, 0.0) /
            jnp.maximum(online, self.num_draws)).astype(jnp.float32)

  def sample_clients(self, state: ServerState, key: jax.Array) -> jax.Array:
    """All M clients (full), K distinct of the online ones uniformly, the
    online first (`uniform_among`: with every client online the uniform
    draw without replacement, slot for slot), or K draws from p (0
    offline). An offline client in a slot leaves it idle (the
    availability part's `adjust`)."""
    if self.full_participation:
      return jnp.arange(self.num_clients, dtype=jnp.int32)
    rnd = self.systems(state)
    if self.options.participation == 'uniform':
      return sampling.uniform_among(key, rnd.online, self.num_draws)
    return sampling.with_replacement(key, self.sampling_probs(rnd),
                                     self.num_draws)

  # ---- the aggregation weighting -------------------------------------------
  def client_coefficients(self, state: ServerState,
                          rnd: OnlineRound) -> jax.Array:
    """c_m of a slot holding client m: the importance weight ω^A_m/π_m (0
    where π_m = 0: offline, or never drawn). [M]."""
    del state
    pi = self.inclusion(rnd)
    return jnp.where(pi > 0, rnd.omega / jnp.where(pi > 0, pi, 1.0), 0.0)

  def slot_coefficients(self, state: ServerState,
                        rnd: OnlineRound,
                        client_ids: jax.Array) -> jax.Array:
    """c_k of every slot of the cohort. float32 [C]."""
    return self.client_coefficients(state, rnd)[client_ids]

  def expected_weights(self, state: ServerState,
                       rnd: OnlineRound) -> jax.Array:
    """e [M] with E[(1/K) Σ_k Z_k c_k Δ_k | A_r] = Σ_m e_m Δ_m (fixed Δ_m),
    given the round's online clients A_r.

    e_m = π_m (1 − q_m) c_m; for a quadratic its mean over rounds fixes the
    iterate's stationary mean.
    """
    return (self.inclusion(rnd) * (1 - rnd.failure_prob) *
            self.client_coefficients(state, rnd))

  def lr_scale(self, rnd: OnlineRound,
               a_norm: jax.Array) -> jax.Array:
    """η_method/η₁ of the step-length calibration (1: FedAvg, App. I.2),
    given the method's ‖a‖₁ at its own rate (`a_norm` [M]); FedAvg's
    reference is at η₁ (`fedavg_norms`)."""
    del rnd, a_norm
    return jnp.ones((), jnp.float32)

  def client_lr(self, rnd: OnlineRound) -> jax.Array:
    """The clients' lr: η₁, or calibrated, the fixed point η₂ = η₁·lr_scale
    with ‖a‖₁ at η₂ (module docstring)."""
    base = jnp.asarray(self.config.client_lr, jnp.float32)
    if not self.options.calibrate:
      return base
    lr = base
    for _ in range(CALIBRATION_ITERATIONS if self.options.prox_mu else 1):
      lr = base * self.lr_scale(rnd, self.work_norms(rnd, lr))
    return lr

  def plan_clients(self, state: ServerState, client_ids: jax.Array,
                   keys: jax.Array) -> ClientPlan:
    """Each slot's lr and coefficient c_k; the parts then set its steps T_m
    and weight c_k Z_m (links and work) and leave an offline slot idle
    (availability)."""
    rnd = self.systems(state)
    k = client_ids.shape[0]
    coefficient = self.slot_coefficients(state, rnd, client_ids)
    plans = self.new_plans(
        client_ids, keys,
        num_steps=rnd.steps[client_ids],
        lr=jnp.full((k,), self.client_lr(rnd), jnp.float32),
        weight=coefficient,
        extras={'link_up': rnd.link_up[client_ids].astype(jnp.float32),
                'coefficient': coefficient})
    return self.parts.adjust(state, plans)

  # ---- local solver --------------------------------------------------------
  def client_optimizer(self) -> program.OptimizerFactory:
    """SGD with `client_momentum`, its rate decayed per local step by
    `fedacs.lr_decay` (client_weight_decay is refused, `_check_options`)."""
    return program.sgd_factory(self.config.client_momentum,
                               lr_decay=self.options.lr_decay)

  # ---- local objective -----------------------------------------------------
  def data_loss(self, params: PyTree, x: jax.Array, y: jax.Array,
                plan: ClientPlan, ctx: StepContext) -> jax.Array:
    """F_m on a batch: the base class's cross-entropy (toy objectives override it)."""
    return super().loss(params, x, y, plan, ctx)

  def loss(self, params: PyTree, x: jax.Array, y: jax.Array,
           plan: ClientPlan, ctx: StepContext) -> jax.Array:
    """The data loss plus FedProx's ½μ‖x − X‖² when `fedacs.prox_mu` > 0."""
    loss = self.data_loss(params, x, y, plan, ctx)
    mu = self.options.prox_mu
    if not mu:
      return loss
    squares = jax.tree.map(lambda p, g: jnp.sum(jnp.square(p - g)), params,
                           ctx.global_params)
    return loss + 0.5 * mu * sum(jax.tree.leaves(squares))

  # ---- aggregation ---------------------------------------------------------
  def slot_weights(self, state: ServerState, plans: ClientPlan,
                   outputs: ClientOutput) -> tuple[jax.Array, jax.Array]:
    """(w [C], copies [C]): each computed slot's weight Z·c in rule (3) and
    how many of the K draws it stands for (1 unless selection follows
    training, as in OS)."""
    del state, outputs
    return plans.weight, jnp.ones_like(plans.weight)

  def pseudo_gradient(self, state: ServerState, plans: ClientPlan,
                      outputs: ClientOutput) -> PyTree:
    """Rule (3): (1/K) Σ_k w_k Δ_k over the K draws (not over the number of
    updates received): the weighted segment sum, as the parts release it
    (`Parts.release_sums`: DP's noise), times `update_scale`. In
    cells: Σ_j (K_j/K)(X − x̄_j^E), the cloud over the cells' rule-(3) edge
    models (module docstring; `segment_pseudo_gradient`)."""
    if self.parts.owner('combine') is not None:   # in cells
      return self.segment_pseudo_gradient(state, plans, outputs)
    weights, _ = self.slot_weights(state, plans, outputs)
    weights = weights * plans.is_active()
    sums, _ = self.parts.release_sums(state, weights, aggregation.segment_sums(
        outputs.delta, weights, plans.group, 1, plans.client_masks()))
    scale = self.update_scale()
    return jax.tree.map(lambda s: (s[0] * scale).astype(s.dtype), sums)

  def update_scale(self) -> float:
    """The factor of Σ_k w_k Δ_k in the pseudo-gradient: 1/K (rule (3))."""
    return 1 / self.num_draws

  def aggregate(self, state: ServerState, plans: ClientPlan,
                outputs: ClientOutput) -> ServerState:
    params, opt_state = self.server_step(
        state, self.pseudo_gradient(state, plans, outputs))
    return state.replace(params=params, opt_state=opt_state,
                         clients=self.next_clients(state, plans, outputs))

  def round_metrics(self, state: ServerState, plans: ClientPlan,
                    outputs: ClientOutput) -> dict[str, jax.Array]:
    _, copies = self.slot_weights(state, plans, outputs)
    active = plans.is_active()
    copies = copies * active  # idle slots exchange and compute nothing
    uploads = copies * plans.extras['link_up']
    model_bytes = payload_bytes(state.params)
    return {
        'train_loss': mean_over_active(outputs.loss, active),
        'examples': jnp.sum(copies * outputs.num_examples),
        'local_steps': jnp.sum(copies * plans.num_steps),
        'uploads': jnp.sum(uploads),
        'bytes_down': jnp.sum(copies) * model_bytes,
        'bytes_up': jnp.sum(uploads) * model_bytes,
    }


class FedAvgHet(SystemsAwareAlgorithm):
  """FedAvg on heterogeneous systems (FedACS App. B.1, Eqs. (18), (19), (21)).

  Samples p = ω and aggregates the received updates with the importance
  weight (1 with replacement), unaware of q and T, so it minimises the
  surrogate Ω_m ∝ ω_m (1 − q_m)‖a_m‖₁: it is biased toward reliable,
  hard-working clients (Example 1, Eq. (4)). With q ≡ 0 and equal T it is the
  engine's FedAvg (with-replacement ∝ examples and uniform weights, or
  uniform without replacement with ω = 1/M).
  """

  name = 'fedavg_het'
  display_name = 'FedAvg'
