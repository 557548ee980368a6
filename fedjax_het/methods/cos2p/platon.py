"""FedAvg+PLATON: FedAvg whose clients prune structured units during local
training with PLATON's importance scores (Zhang et al., ICML 2022, "PLATON:
Pruning Large Transformer Models with Upper Confidence Bound of Weight
Importance"), a baseline of Co-S²P (Li et al., "Unity is Power", Tabs. 1–2:
"All unstructured baselines were switched to structured pruning").

Every local step t of client n (after PLATON's `update_and_pruning`, with
ΔT = 1 and the product score of its code's default):

    I^(t)  = |θ ⊙ ∇_θ L|                                  (sensitivity)
    Ī^(t)  = β1·Ī^(t−1) + (1 − β1)·I^(t)                  (its EMA)
    U^(t)  = |I^(t) − Ī^(t)|,  Ū^(t) = β2·Ū^(t−1) + (1 − β2)·U^(t)
    s^(t)  = Ī^(t) · Ū^(t)                                 (the score)

over the entries of the prunable leaves (qkv, attention projection, fc1,
fc2: kernels and biases), θ the weights the gradient was taken at. A unit
(an MSA head, an output row of the projection, fc1 or fc2: `models.vit`)
scores the sum of s over its entries (`submodel.units.unit_sums` with the
ViT's segment specs: a head owns its q/k/v rows, a row its kernel row and
bias). Before step t the client keeps the top ⌈r_t·U⌉ units of every layer
and kind (`ranking='layer'`, matching the per-layer width R_w of the other
baselines and of the clock) or of every kind over all layers
(`ranking='kind'`), with PLATON's cubic schedule of the remaining ratio
(`Pruner.schedule_threshold_comb`):

    r_t = 1                                          t ≤ t_i
    r_t = R + (1 − R)·(1 − (t − t_i)/(t_f − t_i))³    t_i < t < t_f
    r_t = R                                          t ≥ t_f

at R = R_w = √R_n (full depth, as FedRolex/RAM-Fed on this engine). Our
readings, options of `config.platon`:

- The schedule runs over the client's local steps (`horizon='training'`,
  default): t counts every local step the client ran since the start (in
  `ServerState.clients`), t_i = `start_fraction`·T_n, t_f =
  `end_fraction`·T_n, T_n = rounds·E·⌈|D_n|/B⌉ (its steps if it takes part
  in every round, as it does at μ = 1). `horizon='round'` restarts the
  schedule every round (t = the step in the round, T_n = E·⌈|D_n|/B⌉), so
  each round starts at full density. Ī, Ū persist across rounds in both.
- Masking multiplies the unit's activations (`vit.block`), which equals
  PLATON's zeroed weights in the forward; a pruned unit gets no gradient
  (PLATON's zeroed weights do and can regrow), so its Ī, Ū decay and it
  returns only if it outranks a kept unit.
- The client uploads the units it trained in its last step; entries it
  pruned during the round revert to the round's start model (they are not
  uploaded), and the server averages every entry over the clients holding
  it (`weighting='holders'`, as FedRolex and RAM-Fed). Synchronous at the
  clock's defaults μ = 1, T_clk = 0.

The clock (`vit_engine.VitOnClock.cost_submodel`) charges every round at the target width
R_w; the ramp t < t_f trains wider submodels than it charges.
"""
import dataclasses

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_het.core import program
from fedjax_het.methods.cos2p.vit_engine import (WITHOUT_COS2P, VitOnClock,
                                                 kept_units, revert_untrained)
from fedjax_het.models import vit
from fedjax_het.options import ConfigError, OptionGroup, in_range, option
from fedjax_het.submodel import units as units_lib

# The leaves PLATON scores: every entry of a structured unit.
PRUNED_LEAVES = tuple(f'blocks_{module}_{leaf}'
                      for module in ('qkv', 'proj', 'fc1', 'fc2')
                      for leaf in ('kernel', 'bias'))


@dataclasses.dataclass(frozen=True)
class PlatonOptions(OptionGroup):
  """`config.platon`: FedAvg+PLATON (module docstring)."""
  key = 'platon'
  beta1: float = option(0.85, 'β1: EMA of the sensitivity Ī (PLATON default)', check=in_range(0, 1, closed_high=False))
  beta2: float = option(0.95, 'β2: EMA of the uncertainty Ū (PLATON default)', check=in_range(0, 1, closed_high=False))
  start_fraction: float = option(0.0, 't_i as a fraction of the horizon T_n: full density up to it', check=in_range(0, 1))
  end_fraction: float = option(0.25, 't_f as a fraction of the horizon T_n: the target width R_w from it on', check=in_range(0, 1))
  horizon: str = option('training', 'training: the schedule spans all of a client\'s local steps | round: it restarts every round', choices=('training', 'round'))
  ranking: str = option('layer', 'keep the top ⌈r·U⌉ units of every layer and kind | of every kind over all layers', choices=('layer', 'kind'))

  def validate(self) -> None:
    if self.end_fraction < self.start_fraction:
      raise ConfigError(f'platon.end_fraction ({self.end_fraction:g}) must be '
                        f'≥ platon.start_fraction ({self.start_fraction:g}).')


def cubic_rate(t, target, start, end) -> jax.Array:
  """PLATON's remaining ratio r_t (module docstring): 1 up to `start`, the
  cubic ramp to `target` at `end`, `target` after (a step at start = end)."""
  t = jnp.asarray(t, jnp.float32)
  span = jnp.maximum(end - start, 1e-12)
  progress = jnp.clip((t - start) / span, 0.0, 1.0)
  progress = jnp.where(t >= end, 1.0, progress)
  return target + (1.0 - target) * (1.0 - progress)**3


def platon_scores(ema_importance, ema_uncertainty, params, grads,
                  beta1: float, beta2: float):
  """One step of the EMAs and the score (module docstring) on matching
  pytrees of θ and its gradient: (Ī, Ū, s) after the step."""
  importance = jax.tree.map(lambda p, g: jnp.abs(p * g), params, grads)
  ema_importance = jax.tree.map(lambda e, i: beta1 * e + (1 - beta1) * i,
                                ema_importance, importance)
  ema_uncertainty = jax.tree.map(
      lambda u, i, e: beta2 * u + (1 - beta2) * jnp.abs(i - e),
      ema_uncertainty, importance, ema_importance)
  score = jax.tree.map(jnp.multiply, ema_importance, ema_uncertainty)
  return ema_importance, ema_uncertainty, score


def top_units(scores: jax.Array, rate: jax.Array, ranking: str) -> jax.Array:
  """1 for the ⌈rate·U⌉ best-scoring units of every layer ([L, U] scores,
  `ranking='layer'`) or the ⌈rate·L·U⌉ best of all ('kind'); ties go to
  the lower index. float [L, U]."""
  flat = scores.reshape(1, -1) if ranking == 'kind' else scores
  count = flat.shape[1]
  order = jnp.argsort(-flat, axis=1, stable=True)
  rank = jnp.argsort(order, axis=1, stable=True)
  keep = rank < kept_units(count, rate)
  return keep.astype(jnp.float32).reshape(scores.shape)


@flax.struct.dataclass
class _Carry:
  local: program.LocalModel
  start: dict         # the round's start params
  opt_state: optax.OptState


class FedAvgPlaton(VitOnClock):
  """FedAvg+PLATON on the ViT engine (module docstring)."""

  name = 'vit_fedavg_platon'
  option_groups = VitOnClock.option_groups + (PlatonOptions,)
  full_depth = True
  fixed_options = {**WITHOUT_COS2P, 'cos2p.width_masks': 'rolling', 'cos2p.mask_rounds': 0}

  def __init__(self, config, model, data):
    super().__init__(config, model, data)
    self.platon = PlatonOptions.from_config(config)
    per_round = self.round_steps
    self.horizon_steps = (per_round * (config.rounds if self.platon.horizon
                                       == 'training' else 1)).astype(np.float32)
    self.pruned_specs = {k: self.specs[k] for k in PRUNED_LEAVES}

  # ---- the schedule and the scores -----------------------------------------
  def remaining_rate(self, t: jax.Array, client: jax.Array) -> jax.Array:
    """r_t of `client` after t local steps (of training or of the round)."""
    horizon = jnp.asarray(self.horizon_steps)[client]
    target = jnp.asarray(self.width, jnp.float32)[client]
    return cubic_rate(t, target, self.platon.start_fraction * horizon,
                      self.platon.end_fraction * horizon)

  def unit_scores(self, score: dict) -> dict:
    """{kind: [L, U]}: Σ of s over each unit's entries."""
    sums = units_lib.unit_sums(score, self.pruned_specs)
    return {kind: sums[f'blocks/{kind}'] for kind in vit.UNIT_KINDS}

  def select_units(self, state: dict, rate: jax.Array) -> dict:
    """The top ⌈r·U⌉ units by the client's current scores s = Ī·Ū."""
    score = jax.tree.map(jnp.multiply, state['importance'],
                         state['uncertainty'])
    return {kind: top_units(s, rate, self.platon.ranking)
            for kind, s in self.unit_scores(score).items()}

  # ---- client state and plans ------------------------------------------------
  def init_clients(self, params):
    """The engine's rows, the units the client keeps ('mask', all at
    first), Ī, Ū per prunable entry and its local-step counter."""
    n = self.num_clients
    zeros = lambda: {k: jnp.zeros((n,) + params[k].shape, params[k].dtype)
                     for k in PRUNED_LEAVES}
    return {**super().init_clients(params),
            'mask': {k: jnp.ones((n,) + s)
                     for k, s in self.model.unit_shapes().items()},
            'importance': zeros(), 'uncertainty': zeros(),
            'step': jnp.zeros((n,), jnp.int32)}

  def units_of(self, row, window):
    """The units PLATON's scores keep (not the round's fixed ones)."""
    del window
    return row['mask']

  # ---- the client program ----------------------------------------------------
  def client_program(self) -> program.ClientProgram:
    """E epochs of the client optimiser on the pruned submodel; each step
    prunes to r_t by the scores, trains, and updates the scores."""
    make_optimizer = self.client_optimizer()
    o = self.platon

    def init(start, plan):
      return _Carry(start, start.params,
                    make_optimizer(plan.lr).init(start.params))

    def step(carry, batch, plan, ctx):
      local, window = carry.local, plan.extras
      state = local.client_state
      t = state['step'] if o.horizon == 'training' else ctx.step
      units = self.select_units(state, self.remaining_rate(t, plan.client_id))
      state = {**state, 'mask': units}
      local = local.replace(client_state=state)
      loss, grads = jax.value_and_grad(
          lambda p: self.weight_loss(local.replace(params=p), batch.x,
                                     batch.y, plan, ctx))(local.params)
      held = self.entry_holders(units, window)
      grads = program.apply_mask(grads, held)
      updates, opt_state = make_optimizer(plan.lr).update(
          grads, carry.opt_state, local.params)
      params = optax.apply_updates(local.params,
                                   program.apply_mask(updates, held))
      ema_i, ema_u, _ = platon_scores(
          state['importance'], state['uncertainty'],
          {k: local.params[k] for k in PRUNED_LEAVES},
          {k: grads[k] for k in PRUNED_LEAVES}, o.beta1, o.beta2)
      state = {**state, 'importance': ema_i, 'uncertainty': ema_u,
               'step': state['step'] + 1}
      return carry.replace(local=program.LocalModel(params, state),
                           opt_state=opt_state), loss, None

    def final(carry, plan):
      """Entries outside the last step's units revert to the start model."""
      local = carry.local
      held = self.entry_holders(local.client_state['mask'], plan.extras)
      params = revert_untrained(local.params, carry.start, held)
      return self.finish_weights(local.replace(params=params), plan)

    return program.ClientProgram(
        init, step, final, num_steps=self.max_local_steps(),
        batch_size=self.config.batch_size,
        scan_unroll=self.config.scan_unroll)
