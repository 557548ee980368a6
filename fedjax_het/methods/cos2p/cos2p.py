"""Co-S²P: semi-asynchronous training of a ViT with learned structured pruning
(Li et al., "Unity is Power: Semi-Asynchronous Collaborative Training of
Large-Scale Models with Structured Pruning in Resource-Limited Clients").

Client n has a budget R_n = R_w · R_d (`cos2p.budgets`; R_w = √(R·ρ),
R_d = √(R/ρ), ρ = `width_depth_ratio`, 1 in the paper) and trains, from the
model w_k of the round k it was dispatched in:

1. Depth (Sec. 4.1, App. A): D_n = ⌊L·R_d⌋ trainable blocks at full width
   above h frozen blocks (forward only; embedding, CLS and positions train
   only when h = 0), blocks above pruned. The rolling offset (A1 of our
   reading, `depth_offset`): 'shared' h(k) = k mod (L − D_max + 1), the same
   for every client so a weak client's last exit lines up with a strong
   client's intermediate one; 'per_client' h_n(k) = k mod (L − D_n + 1);
   'none' h = 0 (the authors' code).
2. Width masks (Eq. 2): one logit per MSA head and per output row of the
   attention projection, fc1 and fc2 of every block (`models.vit`), kept in
   the client's persistent state. In rounds k < Q̂ (`mask_rounds`; App. E:
   Q̂ = 20 for E1, 10 for E2/E3, default 20) the client first trains the
   logits for Ê epochs with the weights frozen:
   M ~ Bern(σ(I)) with a straight-through estimator (`ste`: 'identity'
   ∂M/∂P = 1, the paper; 'probability' ∂M/∂P = P, the authors' Bern),
   loss CE(deepest exit) + λ1·|Σ M̂ / Σ size(M̂) − R_w| (the kept fraction
   of the trainable blocks' masked weight entries, rows weighted by their
   inputs); then draws M once (`final_mask`: 'sample' or 'threshold'
   σ(I) > ½) and keeps it until its next mask phase. `learned_units` names
   the kinds that learn; the others draw a random mask of ⌈R_w·U⌉ units
   each round (Tab. 3's ✗). Before any mask phase the mask keeps all units.
3. Weights (Eq. 3): E epochs of `client_optimizer` (Adan with proximal
   weight decay, App. E) on the masked submodel with
   Σ_i (1−λ2)·CE(ŷ_i, y) + λ2·T²·KL_i over the client's exits: after every
   shallower-or-equal client's window end h + D_i − 1 and its own; the
   teacher is its deepest exit (stop-gradient); Eq. 3 as written,
   KL_i = Σ_j σ(ŷ_i/t)_j ln(σ(ŷ_i/t)_j / σ(ŷ_c/t)_j) = KL(student‖teacher),
   by default (`kd_direction='paper'`); KL(teacher‖student) (BYOT, the
   authors' code) is `kd_direction='standard'`; batch mean. Exit heads are personal
   (`personal_heads`): a client trains its own, never overwritten by the
   server, and the server keeps a global head per exit depth aggregated
   from their deltas (A5), used for its own evaluation.

The server (Alg. 1) runs on a virtual clock (`systems.clock`): idle clients
are dispatched at a round's start, the round closes ⌈μN⌉ arrivals plus
T_clk seconds later, and stragglers arrive in later rounds with staleness τ.
The schedule is simulated on the host and enters the compiled rounds as
round inputs (`parts.clock.schedule_inputs`, the clock part's; Co-S²P keeps
its own keys `cos2p.mu`, `t_clk`, `tau_max`, `jitter`, `client_seconds` and
its analytic cost model, and shares the part's inputs, start table, keys,
metrics and facts): slot n of every round is client n, active when its update
arrives; it trains lazily at arrival from the global model of its dispatch
round (`extras['start']` row n: the model client n was dispatched with),
with its key and window drawn from the dispatch round, which gives the same
result as training at dispatch (the client's state cannot change while it
is busy).

What the clock charges (`charges_realised_masks`): with learned masks and
the analytic cost model, a client's round time (compute and link) is that
of the submodel it holds: its window with, per trainable block, the units
its realised mask M keeps (`vit_cost.Submodel.blocks`), not the nominal
width R_w (Eq. 2's budget term is a soft penalty, so the kept fraction is
not R_w). The realised mask exists only once the client has trained, so
the clock is simulated chunk by chunk (`prepare_rounds`): before each chunk
of rounds the host reads every client's mask from the state and charges the
chunk's dispatches with it; each charge is recorded in
`extras['charged_seconds']` [Q, N] (float32), so later chunks and a resumed
run replay the same clock. A dispatch is thus charged the mask its client
holds at the chunk's start: exactly the mask it trains and uploads once its
last mask-phase update has arrived before that chunk (with one-round chunks,
every dispatch at a round ≥ Q̂ after it); a client in a mask round redraws
its mask within that round, so there the charge is its previous mask (all
units before its first mask phase), one mask phase behind, and a mask drawn
within a chunk is charged from the next chunk on. `schedule`
beyond the current chunk is a projection, never charged: the masks held
now, or width R_w for a client that has not yet returned from a mask phase
(so `experiments/cos2p`'s time budgets are fitted as before). Fixed
`client_seconds`, and widths that are not learned (random, rolling, full:
exactly ⌈R_w·U⌉ units), are charged as before, simulated once up front. Aggregation (Eqs. 4–5), per segment i (a head, a row, a
LayerNorm, an exit head, the embedding; `models.vit.segment_specs`):

    γ_n^i = ‖Δ_n^i‖₁ / (‖w_q^i − w_{q−τ_n}^i‖₁ + size(w^i))
    w_{q+1}^i = w_q^i + Σ_{n ∈ N_q^i} γ_n^i / Σ_{m ∈ N_q^i} γ_m^i · Δ_n^i,

Δ_n = w_end − w_start (A7: the model delta, server lr 1, applied to the
current model), N_q^i the arrived clients that trained segment i.
`weighting='holders'` replaces γ by the client weights and averages every
parameter entry over the clients holding it (FedAvg, FedRolex, RAM-Fed).

Baselines on the same code (`width_masks`): 'full' (FedAvg (Full): budgets
1, μ = 1, T_clk = 0), 'rolling' (FedRolex: full depth, heads/rows
{(q + j) mod U : j < ⌈β·U⌉}), 'random' (RAM-Fed: a fresh random ⌈β·U⌉
subset per round); see `ALGORITHMS` for the registered names. Co-S²P(Async.)
is μ = 1/N, T_clk = 0.
"""
import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_het import evaluation, optim
from fedjax_het.methods import self_distillation
from fedjax_het.methods.base import FederatedAlgorithm, mean_over_active
from fedjax_het.core import aggregation, key_streams, program
from fedjax_het.core.key_streams import Stream
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState
from fedjax_het.models import vit
from fedjax_het.options import (ConfigError, OptionGroup, each, in_range,
                                is_bool, non_negative, non_negative_int,
                                option, positive, positive_int, same_value,
                                subset_of)
from fedjax_het.parts import clock as clock_part
from fedjax_het.parts.clock import per_client
from fedjax_het.submodel import units as units_lib
from fedjax_het.systems import clock, vit_cost

PyTree = Any


def _budgets(key: str, value) -> None:
  each(in_range(0, 1, closed_low=False))(key, value)
  if not value:
    raise ConfigError(f'{key} must list at least one budget.')


@dataclasses.dataclass(frozen=True)
class Cos2pOptions(OptionGroup):
  """`config.cos2p`: Co-S²P and the baselines on its engine (module docstring)."""
  key = 'cos2p'
  budgets: tuple = option((1.0,), 'R_n per client (one value: every client), in (0, 1]', check=_budgets)
  device_types: tuple = option(('agx64',), 'device type per client (one value: every client): nx8 | nx16 | agx32 | agx64')
  width_depth_ratio: float = option(1.0, 'ρ = R_w / R_d (Tab. 8); R_w = √(R·ρ), R_d = √(R/ρ)', check=positive)
  depth_offset: str = option('shared', 'rolling frozen-block offset: shared h(q) = q mod (L − D_max + 1) | per_client | none (h = 0)', choices=('shared', 'per_client', 'none'))
  width_masks: str = option('learned', 'learned (Eq. 2) | random (RAM-Fed) | rolling (FedRolex) | full', choices=('learned', 'random', 'rolling', 'full'))
  learned_units: tuple = option(vit.UNIT_KINDS, 'unit kinds with learned masks; the others get random masks (Tab. 3)', check=subset_of(vit.UNIT_KINDS))
  optimizer: str = option('adan', 'client optimiser of the weights: adan (proximal weight decay, App. E) | sgd (client_momentum)', choices=('adan', 'sgd'))
  epochs: int = option(1, 'E: local epochs of weight training per round', check=positive_int)
  mask_rounds: int = option(20, 'Q̂: clients dispatched in rounds < Q̂ train their masks first (App. E: 20 for E1, 10 for E2/E3; 0: no mask is learned and the clock charges full width)', check=non_negative_int)
  mask_epochs: int = option(1, 'Ê: epochs of mask training', check=positive_int)
  mask_lr: float = option(0.01, 'η̂: learning rate of the mask logits (Adan)', check=positive)
  lambda_budget: float = option(1.0, 'λ1 of Eq. 2', check=non_negative)
  lambda_kd: float = option(0.0, 'λ2 of Eq. 3 (self-distillation weight)', check=in_range(0, 1))
  temperature: float = option(3.0, 't of Eq. 3', check=positive)
  kd_direction: str = option('paper', 'paper (Eq. 3 as written: KL(student‖teacher)) | standard (KL(teacher‖student), BYOT and the authors\' code)', choices=self_distillation.KD_DIRECTIONS)
  ste: str = option('identity', 'straight-through gradient of M ~ Bern(P): identity (paper) | probability (P·grad, authors\' code)', choices=('identity', 'probability'))
  final_mask: str = option('sample', 'the frozen mask after a mask phase: sample (one Bernoulli draw) | threshold (σ(I) > ½)', choices=('sample', 'threshold'))
  logit_init_std: float = option(0.01, 'std of the initial mask logits (p ≈ ½)', check=non_negative)
  personal_heads: bool = option(True, 'clients keep their own exit heads (A5); False: start from the global heads', check=is_bool)
  weighting: str = option('eq4', 'eq4 (staleness-aware γ per segment) | holders (client weights, mean over holders)', choices=('eq4', 'holders'))
  mu: float = option(1.0, 'μ: the server waits for ⌈μN⌉ updates', check=in_range(0, 1, closed_low=False))
  t_clk: float = option(0.0, 'T_clk: seconds the server waits after ⌈μN⌉ arrivals', check=non_negative)
  tau_max: int = option(-1, 'drop updates staler than τ_max rounds (−1: never, the paper)', check=in_range(-1, math.inf))
  client_seconds: tuple = option((), 'fixed seconds of every client round (FLSim-style; one value per client); empty: the analytic model', check=each(positive))
  jitter: float = option(0.05, 'σ of the lognormal jitter of client round times', check=non_negative)
  bandwidth_bps: float = option(1e9, 'client link bandwidth in bit/s (analytic model)', check=positive)
  device_speeds: dict = option({}, 'effective training FLOP/s per device type, overriding 15e12·TOPS/275 (e.g. a fit of the paper\'s RU)')
  speed_scale: float = option(1.0, 'multiplies every device\'s FLOP/s (a scaled model on a paper-scale clock; scale bandwidth_bps too)', check=positive)


def straight_through(logits: jax.Array, key: jax.Array, ste: str) -> jax.Array:
  """M ~ Bern(σ(I)) whose gradient flows to I (Eq. 2).

  Forward: the Bernoulli draw. Backward: ∂M/∂P = 1 ('identity') or P
  ('probability'), times σ'(I) from P = σ(I).
  """
  p = jax.nn.sigmoid(logits)
  draw = jax.random.bernoulli(key, jax.lax.stop_gradient(p)).astype(p.dtype)
  surrogate = p if ste == 'identity' else 0.5 * p * p
  return draw + surrogate - jax.lax.stop_gradient(surrogate)


def kept_units(count: int, rate: jax.Array) -> jax.Array:
  """⌈rate·count⌉ (at least one) as int32."""
  return jnp.clip(jnp.ceil(rate * count - 1e-6), 1, count).astype(jnp.int32)


def rolling_units(count: int, rate: jax.Array, offset: jax.Array) -> jax.Array:
  """FedRolex's window {(offset + j) mod U : j < ⌈rate·U⌉}: float [U]."""
  position = (jnp.arange(count) - offset) % count
  return (position < kept_units(count, rate)).astype(jnp.float32)


def random_units(count: int, rate: jax.Array, key: jax.Array) -> jax.Array:
  """A uniformly random subset of ⌈rate·U⌉ units: float [U]."""
  rank = jnp.argsort(jax.random.uniform(key, (count,)))
  return (rank < kept_units(count, rate)).astype(jnp.float32)


class Cos2p(FederatedAlgorithm):
  """Co-S²P on a ViT (module docstring)."""

  name = 'cos2p'
  option_groups = (Cos2pOptions,)
  schedule_depends_on_rounds = True
  # Options a baseline fixes (overriding the config), and whether its clients
  # train the full depth at width R_w (no frozen or pruned blocks).
  fixed_options: dict = {}
  full_depth = False
  # Whether it trains AdaViT's decision networks (a ViT with decisions=True).
  reads_decisions = False

  @classmethod
  def fix_options(cls, config):
    """`config` with the baseline's `fixed_options` written into its cos2p
    section (a copy); a fixed option that `config` sets to another value than
    its default is refused, never overwritten."""
    if not cls.fixed_options:
      return config
    defaults = Cos2pOptions.defaults()
    for key, fixed in cls.fixed_options.items():
      value = config.cos2p[key]
      if not (same_value(value, defaults[key]) or same_value(value, fixed)):
        raise ConfigError(
            f'{cls.name} fixes cos2p.{key} = {fixed!r}, got {value!r}; leave '
            f'it unset (cos2p trains with it).')
    resolved = config.copy_and_resolve_references()
    resolved.cos2p.update(cls.fixed_options)
    return resolved

  def __init__(self, config, model, data):
    if not isinstance(model, vit.ViT):
      raise ConfigError(f'{self.name} trains a ViT; config.model must be vit '
                        f'or a preset (vit_tiny, vit_base, vit_base_ext), got '
                        f'{config.model!r}.')
    if model.decisions != self.reads_decisions:
      raise ConfigError(
          f'{self.name} needs model_options.decisions='
          f'{self.reads_decisions} (AdaViT\'s decision networks are trained '
          'by vit_fedavg_adavit only).')
    if config.clients_per_round != config.num_clients:
      raise ConfigError(
          f'{self.name} keeps every client busy (Alg. 1), so '
          f'clients_per_round must equal num_clients ({config.num_clients}), '
          f'got {config.clients_per_round}.')
    self.options = dataclasses.replace(Cos2pOptions.from_config(config),
                                       **self.fixed_options)
    super().__init__(config, model, data)
    n, o = self.num_clients, self.options
    self.budgets = np.asarray(per_client('cos2p.budgets', o.budgets, n), np.float64)
    self.device_types = per_client('cos2p.device_types', o.device_types, n)
    self.width = np.sqrt(self.budgets * o.width_depth_ratio).clip(max=1.0)
    depth_rate = np.sqrt(self.budgets / o.width_depth_ratio).clip(max=1.0)
    if o.width_masks == 'full':
      self.width = np.ones(n)
    if self.full_depth or o.width_masks == 'full':
      depth_rate = np.ones(n)
    self.depth = np.floor(model.depth * depth_rate + 1e-9).astype(np.int32)
    if (self.depth < 1).any():
      bad = int(np.argmin(self.depth))
      raise ConfigError(
          f'client {bad}\'s budget {self.budgets[bad]:g} leaves ⌊L·R_d⌋ = 0 '
          f'trainable blocks of L = {model.depth}; raise the budget or the '
          'width_depth_ratio.')
    self.counts = np.asarray(data.counts)
    self.batches = -(-self.counts // config.batch_size)      # ⌈n / B⌉
    self.data_shape = tuple(data.x.shape[2:])
    self.template = jax.eval_shape(
        lambda: model.init(jax.random.PRNGKey(0), jnp.zeros(
            (1,) + tuple(data.x.shape[2:])))['params'])
    self.specs = vit.segment_specs(self.template)
    # The clock's charges (module docstring): the kept units per client,
    # block and kind of the masks last read from the state (none learned
    # yet: all units), the seconds charged to each dispatch (−1: not yet),
    # and the first round whose dispatches are not charged for good.
    self.fixed_kept = {kind: np.asarray(kept_units(count, jnp.asarray(
        self.width, jnp.float32))) for kind, (_, count) in
                       model.unit_shapes().items()}
    self.held_kept = self.kept_counts(
        {k: np.ones((n,) + shape) for k, shape in model.unit_shapes().items()})
    self.charged = np.full((config.rounds, n), -1.0, np.float32)
    self.charge_until = 0
    self.learned = np.zeros(n, bool)     # back from a mask phase
    self.schedule = self.make_schedule()

  # ---- the virtual clock -----------------------------------------------------
  def cost_shape(self) -> vit_cost.ViTShape:
    """The model and input size as the analytic cost model sees them."""
    m, (height, width, channels) = self.model, self.data_shape
    if height != width:
      raise ConfigError(f'the analytic clock models square images, got '
                        f'{self.data_shape}; set cos2p.client_seconds.')
    return vit_cost.ViTShape(
        depth=m.depth, hidden=m.hidden, mlp=m.mlp, heads=m.heads,
        patch=m.patch, image=height, channels=channels,
        num_classes=m.num_classes)

  @property
  def charges_realised_masks(self) -> bool:
    """Whether the clock charges the masks clients learn (module docstring):
    learned widths on the analytic cost model."""
    o = self.options
    return (o.width_masks == 'learned' and bool(o.learned_units) and
            not o.client_seconds)

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
    """Client `client`'s window and width when dispatched in that round:
    the units of its held mask per trainable block where the clock charges
    realised masks (a charge, or a projection once it has learned a mask),
    else the width R_w."""
    offset = int(self.offsets(np.int32(dispatch_round))[client])
    depth = int(self.depth[client])
    blocks = ()
    if self.charges_realised_masks and (
        dispatch_round < self.charge_until or self.learned[client] or
        not self.options.mask_rounds):
      blocks = tuple(tuple(int(u) for u in kept) for kept in
                     self.held_kept[client, offset:offset + depth])
    return vit_cost.Submodel(
        frozen=offset, trainable=depth,
        width=vit_cost.Width.uniform(float(self.width[client])),
        exits=int(np.sum(np.unique(self.depth) <= depth)),
        train_embedding=offset == 0,
        learns_mask=self.options.width_masks == 'learned', blocks=blocks)

  def client_round_seconds(self) -> clock.Duration:
    """`duration(client, dispatch_round, index)` of a client round: the fixed
    `client_seconds`, or the analytic model (`systems.vit_cost.round_seconds`)
    of the client's window and width on its device type."""
    o, rounds = self.options, self.config.rounds
    if o.client_seconds:
      seconds = per_client('cos2p.client_seconds', o.client_seconds,
                           self.num_clients)
      return clock.fixed_durations([[s] * rounds for s in seconds])
    shape = self.cost_shape()
    devices = [vit_cost.device(t, o.device_speeds) for t in self.device_types]
    devices = [dataclasses.replace(d, speed=d.speed * o.speed_scale)
               for d in devices]

    @functools.lru_cache(maxsize=None)
    def seconds(client: int, sub: vit_cost.Submodel, masks: bool) -> float:
      return vit_cost.round_seconds(
          shape, sub, devices[client], train_samples=int(self.counts[client]),
          batch=self.config.batch_size, epochs=o.epochs,
          mask_epochs=o.mask_epochs if masks else 0,
          bandwidth_bps=o.bandwidth_bps)

    def duration(client: int, dispatch_round: int, index: int) -> float:
      del index
      sub = self.cost_submodel(client, dispatch_round)
      return seconds(client, sub,
                     sub.learns_mask and dispatch_round < o.mask_rounds)

    return duration

  def make_schedule(self) -> clock.Schedule:
    """The clock over all rounds (module docstring): dispatches before
    `charge_until` at their recorded charge, later ones projected."""
    o = self.options
    duration = clock.with_jitter(self.client_round_seconds(), o.jitter,
                                 self.config.seed)
    if self.charges_realised_masks:
      duration = self.recorded(duration)
    return clock.simulate(duration, num_clients=self.num_clients,
                          rounds=self.config.rounds, mu=o.mu, t_clk=o.t_clk,
                          tau_max=None if o.tau_max < 0 else o.tau_max)

  def recorded(self, duration: clock.Duration) -> clock.Duration:
    """`duration` as float32, charged once per dispatch: a dispatch before
    `charge_until` keeps its recorded charge (`charged`) or records it."""

    def charged(client: int, dispatch_round: int, index: int) -> float:
      seconds = self.charged[dispatch_round, client]
      if seconds < 0:
        seconds = np.float32(duration(client, dispatch_round, index))
        if dispatch_round < self.charge_until:
          self.charged[dispatch_round, client] = seconds
      return float(seconds)

    return charged

  def prepare_rounds(self, state: ServerState, first: int,
                     count: int) -> tuple[ServerState, dict]:
    """Charges the dispatches of rounds [first, first + count) with the
    masks the clients hold in `state` and records them in
    `extras['charged_seconds']` (module docstring); then `round_inputs`."""
    if not self.charges_realised_masks:
      return super().prepare_rounds(state, first, count)
    self.charged = np.array(state.extras['charged_seconds'])
    self.held_kept = self.kept_counts(state.clients['mask'])
    self.charge_until = first
    past = self.make_schedule()             # rounds < first: as charged
    self.learned = (past.arrivals[:first] & (past.dispatch_round[:first] <
                                             self.options.mask_rounds)).any(0)
    self.charge_until = first + count
    self.schedule = self.make_schedule()
    state = state.replace(extras={
        **state.extras, 'charged_seconds': jnp.asarray(self.charged)})
    return state, self.round_inputs(first, count)

  def round_inputs(self, first: int, count: int) -> dict:
    """Rounds [first, first + count) of the schedule, as compiled-round xs;
    'redispatch': the clients dispatched again at the next round's start
    (their update arrived or was dropped)."""
    return clock_part.schedule_inputs(self.schedule, first, count)

  def summary_facts(self) -> dict:
    """The clock's totals (virtual time, RU in its three forms, the largest
    staleness) and, per client, its mean virtual seconds per round and, for
    square images, the analytic memory of its window at offset 0 (params,
    gradients, Adan's buffers and activations; `vit_cost.client_cost`)."""
    facts = clock_part.schedule_facts(self.schedule, self.config.rounds)
    if self.data_shape[0] == self.data_shape[1]:
      shape = self.cost_shape()
      facts['client_memory_bytes'] = [
          float(vit_cost.client_cost(shape, self.cost_submodel(n, 0),
                                     self.config.batch_size).memory_bytes)
          for n in range(self.num_clients)]
    return facts

  # ---- windows ---------------------------------------------------------------
  def offsets(self, dispatch_round):
    """h per client for models dispatched in `dispatch_round` (a scalar, or
    int [N] one per client; numpy or jax): frozen blocks below the window."""
    L = self.model.depth
    if self.options.depth_offset == 'none':
      return dispatch_round * 0 + 0 * self.depth
    if self.options.depth_offset == 'shared':
      return dispatch_round % (L - int(self.depth.max()) + 1) + 0 * self.depth
    return dispatch_round % (L - self.depth + 1)

  def exit_positions(self, offset: jax.Array, depth: jax.Array) -> jax.Array:
    """bool [L]: exits after h + D_i − 1 for every client depth D_i ≤ D."""
    depths = jnp.asarray(np.unique(self.depth))
    ends = offset + depths - 1
    layers = jnp.arange(self.model.depth)
    return jnp.any((layers[:, None] == ends[None]) & (depths <= depth)[None],
                   axis=1)

  def plan_round(self, state: ServerState, data=None,
                 inputs: PyTree = None) -> ClientPlan:
    """Slot n = client n, active if its update arrives this round (inputs)."""
    del data
    n, o = self.num_clients, self.options
    if inputs is None:
      raise ValueError(f'{self.name} plans a round from its schedule: pass '
                       'round inputs (RoundRunner.run does, from '
                       '`round_inputs`).')
    ids = jnp.arange(n)
    dispatch = inputs['dispatch_round']
    keys = jax.vmap(self.client_key, in_axes=(None, 0, 0))(state, dispatch,
                                                          ids)
    offset = self.offsets(dispatch)
    depth = jnp.asarray(self.depth)
    layers = jnp.arange(self.model.depth)
    run = layers[None] < (offset + depth)[:, None]
    frozen = layers[None] < offset[:, None]
    batches = jnp.asarray(self.batches, jnp.int32)
    extras = {
        'run': run, 'frozen': frozen,
        'exits': jax.vmap(self.exit_positions)(offset, depth),
        'teacher': offset + depth - 1, 'offset': offset,
        'width': jnp.asarray(self.width, jnp.float32),
        'mask_steps': jnp.where(dispatch < o.mask_rounds,
                                o.mask_epochs * batches, 0),
        'units': self.round_units(dispatch, keys),
        'busy_seconds': inputs['busy_seconds'],
        'window_seconds': inputs['window_seconds'],
        'staleness': inputs['staleness'],
        'redispatch': inputs['redispatch'],
    }
    return ClientPlan(
        client_id=ids, key=keys,
        num_steps=o.epochs * batches,
        lr=jnp.full((n,), self.config.client_lr, jnp.float32),
        weight=self.client_weights(ids), group=jnp.zeros((n,), jnp.int32),
        extras=extras, active=inputs['arrives'], start_model=ids)

  def client_key(self, state: ServerState, dispatch_round: jax.Array,
                 client: jax.Array) -> jax.Array:
    """The key of a client's work dispatched in `dispatch_round`: the one
    `FederatedAlgorithm.plan_round` gives it in that round."""
    return clock_part.dispatch_key(state.key, dispatch_round, client)

  def round_units(self, dispatch: jax.Array, keys: jax.Array) -> dict:
    """The fixed (not learned) unit masks of the round: {kind: [N, L, U]}."""
    width = jnp.asarray(self.width, jnp.float32)
    out = {}
    for i, (kind, (layers, count)) in enumerate(self.model.unit_shapes().items()):
      if self.options.width_masks == 'full':
        out[kind] = jnp.ones((self.num_clients, layers, count))
      elif self.options.width_masks == 'rolling':
        out[kind] = jax.vmap(lambda r, k: jnp.broadcast_to(
            rolling_units(count, r, k), (layers, count)))(width, dispatch)
      else:   # random: RAM-Fed, or the kinds a learned mask leaves random
        def draw(r, key, kind_index=i):
          key = jax.random.fold_in(
              key_streams.fold(key, Stream.COS2P_RANDOM_UNITS), kind_index)
          return jax.vmap(lambda k: random_units(count, r, k))(
              jax.random.split(key, layers))
        out[kind] = jax.vmap(draw)(width, keys)
    return out

  # ---- client state ----------------------------------------------------------
  def init_clients(self, params: PyTree) -> PyTree:
    """Mask logits and masks {kind: [N, L, U]}, personal exit heads, offset."""
    n = self.num_clients
    key = jax.random.PRNGKey(self.config.seed + 1)
    shapes = self.model.unit_shapes()
    logits = {kind: self.options.logit_init_std * jax.random.normal(
        jax.random.fold_in(key, i), (n,) + shape)
              for i, (kind, shape) in enumerate(shapes.items())}
    heads = {k: jnp.broadcast_to(v, (n,) + v.shape)
             for k, v in params.items() if k.startswith('exits_')}
    return {'logits': logits,
            'mask': {k: jnp.ones((n,) + s) for k, s in shapes.items()},
            'heads': heads, 'offset': jnp.zeros((n,), jnp.int32),
            'units': {k: jnp.ones((n,) + s) for k, s in shapes.items()}}

  def init_extras(self, params: PyTree) -> PyTree:
    """'start': row n the model client n was dispatched with (w_0 for all);
    with `charges_realised_masks`, 'charged_seconds' (module docstring)."""
    n = self.num_clients
    extras = {'start': clock_part.start_table(params, n)}
    if self.charges_realised_masks:
      extras['charged_seconds'] = jnp.asarray(self.charged)
    return extras

  def start_models(self, state: ServerState, plans: ClientPlan) -> PyTree:
    """Row n = w_{k_n}, the model of client n's dispatch round (slot n is
    client n, `plans.start_model[n] = n`)."""
    del plans
    return state.extras['start']

  def run_client(self, shared, per_client) -> ClientOutput:
    """Starts from w_{q−τ} with the client's personal exit heads."""
    params, table, data, mask_table = shared
    plan, row = per_client
    plan = plan.with_row_mask(mask_table)
    params = jax.tree.map(lambda t: t[plan.start_model], table)
    if self.options.personal_heads:
      params = {**params, **row['heads']}
    return program.run_program(self.local_program,
                               program.LocalModel(params, row), plan, data,
                               min_count=self.min_client_count)

  # ---- the client program ----------------------------------------------------
  def client_optimizer(self) -> program.OptimizerFactory:
    if self.options.optimizer == 'sgd':
      return super().client_optimizer()
    return lambda lr: optim.adan(lr, self.config.client_weight_decay)

  def units_of(self, row: PyTree, window: dict) -> dict:
    """The unit masks of the weight phase: learned kinds from the client's
    state, the others from the round's plan (`window['units']`)."""
    if self.options.width_masks != 'learned':
      return window['units']
    return {k: row['mask'][k] if k in self.options.learned_units
            else window['units'][k] for k in vit.UNIT_KINDS}

  def exits_logits(self, params, x, units: dict, window: dict) -> jax.Array:
    """Every exit's logits [L, B, C] of the client's submodel: `units` in
    the trainable blocks, full width in the frozen ones, pruned above."""
    trained = window['run'] & ~window['frozen']
    units = {k: jnp.where(trained[:, None], u, 1.0) for k, u in units.items()}
    return self.model.apply(
        {'params': params}, x, units=units, all_exits=True,
        window=vit.Window(run=window['run'], frozen=window['frozen']))

  def kept_fraction(self, units: dict, window: dict) -> jax.Array:
    """Σ M̂ / Σ size(M̂) over the trainable blocks' learned masks (Eq. 2):
    a unit counts its kernel entries (rows weighted by their inputs)."""
    m = self.model
    entries = {'heads': 3 * m.hidden * m.head_dim, 'proj': m.hidden,
               'fc1': m.hidden, 'fc2': m.mlp}
    trained = (window['run'] & ~window['frozen']).astype(jnp.float32)
    kept = total = 0.0
    for kind in self.options.learned_units:
      kept += entries[kind] * jnp.sum(trained @ units[kind])
      total += entries[kind] * units[kind].shape[1] * jnp.sum(trained)
    return kept / total

  def mask_loss(self, local: program.LocalModel, x, y, plan, ctx):
    """Eq. 2: CE of the deepest exit + λ1·|kept fraction − R_w|."""
    window = plan.extras
    sampled = {k: straight_through(local.client_state['logits'][k],
                                   jax.random.fold_in(ctx.key, i),
                                   self.options.ste)
               for i, k in enumerate(self.options.learned_units)}
    units = {**window['units'], **sampled}
    logits = self.exits_logits(local.params, x, units, window)
    ce = optax.softmax_cross_entropy_with_integer_labels(
        logits[window['teacher']], y).mean()
    gap = jnp.abs(self.kept_fraction(units, window) - window['width'])
    return ce + self.options.lambda_budget * gap

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

  def holders(self, units: dict, window: dict) -> dict:
    """{segment group: 1 where the client trains the segment} (Eq. 5's N_q^i)."""
    trained = (window['run'] & ~window['frozen']).astype(jnp.float32)
    embedding = 1.0 - window['frozen'][0].astype(jnp.float32)
    groups = {f'blocks/{k}': trained[:, None] * u for k, u in units.items()}
    groups.update({'blocks/ln1': trained, 'blocks/ln2': trained,
                   'exits': window['exits'].astype(jnp.float32),
                   'embed': embedding, 'cls': embedding, 'pos': embedding})
    return groups

  def entry_holders(self, units: dict, window: dict) -> PyTree:
    """0/1 per parameter entry the client trains (its gradient and update
    mask, and what it uploads)."""
    segments = units_lib.unit_broadcast(self.holders(units, window),
                                        self.specs)
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), self.template)
    return jax.tree.map(jnp.multiply, segments, vit.entry_mask(zeros, units))

  def client_program(self) -> program.ClientProgram | program.ProgramSequence:
    """[mask phase (Eq. 2, rounds < Q̂),] then the weight phase (Eq. 3)."""
    o, batch = self.options, self.config.batch_size
    max_batches = int(self.batches.max())
    weights = program.sgd_program(
        self.weight_loss, self.client_optimizer(),
        num_steps=o.epochs * max_batches, batch_size=batch,
        scan_unroll=self.config.scan_unroll,
        step_mask=lambda local, plan: self.entry_holders(
            self.units_of(local.client_state, plan.extras), plan.extras))
    weights = then(weights, self.finish_weights)
    if o.width_masks != 'learned' or o.mask_rounds == 0 or not o.learned_units:
      return weights
    masks = program.sgd_program(
        self.mask_loss, lambda lr: optim.adan(o.mask_lr),
        num_steps=o.mask_epochs * max_batches, batch_size=batch,
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
    """The client's state after the round: its exit heads (personal), the
    units it trained and its window offset (for its personalised model)."""
    state = local.client_state
    heads = {k: local.params[k] for k in state['heads']}
    return local.replace(client_state={
        **state, 'heads': heads, 'offset': plan.extras['offset'],
        'units': self.units_of(state, plan.extras)})

  # ---- aggregation (Eqs. 4–5) ------------------------------------------------
  def aggregate(self, state: ServerState, plans: ClientPlan,
                outputs: ClientOutput) -> ServerState:
    delta = jax.tree.map(jnp.negative, outputs.delta)       # w_end − w_start
    units = outputs.client_state['units']
    active = plans.is_active()
    if self.options.weighting == 'holders':
      masks = jax.vmap(self.entry_holders)(units, plans.extras)
      means, _ = aggregation.masked_segment_mean(
          delta, plans.active_weight(), plans.group, 1, masks,
          values_masked=True)
      update = jax.tree.map(lambda m: m[0], means)
    else:
      update = self.staleness_weighted(state, plans, delta, units, active)
    params = jax.tree.map(jnp.add, state.params, update)
    start = clock_part.redispatch(state.extras['start'], plans.client_id,
                                  plans.extras['redispatch'], params)
    return state.replace(params=params,
                         extras={**state.extras, 'start': start},
                         clients=self.next_clients(state, plans, outputs))

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

  def transfer_bytes(self, units: dict, window: dict) -> tuple:
    """(down, up) bytes of a client round: it downloads the embedding, its
    blocks up to its depth at full width and its exit heads, and uploads
    the entries it trained plus one bit per unit of its trainable blocks."""
    full = {k: jnp.ones_like(u) for k, u in units.items()}
    shipped = {**window, 'frozen': jnp.zeros_like(window['frozen'])}
    down = units_lib.unit_broadcast(self.holders(full, shipped), self.specs)
    up = self.entry_holders(units, window)
    itemsize = 4
    trained = (window['run'] & ~window['frozen']).astype(jnp.float32)
    bits = sum(jnp.sum(trained) * u.shape[1] for u in units.values())
    count = lambda tree: sum(jnp.sum(x) for x in jax.tree.leaves(tree))
    return itemsize * count(down), itemsize * count(up) + bits / 8

  def round_metrics(self, state, plans, outputs):
    """Loss, examples and bytes of the arrived updates, and the clock:
    virtual seconds of the round, client busy seconds, arrivals and their
    summed staleness (running totals in the logs)."""
    active = plans.is_active()
    down, up = jax.vmap(self.transfer_bytes)(outputs.client_state['units'],
                                             plans.extras)
    return {
        'train_loss': mean_over_active(outputs.loss, active),
        'examples': jnp.sum(outputs.num_examples),
        'bytes_down': jnp.sum(jnp.where(active, down, 0.0)),
        'bytes_up': jnp.sum(jnp.where(active, up, 0.0)),
        **clock_part.round_metrics(plans.extras, active),
    }

  # ---- evaluation --------------------------------------------------------------
  def state_evaluator(self, split):
    """Server: `server_logits` (the full model's deepest exit, global
    heads) on the test set, Top-1/Top-5/weighted F1. Clients (with
    `local_test`): each client's `personal_logits` on its local test split,
    averaged weighted by the split sizes."""
    server = evaluation.make_evaluator(
        self.server_logits, split.test_x, split.test_y,
        self.config.eval_batch_size, extended=True)
    if split.local_test is None:
      return lambda state: server(state.params)
    depth = jnp.asarray(self.depth)
    clients = evaluation.make_personal_evaluator(
        self.personal_logits, split.local_test, self.config.eval_batch_size,
        extended=True)
    weights = np.asarray(split.local_test.counts, np.float64)
    weights = weights / weights.sum()

    def evaluate(state):
      out = dict(server(state.params))
      rows = {**state.clients, 'depth': depth}
      per_client = clients(state.params, rows)
      for name, values in per_client.items():
        out[f'client_{name}'] = float(np.dot(weights, np.asarray(values)))
      return out

    return evaluate

  def server_logits(self, params: PyTree, x: jax.Array) -> jax.Array:
    """The server model's logits [B, C]: the full ViT's deepest exit."""
    return self.model.apply({'params': params}, x)

  def personal_logits(self, shared: PyTree, row: PyTree,
                      x: jax.Array) -> jax.Array:
    """A client's personalised submodel (its masks, window and exit heads;
    deepest exit) on x: logits [B, C]. `row` is its row of the client
    state with its depth."""
    offset, layers = row['offset'], jnp.arange(self.model.depth)
    window = {'run': layers < offset + row['depth'],
              'frozen': layers < offset}
    params = ({**shared, **row['heads']} if self.options.personal_heads
              else shared)
    logits = self.exits_logits(params, x, row['units'], window)
    return logits[offset + row['depth'] - 1]


def revert_untrained(params: PyTree, start: PyTree, held: PyTree) -> PyTree:
  """`params` where `held` > 0, the round's `start` elsewhere: entries a
  client did not train (e.g. moved only by weight decay) are not uploaded."""
  return jax.tree.map(lambda p, s, m: jnp.where(m > 0, p, s), params, start,
                      held)


def then(base: program.ClientProgram, finish) -> program.ClientProgram:
  """`base` whose end model goes through `finish(local, plan) -> local`."""
  return dataclasses.replace(base, final=lambda carry, plan: finish(
      base.final(carry, plan), plan))


# What every baseline of Co-S²P's tables shares: synchronous rounds (μ = 1,
# T_clk = 0; their RU < 100%), no personal heads or self-distillation, and
# every entry averaged over the clients holding it.
SYNCHRONOUS_BASELINE = {'weighting': 'holders', 'personal_heads': False,
                        'lambda_kd': 0.0, 'mu': 1.0, 't_clk': 0.0}


class FedAvgFull(Cos2p):
  """FedAvg (Full) on the clock: every client trains the whole ViT each
  synchronous round and the server averages them (`aggregation_weights`)."""
  name = 'vit_fedavg'
  fixed_options = {**SYNCHRONOUS_BASELINE, 'width_masks': 'full'}


class FedRolexVit(Cos2p):
  """FedRolex (Alam et al. 2022) on the ViT: full depth, the heads and rows
  {(q + j) mod U : j < ⌈β·U⌉} at β = R_w = √R_n (our reading; the spec
  leaves β = √R_n or R_n open), every entry averaged over its holders."""
  name = 'vit_fedrolex'
  full_depth = True
  fixed_options = {**SYNCHRONOUS_BASELINE, 'width_masks': 'rolling'}


class RamFed(Cos2p):
  """RAM-Fed (Wang et al. 2023) as the spec reads it: full depth, a fresh
  random ⌈β·U⌉ of the heads and rows of every layer per client and round at
  β = R_w, every entry averaged over its holders."""
  name = 'ram_fed'
  full_depth = True
  fixed_options = {**SYNCHRONOUS_BASELINE, 'width_masks': 'random'}
