"""ScaleFL (Ilhan et al., CVPR 2023), a width-and-depth baseline of FIARSE.

A client of capacity γ trains the first s stages of the global model (with
the early exits 1..s attached after them) at width r: HeteroFL's prefix
channel windows (`fedjax_het.submodel.width`) intersected with a depth mask
that drops every stage and exit deeper than s. The model must be built with
`exits=True` (mlp, lenet5, resnet18): `apply` then returns the logits of all
exits [E, B, classes], and stage j is every module created after exit j−1 up
to exit j (creation order = forward order, as the width layout reads it).

Depth and width of a capacity γ (FIARSE does not give the split for its
capacity sets; ScaleFL's code hard-codes depths 1–4 at widths 0.7, 0.7, 0.75,
1 for its own four levels; we read it as follows):

    s(γ) = the smallest depth whose full-width submodel (stages and exits
           1..s) holds at least τ·γ of all parameters, τ =
           `submodel.scalefl_depth_tolerance` (0.8);
    r(γ) = the largest width r ≤ 1 whose (s, r) submodel holds at most γ of
           them (bisection, as `width_rule='params'`).

For the CIFAR-10 ResNet-18 with exits (11,178,472 params) the levels
{1/64, 1/16, 1/4, 1} get depths 1, 2, 3, 4 at full width (fractions 0.0135,
0.0606, 0.2487, 1); {0.04, 0.16, 0.36, 0.64, 1} get depths 2, 3, 4, 4, 4 at
widths ≈ 0.81, 0.80, 0.60, 0.80, 1. Levels need not nest: (3, 0.80) for 0.16
and (4, 0.60) for 0.36 hold different parts of stages 1–3. The submodel
counts every parameter it holds, earlier exits included (the client
downloads and trains them), so `params_fraction@γ` ≤ γ.

Local objective (ScaleFL code `train.py`), for a client of depth s
with exit logits z_1..z_s:

    L = Σ_{j=1}^{s} j·ℓ_j / Σ_{j=1}^{s} j,    ℓ_s = CE(z_s, y),
    ℓ_j = (1 − g)·CE(z_j, y) + g·T²·KL(softmax(z_s/T) ‖ softmax(z_j/T)),  j < s,

with the teacher z_s held constant (stop_gradient), T =
`submodel.scalefl_temperature` (3) and g = `submodel.scalefl_kd_weight`
once the round index exceeds `scalefl_kd_start`·`rounds` (0 before; the
code's `round > 0.25·num_rounds`). The KL is summed over classes and
averaged over the batch. What the official code (git-disl/scale-fl) does
differently, kept out on purpose: its `KDLoss` adds g·T²·KL to the full CE
(the (1 − g) factor is commented out), averages the KL over classes as well
(PyTorch's `KLDivLoss()` 'mean'), and does not detach the teacher; its
`KD_gamma` defaults to 0 and its README sets 0.05 only for BERT on AG News,
hence our default g = 0.05. Its exits on ResNet-110 have three conv layers
before the pool; ours are pool + Dense (`fedjax_het.models`).

Aggregation is HeteroFL's: every entry is averaged over the clients whose
submodel holds it ('mask' partial averaging), so a shallow client never votes
on deeper stages. The Scaler (`submodel.scaler`) is HeteroFL's: hidden
outputs divided by r in training only. ScaleFL's code divides conv outputs by
r at test time too; with static BN right after every conv (ResNet-18) the two
agree, since the norm undoes the scale.

Evaluation at capacity γ — the levels (Global/Local) and unparticipated
sizes alike — reads exit s(γ) of the (s(γ), r(γ)) submodel.
"""
import math
import re
from typing import Any

import jax
import jax.numpy as jnp

from fedjax_het.methods import self_distillation
from fedjax_het.methods.fiarse.width_slicing import HeteroFL
from fedjax_het.core import program
from fedjax_het.submodel import width

PyTree = Any


def exit_depths(params: dict) -> dict[str, int]:
  """Depth (1-based exit index) of every top-level module of a model with exits.

  `params` must be in creation (forward) order, as `model.init` returns it:
  exit j is the j-th exit module (`exit1`, `exit2`, ..., then `head`), and a
  module created after exit j−1 and up to exit j feeds exit j first, so it
  belongs to stage j.
  """
  depths, pending, exits = {}, [], []
  for name in params:
    pending.append(name)
    if name == 'head' or re.fullmatch(r'exit\d+', name):
      exits.append(name)
      depths.update(dict.fromkeys(pending, len(exits)))
      pending = []
  expected = [f'exit{j}' for j in range(1, len(exits))] + ['head']
  if exits != expected or pending:
    raise ValueError(f'a model with exits must create exit1, exit2, ... and '
                     f'end with head, in forward order; got {list(params)}.')
  return depths


def depth_and_width(layout: PyTree, leaf_depth: PyTree, gamma: float,
                    tolerance: float) -> tuple[int, float]:
  """(s, r) of capacity γ by the rule of the module docstring (host, exact).

  Args:
    layout: `LeafLayout` of every parameter (`width.channel_layout`).
    leaf_depth: int depth of every parameter leaf, a pytree like the params.
    gamma: capacity in (0, 1].
    tolerance: τ in (0, 1]; depth s is the first holding ≥ τ·γ at full width.
  """
  leaves = jax.tree.leaves(layout, is_leaf=_is_leaf_layout)
  depths = jax.tree.leaves(leaf_depth)
  sizes = [math.prod(axis.size for axis in leaf.axes) for leaf in leaves]
  total = sum(sizes)

  def held(depth):  # parameters of stages and exits 1..depth at full width
    return sum(n for n, d in zip(sizes, depths) if d <= depth)

  depth = next(s for s in range(1, max(depths) + 1)
               if held(s) >= tolerance * gamma * total)
  kept = [leaf for leaf, d in zip(leaves, depths) if d <= depth]
  rate = width.width_for_capacity(kept, gamma * total / held(depth), 'params')
  return depth, rate


def _is_leaf_layout(x) -> bool:
  return isinstance(x, width.LeafLayout)


def multi_exit_loss(logits: jax.Array, labels: jax.Array, depth: jax.Array,
                    kd_weight: jax.Array, temperature: float) -> jax.Array:
  """ScaleFL's weighted exit loss (module docstring) of one batch.

  Args:
    logits: [E, B, classes] logits of all exits, deepest last.
    labels: int [B].
    depth: int scalar s in 1..E; exits deeper than s get weight 0.
    kd_weight: g, the KD share of the earlier exits' losses (0: CE only).
    temperature: T of the distillation.
  """
  exits = jnp.arange(1, logits.shape[0] + 1)
  weights = jnp.where(exits <= depth, exits, 0) / (depth * (depth + 1) / 2)
  ce, kd = self_distillation.exit_terms(logits, labels, depth - 1,
                                        temperature)
  per_exit = jnp.where(exits == depth, ce,
                       (1 - kd_weight) * ce + kd_weight * kd)
  return jnp.sum(weights * per_exit)


class ScaleFL(HeteroFL):
  """Width- and depth-scaled submodels with early exits and self-distillation."""

  name = 'scalefl'
  reads_exits = True
  supports_token_labels = False  # its multi-exit loss reads class labels
  schedule_depends_on_rounds = True  # KD starts at scalefl_kd_start × rounds

  def __init__(self, config, model, data):
    if not getattr(model, 'exits', False):
      raise ValueError('scalefl trains early exits, so the model must be built '
                       'with model_options.exits=True (mlp, lenet5, resnet18).')
    super().__init__(config, model, data)
    module_depth = exit_depths(self.template)
    self.leaf_depth = {name: jax.tree.map(lambda _, d=d: d, self.template[name])
                       for name, d in module_depth.items()}
    options = self.submodel_options
    self.tolerance = float(options.scalefl_depth_tolerance)
    shapes = [self.submodel_shape(g) for g in self.levels]
    self.depths = jnp.asarray([s for s, _ in shapes], jnp.int32)
    self.rates = jnp.asarray([r for _, r in shapes], jnp.float32)
    self.kd_weight = float(options.scalefl_kd_weight)
    self.temperature = float(options.scalefl_temperature)
    self.kd_start_round = float(options.scalefl_kd_start) * config.rounds

  def submodel_shape(self, gamma: float) -> tuple[int, float]:
    """(depth s, width r) of capacity γ."""
    return depth_and_width(self.layout, self.leaf_depth, gamma, self.tolerance)

  def submodel_mask(self, rate, depth) -> PyTree:
    """Width-`rate` prefix windows of the stages and exits 1..`depth`.

    `rate` and `depth` may be traced (per-client values under vmap).
    """
    return jax.tree.map(lambda keep, d: keep & (d <= depth),
                        width.width_mask(self.layout, rate), self.leaf_depth)

  def level_plan(self, state, levels):
    rates, depths = self.rates[levels], self.depths[levels]
    masks = jax.vmap(self.submodel_mask)(rates, depths)
    kd_on = state.round > self.kd_start_round
    kd_weight = jnp.full(levels.shape, jnp.where(kd_on, self.kd_weight, 0.0),
                         jnp.float32)
    return masks, {'rate': rates, 'depth': depths, 'kd_weight': kd_weight}

  def loss(self, params, x, y, plan, ctx):
    logits = self.model.apply(
        {'params': self.forward_params(params, plan, ctx)}, x, train=True)
    return multi_exit_loss(logits, y, plan.extras['depth'],
                           plan.extras['kd_weight'], self.temperature)

  def eval_mask(self, params, gamma):
    del params
    depth, rate = self.submodel_shape(gamma)
    return self.submodel_mask(rate, depth)

  def eval_params(self, params, gamma):
    depth, _ = self.submodel_shape(gamma)
    return {'params': program.apply_mask(params, self.eval_mask(params, gamma)),
            'exit': jnp.asarray(depth - 1, jnp.int32)}

  def eval_apply(self, submodel, x):
    logits = self.model.apply({'params': submodel['params']}, x)
    return logits[submodel['exit']]
