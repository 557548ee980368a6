"""Co-S²P: semi-asynchronous training of a ViT with learned structured pruning
(Li et al., "Unity is Power: Semi-Asynchronous Collaborative Training of
Large-Scale Models with Structured Pruning in Resource-Limited Clients").

Co-S²P runs on the ViT engine (`vit_engine.VitOnClock`: budgets R_n = R_w ·
R_d, the rolling depth windows of Sec. 4.1 and App. A (our reading A1 of
the offset: `depth_offset`), the virtual clock of Alg. 1 with its analytic
cost model, the start table of stale clients) and adds, per client n
dispatched with w_k:

1. Width masks (Eq. 2, `budget_masks`): one logit per MSA head and per
   output row of the attention projection, fc1 and fc2 of every block
   (`models.vit`), kept in the client's persistent state. In rounds
   k < Q̂ (`mask_rounds`; App. E: Q̂ = 20 for E1, 10 for E2/E3, default 20)
   the client first trains the logits for Ê epochs with the weights frozen
   on Eq. 2's loss, then draws M once (`final_mask`: 'sample' or
   'threshold' σ(I) > ½) and keeps it until its next mask phase.
   `learned_units` names the kinds that learn; the others draw a random
   mask of ⌈R_w·U⌉ units each round (Tab. 3's ✗). Before any mask phase the
   mask keeps all units. `width_masks` other than 'learned' trains the
   engine's fixed widths instead.
2. Weights (Eq. 3): E epochs of `client_optimizer` (Adan with proximal
   weight decay, App. E) on the masked submodel with
   Σ_i (1−λ2)·CE(ŷ_i, y) + λ2·T²·KL_i over the client's exits (the
   engine's); the teacher is its deepest exit (stop-gradient); Eq. 3 as
   written, KL_i = Σ_j σ(ŷ_i/t)_j ln(σ(ŷ_i/t)_j / σ(ŷ_c/t)_j) =
   KL(student‖teacher), by default (`kd_direction='paper'`);
   KL(teacher‖student) (BYOT, the authors' code) is
   `kd_direction='standard'`; batch mean.
3. Personal exit heads (`personal_heads`, A5): a client trains its own,
   never overwritten by the server, and the server keeps a global head per
   exit depth aggregated from their deltas, used for its own evaluation; a
   client's personalised model is its masks, window and heads.

What the clock charges (`charges_realised_masks`): with learned masks and
the analytic cost model, a client's round time (compute and link) is that
of the submodel it holds: its window with, per trainable block, the units
its realised mask M keeps (`vit_cost.Submodel.blocks`), not the nominal
width R_w (Eq. 2's budget term is a soft penalty, so the kept fraction is
not R_w); a dispatch of a round < Q̂ also pays Ê epochs of mask training.
The realised mask exists only once the client has trained, so the clock is
simulated as the rounds run (`prepare_rounds`): before a chunk of rounds
the host reads every client's mask from the state and charges the chunk's
dispatches with it; each charge is recorded in `extras['charged_seconds']`
[Q, N] (float32), so later chunks and a resumed run replay the same clock.
A client draws its mask when its update from a round < Q̂ arrives (round r),
and is dispatched again at round r + 1's start: that dispatch, and every
later one, is charged the mask drawn in round r. A mask drawn within a
compiled chunk would come too late for the chunk's later dispatches, so
`prepare_rounds` ends the chunk's inputs at the first round in which a mask
is drawn, and the runner prepares the rest of the chunk from the state
after it (`core.rounds.RoundRunner._in_parts`): in the mask phase chunks
are one round long, and the clock, the charges and so the parameters do
not depend on `rounds_per_call`. A dispatch of a round < Q̂ redraws its
mask within that round, so it is charged its previous mask (all units
before its first mask phase) and Ê epochs of mask training: one mask phase
behind; from the return of its last mask phase on, a client is charged the
mask it trains and uploads. `schedule` beyond the prepared rounds is a
projection, never charged: the masks held now, or width R_w for a client
that has not yet returned from a mask phase; once every client has
returned from its last mask phase it is the clock the run will follow
(`experiments/cos2p`'s time budgets are fitted on it). The same holds in
the clock's buffered mode (`clock.buffer_size`, FedBuff's server steps as
rounds): a client whose update arrives in step r is eligible again only
after it, so it is dispatched with version r + 1 or later, and simulating
the steps again keeps those already run (`parts.clock`'s module
docstring). Fixed `clock.client_seconds`, a device trace
(`clock.device_trace`, whose work is the samples of a round) and widths
that are not learned are charged as the engine charges them, simulated
once up front.

Aggregation (Eqs. 4–5), per segment i (a head, a row, a LayerNorm, an exit
head, the embedding; `models.vit.segment_specs`):

    γ_n^i = ‖Δ_n^i‖₁ / (‖w_q^i − w_{q−τ_n}^i‖₁ + size(w^i))
    w_{q+1}^i = w_q^i + Σ_{n ∈ N_q^i} γ_n^i / Σ_{m ∈ N_q^i} γ_m^i · Δ_n^i,

Δ_n = w_end − w_start (A7: the model delta, server lr 1, applied to the
current model), N_q^i the arrived clients that trained segment i;
w_{q−τ_n} is the start model of the client's slot (its row of the clock
part's table: by client under Alg. 1, its version's in buffered mode).
`weighting='holders'` is the engine's mean over holders instead.
Co-S²P(Async.) is μ = 1/N, T_clk = 0.
"""
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_het import optim
from fedjax_het.methods import self_distillation
from fedjax_het.methods.cos2p.budget_masks import BudgetMasks
from fedjax_het.methods.cos2p.vit_engine import Cos2pOptions, kept_units, then
from fedjax_het.core import key_streams, program
from fedjax_het.core.key_streams import Stream
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState
from fedjax_het.models import vit
from fedjax_het.submodel import units as units_lib
from fedjax_het.systems import clock, vit_cost

PyTree = Any


@dataclasses.dataclass
class Charges:
  """The clock's charges of realised masks (module docstring), host-side."""
  held_kept: np.ndarray    # int [N, L, 4]: units kept per client, block and
                           # kind by the masks last read from the state
  charged: np.ndarray      # float32 [Q, N]: seconds charged per dispatch
                           # (−1: not yet)
  learned: np.ndarray      # bool [N]: back from a mask phase
  charge_until: int = 0    # the first round not charged for good


class Cos2p(BudgetMasks):
  """Co-S²P on a ViT (module docstring)."""

  name = 'cos2p'
  reads_keys = frozenset(Cos2pOptions.defaults())   # every key is its own

  # ---- the clock's charges -----------------------------------------------------
  @property
  def charges_realised_masks(self) -> bool:
    """Whether the clock charges the masks clients learn (module docstring):
    learned widths on the analytic cost model (not fixed seconds, not a
    device trace, whose work is the samples a round trains)."""
    o, c = self.options, self.clock_options
    return (o.width_masks == 'learned' and bool(o.learned_units) and
            not c.client_seconds and not c.device_trace)

  @functools.cached_property
  def fixed_kept(self) -> dict:
    """{kind: int [N]}: ⌈R_w·U⌉, the units a random mask keeps."""
    return {kind: np.asarray(kept_units(count, jnp.asarray(
        self.width, jnp.float32))) for kind, (_, count) in
            self.model.unit_shapes().items()}

  @functools.cached_property
  def charges(self) -> Charges:
    """No mask learned yet (all units held), nothing charged."""
    n, shapes = self.num_clients, self.model.unit_shapes()
    return Charges(
        held_kept=self.kept_counts(
            {k: np.ones((n,) + shape) for k, shape in shapes.items()}),
        charged=np.full((self.config.rounds, n), -1.0, np.float32),
        learned=np.zeros(n, bool))

  def kept_counts(self, masks: dict) -> np.ndarray:
    """int [N, L, 4]: the units (`vit.UNIT_KINDS` order) each client keeps
    per block when it trains with its learned `masks` ({kind: [N, L, U]});
    the kinds it does not learn keep ⌈R_w·U⌉ (their random masks)."""
    kinds = []
    for kind in vit.UNIT_KINDS:
      if kind in self.options.learned_units:
        kinds.append(np.asarray(masks[kind]).sum(-1).round())
      else:
        kinds.append(np.broadcast_to(self.fixed_kept[kind][:, None],
                                     np.shape(masks[kind])[:2]))
    return np.stack(kinds, -1).astype(np.int64)

  def cost_submodel(self, client: int,
                    dispatch_round: int) -> vit_cost.Submodel:
    """The engine's window of the client, which learns its mask; where the
    clock charges realised masks (a charge, or a projection once it has
    learned a mask), the units of its held mask per trainable block replace
    the width R_w."""
    sub = super().cost_submodel(client, dispatch_round)
    c, blocks = self.charges, ()
    if self.charges_realised_masks and (
        dispatch_round < c.charge_until or c.learned[client] or
        not self.options.mask_rounds):
      blocks = tuple(tuple(int(u) for u in kept) for kept in
                     c.held_kept[client, sub.frozen:sub.frozen + sub.trainable])
    return dataclasses.replace(
        sub, learns_mask=self.options.width_masks == 'learned', blocks=blocks)

  def mask_epochs_charged(self, sub: vit_cost.Submodel,
                          dispatch_round: int) -> int:
    """Ê for a dispatch of a round < Q̂ that learns its mask."""
    o = self.options
    return o.mask_epochs if sub.learns_mask and dispatch_round < o.mask_rounds \
        else 0

  def round_durations(self) -> clock.Duration:
    """The engine's durations, charged once per dispatch and recorded where
    the clock charges realised masks (`recorded`)."""
    duration = super().round_durations()
    return self.recorded(duration) if self.charges_realised_masks else duration

  def recorded(self, duration: clock.Duration) -> clock.Duration:
    """`duration` as float32, charged once per dispatch: a dispatch before
    `charge_until` keeps its recorded charge (`charged`) or records it."""
    c = self.charges

    def charged(client: int, dispatch_round: int, index: int) -> float:
      seconds = c.charged[dispatch_round, client]
      if seconds < 0:
        seconds = np.float32(duration(client, dispatch_round, index))
        if dispatch_round < c.charge_until:
          c.charged[dispatch_round, client] = seconds
      return float(seconds)

    return charged

  def prepare_rounds(self, state: ServerState, first: int,
                     count: int) -> tuple[ServerState, dict]:
    """The inputs of rounds [first, first + m), m ≤ `count`, their
    dispatches charged with the masks the clients hold in `state` and
    recorded in `extras['charged_seconds']` (module docstring): m ends at
    the first round in which a mask is drawn (`charge`)."""
    if not self.charges_realised_masks:
      return super().prepare_rounds(state, first, count)
    c = self.charges
    c.charged = np.array(state.extras['charged_seconds'])
    c.held_kept = self.kept_counts(state.clients['mask'])
    c.charge_until = first
    self.virtual_clock.simulate()   # rounds < first: as charged
    c.learned = self.draws_masks(self.schedule)[:first].any(0)
    count = self.charge(first, count)
    state = state.replace(extras={
        **state.extras, 'charged_seconds': jnp.asarray(c.charged)})
    return state, self.round_inputs(first, count)

  def draws_masks(self, schedule: clock.Schedule) -> np.ndarray:
    """bool [Q, N]: client n draws a new mask in round q, the round its
    update from a mask round (dispatched in a round < Q̂) arrives; from the
    [Q, N] arrays of `schedule` (in buffered mode the events' `schedule`,
    built by the clock on demand)."""
    return schedule.arrivals & (schedule.dispatch_round <
                                self.options.mask_rounds)

  def charge(self, first: int, count: int) -> int:
    """Charges (`charges.charged`) the dispatches of rounds [first, first +
    m) with the held masks and sets `schedule`; returns m: the rounds up to
    the first in which a mask is drawn, or `count` where none is drawn
    before the last round (the dispatches after a draw are charged once its
    mask is read from the state)."""
    c = self.charges
    c.charge_until = first + count
    self.virtual_clock.simulate()
    drawn = self.draws_masks(self.schedule)[first:first + count - 1].any(1)
    if not drawn.any():
      return count
    rounds = int(np.argmax(drawn)) + 1
    c.charged[first + rounds:first + count] = -1.0     # not charged yet
    c.charge_until = first + rounds
    self.virtual_clock.simulate()          # the same rounds < first + m
    return rounds

  # ---- plans and state -----------------------------------------------------------
  def plan_round(self, state: ServerState, data=None,
                 inputs: PyTree = None) -> ClientPlan:
    """The engine's plan and 'mask_steps' int [S]: Ê epochs of mask
    training for a dispatch of a round < Q̂, else 0."""
    plans = super().plan_round(state, data, inputs)
    o = self.options
    batches = self.of_slots(plans.client_id, self.batches.astype(np.int32))
    dispatch = plans.extras['clock']['dispatch_round']
    mask_steps = jnp.where(dispatch < o.mask_rounds, o.mask_epochs * batches,
                           0)
    return plans.replace(extras={**plans.extras, 'mask_steps': mask_steps})

  def init_clients(self, params: PyTree) -> PyTree:
    """The engine's rows, mask logits and masks {kind: [N, L, U]} and the
    personal exit heads."""
    n = self.num_clients
    key = jax.random.PRNGKey(self.config.seed + 1)
    shapes = self.model.unit_shapes()
    logits = {kind: self.options.logit_init_std * jax.random.normal(
        jax.random.fold_in(key, i), (n,) + shape)
              for i, (kind, shape) in enumerate(shapes.items())}
    heads = {k: jnp.broadcast_to(v, (n,) + v.shape)
             for k, v in params.items() if k.startswith('exits_')}
    return {**super().init_clients(params), 'logits': logits,
            'mask': {k: jnp.ones((n,) + s) for k, s in shapes.items()},
            'heads': heads}

  def init_extras(self, params: PyTree) -> PyTree:
    """With `charges_realised_masks`, 'charged_seconds' (module
    docstring)."""
    extras = super().init_extras(params)
    if self.charges_realised_masks:
      extras['charged_seconds'] = jnp.asarray(self.charges.charged)
    return extras

  def run_client(self, shared, per_client) -> ClientOutput:
    """Starts from w_{q−τ} with the client's personal exit heads."""
    _, table, data, mask_table = shared
    plan, row = per_client
    start = jax.tree.map(lambda t: t[plan.start_model], table)
    if self.options.personal_heads:
      start = {**start, **row['heads']}
    return super().run_client((start, None, data, mask_table), per_client)

  # ---- the client program ----------------------------------------------------
  def units_of(self, row: PyTree, window: dict) -> dict:
    """The unit masks of the weight phase: learned kinds from the client's
    state, the others from the round's plan (`window['units']`)."""
    if self.options.width_masks != 'learned':
      return super().units_of(row, window)
    return {k: row['mask'][k] if k in self.options.learned_units
            else window['units'][k] for k in vit.UNIT_KINDS}

  def weight_loss(self, local: program.LocalModel, x, y, plan, ctx):
    """Eq. 3 over the client's exits, teacher = the deepest."""
    del ctx
    o, window = self.options, plan.extras
    logits = self.exits_logits(local.params, x,
                               self.units_of(local.client_state, window),
                               window)                         # [L, B, C]
    ce, kd = self_distillation.exit_terms(logits, y, window['teacher'],
                                          o.temperature, o.kd_direction)
    per_exit = (1 - o.lambda_kd) * ce + o.lambda_kd * kd
    return jnp.sum(jnp.where(window['exits'], per_exit, 0.0))

  def client_program(self) -> program.ClientProgram | program.ProgramSequence:
    """[mask phase (Eq. 2, rounds < Q̂),] then the weight phase (Eq. 3)."""
    o = self.options
    weights = super().client_program()
    if o.width_masks != 'learned' or o.mask_rounds == 0 or not o.learned_units:
      return weights
    masks = program.sgd_program(
        self.mask_loss, lambda lr: optim.adan(o.mask_lr),
        num_steps=o.mask_epochs * int(self.batches.max()),
        batch_size=self.config.batch_size,
        trainable=(('client_state', 'logits'),),
        scan_unroll=self.config.scan_unroll,
        active_steps=lambda plan: plan.extras['mask_steps'])
    return program.sequence(then(masks, self.draw_mask), weights)

  def draw_mask(self, local: program.LocalModel, plan) -> program.LocalModel:
    """After a mask phase that ran: M drawn once from σ(I) (Alg. 2 l.13)."""
    state = local.client_state
    ran = plan.extras['mask_steps'] > 0
    key = key_streams.fold(plan.key, Stream.COS2P_MASK_DRAW)
    mask = dict(state['mask'])
    for i, kind in enumerate(self.options.learned_units):
      p = jax.nn.sigmoid(state['logits'][kind])
      drawn = (p > 0.5 if self.options.final_mask == 'threshold' else
               jax.random.bernoulli(jax.random.fold_in(key, i), p))
      mask[kind] = jnp.where(ran, drawn.astype(p.dtype), mask[kind])
    return local.replace(client_state={**state, 'mask': mask})

  def finish_weights(self, local: program.LocalModel,
                     plan) -> program.LocalModel:
    """The engine's rows and the client's exit heads (personal)."""
    local = super().finish_weights(local, plan)
    state = local.client_state
    heads = {k: local.params[k] for k in state['heads']}
    return local.replace(client_state={**state, 'heads': heads})

  # ---- aggregation (Eqs. 4–5) ------------------------------------------------
  def update(self, state: ServerState, plans: ClientPlan, delta: PyTree,
             units: dict) -> PyTree:
    """Eqs. 4–5 (`weighting='eq4'`) or the engine's mean over holders."""
    if self.options.weighting == 'holders':
      return super().update(state, plans, delta, units)
    return self.staleness_weighted(state, plans, delta, units,
                                   plans.delivers())

  def staleness_weighted(self, state, plans, delta, units, active) -> PyTree:
    """Σ_n γ̃_n^i Δ_n^i per segment (Eqs. 4–5)."""
    table = self.start_models(state, plans)
    sizes = units_lib.segment_sizes(self.specs)

    def gamma(d, row, client_units, window):
      start = jax.tree.map(lambda t: t[row], table)           # w_{q−τ}
      drift = units_lib.unit_sums(
          jax.tree.map(jnp.subtract, state.params, start), self.specs, jnp.abs)
      norms = units_lib.unit_sums(d, self.specs, jnp.abs)
      holds = self.holders(client_units, window)
      return {g: holds[g] * norms[g] / (drift[g] + sizes[g]) for g in norms}

    gammas = jax.vmap(gamma)(delta, plans.start_model, units, plans.extras)
    gammas = {g: jnp.where(active.reshape((-1,) + (1,) * (v.ndim - 1)), v, 0.)
              for g, v in gammas.items()}
    weights = {g: v / jnp.where(v.sum(0) > 0, v.sum(0), 1.0)
               for g, v in gammas.items()}
    broadcast = units_lib.unit_broadcast(weights, self.specs)
    return jax.tree.map(lambda w, d: jnp.sum(w * d, axis=0), broadcast, delta)

  # ---- evaluation --------------------------------------------------------------
  def personal_logits(self, shared: PyTree, row: PyTree,
                      x: jax.Array) -> jax.Array:
    """The engine's submodel of the client with its personal exit heads."""
    if self.options.personal_heads:
      shared = {**shared, **row['heads']}
    return super().personal_logits(shared, row, x)
