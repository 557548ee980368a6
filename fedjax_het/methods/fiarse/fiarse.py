"""FIARSE (Wu et al., NeurIPS 2024) and its two ablations.

Algorithm 1 of FIARSE, per round t:
  1. θ_γ = TopK_γ(|x̃_t|) for every capacity level γ (one sort per threshold
     group, on device; `fedjax_het.submodel.magnitude`).
  2. Client i trains K steps of TCB-GD (Eq. 3) with θ_{γ_i} fixed: the
     forward uses x ⊙ 1{|x| ≥ θ} re-evaluated at every step
     (`fedjax_het.submodel.tcb.tcb_mask`), so a parameter that falls below θ
     drops out; under plain SGD the submodel can only shrink (§3, L113–115).
     `submodel.tcb_bias=False` drops Eq. (3)'s bias factor: the plain masked
     gradient g ⊙ 1{|x| ≥ θ} of the official code (`tcb.plain_mask`).
  3. Updates are zero outside the client's round-start submodel (Δ is
     restricted to it; the mask also stops momentum or weight decay from
     moving excluded entries). With momentum an entry that fell below θ
     keeps moving by its momentum buffer and may re-enter; with
     `submodel.update_mask='current'` the gradient and the optimiser's
     update are also masked by the step's 1{|x| ≥ θ}, so it freezes where it
     dropped out and the submodel only shrinks again. The server averages
     each coordinate over
     the clients that updated it ('nonzero' count rule by default), x̃ ← x̃ −
     η_s·Agg(x̃_t − x_{t,K}) with η_s = `server_lr` (the paper's 1).

Registered methods:
  fiarse            model-wise thresholds (`submodel.threshold_granularity`).
  fiarse_layerwise  one threshold per layer/stage (App. D.1, Tables 6–7).
  pruning_greedy    the round-start mask m0 kept fixed, plain masked gradient
                    ∇F(x ⊙ m0) ⊙ m0 (Zhou et al. 2023; Tables 6–7).

All three run on the virtual clock (`config.clock`, the base class's clock
part): a stale client's thresholds and mask are those of the model it was
dispatched with, w_{k_n}.
"""
import jax
import jax.numpy as jnp

from fedjax_het import models
from fedjax_het.methods.fiarse.submodels import SubmodelAlgorithm
from fedjax_het.core import program
from fedjax_het.submodel import magnitude
from fedjax_het.submodel.tcb import plain_mask, tcb_mask


class Fiarse(SubmodelAlgorithm):
  """FIARSE: importance-aware (magnitude) submodels trained with TCB-GD."""

  name = 'fiarse'
  default_partial_average = 'nonzero'
  # TCB-GD straight-through forward; False trains the fixed round-start mask.
  straight_through = True

  def __init__(self, config, model, data):
    super().__init__(config, model, data)
    self.thresholds = magnitude.MagnitudeThresholds(
        self.template, models.maskable_leaves(self.template),
        self.granularity(), self.submodel_options.threshold_shards)

  def granularity(self) -> str:
    return self.submodel_options.threshold_granularity

  def client_thresholds(self, params, levels: jax.Array):
    """θ of each client's level: a pytree of float [K] leaves."""
    per_level = self.thresholds(params, self.levels)
    return jax.tree.map(lambda t: t[levels], per_level)

  def level_plan(self, state, levels):
    theta = self.client_thresholds(state.params, levels)
    masks = jax.vmap(magnitude.magnitude_mask, in_axes=(None, 0))(
        state.params, theta)
    return masks, {'theta': theta}

  def forward_params(self, params, plan, ctx):
    if not self.straight_through:
      return program.apply_mask(params, plan.mask)
    mask = tcb_mask if self.submodel_options.tcb_bias else plain_mask
    return jax.tree.map(mask, params, plan.extras['theta'])

  def step_mask(self, params, plan):
    """The round-start mask, ∧ 1{|x| ≥ θ} at this step under 'current'."""
    if self.submodel_options.update_mask == 'round_start':
      return plan.mask
    return jax.tree.map(jnp.logical_and, plan.mask,
                        magnitude.magnitude_mask(params, plan.extras['theta']))

  def eval_mask(self, params, gamma):
    theta = jax.tree.map(lambda t: t[0], self.thresholds(params, (gamma,)))
    return magnitude.magnitude_mask(params, theta)


class FiarseLayerwise(Fiarse):
  """FIARSE with one threshold per layer (ResNet stage), FIARSE App. D.1."""

  name = 'fiarse_layerwise'

  def granularity(self) -> str:
    return 'layer'


class PruningGreedy(Fiarse):
  """The greedy magnitude-pruning ablation: fixed round-start mask, no bias."""

  name = 'pruning_greedy'
  straight_through = False

