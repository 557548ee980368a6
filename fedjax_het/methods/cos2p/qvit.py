"""FedAvg+Q-ViT: FedAvg whose clients train fake-quantised ViTs with
learnable head-wise bit-widths, a baseline of Co-S²P (Li et al., "Unity is
Power", Tabs. 1–2).

Which Q-ViT: the method with learnable head-wise bit-widths and LSQ scales
is Li, Yang, Wang and Cheng, "Q-ViT: Fully Differentiable Quantization for
Vision Transformer" (arXiv 2201.07703; code zhexinli/Q-ViT-DeiT), not the
NeurIPS 2022 "Q-ViT: Accurate and Fully Quantized Low-bit Vision
Transformer" (Y. Li et al.: fixed bit-widths, information rectification and
distribution-guided distillation), whose name the comparison cites. We
implement the former, as the issue describes it, on weights only.

Quantiser (LSQ, Esser et al. 2020), per group g of weights w sharing a
bit-width b and a scale s:

    q(w) = clip(round(w/s), −2^{b−1}, 2^{b−1} − 1) · s,

round with the straight-through estimator (∂q/∂w = 1 inside the range, 0
outside), ∂q/∂s = round(w/s) − w/s inside and the clip bound outside, times
g = 1/√(N_g·Q_P) (N_g the group's entries, Q_P = 2^{b−1} − 1). Groups:
every head of the qkv kernel (its q/k/v rows) and of the attention
projection (its input columns, Q-ViT's `QuantMuitiHeadLinear_in`), and the
fc1 and fc2 kernels of every layer; biases, LayerNorms, the embedding and
the exit heads stay float32 and outside the budget (our reading: Q-ViT
quantises the blocks' linear layers; activations, which it also
quantises, stay float here, as the budget is the weights' memory). As in
Q-ViT's code, b is a continuous parameter clipped to [`min_bits`,
`max_bits`] and rounded in the forward (Q-ViT: [2, 8]; we allow up to 32 so
that any budget R_n ≤ 1 is reachable), both straight-through (gradient 1,
so a budget can always pull b back), and its gradient flows through the
clip bounds ±2^{b−1}; every group keeps one scale per bit-width (Q-ViT's
switchable scale, `alpha[n − 2]`), initialised by LSQ's 2·mean|w|/√Q_P from
the initial model.

Budget: the memory ratio of the quantised weights, ρ = Σ_g N_g·b_g /
(32·Σ_g N_g), against R_n (`cos2p.budgets`). `budget_rule='projection'`
(default) shifts every bit-width down by the least c ≥ 0 with
ρ(round(clip(b − c))) ≤ R_n (bisection, in the forward, the shift held
constant in the backward), so the budget always holds and the bit-widths
learn their differences; 'penalty' adds Q-ViT's λ·max(ρ − R_n, 0)² to the
loss (its code penalises BitOPs). Bits start at 32·R_n.

Federation: FedAvg on the ViT engine (`vit_engine`: full width and depth,
synchronous at the clock's defaults μ = 1, T_clk = 0, every entry averaged
over the clients). Bit-widths and scales are the client's own
(`ServerState.clients`), trained by SGD at `quant_lr`; the weights by the
client optimiser. The client receives the global model quantised with its
own quantiser (`quantized_download`) and uploads q(w_end): the server
averages the de-quantised weights. `round_metrics` counts quantised bytes
both ways (`quantized_transfer_bytes`), and the analytic clock charges the
quantised kernels at R_n·32 bits (the bound the projection keeps) both
ways (`client_round_seconds`). Open: the personalised evaluation reads the
float global model, not the client's quantised copy.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_het.methods.cos2p.vit_engine import (WITHOUT_COS2P,
                                                 VitOnClock)
from fedjax_het.core import program
from fedjax_het.options import (ConfigError, OptionGroup, in_range, is_bool,
                                non_negative, option, positive)
from fedjax_het.systems import vit_cost

# group -> (the kernel it quantises, whether it has one bit-width per head).
GROUPS = {'qkv': ('blocks_qkv_kernel', True),
          'proj': ('blocks_proj_kernel', True),
          'fc1': ('blocks_fc1_kernel', False),
          'fc2': ('blocks_fc2_kernel', False)}
# Bytes per group on the link besides its weights: the float32 scale of its
# bit-width and the bit-width itself.
GROUP_HEADER_BYTES = 5


def _bits(key: str, value) -> None:
  in_range(1, 32)(key, value)
  if not isinstance(value, int) or isinstance(value, bool):
    raise ConfigError(f'{key} must be an integer number of bits, got '
                      f'{value!r}.')


@dataclasses.dataclass(frozen=True)
class QvitOptions(OptionGroup):
  """`config.qvit`: FedAvg+Q-ViT (module docstring)."""
  key = 'qvit'
  min_bits: int = option(2, 'least bit-width of a group (Q-ViT: 2)', check=_bits)
  max_bits: int = option(32, 'largest bit-width of a group (Q-ViT: 8; 32 lets any budget ≤ 1 be met)', check=_bits)
  budget_rule: str = option('projection', 'projection: shift the bits so the memory ratio ≤ R_n | penalty: λ·max(ratio − R_n, 0)² (Q-ViT)', choices=('projection', 'penalty'))
  lambda_bits: float = option(1.0, 'λ of the budget penalty', check=non_negative)
  quant_lr: float = option(0.01, 'SGD learning rate of the bit-widths and scales', check=positive)
  quantized_download: bool = option(True, 'the client starts from the global model quantised with its own quantiser', check=is_bool)

  def validate(self) -> None:
    if self.max_bits < self.min_bits:
      raise ConfigError(f'qvit.max_bits ({self.max_bits}) must be ≥ '
                        f'qvit.min_bits ({self.min_bits}).')


# ---- the quantiser -------------------------------------------------------------
def round_ste(x: jax.Array) -> jax.Array:
  """round(x) forward, identity backward."""
  return x + jax.lax.stop_gradient(jnp.round(x) - x)


def clip_ste(x: jax.Array, low, high) -> jax.Array:
  """clip(x, low, high) forward, identity backward."""
  return x + jax.lax.stop_gradient(jnp.clip(x, low, high) - x)


def grad_scale(x: jax.Array, g) -> jax.Array:
  """x forward, g·∂ backward (LSQ's gradient scale)."""
  return jax.lax.stop_gradient(x) + g * (x - jax.lax.stop_gradient(x))


def lsq_quantize(w: jax.Array, scale: jax.Array, bits: jax.Array,
                 g) -> jax.Array:
  """q(w) = clip(round(w/s), −2^{b−1}, 2^{b−1} − 1)·s (module docstring).

  `scale` and `bits` (integer-valued) broadcast against `w`; the gradient of
  s is scaled by `g`, b's flows through the clip bounds.
  """
  s = grad_scale(scale, g)
  low, high = -2.0**(bits - 1), 2.0**(bits - 1) - 1
  return round_ste(jnp.clip(w / s, low, high)) * s


def _expand(values: jax.Array, kernel_ndim: int, head_axis: int | None):
  """[L, H] (head_axis) or [L] values shaped to broadcast against a kernel."""
  shape = [1] * kernel_ndim
  shape[0] = values.shape[0]
  if head_axis is not None:
    shape[head_axis] = values.shape[1]
  return values.reshape(shape)


# qkv [L, D, 3, H, e]: heads on axis 3; proj [L, H, e, D]: on axis 1.
_HEAD_AXIS = {'qkv': 3, 'proj': 1, 'fc1': None, 'fc2': None}


class FedAvgQvit(VitOnClock):
  """FedAvg+Q-ViT on the ViT engine (module docstring)."""

  name = 'vit_fedavg_qvit'
  option_groups = VitOnClock.option_groups + (QvitOptions,)
  full_depth = True
  fixed_options = {**WITHOUT_COS2P, 'cos2p.width_masks': 'full', 'cos2p.mask_rounds': 0}

  def __init__(self, config, model, data):
    self.qvit = QvitOptions.from_config(config)
    super().__init__(config, model, data)
    q = self.qvit
    # R_n as a bit budget (the engine's widths are 1: full width and depth).
    self.bit_budgets = self.budgets.astype(np.float32)
    if (self.bit_budgets * 32 < q.min_bits - 1e-6).any():
      bad = float(self.bit_budgets.min())
      raise ConfigError(f'a budget of {bad:g} needs {32 * bad:g} bits per '
                        f'weight, below qvit.min_bits ({q.min_bits}).')
    self.levels = q.max_bits - q.min_bits + 1
    shapes = {name: self.template[leaf].shape
              for name, (leaf, _) in GROUPS.items()}
    # N_g, entries per group of each kind.
    self.group_entries = {
        name: int(np.prod(shape)) // (shape[0] * (
            shape[_HEAD_AXIS[name]] if _HEAD_AXIS[name] else 1))
        for name, shape in shapes.items()}
    self.bit_shapes = {
        name: (shape[0],) + ((shape[_HEAD_AXIS[name]],)
                             if _HEAD_AXIS[name] else ())
        for name, shape in shapes.items()}
    quantized = sum(int(np.prod(s)) for s in shapes.values())
    total = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(self.template))
    self.float_entries = total - quantized

  # ---- the clock --------------------------------------------------------------
  def client_round_seconds(self):
    """The engine's durations less the link time the quantised kernels save:
    4·K·(1 − R_n) bytes each way, K the kernel entries of the qkv,
    projection, fc1 and fc2 (the analytic model; fixed `clock.client_seconds`
    are kept as given)."""
    duration = super().client_round_seconds()
    if self.clock_options.client_seconds:
      return duration
    shape = self.cost_shape()
    kernels = shape.depth * (4 * shape.hidden**2 + 2 * shape.hidden * shape.mlp)
    saved = (2 * vit_cost.BYTES_PER_FLOAT * kernels * (1 - self.budgets) * 8 /
             self.options.bandwidth_bps)
    return lambda client, dispatch_round, index: duration(
        client, dispatch_round, index) - float(saved[client])

  # ---- bit-widths and the budget -----------------------------------------------
  def memory_ratio(self, bits: dict) -> jax.Array:
    """ρ = Σ_g N_g·b_g / (32·Σ_g N_g) over the quantised kernels."""
    used = sum(self.group_entries[k] * jnp.sum(b) for k, b in bits.items())
    size = sum(self.group_entries[k] * np.prod(self.bit_shapes[k])
               for k in bits)
    return used / (32.0 * size)

  def clipped_bits(self, bits: dict, shift=0.0) -> dict:
    """round(clip(b − shift)), straight-through."""
    q = self.qvit
    return {k: round_ste(clip_ste(b - shift, q.min_bits, q.max_bits))
            for k, b in bits.items()}

  def budget_shift(self, bits: dict, budget: jax.Array) -> jax.Array:
    """The least c ≥ 0 with ρ(round(clip(b − c))) ≤ budget (bisection)."""
    bits = jax.lax.stop_gradient(bits)
    fits = lambda c: self.memory_ratio(self.clipped_bits(bits, c)) <= budget

    def halve(_, bounds):
      low, high = bounds
      mid = 0.5 * (low + high)
      return jnp.where(fits(mid), low, mid), jnp.where(fits(mid), mid, high)

    high = jnp.float32(self.qvit.max_bits - self.qvit.min_bits + 1)
    _, high = jax.lax.fori_loop(0, 40, halve, (jnp.float32(0), high))
    return jnp.where(fits(0.0), 0.0, high)

  def effective_bits(self, bits: dict, budget: jax.Array) -> dict:
    """The integer bit-widths the forward uses (module docstring)."""
    if self.qvit.budget_rule == 'projection':
      return self.clipped_bits(bits, self.budget_shift(bits, budget))
    return self.clipped_bits(bits)

  def fake_quantize(self, params: dict, bits: dict, scales: dict) -> dict:
    """The params with every quantised kernel replaced by q(w); `bits` the
    effective ones ({group: [L, H] or [L]}), `scales` [..., levels]."""
    out = dict(params)
    for name, (leaf, _) in GROUPS.items():
      b = bits[name]
      index = jax.lax.stop_gradient(b - self.qvit.min_bits).astype(jnp.int32)
      s = jnp.take_along_axis(scales[name], index[..., None], -1)[..., 0]
      qp = 2.0**(jax.lax.stop_gradient(b) - 1) - 1
      g = 1.0 / jnp.sqrt(self.group_entries[name] * qp)
      w = params[leaf]
      axis = _HEAD_AXIS[name]
      out[leaf] = lsq_quantize(w, _expand(s, w.ndim, axis),
                               _expand(b, w.ndim, axis),
                               _expand(g, w.ndim, axis))
    return out

  def quantize_local(self, params: dict, state: dict, budget) -> dict:
    bits = self.effective_bits(state['bits'], budget)
    return self.fake_quantize(params, bits, state['scales'])

  # ---- client state and plans ------------------------------------------------
  def init_clients(self, params):
    """Bits 32·R_n and, per group and bit-width, LSQ's scale 2·mean|w|/√Q_P
    of the initial model; the engine's rows."""
    q, n = self.qvit, self.num_clients
    levels = jnp.arange(q.min_bits, q.max_bits + 1, dtype=jnp.float32)
    root_qp = jnp.sqrt(2.0**(levels - 1) - 1)
    bits, scales = {}, {}
    for name, (leaf, _) in GROUPS.items():
      w = jnp.abs(params[leaf])
      axis = _HEAD_AXIS[name]
      other = tuple(a for a in range(1, w.ndim) if a != axis)
      mean = jnp.mean(w, axis=other)                      # [L, H] or [L]
      mean = jnp.maximum(mean, 1e-8)
      table = 2 * mean[..., None] / root_qp               # [..., levels]
      scales[name] = jnp.broadcast_to(table, (n,) + table.shape)
      start = jnp.clip(32.0 * jnp.asarray(self.bit_budgets), q.min_bits,
                       q.max_bits)
      bits[name] = jnp.broadcast_to(
          start.reshape((n,) + (1,) * len(self.bit_shapes[name])),
          (n,) + self.bit_shapes[name]).astype(jnp.float32)
    return {**super().init_clients(params), 'bits': bits, 'scales': scales}

  def plan_round(self, state, data=None, inputs=None):
    plans = super().plan_round(state, data, inputs)
    return plans.replace(extras={**plans.extras,
                                 'budget': self.of_slots(plans.client_id,
                                                         self.bit_budgets)})

  # ---- the client program ----------------------------------------------------
  def weight_loss(self, local, x, y, plan, ctx):
    """The engine's loss (CE over the exits) of the fake-quantised model, plus
    the budget penalty under `budget_rule='penalty'`."""
    state, budget = local.client_state, plan.extras['budget']
    bits = self.effective_bits(state['bits'], budget)
    params = self.fake_quantize(local.params, bits, state['scales'])
    loss = super().weight_loss(local.replace(params=params), x, y, plan, ctx)
    if self.qvit.budget_rule == 'penalty':
      excess = jnp.maximum(self.memory_ratio(bits) - budget, 0.0)
      loss = loss + self.qvit.lambda_bits * excess**2
    return loss

  def client_optimizer(self):
    """The client optimiser on the weights, SGD at `quant_lr` on the bits
    and scales."""
    weights = super().client_optimizer()
    quant_lr = self.qvit.quant_lr

    def labels(tree):
      return program.LocalModel(
          jax.tree.map(lambda _: 'weights', tree.params),
          jax.tree.map(lambda _: 'quant', tree.client_state))

    return lambda lr: optax.multi_transform(
        {'weights': weights(lr), 'quant': optax.sgd(quant_lr)}, labels)

  def client_program(self) -> program.ClientProgram:
    """E epochs on the fake-quantised model (weights, bits and scales), from
    the quantised download to the quantised upload."""
    q = self.qvit
    base = program.sgd_program(
        self.weight_loss, self.client_optimizer(),
        num_steps=self.max_local_steps(),
        batch_size=self.config.batch_size,
        trainable=(('params',), ('client_state', 'bits'),
                   ('client_state', 'scales')),
        scan_unroll=self.config.scan_unroll)

    def init(start, plan):
      if q.quantized_download:
        start = start.replace(params=self.quantize_local(
            start.params, start.client_state, plan.extras['budget']))
      return base.init(start, plan)

    def final(carry, plan):
      local = base.final(carry, plan)
      params = self.quantize_local(local.params, local.client_state,
                                   plan.extras['budget'])
      return self.finish_weights(local.replace(params=params), plan)

    return dataclasses.replace(base, init=init, final=final)

  # ---- accounting ---------------------------------------------------------------
  def quantized_transfer_bytes(self, bits: dict, budget) -> jax.Array:
    """Bytes of one copy of the model at the effective bit-widths: Σ_g
    N_g·b_g/8, a scale and a bit-width per group, float32 elsewhere (what
    `VitOnClock.transfer_bytes` counts in float32)."""
    bits = self.effective_bits(bits, budget)
    weights = sum(self.group_entries[k] * jnp.sum(b) / 8
                  for k, b in bits.items())
    groups = sum(int(np.prod(s)) for s in self.bit_shapes.values())
    return weights + GROUP_HEADER_BYTES * groups + 4.0 * self.float_entries

  def round_metrics(self, state, plans, outputs):
    """The engine's metrics with the bytes counted quantised: down at the
    client's bit-widths at the round's start, up at its end (uploads that
    get through)."""
    metrics = super().round_metrics(state, plans, outputs)
    active = plans.is_active()
    budget = plans.extras['budget']
    measure = jax.vmap(self.quantized_transfer_bytes)
    held = jax.tree.map(lambda b: self.of_slots(plans.client_id, b),
                        state.clients['bits'])   # the slots' clients'
    down = measure(held, budget)
    up = measure(outputs.client_state['bits'], budget)
    metrics['bytes_down'] = jnp.sum(jnp.where(active, down, 0.0))
    metrics['bytes_up'] = jnp.sum(jnp.where(plans.delivers(), up, 0.0))
    return metrics
