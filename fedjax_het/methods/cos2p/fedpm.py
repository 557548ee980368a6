"""FedPM (Isik et al., ICLR 2023, "Sparse Random Networks for
Communication-Efficient Federated Learning") on the ViT engine of Co-S²P's
baselines (`vit_engine`), with structured masks (Co-S²P's baselines, Tabs.
1–2: "all unstructured baselines were switched to structured pruning").

The weights never train: the model is the run's initial params (a random
init, or the checkpoint of `init_params_file`), and the server's state is a
keep probability θ per unit (MSA head, attention-projection row, fc1 row,
fc2 row of every block; `models.vit`), kept in `ServerState.extras['p']`
{kind: [L, U]}. Synchronous rounds at the clock's defaults (μ = 1,
T_clk = 0), full depth.

Client n (Sec. 3 of the paper):

1. starts from scores s = logit(clip(θ, ε, 1 − ε)) (`clip`),
2. trains s for E epochs with M ~ Bern(σ(s)) and the straight-through
   gradient (`budget_masks.straight_through`, `cos2p.ste`) on Co-S²P's mask
   loss (`budget_masks`) CE(deepest exit) + λ1·|kept fraction − R_w| (Eq. 2
   of Co-S²P; λ1 = `cos2p.lambda_budget`, R_w = √R_n): FedPM itself has no budget — its
   sparsity emerges — and this penalty is our reading of the spec's "same
   per-client budget R_n" (λ1 = 0 is FedPM as published),
3. uploads one sample M_n ~ Bern(σ(s_end)) (1 bit per unit).

The server's Bayesian aggregation (Sec. 3.2), per unit:

    α ← α + Σ_n M_n,   β ← β + Σ_n (1 − M_n)   (the round's arrived clients),
    θ = (α − 1) / (α + β − 2)  (`posterior='mode'`, the authors' code)
        or α / (α + β)          (`posterior='mean'`),

with α, β reset to the prior λ0 (`prior`, 1 in the paper) before the update
of every round q with q mod `reset_every` = 0 (the authors' code resets
every round, `reset_every=1`; 0 never resets). A round with no arrival
keeps θ where the mode is undefined.

Evaluation: the initial weights under a mask drawn from θ (`eval_mask=
'sample'`, one Bernoulli draw per evaluation, keyed by the round) or
θ > ½ ('threshold'); both are in the authors' code.

Clock: a client's round costs its S_n steps (E epochs, or its unequal work
`systems.local_work`) of forward + activation backward of
the full-width model (no weight gradients; `vit_cost.client_cost`'s
mask FLOPs, as Co-S²P's mask phase) plus 32 bits down and 1 bit up per
unit on the link.
"""
import dataclasses

import jax
import jax.numpy as jnp

from fedjax_het import optim
from fedjax_het.methods.cos2p import masked_eval
from fedjax_het.methods.cos2p.budget_masks import BudgetMasks
from fedjax_het.methods.cos2p.vit_engine import (WITHOUT_COS2P, then)
from fedjax_het.core import key_streams, program
from fedjax_het.core.key_streams import Stream
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState, \
    round_key
from fedjax_het.models import vit
from fedjax_het.options import (ConfigError, OptionGroup, in_range,
                                non_negative_int, option, positive)
from fedjax_het.systems import vit_cost


@dataclasses.dataclass(frozen=True)
class FedPMOptions(OptionGroup):
  """`config.fedpm`: FedPM's score training and Bayesian aggregation."""
  key = 'fedpm'
  score_lr: float = option(0.1, 'learning rate of the mask scores (Adan, as Co-S²P\'s mask phase; the paper: Adam, 0.1)', check=positive)
  posterior: str = option('mode', 'θ from the Beta posterior: mode (α−1)/(α+β−2) (authors\' code) | mean α/(α+β)', choices=('mode', 'mean'))
  prior: float = option(1.0, 'λ0: the Beta prior α = β = λ0 after a reset', check=positive)
  reset_every: int = option(1, 'reset α, β to the prior before the update of every k-th round (1: every round, the authors\' code; 0: never)', check=non_negative_int)
  clip: float = option(0.01, 'ε: the clients start from logit(clip(θ, ε, 1−ε))', check=in_range(0, 0.5, closed_low=False, closed_high=False))
  eval_mask: str = option('sample', 'the evaluated mask: sample (M ~ Bern(θ)) | threshold (θ > ½)', choices=('sample', 'threshold'))

  def validate(self) -> None:
    if self.posterior == 'mode' and self.prior < 1:
      raise ConfigError(f'fedpm.posterior=mode needs fedpm.prior ≥ 1 (the '
                        f'Beta mode is undefined below), got {self.prior!r}.')


def posterior_update(extras: dict, masks: dict, active: jax.Array,
                     reset: jax.Array, prior: float, posterior: str) -> dict:
  """One round of Bayesian aggregation (module docstring).

  Args:
    extras: {'alpha', 'beta', 'p'}, each {kind: [L, U]}.
    masks: the uploaded masks {kind: [N, L, U]} (0/1).
    active: bool [N], the clients whose masks arrived.
    reset: bool scalar, reset α, β to `prior` before adding the masks.
    prior, posterior: λ0 and 'mode' | 'mean'.

  Returns:
    The new {'alpha', 'beta', 'p'}.
  """
  weight = active.astype(jnp.float32)
  out = {'alpha': {}, 'beta': {}, 'p': {}}
  for kind, m in masks.items():
    ones = jnp.tensordot(weight, m, axes=1)             # Σ_n M_n   [L, U]
    zeros = jnp.sum(weight) - ones                      # Σ_n (1 − M_n)
    alpha = jnp.where(reset, prior, extras['alpha'][kind]) + ones
    beta = jnp.where(reset, prior, extras['beta'][kind]) + zeros
    if posterior == 'mode':
      total = alpha + beta - 2
      p = jnp.where(total > 0, (alpha - 1) / jnp.where(total > 0, total, 1.0),
                    extras['p'][kind])
    else:
      p = alpha / (alpha + beta)
    out['alpha'][kind], out['beta'][kind], out['p'][kind] = alpha, beta, p
  return out


class FedPM(BudgetMasks):
  """FedPM with one Bernoulli keep probability per head/row (module docstring)."""

  name = 'fedpm'
  option_groups = BudgetMasks.option_groups + (FedPMOptions,)
  full_depth = True
  per_round_metrics = ('mask_density',)
  fixed_options = {**WITHOUT_COS2P, 'cos2p.width_masks': 'rolling', 'cos2p.learned_units': vit.UNIT_KINDS, 'cos2p.mask_rounds': 0}
  reads_keys = BudgetMasks.reads_keys | {'logit_init_std'}   # s0's std

  trains_weights = False

  def __init__(self, config, model, data):
    self.fedpm = FedPMOptions.from_config(config)
    super().__init__(config, model, data)

  # ---- the clock ---------------------------------------------------------------
  def client_round_seconds(self):
    """S_n steps (E epochs) of mask training at full width plus the link
    (module doc)."""
    o = self.options
    if self.clock_options.client_seconds:
      return super().client_round_seconds()
    shape, batch = self.cost_shape(), self.config.batch_size
    full = vit_cost.Submodel(frozen=0, trainable=shape.depth,
                             learns_mask=True)
    flops = vit_cost.client_cost(shape, full, batch).mask_flops
    units = shape.depth * vit_cost.block_units(shape)
    comm = (32 + 1) * units / o.bandwidth_bps
    seconds = []
    for n, kind in enumerate(self.device_types):
      speed = vit_cost.device(kind, o.device_speeds).speed * o.speed_scale
      seconds.append(comm + int(self.round_steps[n]) * batch * flops / speed)
    return lambda client, dispatch_round, index: seconds[client]

  # ---- state ---------------------------------------------------------------------
  def init_clients(self, params):
    """None: a client's scores start from θ every round
    (`program_client_state`)."""
    del params
    return None

  def init_extras(self, params):
    """α = β = λ0 and θ = σ(s0), s0 ~ N(0, logit_init_std²) per unit."""
    del params
    key = jax.random.PRNGKey(self.config.seed + 1)
    shapes = self.model.unit_shapes()
    prior = lambda: {k: jnp.full(s, self.fedpm.prior)
                     for k, s in shapes.items()}
    p = {k: jax.nn.sigmoid(self.options.logit_init_std * jax.random.normal(
        jax.random.fold_in(key, i), s)) for i, (k, s) in enumerate(
            shapes.items())}
    return {'alpha': prior(), 'beta': prior(), 'p': p}

  def program_client_state(self, state: ServerState, plans: ClientPlan):
    """Every client's scores logit(clip(θ)) and a slot for its upload."""
    n, eps = plans.client_id.shape[0], self.fedpm.clip
    logits = {k: jnp.broadcast_to(jax.scipy.special.logit(
        jnp.clip(p, eps, 1 - eps)), (n,) + p.shape)
              for k, p in state.extras['p'].items()}
    return {'logits': logits,
            'units': {k: jnp.zeros_like(v) for k, v in logits.items()}}

  def start_models(self, state, plans):
    """None: the weights never train, every client holds the run's params."""
    del state, plans
    return None

  def next_clients(self, state, plans, outputs):
    """The clients keep no state (`init_clients`)."""
    del plans, outputs
    return state.clients

  # ---- the client program ----------------------------------------------------------
  def client_program(self) -> program.ClientProgram:
    """E epochs of score training (Co-S²P's Eq. 2, `mask_loss`), then the
    upload draw."""
    scores = program.sgd_program(
        self.mask_loss, lambda lr: optim.adan(self.fedpm.score_lr),
        num_steps=self.max_local_steps(),
        batch_size=self.config.batch_size,
        trainable=(('client_state', 'logits'),),
        scan_unroll=self.config.scan_unroll)
    return then(scores, self.sample_upload)

  def sample_upload(self, local: program.LocalModel,
                    plan) -> program.LocalModel:
    """M_n ~ Bern(σ(s_end)), the client's upload."""
    key = key_streams.fold(plan.key, Stream.FEDPM_UPLOAD)
    state = local.client_state
    units = {k: jax.random.bernoulli(jax.random.fold_in(key, i), jax.nn.sigmoid(
        state['logits'][k])).astype(jnp.float32)
             for i, k in enumerate(vit.UNIT_KINDS)}
    return local.replace(client_state={**state, 'units': units})

  # ---- the server ------------------------------------------------------------------
  def aggregate(self, state: ServerState, plans: ClientPlan,
                outputs: ClientOutput) -> ServerState:
    """Bayesian aggregation of the uploaded masks; the weights stay."""
    f = self.fedpm
    reset = (state.round % f.reset_every == 0) if f.reset_every else False
    extras = posterior_update(state.extras, outputs.client_state['units'],
                              plans.delivers(), jnp.asarray(reset),
                              f.prior, f.posterior)
    return state.replace(extras=extras)

  def transfer_bytes(self, units: dict, window: dict) -> tuple:
    """θ down (float32 per unit), the sampled mask up (1 bit per unit)."""
    del window
    count = sum(u.size for u in units.values())
    return jnp.float32(4 * count), jnp.float32(count / 8)

  def round_metrics(self, state, plans, outputs):
    """The engine's metrics and the mean θ the round started from."""
    p = state.extras['p']
    density = sum(jnp.sum(v) for v in p.values()) / sum(
        v.size for v in p.values())
    return {**super().round_metrics(state, plans, outputs),
            'mask_density': density}

  # ---- evaluation --------------------------------------------------------------------
  def eval_units(self, state: ServerState) -> dict:
    """The evaluated mask: a draw from θ keyed by the round, or θ > ½."""
    p = state.extras['p']
    if self.fedpm.eval_mask == 'threshold':
      return {k: (v > 0.5).astype(jnp.float32) for k, v in p.items()}
    key = round_key(state, Stream.FEDPM_EVAL)
    return {k: jax.random.bernoulli(jax.random.fold_in(key, i), v).astype(
        jnp.float32) for i, (k, v) in enumerate(p.items())}

  def state_evaluator(self, split):
    return masked_eval.global_mask_evaluator(
        self.model, split, self.config.eval_batch_size, self.eval_units)
