"""PruneFL (Jiang et al., "Model Pruning Enables Efficient Federated Learning
on Edge Devices", TNNLS 2022) on the ViT engine of Co-S²P's baselines
(`vit_engine`), structured (Co-S²P's
baselines, Tabs. 1–2: heads and rows, never single weights).

One global sparse model: a 0/1 mask per unit (MSA head, attention-projection
row, fc1 row, fc2 row of every block; `models.vit`) in
`ServerState.extras['mask']`, full depth, FedAvg of every entry over the
clients holding it (as FedRolex on this engine; synchronous at the clock's
defaults μ = 1, T_clk = 0).

Importance (Sec. IV of the paper). Pruned units have zero weights in the
forward pass (the server keeps their last values; a regrown unit resumes
from them, as the authors' code does), and every local step's gradient g is
the dense one at that sparse point, so a pruned unit's g is the first-order
effect of switching it back on. A unit's importance is Σ_steps Σ_{j ∈ u}
g_j² over the entries it owns (`models.vit.segment_specs`: a kernel entry
belongs to its output unit); the clients report it every round and the
server accumulates the example-weighted mean over the reconfiguration
interval. The authors' code squares the round's summed gradient instead;
we follow the paper's Σ g².

Time (the paper's linear model T(M) = c + Σ_{u ∈ M} t_u): t_u = the unit's
training FLOPs (3 × its forward FLOPs of `systems.vit_cost`, over E epochs
of the client's samples) on the slowest client's device plus its
parameters down and up on the link; c the same for the embedding, the
LayerNorms and the exit head. A unit's density share is its parameter
count; the density of a mask is Σ_kept P_u / Σ_all P_u (a linear measure:
FedRolex's width-β submodel has density β).

Reconfiguration (every `reconfig_every` rounds, Alg. 2 of the paper and the
authors' `architecture_search`): in every block and kind the
⌊`max_decrease`·kept⌋ kept units of smallest ‖w_u‖² may be removed, the
other kept units stay; the candidates (those and the pruned units) are
added in decreasing I_u / t_u while that exceeds the current
(I_fixed + Σ I) / (c + Σ t) (which maximises the estimated loss decrease
per second of a round) and the density stays ≤ `max_density` (0: the
largest client's β_n = √R_n). The authors decay `max_decrease` with a
half-life of 10⁴ rounds; we keep it fixed. Our addition: units are also
added, in the same order, until the density reaches the smallest client's
β_n (on a small ViT the exit head and embeddings' importance per second can
beat every unit's, and the greedy rule alone then keeps no unit at all).

Initial pruning (`init_steps` > 0): before round 0, `init_steps` local
steps of the full model on client 0's data (the "selected client"), then one
reconfiguration with every unit a candidate. The paper repeats this until
the density settles; we run it once.

Clients: client n trains the global mask trimmed to its budget β_n = √R_n:
its kept units in decreasing score (I_u / t_u of the last
reconfiguration; ‖w_u‖² / t_u before any) while the density stays ≤ β_n.
The clock charges client n the width-β_n submodel at full depth (its
budget, as FedRolex), not the mask's own, which the schedule cannot know
before training.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_het.methods.cos2p import masked_eval
from fedjax_het.methods.cos2p.vit_engine import (WITHOUT_COS2P,
                                                 VitOnClock)
from fedjax_het.core import key_streams, program
from fedjax_het.core.key_streams import Stream
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState
from fedjax_het.models import vit
from fedjax_het.options import (OptionGroup, in_range, non_negative_int,
                                option)
from fedjax_het.submodel import units as units_lib
from fedjax_het.systems import vit_cost

GROUPS = {kind: f'blocks/{kind}' for kind in vit.UNIT_KINDS}


@dataclasses.dataclass(frozen=True)
class PruneFLOptions(OptionGroup):
  """`config.prunefl`: PruneFL's initial and adaptive pruning."""
  key = 'prunefl'
  init_steps: int = option(0, 'local steps of initial pruning on client 0 before round 0 (0: none)', check=non_negative_int)
  reconfig_every: int = option(50, 'rounds between reconfigurations (the paper\'s ΔR; 0: never)', check=non_negative_int)
  max_decrease: float = option(0.3, 'fraction of the kept units per block and kind that a reconfiguration may remove (the smallest ‖w‖²)', check=in_range(0, 1))
  max_density: float = option(0.0, 'cap of the global model\'s density (0: the largest client\'s √R_n)', check=in_range(0, 1))


def _flat(tree: dict) -> jax.Array:
  return jnp.concatenate([tree[k].ravel() for k in vit.UNIT_KINDS])


def _unflat(flat: jax.Array, like: dict) -> dict:
  out, start = {}, 0
  for k in vit.UNIT_KINDS:
    size = like[k].size
    out[k] = flat[start:start + size].reshape(like[k].shape)
    start += size
  return out


def _per_unit(values: dict, like: dict) -> jax.Array:
  """{kind: scalar} spread over every unit, flat."""
  return _flat({k: jnp.full(like[k].shape, values[k], jnp.float32)
                for k in vit.UNIT_KINDS})


def reconfigure(kept: dict, importance: dict, magnitude: dict,
                fixed_importance: jax.Array, unit_time: dict,
                unit_params: dict, fixed_time: float, cap: float,
                max_decrease: float, floor: float = 0.0) -> dict:
  """PruneFL's architecture search on units (module docstring).

  Args:
    kept: the current mask {kind: [L, U]} (0/1).
    importance, magnitude: Σ g² and ‖w‖² per unit, {kind: [L, U]}.
    fixed_importance: Σ g² of the unprunable parameters (scalar).
    unit_time, unit_params: t_u and P_u per kind {kind: float}.
    fixed_time: c.
    cap: the largest density.
    max_decrease: the fraction of kept units per row that may be removed.
    floor: the least density: units are added in ratio order until it is
      reached even where they do not improve the ratio (0: PruneFL's greedy
      rule alone, which can keep no unit when the unprunable parameters'
      importance per second beats every unit's).

  Returns:
    The new mask {kind: [L, U]}.
  """
  stays = {}
  for k in vit.UNIT_KINDS:
    on = kept[k] > 0
    rank = jnp.argsort(jnp.argsort(jnp.where(on, magnitude[k], jnp.inf),
                                   axis=1, stable=True), axis=1, stable=True)
    removable = jnp.floor(max_decrease * on.sum(1, keepdims=True) + 1e-6)
    stays[k] = on & (rank >= removable)
  stays, imp = _flat(stays), _flat(importance)
  time, size = _per_unit(unit_time, kept), _per_unit(unit_params, kept)
  numerator = fixed_importance + jnp.sum(jnp.where(stays, imp, 0.0))
  denominator = fixed_time + jnp.sum(jnp.where(stays, time, 0.0))
  room = cap * jnp.sum(size) - jnp.sum(jnp.where(stays, size, 0.0))
  ratio = jnp.where(stays, -jnp.inf, imp / time)
  order = jnp.argsort(-ratio, stable=True)
  r, t, i, s = ratio[order], time[order], imp[order], size[order]
  before = lambda x: jnp.cumsum(x) - x
  improves = r > (numerator + before(i)) / (denominator + before(t))
  below_floor = (jnp.sum(jnp.where(stays, size, 0.0)) + before(s) <
                 floor * jnp.sum(size) - 1e-6)
  fits = jnp.cumsum(s) <= room + 1e-6
  added = jnp.cumprod(((improves | below_floor) & fits &
                       (r > -jnp.inf)).astype(jnp.int32))
  new = stays | jnp.zeros_like(stays).at[order].set(added > 0)
  return _unflat(new.astype(jnp.float32), kept)


def trim(kept: dict, score: dict, unit_params: dict,
         budget: jax.Array) -> dict:
  """The kept units of highest score while the density stays ≤ `budget`."""
  on, sc = _flat(kept) > 0, _flat(score)
  size = _per_unit(unit_params, kept)
  order = jnp.argsort(-jnp.where(on, sc, -jnp.inf), stable=True)
  fits = jnp.cumsum(jnp.where(on, size, 0.0)[order]) <= (
      budget * jnp.sum(size) + 1e-6)
  keep = jnp.zeros_like(on).at[order].set(jnp.cumprod(fits) > 0) & on
  return _unflat(keep.astype(jnp.float32), kept)


class PruneFL(VitOnClock):
  """PruneFL with structured units (module docstring)."""

  name = 'prunefl'
  option_groups = VitOnClock.option_groups + (PruneFLOptions,)
  full_depth = True
  per_round_metrics = ('model_density',)
  fixed_options = {**WITHOUT_COS2P, 'cos2p.width_masks': 'rolling'}

  def __init__(self, config, model, data):
    self.prunefl = PruneFLOptions.from_config(config)
    super().__init__(config, model, data)
    self.train_data = data
    shape, o = self.cost_shape(), self.options
    t, d, m, hd = shape.tokens, shape.hidden, shape.mlp, shape.head_dim
    flops = {'heads': 2 * t * d * 3 * hd + 4 * t * t * hd, 'proj': 2 * t * d,
             'fc1': 2 * t * d, 'fc2': 2 * t * m}
    self.unit_params = {'heads': 3 * hd * (d + 1), 'proj': d + 1,
                        'fc1': d + 1, 'fc2': m + 1}
    fixed_flops = vit_cost.embedding_flops(shape) + vit_cost.head_flops(shape)
    fixed_params = (vit_cost.embedding_params(shape) + vit_cost.head_params(
        shape) + shape.depth * 4 * d)
    speeds = [vit_cost.device(k, o.device_speeds).speed * o.speed_scale
              for k in self.device_types]
    samples = self.round_steps * config.batch_size
    per_flop = float(np.max(samples / np.asarray(speeds))) * 3
    per_param = 2 * 32 / o.bandwidth_bps
    self.unit_time = {k: per_flop * flops[k] + per_param * p
                      for k, p in self.unit_params.items()}
    self.fixed_time = per_flop * fixed_flops + per_param * fixed_params
    self.cap = self.prunefl.max_density or float(self.width.max())
    # No client is left with fewer units than its own budget asks for.
    self.floor = min(float(self.width.min()), self.cap)

  # ---- state ---------------------------------------------------------------------
  def init_clients(self, params):
    """None: a client's units and importance are the round's
    (`program_client_state`)."""
    del params
    return None

  def unit_magnitude(self, params) -> dict:
    sums = units_lib.unit_sums(params, self.specs, jnp.square)
    return {k: sums[g] for k, g in GROUPS.items()}

  def magnitude_score(self, params) -> dict:
    mag = self.unit_magnitude(params)
    return {k: mag[k] / self.unit_time[k] for k in vit.UNIT_KINDS}

  def init_extras(self, params):
    """The full mask, no importance yet, magnitude scores."""
    zeros = {g: jnp.zeros(s) for g, s in units_lib.group_shapes(
        self.specs).items()}
    return {**super().init_extras(params),
            'mask': {k: jnp.ones(s) for k, s in self.model.unit_shapes(
                ).items()},
            'importance': zeros, 'score': self.magnitude_score(params)}

  def initial_state(self, params, key) -> ServerState:
    """With `init_steps`: initial pruning on client 0 (module docstring)."""
    state = super().initial_state(params, key)
    steps = self.prunefl.init_steps
    if not steps:
      return state
    layers = self.model.depth
    full = state.extras['mask']
    window = {'run': jnp.ones(layers, bool), 'frozen': jnp.zeros(layers, bool),
              'exits': self.exit_positions(jnp.int32(0), jnp.int32(layers)),
              'teacher': jnp.int32(layers - 1), 'units': full}
    plan = ClientPlan(
        client_id=jnp.int32(0), key=key_streams.fold(key, Stream.PRUNEFL_INIT),
        num_steps=jnp.int32(steps),
        lr=jnp.float32(self.config.client_lr), weight=jnp.float32(1.0),
        group=jnp.int32(0), extras=window)
    out = program.run_program(
        self.importance_program(steps),
        program.LocalModel(state.params, {
            'units': full, 'importance': jax.tree.map(
                jnp.zeros_like, state.extras['importance'])}),
        plan, self.train_data, min_count=self.min_client_count)
    params = jax.tree.map(jnp.subtract, state.params, out.delta)
    importance = out.client_state['importance']
    mask = self.reconfigured(full, importance, params, max_decrease=1.0)
    extras = {**state.extras, 'mask': mask, 'score': self.scores(importance),
              'start': jax.tree.map(lambda p, h: jnp.broadcast_to(p, h.shape),
                                    params, state.extras['start'])}
    return state.replace(params=params, extras=extras)

  def scores(self, importance: dict) -> dict:
    return {k: importance[g] / self.unit_time[k] for k, g in GROUPS.items()}

  def reconfigured(self, mask, importance, params, max_decrease=None):
    fixed = sum(jnp.sum(v) for g, v in importance.items()
                if g not in GROUPS.values())
    return reconfigure(
        mask, {k: importance[g] for k, g in GROUPS.items()},
        self.unit_magnitude(params), fixed, self.unit_time, self.unit_params,
        self.fixed_time, self.cap,
        self.prunefl.max_decrease if max_decrease is None else max_decrease,
        floor=self.floor)

  def program_client_state(self, state: ServerState, plans: ClientPlan):
    n = plans.client_id.shape[0]
    zeros = jax.tree.map(lambda v: jnp.zeros((n,) + v.shape, v.dtype),
                         state.extras['importance'])
    return {'units': plans.extras['units'], 'importance': zeros}

  def next_clients(self, state, plans, outputs):
    """The clients keep no state (`init_clients`)."""
    del plans, outputs
    return state.clients

  # ---- plans -----------------------------------------------------------------------
  def plan_round(self, state, data=None, inputs=None) -> ClientPlan:
    """The engine's synchronous plan with the global mask trimmed per client."""
    plans = super().plan_round(state, data, inputs)
    extras = state.extras
    units = jax.vmap(lambda b: trim(extras['mask'], extras['score'],
                                    self.unit_params, b))(
        self.of_slots(plans.client_id, self.width.astype(np.float32)))
    return plans.replace(extras={**plans.extras, 'units': units})

  # ---- the client program ------------------------------------------------------------
  def importance_program(self, num_steps: int) -> program.ClientProgram:
    """The engine's loss (CE, one exit) on the sparse point, steps of the client
    optimiser on the kept entries, Σ g² per segment accumulated."""
    make_optimizer = self.client_optimizer()

    def init(start, plan):
      return start, make_optimizer(plan.lr).init(start.params)

    def step(carry, batch, plan, ctx):
      local, opt_state = carry
      window = plan.extras
      units = window['units']
      owned = units_lib.unit_broadcast(self.owned(units), self.specs)
      dense = {**window, 'units': jax.tree.map(jnp.ones_like, units)}

      def objective(params):
        sparse = jax.tree.map(
            lambda p, m: p + jax.lax.stop_gradient(p * m - p), params, owned)
        return self.weight_loss(program.LocalModel(sparse, None), batch.x,
                                batch.y, plan.replace(extras=dense), ctx)

      loss, grads = jax.value_and_grad(objective)(local.params)
      squares = units_lib.unit_sums(grads, self.specs, jnp.square)
      mask = self.entry_holders(units, window)
      grads = program.apply_mask(grads, mask)
      updates, opt_state = make_optimizer(plan.lr).update(
          grads, opt_state, local.params)
      params = optax.apply_updates(local.params,
                                   program.apply_mask(updates, mask))
      state = local.client_state
      state = {**state, 'importance': jax.tree.map(
          jnp.add, state['importance'], squares)}
      return (local.replace(params=params, client_state=state),
              opt_state), loss, None

    return program.ClientProgram(
        init, step, lambda carry, plan: carry[0], num_steps=num_steps,
        batch_size=self.config.batch_size,
        scan_unroll=self.config.scan_unroll)

  def owned(self, units: dict) -> dict:
    """{segment group: 1 where the segment's entries are in the forward}."""
    ones = {g: jnp.ones(s) for g, s in units_lib.group_shapes(
        self.specs).items()}
    return {**ones, **{g: units[k] for k, g in GROUPS.items()}}

  def client_program(self) -> program.ClientProgram:
    return self.importance_program(self.max_local_steps())

  # ---- the server ------------------------------------------------------------------
  def aggregate(self, state: ServerState, plans: ClientPlan,
                outputs: ClientOutput) -> ServerState:
    """FedAvg over holders; Σ g² accumulated; reconfiguration every
    `reconfig_every` rounds (after rounds q with (q + 1) mod ΔR = 0)."""
    new = super().aggregate(state, plans, outputs)
    weight = plans.active_weight()
    weight = weight / jnp.maximum(jnp.sum(weight), 1e-30)
    round_importance = jax.tree.map(
        lambda v: jnp.tensordot(weight, v, axes=1),
        outputs.client_state['importance'])
    old = state.extras
    importance = jax.tree.map(jnp.add, old['importance'], round_importance)
    every = self.prunefl.reconfig_every
    now = ((state.round + 1) % every == 0) if every else jnp.bool_(False)
    mask = self.reconfigured(old['mask'], importance, new.params)
    pick = lambda a, b: jax.tree.map(lambda x, y: jnp.where(now, x, y), a, b)
    extras = {**new.extras,
              'mask': pick(mask, old['mask']),
              'importance': pick(jax.tree.map(jnp.zeros_like, importance),
                                 importance),
              'score': pick(self.scores(importance), old['score'])}
    return new.replace(extras=extras)

  def round_metrics(self, state, plans, outputs):
    """The engine's metrics and the density of the round's global mask."""
    size = _per_unit(self.unit_params, state.extras['mask'])
    density = jnp.sum(_flat(state.extras['mask']) * size) / jnp.sum(size)
    return {**super().round_metrics(state, plans, outputs),
            'model_density': density}

  def state_evaluator(self, split):
    """The global sparse model (mask in extras) on the test sets."""
    return masked_eval.global_mask_evaluator(
        self.model, split, self.config.eval_batch_size,
        lambda state: state.extras['mask'])
