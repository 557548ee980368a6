"""FIARSE (Wu et al., NeurIPS 2024) and its two ablations.

Algorithm 1 of FIARSE, per round t:
  1. θ_γ = TopK_γ(|x̃_t|) for every capacity level γ (one sort per threshold
     group, on device; `fedjax_het.submodel.magnitude`).
  2. Client i trains K steps of TCB-GD (Eq. 3) with θ_{γ_i} fixed: the
     forward uses x ⊙ 1{|x| ≥ θ} re-evaluated at every step
     (`fedjax_het.submodel.tcb.tcb_mask`), so a parameter that falls below θ
     drops out; under plain SGD the submodel can only shrink.
  3. Updates are zero outside the client's round-start submodel (specs §7.2:
     Δ is restricted to it; the mask also stops momentum or weight decay from
     moving excluded entries), and the server averages each coordinate over
     the clients that updated it ('nonzero' count rule by default), x̃ ← x̃ −
     η_s·Agg(x̃_t − x_{t,K}) with η_s = `server_lr` (the paper's 1).

Registered methods:
  fiarse            model-wise thresholds (`submodel.threshold_granularity`).
  fiarse_layerwise  one threshold per layer/stage (App. D.1, Tables 6–7).
  pruning_greedy    the round-start mask m0 kept fixed, plain masked gradient
                    ∇F(x ⊙ m0) ⊙ m0 (Zhou et al. 2023; Tables 6–7).
"""
import jax

from fedjax_het import models
from fedjax_het.algorithms.submodels import SubmodelAlgorithm
from fedjax_het.core import program
from fedjax_het.submodel import magnitude
from fedjax_het.submodel.tcb import tcb_mask


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
    return jax.tree.map(tcb_mask, params, plan.extras['theta'])

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

