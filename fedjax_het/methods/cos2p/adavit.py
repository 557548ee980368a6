"""FedAvg+AdaViT: FedAvg whose clients train AdaViT's per-input decision
networks with the ViT (Meng et al., CVPR 2022, "AdaViT: Adaptive Vision
Transformers for Efficient Image Recognition"), a baseline of Co-S²P (Li et
al., "Unity is Power", Tabs. 1–2).

The model (`models.vit.ViT(decisions=True)`): before block l, linear maps
of the CLS token give one logit per MSA head and one per sub-layer (MSA,
MLP), and a linear map of every LayerNorm-ed patch token one logit per
token; `models.vit.gumbel_gate` turns them into 0/1 gates: in training
1[σ((logit + g1 − g2)/τ) > threshold] with Gumbel noise g1, g2 and the
straight-through gradient of the soft value, at evaluation the hard
1[σ(logit) > threshold] — every input gets its own hard keep-set. A dropped
head has q = k = v = 0, a dropped sub-layer adds nothing to the residual
stream, a dropped token is neither attended to nor updated (AdaViT's
pre-softmax policy, detached). Blocks below `keep_layers` decide tokens
only. As AdaViT's code (and the Co-S²P authors' `fedadavit`): τ = 5, head
and sub-layer threshold ½, token threshold 0.6, keep_layers = 1.

Loss of a local step (AdaViT's `AdaLoss` with the authors' weights; the
diversity, entropy and minimum terms are 0 there):

    CE(deepest exit, y) + w·(|ū_heads − γ| + |ū_layers − γ| + (ū_tokens − γ)²)

ū_heads the mean head gate over the inputs, decided blocks and heads where
the block runs a sub-layer (a head mask detached from the gates, as
AdaViT's), ū_layers the mean sub-layer gate over inputs and decided blocks,
ū_tokens the mean token gate over inputs, blocks and patch tokens; only
the kinds in `decide` count. Our readings, options of `config.adavit`:

- Target γ (`usage_target`): 'width' (default) γ = R_w = √R_n, the width
  FedRolex, RAM-Fed and PLATON train on this engine (so heads × sub-layers
  use ≈ R_n of the MSA); 'code' γ = ½ for every client (the Co-S²P
  authors' `fedadavit` config, which instead cut the client's depth to
  ⌊L·R_n⌋; we keep full depth like the other baselines).
- A client with R_n = 1 has no reason to prune: its decisions are off
  (every gate 1) and it trains the ViT as FedAvg does, so all budgets 1
  reduce to `vit_fedavg`.
- Federation ("prune to the learned keep-set and FedAvg over holders", the
  spec's reading): the client's keep-set of the round is every head and
  sub-layer some input of the round ran (a head counts when its MSA
  sub-layer ran too); it uploads those entries and the decision networks
  (if its decisions are on); entries outside revert to the round's start
  model (they got no gradient; the revert also undoes the optimiser's
  weight decay on them). The server averages every entry over the clients
  holding it (`weighting='holders'`), synchronous at the clock's defaults
  (μ = 1, T_clk = 0).
- Evaluation: the server's model is the global ViT with hard decisions;
  a client's is the same model with its decisions on or off (R_n < 1 or
  = 1) on its local test split.
- The clock (`vit_engine.VitOnClock.cost_submodel`) charges the full depth at width R_w,
  as for PLATON: the expected compute at the target; the memory of a
  dynamic network is really the full model's. The decision networks are
  shared, so a client whose target is far from the others' need not reach
  it (the README's scaled run: usage ≈ 0.7 at a target of 0.25).

Round metrics `usage_heads`, `usage_layers`, `usage_tokens`: the mean gate
over the round's steps of the clients that decide (per-round values).
"""
import dataclasses

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_het.methods.common.accounting import mean_over_active
from fedjax_het.methods.cos2p.vit_engine import (WITHOUT_COS2P, VitOnClock,
                                                 revert_untrained)
from fedjax_het.core import program
from fedjax_het.models import vit
from fedjax_het.options import (ConfigError, OptionGroup, in_range,
                                non_negative, non_negative_int, option,
                                positive, subset_of)


@dataclasses.dataclass(frozen=True)
class AdavitOptions(OptionGroup):
  """`config.adavit`: FedAvg+AdaViT (module docstring)."""
  key = 'adavit'
  decide: tuple = option(vit.DECISION_KINDS, 'what the decision networks choose per input: heads, layers (the MSA and MLP sub-layers), tokens (patches)', check=subset_of(vit.DECISION_KINDS, non_empty=True))
  usage_target: str = option('width', 'γ of every kind: width = the client\'s R_w = √R_n | code = ½ (the Co-S²P authors\' fedadavit)', choices=('width', 'code'))
  usage_weight: float = option(2.0, 'w: weight of each kind\'s usage loss (AdaViT\'s code: 2)', check=non_negative)
  tau: float = option(5.0, 'τ of the Gumbel-sigmoid gates (AdaViT: 5)', check=positive)
  token_threshold: float = option(0.6, 'a token is kept when its noisy probability exceeds it (AdaViT: 0.6; heads and sub-layers: ½)', check=in_range(0, 1, closed_low=False, closed_high=False))
  keep_layers: int = option(1, 'blocks below it decide no heads or sub-layers (AdaViT: 1)', check=non_negative_int)


def usage_loss(gates: dict, target: jax.Array, kinds: tuple,
               keep_layers: int) -> tuple[jax.Array, dict]:
  """(Σ of the usage terms of `kinds`, {kind: mean usage ū}) of one batch's
  gates {'heads': [L, B, H], 'layers': [L, B, 2], 'tokens': [L, B, T−1]}
  against the target γ (module docstring)."""
  heads, layers, tokens = gates['heads'], gates['layers'], gates['tokens']
  decided = (jnp.arange(heads.shape[0]) >= keep_layers).astype(heads.dtype)
  runs = jax.lax.stop_gradient(layers.sum(-1) > 0).astype(heads.dtype)
  head_mask = decided[:, None, None] * runs[..., None] * jnp.ones_like(heads)
  usage = {
      'heads': jnp.sum(heads * head_mask) / jnp.maximum(head_mask.sum(), 1.0),
      'layers': jnp.sum(layers * decided[:, None, None]) / jnp.maximum(
          decided.sum() * layers.shape[1] * layers.shape[2], 1.0),
      'tokens': jnp.mean(tokens)}
  terms = {'heads': jnp.abs(usage['heads'] - target),
           'layers': jnp.abs(usage['layers'] - target),
           'tokens': jnp.square(usage['tokens'] - target)}
  return sum(terms[k] for k in kinds), usage


def used_units(gates: dict, unit_shapes: dict) -> dict:
  """{kind: [L, U]} 1 for the units some input of the batch ran: a head
  when it and its MSA sub-layer are kept, the attention projection's rows
  when the MSA runs, fc1's and fc2's when the MLP runs."""
  gates = jax.lax.stop_gradient(gates)
  attention, mlp = gates['layers'][..., 0], gates['layers'][..., 1]  # [L, B]
  heads = jnp.max(gates['heads'] * attention[..., None], axis=1) > 0
  rows = {'proj': jnp.max(attention, axis=1) > 0,
          'fc1': jnp.max(mlp, axis=1) > 0, 'fc2': jnp.max(mlp, axis=1) > 0}
  out = {'heads': heads.astype(jnp.float32)}
  for kind, ran in rows.items():
    out[kind] = jnp.broadcast_to(ran[:, None], unit_shapes[kind]).astype(
        jnp.float32)
  return out


@flax.struct.dataclass
class _Carry:
  local: program.LocalModel
  start: dict         # the round's start params
  opt_state: optax.OptState
  used: dict          # {kind: [L, U]} units some input ran this round
  usage: jax.Array    # [3] Σ over steps of the batch's ū per kind


class FedAvgAdavit(VitOnClock):
  """FedAvg+AdaViT on the ViT engine (module docstring)."""

  name = 'vit_fedavg_adavit'
  option_groups = VitOnClock.option_groups + (AdavitOptions,)
  full_depth = True
  reads_decisions = True
  fixed_options = {**WITHOUT_COS2P, 'cos2p.width_masks': 'rolling',
                   'cos2p.mask_rounds': 0}
  per_round_metrics = tuple(f'usage_{k}' for k in vit.DECISION_KINDS)

  def __init__(self, config, model, data):
    self.adavit = AdavitOptions.from_config(config)
    super().__init__(config, model, data)
    if self.adavit.keep_layers >= model.depth:
      raise ConfigError(f'adavit.keep_layers ({self.adavit.keep_layers}) '
                        f'must be below the depth ({model.depth}), or no '
                        'block decides its heads and sub-layers.')
    self.decides = self.budgets < 1.0
    self.targets = (self.width if self.adavit.usage_target == 'width' else
                    np.full(self.num_clients, 0.5)).astype(np.float32)

  def decide(self, key: jax.Array | None, enabled: jax.Array) -> vit.Decide:
    """The model's decision settings: Gumbel noise from `key` (None: hard
    evaluation gates), on where `enabled`."""
    a = self.adavit
    return vit.Decide(key=key, enabled=enabled, kinds=tuple(a.decide),
                      tau=a.tau, token_threshold=a.token_threshold,
                      keep_layers=a.keep_layers)

  # ---- client state and plans ------------------------------------------------
  def init_clients(self, params):
    """The engine's rows, whether the client decides and its mean usage in
    its last round."""
    return {**super().init_clients(params),
            'decides': jnp.asarray(self.decides),
            'usage': jnp.zeros((self.num_clients, len(vit.DECISION_KINDS)))}

  def plan_round(self, state, data=None, inputs=None):
    plans = super().plan_round(state, data, inputs)
    ids = plans.client_id
    return plans.replace(extras={**plans.extras,
                                 'decides': self.of_slots(ids, self.decides),
                                 'target': self.of_slots(ids, self.targets)})

  def holders(self, units: dict, window: dict) -> dict:
    """The engine's holders, and the decision networks of the trained blocks for
    a client whose decisions are on."""
    trained = (window['run'] & ~window['frozen']).astype(jnp.float32)
    return {**super().holders(units, window),
            'decisions': trained * window['decides']}

  # ---- the client program ----------------------------------------------------
  def adavit_loss(self, params, x, y, plan, key):
    """CE of the deepest exit + w·usage terms (module docstring): (loss,
    (gates, {kind: ū}))."""
    a, window = self.adavit, plan.extras
    logits, gates = self.model.apply({'params': params}, x,
                                     decide=self.decide(key, window['decides']))
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    penalty, usage = usage_loss(gates, window['target'], tuple(a.decide),
                                a.keep_layers)
    penalty = jnp.where(window['decides'], penalty, 0.0)
    return ce + a.usage_weight * penalty, (gates, usage)

  def client_program(self) -> program.ClientProgram:
    """E epochs of the client optimiser on the whole ViT with sampled gates,
    recording the units some input ran; entries outside them revert."""
    make_optimizer = self.client_optimizer()
    shapes = self.model.unit_shapes()

    def init(start, plan):
      return _Carry(start, start.params,
                    make_optimizer(plan.lr).init(start.params),
                    {k: jnp.zeros(s) for k, s in shapes.items()},
                    jnp.zeros((len(vit.DECISION_KINDS),)))

    def step(carry, batch, plan, ctx):
      local = carry.local
      (loss, (gates, usage)), grads = jax.value_and_grad(
          self.adavit_loss, has_aux=True)(local.params, batch.x, batch.y, plan,
                                   ctx.key)
      updates, opt_state = make_optimizer(plan.lr).update(
          grads, carry.opt_state, local.params)
      used = jax.tree.map(jnp.maximum, carry.used, used_units(gates, shapes))
      usage = carry.usage + jnp.stack(
          [usage[k] for k in vit.DECISION_KINDS])
      return carry.replace(
          local=local.replace(params=optax.apply_updates(local.params,
                                                         updates)),
          opt_state=opt_state, used=used, usage=usage), loss, None

    def final(carry, plan):
      held = self.entry_holders(carry.used, plan.extras)
      params = revert_untrained(carry.local.params, carry.start, held)
      state = {**carry.local.client_state, 'units': carry.used,
               'offset': plan.extras['offset'],
               'usage': carry.usage / jnp.maximum(plan.num_steps, 1)}
      return program.LocalModel(params, state)

    return program.ClientProgram(
        init, step, final, num_steps=self.max_local_steps(),
        batch_size=self.config.batch_size,
        scan_unroll=self.config.scan_unroll)

  def round_metrics(self, state, plans, outputs):
    """The engine's metrics and the mean usage of the arrived deciding clients."""
    metrics = super().round_metrics(state, plans, outputs)
    deciding = plans.is_active() & plans.extras['decides']
    for i, kind in enumerate(vit.DECISION_KINDS):
      metrics[f'usage_{kind}'] = mean_over_active(
          outputs.client_state['usage'][:, i], deciding)
    return metrics

  # ---- evaluation ----------------------------------------------------------------
  def server_logits(self, params, x):
    """The global ViT with hard decisions (every input its own keep-set)."""
    return self.model.apply({'params': params}, x,
                            decide=self.decide(None, jnp.asarray(True)))[0]

  def personal_logits(self, shared, row, x):
    """The global ViT with the client's decisions on or off, hard."""
    return self.model.apply({'params': shared}, x,
                            decide=self.decide(None, row['decides']))[0]
