"""The shared mechanism of submodel methods: capacity levels, masks, evaluation.

Client i has a capacity γ_i ∈ (0, 1], the fraction of the global model it can
train (FIARSE §3). The levels of `config.capacities` are assigned to clients
in equal contiguous blocks of client ids (FIARSE's code; client data are
partitioned at random, so blocks carry no data bias). Every round each
sampled client gets the mask of its level's submodel; local training updates
only that submodel, and the server averages each coordinate over the clients
that updated it (partial averaging, Sec. 3 of FIARSE):

    x̃ ← x̃ − η_s · Σ_i w_i m_ij Δ_ij / Σ_i w_i m_ij   (entries no client holds stay),

with m the submodel mask ('mask', App. C.1 Eq. 12) or 1{Δ_ij ≠ 0} ('nonzero',
Sec. 3's Agg and FIARSE's code), and w_i from `aggregation_weights`
(FIARSE and HeteroFL count clients: 'uniform').

A method supplies `level_plan` (masks and extras of capacity levels), the forward it
trains (`forward_params`) and `eval_mask(params, γ)`, the submodel any
client of capacity γ gets from the global model — also sizes never trained.

Evaluation (FIARSE §5), logged every `eval_every` rounds:
  accuracy@γ, loss@γ      the γ-submodel on the global test set (Global): the
                          test split in its order (default), or with
                          `submodel.global_test='client_shards'` the clients'
                          local shards concatenated in client order, as
                          FIARSE's code does (with batch-statistics BN each
                          eval batch then holds one client's skewed labels);
  accuracy, loss          their means over the levels (Global);
  local_accuracy@γ        mean over clients of level γ of the accuracy on
                          their own test shard with the γ-submodel (Model(γ));
  local_accuracy          mean of local_accuracy@γ over levels (Local);
  unparticipated_accuracy@γ  for each γ of `submodel.eval_capacities`;
  params_fraction@γ       share of all parameters in the γ-submodel at init.
The local metrics need `config.local_test = True`.

A submodel method is FedAvg on submodels: it runs under FedAvg's parts, the
systems part and the cells part (`config.hierarchy`, `parts.cells`), where
the sampled clients of a cell train their level's submodel from the cell's
edge model for E edge rounds, each edge mean the partial average above
within the cell (OMA or AirComp), and the cloud averages each coordinate over
the cells whose clients hold it. The level masks are planned once per global
round from the global model (FIARSE's straight-through forward still reads
the current local params at every step).
"""
import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_het import evaluation
from fedjax_het import models
from fedjax_het.evaluation import capacity_key
from fedjax_het.methods.fedavg import FedAvg
from fedjax_het.core import program
from fedjax_het.core.state import ClientPlan, ServerState
from fedjax_het.parts.cells import HierarchyOptions
from fedjax_het.parts.clock import ClockOptions
from fedjax_het.parts import dp as dp_lib
from fedjax_het.parts import secagg as secagg_lib
from fedjax_het.parts import links_work
from fedjax_het.options import (ConfigError, OptionGroup, in_range, is_bool,
                                option, positive)

PyTree = Any
PARTIAL_AVERAGES = ('auto', 'nonzero', 'mask')


def _capacities_in_unit_interval(key: str, value) -> None:
  if not all(0 < g <= 1 for g in value):
    raise ConfigError(f'{key} must lie in (0, 1], got {tuple(value)}.')


@dataclasses.dataclass(frozen=True)
class SubmodelOptions(OptionGroup):
  """`config.submodel`: FIARSE, HeteroFL, FedRolex, FjORD, ScaleFL, ..."""
  key = 'submodel'
  partial_average: str = option(
      'auto', "per-coordinate averaging denominator: 'nonzero' counts clients "
      "whose update is non-zero (FIARSE's code, Sec. 3 Agg), 'mask' clients "
      "whose submodel holds it (App. C.1 Eq. 12, HeteroFL), 'auto' the "
      "method's own", choices=PARTIAL_AVERAGES)
  threshold_granularity: str = option(
      'model', 'FIARSE thresholds: one top-k over all maskable parameters '
      '(model), one per layer / ResNet stage (layer) or per prefix in '
      'threshold_shards (shard)', choices=('model', 'layer', 'shard'))
  threshold_shards: tuple = option((), "parameter-path prefixes of the "
                                   "threshold groups (granularity 'shard')")
  tcb_bias: bool = option(
      True, "FIARSE: Eq. (3)'s factor 1 + 2|x|θ/(|x|+θ)² on the gradient of "
      "kept entries; False: the plain masked gradient, what the official code "
      "computes (its Bern backward never runs)", check=is_bool)
  update_mask: str = option(
      'round_start', 'mask of local gradients and optimiser updates: the '
      "round-start submodel, or 'current': also FIARSE's 1{|x| ≥ θ} at each "
      'step, so with momentum the submodel still only shrinks',
      choices=('round_start', 'current'))
  global_test: str = option(
      'test_set', "global test set: the test split in its order, or "
      "'client_shards': the local test shards concatenated in client order "
      "(FIARSE's code; label-skewed eval batches under static BN; needs "
      'local_test)', choices=('test_set', 'client_shards'))
  width_rule: str = option(
      'sqrt', 'width methods: r = sqrt(γ), or the widest r holding at most a '
      'γ fraction of the parameters (params)', choices=('sqrt', 'params'))
  scaler: bool = option(True, 'HeteroFL/FedRolex Scaler: hidden outputs '
                        'divided by r in training', check=is_bool)
  eval_capacities: tuple = option(
      (), 'extra capacities evaluated on the global test set as '
      'unparticipated clients (FIARSE Fig. 4)',
      check=_capacities_in_unit_interval)
  scalefl_depth_tolerance: float = option(
      0.8, 'ScaleFL: depth s(γ) is the shallowest whose full-width submodel '
      'holds ≥ this·γ of the parameters',
      check=in_range(0, 1, closed_low=False))
  scalefl_kd_weight: float = option(
      0.05, 'ScaleFL: weight g of the self-distillation term',
      check=in_range(0, 1))
  scalefl_temperature: float = option(
      3.0, 'ScaleFL: distillation temperature T', check=positive)
  scalefl_kd_start: float = option(
      0.25, 'ScaleFL: fraction of `rounds` after which distillation starts',
      check=in_range(0, 1))


def level_of_clients(num_clients: int, num_levels: int) -> np.ndarray:
  """int32 [M]: level of each client, equal contiguous blocks of client ids."""
  return (np.arange(num_clients) * num_levels // num_clients).astype(np.int32)


class SubmodelAlgorithm(FedAvg):
  """Base of the methods that train capacity-limited submodels.

  Subclasses set `default_partial_average` and implement `level_plan`,
  `eval_mask` and, if the trained forward differs from the masked model,
  `forward_params`.
  """

  supports_capacities = True
  default_partial_average = 'mask'
  sums_deltas_in_map = True
  # Submodels, under lossy uplinks and unequal work (the systems part), on
  # the virtual clock and in cells (FedAvg's cells part: clients train their
  # level's submodel from their cell's edge model).
  option_groups = (SubmodelOptions, links_work.SystemsOptions, ClockOptions,
                   HierarchyOptions, dp_lib.DPOptions,
                   secagg_lib.SecaggOptions)
  # Whether the trained submodel is re-evaluated at every local step
  # (FIARSE's TCB-GD): only then may `submodel.update_mask` be 'current'.
  straight_through = False

  def __init__(self, config, model, data):
    self.submodel_options = SubmodelOptions.from_config(config)
    super().__init__(config, model, data)
    levels = tuple(float(g) for g in config.capacities)
    if len(set(levels)) != len(levels):
      raise ValueError(f'capacities must be distinct levels, got {levels}.')
    options = self.submodel_options
    if options.update_mask == 'current' and not self.straight_through:
      raise ConfigError(f"submodel.update_mask='current' needs a submodel "
                        f're-evaluated at every step (fiarse), not '
                        f'{self.name}.')
    if options.global_test == 'client_shards' and not config.local_test:
      raise ConfigError("submodel.global_test='client_shards' needs "
                        'local_test=True.')
    self.levels = levels
    self.client_level = jnp.asarray(
        level_of_clients(self.num_clients, len(levels)))
    self.partial_average = (self.default_partial_average
                            if options.partial_average == 'auto'
                            else options.partial_average)
    self.input_shape = data.feature_shape
    self.template = models.init_params(model, jax.random.PRNGKey(0),
                                       self.input_shape)
    self._eval_params = jax.jit(self.eval_params, static_argnums=1)
    self._eval_mask = jax.jit(self.eval_mask, static_argnums=1)

  # ---- what a method defines ------------------------------------------------
  def level_plan(self, state: ServerState, levels: jax.Array
                 ) -> tuple[PyTree, PyTree]:
    """(masks [K, ...], extras) of clients at capacity indices `levels` [K]."""
    raise NotImplementedError

  def eval_mask(self, params: PyTree, gamma: float) -> PyTree:
    """Entries of the global params in the γ-submodel a client receives."""
    raise NotImplementedError

  def eval_params(self, params: PyTree, gamma: float) -> PyTree:
    """The γ-submodel of the global params (zeros outside it).

    Methods whose submodels need more than parameters at test time (e.g. an
    early exit to read) return a pytree that `eval_apply` understands.
    """
    return program.apply_mask(params, self.eval_mask(params, gamma))

  def eval_apply(self, submodel: PyTree, x: jax.Array) -> jax.Array:
    """Logits [B, classes] of an `eval_params` submodel on a batch."""
    return self.model.apply({'params': submodel}, x)

  # ---- engine hooks ----------------------------------------------------------
  def plan_clients(self, state: ServerState, client_ids: jax.Array,
                   keys: jax.Array) -> ClientPlan:
    plan = super().plan_clients(state, client_ids, keys)
    # Submodels depend on the level only: plan every level once ([L, ...]
    # masks and thresholds); the masks stay a table the clients index by
    # their level, the extras are gathered per client.
    level_masks, level_extras = self.level_plan(
        state, jnp.arange(len(self.levels)))
    levels = self.client_level[client_ids]
    return plan.replace(
        mask_table=level_masks, mask_row=levels,
        extras=jax.tree.map(lambda x: x[levels], level_extras))

  def coverage_masks(self, mask, delta):
    """The submodel mask, or 1{Δ ≠ 0} under the 'nonzero' rule."""
    if self.partial_average == 'nonzero':
      return jax.tree.map(lambda d: d != 0, delta)
    return mask

  # ---- evaluation ------------------------------------------------------------
  def submodel_fractions(self, params: PyTree) -> dict[str, float]:
    """Fraction of all parameters in each level's submodel of `params`."""
    total = sum(x.size for x in jax.tree.leaves(params))
    return {capacity_key(g): float(sum(
        jnp.sum(m) for m in jax.tree.leaves(self._eval_mask(params, g)))) / total
            for g in self.levels}

  def evaluator(self, split) -> Callable[[PyTree], dict[str, jax.Array]]:
    apply = self.eval_apply
    batch_size = self.config.eval_batch_size
    test_x, test_y = split.test_x, split.test_y
    if self.submodel_options.global_test == 'client_shards':
      test_x, test_y = evaluation.concatenated_shards(split.local_test)
    global_eval = evaluation.make_evaluator(apply, test_x, test_y, batch_size)
    local_eval = None
    if split.local_test is not None:
      local_eval = evaluation.make_client_evaluator(apply, split.local_test,
                                                  batch_size)
    client_level = np.asarray(self.client_level)
    extra = tuple(float(g) for g in self.submodel_options.eval_capacities)

    fractions = self.submodel_fractions(self.template)

    def evaluate(params):
      out = {f'params_fraction@{k}': v for k, v in fractions.items()}
      level_params = [self._eval_params(params, g) for g in self.levels]
      for g, p in zip(self.levels, level_params):
        result = global_eval(p)
        out[f'accuracy@{capacity_key(g)}'] = result['accuracy']
        out[f'loss@{capacity_key(g)}'] = result['loss']
      out['accuracy'] = np.mean([out[f'accuracy@{capacity_key(g)}']
                                 for g in self.levels])
      out['loss'] = np.mean([out[f'loss@{capacity_key(g)}']
                             for g in self.levels])
      if local_eval is not None:
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *level_params)
        per_client = np.asarray(local_eval(stacked, client_level)['accuracy'])
        for i, g in enumerate(self.levels):
          out[f'local_accuracy@{capacity_key(g)}'] = float(
              per_client[client_level == i].mean())
        out['local_accuracy'] = float(np.mean([
            out[f'local_accuracy@{capacity_key(g)}'] for g in self.levels]))
      for g in extra:
        out[f'unparticipated_accuracy@{capacity_key(g)}'] = global_eval(
            self._eval_params(params, g))['accuracy']
      return out

    return evaluate
