"""Width-slicing baselines of FIARSE: HeteroFL, FedRolex, FjORD.

A client of capacity γ trains the width-r sub-network, r from
`submodel.width_rule` (default r = √γ, so conv parameters ≈ γ·d), as a mask
over the global model (`fedjax_het.submodel.width`); the server averages each
entry over the clients holding it (HeteroFL's partial averaging, FIARSE
Sec. 3). At evaluation a client of any capacity γ gets the first ⌈rC⌉
channels of every hidden layer (for FedRolex too).

- HeteroFL (Diao et al., ICLR 2021): static prefix windows; training-time
  Scaler dividing hidden outputs by r (`submodel.scaler`); use static BN.
- FedRolex (Alam et al., NeurIPS 2022): in round t the window of a layer
  with C channels is {(j − t) mod C : j < ⌈rC⌉}, rolling one channel per
  round in step for all layers.
- FjORD (Horváth et al., NeurIPS 2021): ordered dropout; at each local step
  the client samples a width uniformly among the levels' widths not above its
  own and trains that prefix (self-distillation, optional in FjORD, is not
  used); no Scaler.

All of them (ScaleFL too) run on the virtual clock (`config.clock`, the base
class's clock part): a stale client trains the submodel of its dispatch
round (FedRolex's window of round k_n) from the model of that round.
"""
import jax
import jax.numpy as jnp

from fedjax_het.methods.fiarse.submodels import SubmodelAlgorithm
from fedjax_het.core import key_streams, program
from fedjax_het.core.key_streams import Stream
from fedjax_het.submodel import width


class HeteroFL(SubmodelAlgorithm):
  """Static prefix-channel submodels with partial averaging."""

  name = 'heterofl'
  default_partial_average = 'mask'
  scaler_allowed = True

  def __init__(self, config, model, data):
    super().__init__(config, model, data)
    self.layout = width.channel_layout(model, self.input_shape)
    rule = self.submodel_options.width_rule
    self.rates = jnp.asarray(
        [width.width_for_capacity(self.layout, g, rule) for g in self.levels],
        jnp.float32)
    self.use_scaler = self.scaler_allowed and self.submodel_options.scaler

  def window_offset(self, state) -> jax.Array:
    """Offset of the channel windows this round (0: prefixes)."""
    del state
    return jnp.zeros((), jnp.int32)

  def level_plan(self, state, levels):
    rates = self.rates[levels]
    offset = self.window_offset(state)
    masks = jax.vmap(lambda r: width.width_mask(self.layout, r, offset))(rates)
    return masks, {'rate': rates}

  def forward_params(self, params, plan, ctx):
    params = program.apply_mask(params, plan.mask)
    if not self.use_scaler:
      return params
    scale = width.hidden_output_scale(self.layout, plan.extras['rate'])
    return jax.tree.map(lambda p, s: p * s.astype(p.dtype), params, scale)

  def eval_mask(self, params, gamma):
    del params
    rate = width.width_for_capacity(self.layout, gamma,
                                    self.submodel_options.width_rule)
    return width.width_mask(self.layout, rate)


class FedRolex(HeteroFL):
  """Rolling channel windows: the window moves by one channel per round."""

  name = 'fedrolex'

  def window_offset(self, state):
    return state.round


class FjORD(HeteroFL):
  """Ordered dropout: a random nested width at every local step."""

  name = 'fjord'
  scaler_allowed = False

  def forward_params(self, params, plan, ctx):
    allowed = jnp.sum(self.rates <= plan.extras['rate'] * (1 + 1e-6))
    choice = jax.random.randint(
        key_streams.fold(ctx.key, Stream.FJORD_WIDTH), (), 0, allowed)
    rate = jnp.sort(self.rates)[choice]
    return program.apply_mask(params, width.width_mask(self.layout, rate))
