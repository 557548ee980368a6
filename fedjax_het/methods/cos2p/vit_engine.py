"""The ViT engine on the virtual clock that Co-S²P and its baselines share
(`VitOnClock`); no paper's method itself. Its options are the `cos2p`
section (`Cos2pOptions`) and the virtual clock's, the `clock` section every
method on the clock shares (`parts.clock.ClockOptions`). Co-S²P's own keys
(mask phase, self-distillation, personal heads, Eq. 4 weighting) are read
by `cos2p.Cos2p` and Eq. 2's by `budget_masks`; a baseline fixes the ones
it does without (`fixed_options`, e.g. `cos2p.lambda_kd = 0`), so its
resolved config says what it trains with. Every ViT method reads the clock
section, whose defaults μ = 1, T_clk = 0 make the baselines synchronous as in
the paper's tables; a config may set μ < 1 for any of them (e.g. FedRolex
semi-asynchronously).

Budgets. Client n has a budget R_n = R_w · R_d (`cos2p.budgets`; R_w =
√(R·ρ), R_d = √(R/ρ), ρ = `width_depth_ratio`). It trains a window of
D_n = ⌊L·R_d⌋ blocks at width R_w above h frozen blocks (forward only;
embedding, CLS and positions train only when h = 0), the blocks above
pruned; a method with `full_depth` trains all L blocks (h = 0) at width R_w,
`width_masks='full'` the whole model (R_w = R_d = 1). The rolling offset
(`depth_offset`): 'shared' h(k) = k mod (L − D_max + 1) for every client,
so a weak client's last exit lines up with a strong client's intermediate
one; 'per_client' h_n(k) = k mod (L − D_n + 1); 'none' h = 0. Exits: after
every shallower-or-equal client's window end h + D_i − 1 and the client's
own (its deepest exit is the teacher row of `plan.extras`).

Fixed widths (`width_masks`, `round_units`), per kind of unit (MSA head,
output row of the attention projection, fc1, fc2; `models.vit`) and block,
float [N, L, U] of 1 = kept: 'full' every unit; 'rolling' (FedRolex) the
window {(q + j) mod U : j < ⌈R_w·U⌉} of dispatch round q; 'random'
(RAM-Fed) a fresh uniformly random ⌈R_w·U⌉ subset per client and round.

The clock (`systems.clock`, Alg. 1 of Co-S²P): idle clients are dispatched
at a round's start, the round closes ⌈μN⌉ arrivals plus T_clk seconds later
(`clock.mu`, `clock.t_clk`, `clock.tau_max`: the shared `clock` section,
`parts.clock.ClockOptions`), and stragglers arrive in later rounds with
staleness τ. The clock part (`parts.clock.OnClock`) is composed with the
engine as with any method, always on (`always_on_clock`); the engine plans
the rounds itself from its inputs: the schedule is simulated on the host
and enters the compiled rounds as round inputs
(`parts.clock.schedule_inputs`, `inputs['clock']`, `extras['clock']` of the
plans), read through the part's `slot_clients`; slot n of every round is
client n, active when its update arrives; it trains lazily at arrival from
the global model of its dispatch round (`extras['start']` row n, the part's
start table), with its key (`parts.clock.dispatch_key`) and window drawn
from the dispatch round, which gives the same result as training at
dispatch (the client's state cannot change while it is busy). The part's
round-time model is the engine's (`round_durations`): a client round costs
the fixed `clock.client_seconds`, or the analytic cost model
(`systems.vit_cost.round_seconds`) of the client's window at width R_w on
its device type, times a lognormal jitter (`clock.jitter`); the generic
one (FedAvg's, `local_steps` seconds per round) is not used, and the
generic part's staleness weights (`clock.staleness_weight`,
`staleness_exponent`) are refused: Co-S²P weighs stale updates by Eq. 4
(`cos2p.weighting`).

Buffered mode (`clock.buffer_size` K > 0, FedBuff: C = `clock.concurrency`
clients in flight, a server step on every K arrivals, `clock.tau_max` ≥ 0;
`parts.clock`'s module docstring): a round is a server step of K slots
(clients_per_round = K), slot j the step's j-th arriving client
(`parts.clock.slot_inputs`' 'client_id'), whose per-client facts (depth,
width, steps, weight, a method's own) are gathered by its id (`of_slots`);
it starts from the version it was dispatched with, row k mod (τ_max + 1) of
the part's version table, and Co-S²P's Eq. 4 measures its drift from that
row. C = K = N with τ_max = N − 1 is Alg. 1 at μ = 1 bit for bit
(tests/test_vit_buffered.py). A device trace (`clock.device_trace`) times
a client round by FedScale's completion time of its S_n·B samples
(`clock_default_steps`) in place of the analytic model.

Lossy links and unequal work (`config.systems`, the `parts.links_work`
part, composed with the engine's `part_types`): client n's update is
weighed by its link outcome Z_n drawn for its dispatch round, as the clock
part plans at dispatch (`at_dispatch`): a lost upload (Z_n = 0) gives it
weight 0, so it holds no entry of any mean (Co-S²P's Eq. 4 counts only the
uploads that get through, `ClientPlan.delivers`) and uploads no bytes; its
round still takes its time on the clock. Its local work T_n
(`systems.local_work` in `systems.work_unit`: steps, or epochs of its data;
empty: E = `epochs` epochs each, as without the part) sets the S_n steps it
runs (`work_steps`, `round_steps`), and the analytic clock charges them
(`vit_cost.round_seconds`). The clock is simulated on the host before the
rounds, so T_n must be static: the dynamic and trace models, which draw it
in the compiled round, are refused in one line (`refuse_drawn_work`).
Availability (`systems.availability`, the `parts.availability` part, which
the clock hosts): at a round's start only the idle clients online in that
round are dispatched, and the round waits for min(⌈μN⌉, clients training)
arrivals (`systems.clock.simulate`'s `online`); a client dispatched while
online finishes its update.

A round: S_n steps (E epochs, `epochs`) of `client_optimizer` (Adan with proximal
weight decay, or SGD) on the client's submodel with the cross-entropy
summed over its exits (`weight_loss`); gradients and updates are masked to
the entries it trains (`entry_holders`), which it uploads. The server
averages every parameter entry over the arrived clients holding it,
weighted by the client weights (`aggregate`: Δ_n = w_end − w_start, applied
to the current model), and dispatches w_{q+1} to the clients it redispatches.

Evaluation: the server model (the full ViT's deepest exit) on the test set,
and with `local_test` every client's submodel (its window and units) on its
local test split, averaged weighted by the split sizes.
"""
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_het import evaluation, optim
from fedjax_het.methods import self_distillation
from fedjax_het.methods.base import FederatedAlgorithm
from fedjax_het.methods.common.accounting import mean_over_active
from fedjax_het.core import aggregation, key_streams, program
from fedjax_het.core.key_streams import Stream
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState
from fedjax_het.models import vit
from fedjax_het.options import (ConfigError, OptionGroup, each, in_range,
                                is_bool, non_negative, non_negative_int,
                                option, positive, positive_int, same_value,
                                subset_of)
from fedjax_het.parts import clock as clock_part
from fedjax_het.parts import links_work
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
  """`config.cos2p`: the ViT engine (module docstring) and Co-S²P's own
  keys (`cos2p.Cos2p`)."""
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
  bandwidth_bps: float = option(1e9, 'client link bandwidth in bit/s (analytic model)', check=positive)
  device_speeds: dict = option({}, 'effective training FLOP/s per device type, overriding 15e12·TOPS/275 (e.g. a fit of the paper\'s RU)')
  speed_scale: float = option(1.0, 'multiplies every device\'s FLOP/s (a scaled model on a paper-scale clock; scale bandwidth_bps too)', check=positive)


# What every baseline of Co-S²P's tables fixes, as dotted 'section.key':
# Co-S²P's own options at the values that mean "without them" (every entry
# averaged over the clients holding it, no personal heads, no
# self-distillation), which the engine does not read. Their synchronous
# rounds (μ = 1, T_clk = 0; RU < 100%) are the clock section's defaults, not
# fixed: the paper's rows set them (experiments/cos2p/cos2p_setup.py).
WITHOUT_COS2P = {'cos2p.weighting': 'holders', 'cos2p.personal_heads': False,
                 'cos2p.lambda_kd': 0.0}


# The `cos2p` keys the engine's own code reads; a method adds those its code
# reads (`reads_keys`); any other key it neither reads nor fixes, set to a
# value other than its default, is refused in one line (`fix_options`).
ENGINE_KEYS = frozenset({
    'budgets', 'device_types', 'width_depth_ratio', 'depth_offset',
    'width_masks', 'optimizer', 'epochs', 'bandwidth_bps', 'device_speeds',
    'speed_scale'})

# The `clock` keys every ViT method reads (Alg. 1's μ, T_clk, τ_max, the
# round times, buffered mode's K and C and a device trace);
# `clock.staleness_weight` / `staleness_exponent` are the
# generic clock part's, refused here: Co-S²P weighs stale updates by its own
# Eq. 4 (`cos2p.weighting`), the baselines over holders.
CLOCK_KEYS = frozenset({'mu', 't_clk', 'tau_max', 'client_seconds', 'jitter',
                        'buffer_size', 'concurrency', 'device_trace'})

# The sections a ViT method reads, with the keys it reads of each (`cos2p`:
# the method's `reads_keys`) and why it does not read the others.
_SECTIONS = {'cos2p': (Cos2pOptions, "it is Co-S²P's own or another ViT "
                       "method's"),
             'clock': (clock_part.ClockOptions, "the ViT methods weigh stale "
                       "updates by their own rule, Co-S²P's cos2p.weighting")}


# ---- local work (host numpy) --------------------------------------------------
def refuse_drawn_work(systems) -> None:
  """ConfigError where the `systems` section draws T_m per round in the
  compiled round (the dynamic and trace models): the ViT clock charges each
  client's work on the host before the rounds (`work_steps`)."""
  if systems.model in ('dynamic', 'trace'):
    raise ConfigError(
        f'systems.model = {systems.model!r} draws each client\'s local work per '
        'round in the compiled round, but the ViT methods\' clock charges it '
        "on the host before the rounds; use systems.model 'static' or "
        "'markov' (a fixed T_m per client).")


def work_steps(config, counts: np.ndarray, epochs: int) -> np.ndarray:
  """S_m, the weight-training steps of client m's round, int64 [N]: E·⌈n_m/B⌉
  (E = `epochs`, counts n_m [N]), or where `systems.local_work` is set its
  T_m in `systems.work_unit` (T_m, or T_m·⌈n_m/B⌉ for epochs), as the
  links-and-work model assigns them (`parts.links_work.Heterogeneity`, its
  `shuffle` included). Static (`refuse_drawn_work`): the clock charges them."""
  batches = -(-counts // config.batch_size)
  if not config.systems.local_work:
    return epochs * batches
  model = links_work.Heterogeneity.from_config(
      config.systems, client_counts=counts, batch_size=config.batch_size,
      default_work=1, seed=config.seed)
  return model.work * model.steps_per_work


# ---- windows (host numpy; `window_offsets` also traced) ----------------------
def client_windows(budgets: np.ndarray, layers: int, ratio: float, *,
                   full_width: bool = False,
                   full_depth: bool = False) -> tuple[np.ndarray, np.ndarray]:
  """(D_n int32 [N], R_w float64 [N]) of the budgets R_n [N] on a ViT of
  L = `layers` blocks (module docstring): R_w = √(R·ρ), R_d = √(R/ρ), each
  at most 1, D_n = ⌊L·R_d⌋; `full_depth` R_d = 1 (FedRolex's clients),
  `full_width` R_w = R_d = 1 (the whole model). ConfigError where a budget
  leaves no block."""
  width = np.sqrt(budgets * ratio).clip(max=1.0)
  depth_rate = np.sqrt(budgets / ratio).clip(max=1.0)
  if full_width:
    width = np.ones(len(budgets))
  if full_depth or full_width:
    depth_rate = np.ones(len(budgets))
  depth = np.floor(layers * depth_rate + 1e-9).astype(np.int32)
  if (depth < 1).any():
    bad = int(np.argmin(depth))
    raise ConfigError(
        f'client {bad}\'s budget {budgets[bad]:g} leaves ⌊L·R_d⌋ = 0 '
        f'trainable blocks of L = {layers}; raise the budget or the '
        'width_depth_ratio.')
  return depth, width


def window_offsets(dispatch_round, depths: np.ndarray, layers: int,
                   mode: str):
  """h per client (int [N]) for models dispatched in `dispatch_round` (a
  scalar, or int [N] one per client; numpy or jax), the clients' depths D_n
  [N] on L = `layers` blocks: frozen blocks below the window, by
  `depth_offset` `mode` (module docstring)."""
  if mode == 'none':
    return dispatch_round * 0 + 0 * depths
  if mode == 'shared':
    return dispatch_round % (layers - int(depths.max()) + 1) + 0 * depths
  return dispatch_round % (layers - depths + 1)


def window_submodel(offset: int, depth: int, width: float,
                    depths: np.ndarray) -> vit_cost.Submodel:
  """A client's window as the analytic cost model sees it: h = `offset`
  frozen blocks, D = `depth` trainable ones at width R_w = `width`, an exit
  after every client depth D_i ≤ D (`depths` [N]), the embedding trained
  when h = 0."""
  return vit_cost.Submodel(
      frozen=offset, trainable=depth, width=vit_cost.Width.uniform(width),
      exits=int(np.sum(np.unique(depths) <= depth)),
      train_embedding=offset == 0)


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


def revert_untrained(params: PyTree, start: PyTree, held: PyTree) -> PyTree:
  """`params` where `held` > 0, the round's `start` elsewhere: entries a
  client did not train (e.g. moved only by weight decay) are not uploaded."""
  return jax.tree.map(lambda p, s, m: jnp.where(m > 0, p, s), params, start,
                      held)


def then(base: program.ClientProgram, finish) -> program.ClientProgram:
  """`base` whose end model goes through `finish(local, plan) -> local`."""
  return dataclasses.replace(base, final=lambda carry, plan: finish(
      base.final(carry, plan), plan))


class VitOnClock(FederatedAlgorithm):
  """A ViT trained on per-client windows and widths on the virtual clock,
  aggregated over holders (module docstring). Methods subclass it with
  their own client program, state and server rule."""

  # The virtual clock's keys are the shared `clock` section (CLOCK_KEYS);
  # the clock part is always on (`always_on_clock`), with the engine's
  # round-time model (`round_durations`, not equal work); the `systems`
  # section's parts (links and work, availability, which the clock hosts:
  # it dispatches the clients online) are composed as for any method.
  option_groups = (Cos2pOptions, clock_part.ClockOptions,
                   links_work.SystemsOptions)
  always_on_clock = True
  round_times_equal_work = False
  schedule_depends_on_rounds = True
  own_server_rule = ('a ViT method aggregates by its own rule: entries '
                     'averaged over their holders, FedPM a mask posterior')
  # Options the method fixes, as dotted 'section.key' of its sections (a
  # config setting one of them to another value is refused,
  # `fix_options`), and whether its clients train the full depth at width
  # R_w (no frozen or pruned blocks).
  fixed_options: dict = {}
  # The `cos2p` keys the method reads (ENGINE_KEYS and its own).
  reads_keys: frozenset = ENGINE_KEYS
  full_depth = False
  # Whether it trains AdaViT's decision networks (a ViT with decisions=True).
  reads_decisions = False

  @classmethod
  def fix_options(cls, config):
    """`config` with the method's `fixed_options` ('section.key') written
    into their sections (a copy); a fixed option that `config` sets to
    another value than its default is refused, never overwritten, and so is
    a key of its sections (`cos2p`, `clock`) the method neither reads
    (`reads_keys`, CLOCK_KEYS) nor fixes; the parts check it first
    (`MethodTraits.fix_options`), and `refuse_drawn_work` refuses local work
    the host cannot charge."""
    config = super().fix_options(config)
    refuse_drawn_work(config.systems)
    reads = {'cos2p': cls.reads_keys, 'clock': CLOCK_KEYS}
    for section, (group, reason) in _SECTIONS.items():
      for key, default in group.defaults().items():
        value = config[section][key]
        if (f'{section}.{key}' in cls.fixed_options or
            key in reads[section] or same_value(value, default)):
          continue
        raise ConfigError(
            f'{section}.{key} = {value!r} is set, but {cls.name} does not '
            f'read it ({reason}); leave it unset.')
    if not cls.fixed_options:
      return config
    resolved = config.copy_and_resolve_references()
    for dotted, fixed in cls.fixed_options.items():
      section, key = dotted.split('.')
      value = config[section][key]
      default = _SECTIONS[section][0].defaults()[key]
      if not (same_value(value, default) or same_value(value, fixed)):
        raise ConfigError(
            f'{cls.name} fixes {dotted} = {fixed!r}, got {value!r}; leave '
            f'it unset ({cls.name} trains with it).')
      resolved[section][key] = fixed
    return resolved

  @classmethod
  def fixed_in(cls, section: str) -> dict:
    """{key: value} of the `fixed_options` in `section`."""
    return {dotted.split('.')[1]: value
            for dotted, value in cls.fixed_options.items()
            if dotted.split('.')[0] == section}

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
    # The windows and costs first: the clock part, built with the parts
    # (`super().__init__`), reads the round-time model `round_durations`.
    self.config, self.model = config, model
    self.options = dataclasses.replace(Cos2pOptions.from_config(config),
                                       **self.fixed_in('cos2p'))
    self.clock_options = clock_part.ClockOptions.from_config(config)
    n, o = int(data.counts.shape[0]), self.options
    self.num_clients = n
    self.budgets = np.asarray(per_client('cos2p.budgets', o.budgets, n), np.float64)
    self.device_types = per_client('cos2p.device_types', o.device_types, n)
    self.depth, self.width = client_windows(
        self.budgets, model.depth, o.width_depth_ratio,
        full_width=o.width_masks == 'full', full_depth=self.full_depth)
    self.counts = np.asarray(data.counts)
    self.batches = -(-self.counts // config.batch_size)      # ⌈n / B⌉
    self.round_steps = work_steps(config, self.counts, o.epochs)   # S_m
    self.data_shape = data.feature_shape
    self.template = jax.eval_shape(
        lambda: model.init(jax.random.PRNGKey(0), jnp.zeros(
            (1,) + data.feature_shape))['params'])
    self.specs = vit.segment_specs(self.template)
    super().__init__(config, model, data)

  # ---- the virtual clock -----------------------------------------------------
  def max_local_steps(self) -> int:
    """The program's length: the most steps S_m of a client round."""
    return int(self.round_steps.max())

  def clock_default_steps(self) -> tuple:
    """S_m per client: a client round's work on a device trace, S_m·B
    samples at the device's ms per sample (`parts.clock.trace_seconds`,
    module docstring)."""
    return tuple(int(s) for s in self.round_steps)

  @property
  def virtual_clock(self) -> clock_part.VirtualClock:
    """The clock part's host side (the engine is defined on the clock)."""
    return self.parts[clock_part.OnClock.name].clock

  @property
  def schedule(self) -> clock.Schedule:
    """The clock's schedule (`virtual_clock`'s)."""
    return self.virtual_clock.schedule

  def cost_shape(self) -> vit_cost.ViTShape:
    """The model and input size as the analytic cost model sees them."""
    m, (height, width, channels) = self.model, self.data_shape
    if height != width:
      raise ConfigError(f'the analytic clock models square images, got '
                        f'{self.data_shape}; set clock.client_seconds.')
    return vit_cost.ViTShape(
        depth=m.depth, hidden=m.hidden, mlp=m.mlp, heads=m.heads,
        patch=m.patch, image=height, channels=channels,
        num_classes=m.num_classes)

  def cost_submodel(self, client: int,
                    dispatch_round: int) -> vit_cost.Submodel:
    """Client `client`'s window at width R_w when dispatched in that round
    (`window_submodel`)."""
    return window_submodel(int(self.offsets(np.int32(dispatch_round))[client]),
                           int(self.depth[client]), float(self.width[client]),
                           self.depth)

  def mask_epochs_charged(self, sub: vit_cost.Submodel,
                          dispatch_round: int) -> int:
    """Epochs of mask training the clock charges a dispatch (none here)."""
    del sub, dispatch_round
    return 0

  def client_round_seconds(self) -> clock.Duration:
    """`duration(client, dispatch_round, index)` of a client round: the fixed
    `client_seconds`, or the analytic model (`systems.vit_cost.round_seconds`)
    of `cost_submodel` on the client's device type."""
    o = self.options
    if self.clock_options.client_seconds:
      return clock_part.fixed_seconds(self.clock_options,
                                      num_clients=self.num_clients,
                                      rounds=self.config.rounds)
    shape = self.cost_shape()
    devices = [vit_cost.device(t, o.device_speeds) for t in self.device_types]
    devices = [dataclasses.replace(d, speed=d.speed * o.speed_scale)
               for d in devices]

    @functools.lru_cache(maxsize=None)
    def seconds(client: int, sub: vit_cost.Submodel, mask_epochs: int) -> float:
      return vit_cost.round_seconds(
          shape, sub, devices[client], train_samples=int(self.counts[client]),
          batch=self.config.batch_size, steps=int(self.round_steps[client]),
          mask_epochs=mask_epochs, bandwidth_bps=o.bandwidth_bps)

    def duration(client: int, dispatch_round: int, index: int) -> float:
      del index
      sub = self.cost_submodel(client, dispatch_round)
      return seconds(client, sub, self.mask_epochs_charged(sub, dispatch_round))

    return duration

  def round_durations(self) -> clock.Duration:
    """What the clock charges a dispatch: `client_round_seconds` with the
    lognormal jitter."""
    return clock.with_jitter(self.client_round_seconds(),
                             self.clock_options.jitter, self.config.seed)

  def summary_facts(self) -> dict:
    """The clock's totals (virtual time, RU in its three forms, the largest
    staleness) and, per client, its mean virtual seconds per round and, for
    square images, the analytic memory of its window at offset 0 (params,
    gradients, Adan's buffers and activations; `vit_cost.client_cost`)."""
    facts = super().summary_facts()
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
    int [N] one per client; numpy or jax): frozen blocks below the window
    (`window_offsets`)."""
    return window_offsets(dispatch_round, self.depth, self.model.depth,
                          self.options.depth_offset)

  def exit_positions(self, offset: jax.Array, depth: jax.Array) -> jax.Array:
    """bool [L]: exits after h + D_i − 1 for every client depth D_i ≤ D."""
    depths = jnp.asarray(np.unique(self.depth))
    ends = offset + depths - 1
    layers = jnp.arange(self.model.depth)
    return jnp.any((layers[:, None] == ends[None]) & (depths <= depth)[None],
                   axis=1)

  def plan_round(self, state: ServerState, data=None,
                 inputs: PyTree = None) -> ClientPlan:
    """The round's S slots (the clock's inputs, `inputs['clock']`, read by
    the part's `slot_clients`): slot n = client n under Alg. 1 (S = N), the
    step's n-th arrival in buffered mode (S = K), active if its update
    arrives this round, starting from its start-table row.

    `extras`: the window ('run', 'frozen' bool [S, L], 'exits' bool [S, L],
    'teacher' and 'offset' int [S]), 'width' R_w [S], the fixed 'units'
    {kind: [S, L, U]} and the clock's inputs of the round by slot, 'clock'
    (as the clock part's plans carry them). A slot's client runs its S_n
    steps (`round_steps`); the parts adjust its plan as in its dispatch
    round (`at_dispatch`)."""
    del data
    if inputs is None:
      raise ValueError(f'{self.name} plans a round from its schedule: pass '
                       'round inputs (RoundRunner.run does, from '
                       '`round_inputs`).')
    ids, inputs, rows = self.parts[clock_part.OnClock.name].slot_clients(
        inputs)
    slots = ids.shape[0]
    dispatch = inputs['dispatch_round']
    keys = jax.vmap(self.client_key, in_axes=(None, 0, 0))(state, dispatch,
                                                          ids)
    offset = jax.vmap(lambda k, client: self.offsets(k)[client])(dispatch,
                                                                ids)
    depth = self.of_slots(ids, self.depth)
    width = self.of_slots(ids, self.width.astype(np.float32))
    layers = jnp.arange(self.model.depth)
    run = layers[None] < (offset + depth)[:, None]
    frozen = layers[None] < offset[:, None]
    extras = {
        'run': run, 'frozen': frozen,
        'exits': jax.vmap(self.exit_positions)(offset, depth),
        'teacher': offset + depth - 1, 'offset': offset,
        'width': width,
        'units': self.round_units(dispatch, keys, width),
        clock_part.OnClock.name: inputs,
    }
    plans = ClientPlan(
        client_id=ids, key=keys,
        num_steps=self.of_slots(ids, self.round_steps.astype(np.int32)),
        lr=jnp.full((slots,), self.config.client_lr, jnp.float32),
        weight=self.client_weights(ids),
        group=jnp.zeros((slots,), jnp.int32),
        extras=extras, active=inputs['arrives'], start_model=rows)
    return self.at_dispatch(state, dispatch, plans)

  def of_slots(self, ids: jax.Array, values: np.ndarray) -> jax.Array:
    """A per-client array [N, ...] (numpy, or a row of the clients' state)
    at the round's slots' clients `ids` [S]:
    itself where the slots are the clients in order (Alg. 1: slot n is
    client n), else its rows `ids` (buffered mode)."""
    if self.parts[clock_part.OnClock.name].options.buffered:
      return jnp.asarray(values)[ids]
    return jnp.asarray(values)

  def at_dispatch(self, state: ServerState, dispatch: jax.Array,
                  plans: ClientPlan) -> ClientPlan:
    """`plans` [S] adjusted by the parts as in each slot's dispatch round
    (`dispatch` int [S]), as the clock part plans at dispatch: links and
    work weigh client n's update by its link outcome Z_n of that round
    (w_n·Z_n; 0: its upload is lost, it is no holder of any entry and
    uploads no bytes). Its steps stay S_n (`round_steps`: the part's T_n,
    which the clock charges)."""
    def adjust(dispatch_round, plan):
      one = jax.tree.map(lambda x: x[None], plan)
      one = self.parts.adjust(state.replace(round=dispatch_round), one)
      return jax.tree.map(lambda x: x[0], one)

    adjusted = jax.vmap(adjust)(dispatch, plans)
    return adjusted.replace(num_steps=plans.num_steps)

  def client_key(self, state: ServerState, dispatch_round: jax.Array,
                 client: jax.Array) -> jax.Array:
    """The key of a client's work dispatched in `dispatch_round`: the one
    `FederatedAlgorithm.plan_round` gives it in that round."""
    return clock_part.dispatch_key(state.key, dispatch_round, client)

  def round_units(self, dispatch: jax.Array, keys: jax.Array,
                  width: jax.Array) -> dict:
    """The fixed unit masks of the round's slots (`width_masks`, module
    docstring), dispatched in rounds `dispatch` [S] with keys [S] at widths
    R_w [S]: {kind: [S, L, U]}."""
    out = {}
    for i, (kind, (layers, count)) in enumerate(self.model.unit_shapes().items()):
      if self.options.width_masks == 'full':
        out[kind] = jnp.ones((width.shape[0], layers, count))
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

  # ---- client and server state -----------------------------------------------
  def init_clients(self, params: PyTree) -> PyTree:
    """The units each client trained last and its window offset (for its
    submodel's evaluation), {kind: [N, L, U]} (all units) and int [N]."""
    del params
    n = self.num_clients
    return {'offset': jnp.zeros((n,), jnp.int32),
            'units': {k: jnp.ones((n,) + s)
                      for k, s in self.model.unit_shapes().items()}}

  def init_extras(self, params: PyTree) -> dict:
    """No server state of the engine's own, a dict the methods add theirs
    to (the clock part adds its start table 'start')."""
    del params
    return {}

  # ---- the client program ----------------------------------------------------
  def client_optimizer(self) -> program.OptimizerFactory:
    if self.options.optimizer == 'sgd':
      return super().client_optimizer()
    return lambda lr: optim.adan(lr, self.config.client_weight_decay)

  def units_of(self, row: PyTree, window: dict) -> dict:
    """The unit masks a client trains with: the round's fixed ones."""
    del row
    return window['units']

  def exits_logits(self, params, x, units: dict, window: dict) -> jax.Array:
    """Every exit's logits [L, B, C] of the client's submodel: `units` in
    the trainable blocks, full width in the frozen ones, pruned above."""
    trained = window['run'] & ~window['frozen']
    units = {k: jnp.where(trained[:, None], u, 1.0) for k, u in units.items()}
    return self.model.apply(
        {'params': params}, x, units=units, all_exits=True,
        window=vit.Window(run=window['run'], frozen=window['frozen']))

  def weight_loss(self, local: program.LocalModel, x, y, plan, ctx):
    """Σ over the client's exits of the batch-mean cross-entropy."""
    del ctx
    window = plan.extras
    logits = self.exits_logits(local.params, x,
                               self.units_of(local.client_state, window),
                               window)                         # [L, B, C]
    ce = optax.softmax_cross_entropy_with_integer_labels(
        logits, y[None]).mean(axis=-1)
    return jnp.sum(jnp.where(window['exits'], ce, 0.0))

  def holders(self, units: dict, window: dict) -> dict:
    """{segment group: 1 where the client trains the segment} (the clients
    an entry is averaged over)."""
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
    """E epochs of `weight_loss` on the entries the client trains, then
    `finish_weights`."""
    weights = program.sgd_program(
        self.weight_loss, self.client_optimizer(),
        num_steps=self.max_local_steps(),
        batch_size=self.config.batch_size,
        scan_unroll=self.config.scan_unroll,
        step_mask=lambda local, plan: self.entry_holders(
            self.units_of(local.client_state, plan.extras), plan.extras))
    return then(weights, self.finish_weights)

  def finish_weights(self, local: program.LocalModel,
                     plan) -> program.LocalModel:
    """The client's state after the round: the units it trained and its
    window offset (for its submodel's evaluation)."""
    state = local.client_state
    return local.replace(client_state={
        **state, 'offset': plan.extras['offset'],
        'units': self.units_of(state, plan.extras)})

  # ---- aggregation ---------------------------------------------------------
  def aggregate(self, state: ServerState, plans: ClientPlan,
                outputs: ClientOutput) -> ServerState:
    """w_{q+1} = w_q + `update` (the clock part then dispatches w_{q+1} to
    the clients it redispatches)."""
    delta = jax.tree.map(jnp.negative, outputs.delta)       # w_end − w_start
    update = self.update(state, plans, delta, outputs.client_state['units'])
    params = jax.tree.map(jnp.add, state.params, update)
    return state.replace(params=params,
                         clients=self.next_clients(state, plans, outputs))

  def update(self, state: ServerState, plans: ClientPlan, delta: PyTree,
             units: dict) -> PyTree:
    """Every entry's weighted mean of the arrived deltas Δ_n [N, ...] over
    the clients holding it (`aggregation.masked_segment_mean`)."""
    del state
    masks = jax.vmap(self.entry_holders)(units, plans.extras)
    means, _ = aggregation.masked_segment_mean(
        delta, plans.active_weight(), plans.group, 1, masks,
        values_masked=True)
    return jax.tree.map(lambda m: m[0], means)

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
    """Loss, examples and bytes of the arrived updates (up: those whose
    upload gets through, `ClientPlan.delivers`); the clock part adds its
    own (virtual seconds, busy seconds, arrivals, staleness)."""
    active = plans.is_active()
    down, up = jax.vmap(self.transfer_bytes)(outputs.client_state['units'],
                                             plans.extras)
    return {
        'train_loss': mean_over_active(outputs.loss, active),
        'examples': jnp.sum(outputs.num_examples),
        'bytes_down': jnp.sum(jnp.where(active, down, 0.0)),
        'bytes_up': jnp.sum(jnp.where(plans.delivers(), up, 0.0)),
    }

  # ---- evaluation --------------------------------------------------------------
  def state_evaluator(self, split):
    """Server: `server_logits` (the full model's deepest exit) on the test
    set, Top-1/Top-5/weighted F1. Clients (with `local_test`): each client's
    `personal_logits` on its local test split, averaged weighted by the
    split sizes."""
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
    """A client's submodel (its units and window, deepest exit) of the
    params `shared` on x: logits [B, C]. `row` is its row of the client
    state with its depth."""
    offset, layers = row['offset'], jnp.arange(self.model.depth)
    window = {'run': layers < offset + row['depth'],
              'frozen': layers < offset}
    logits = self.exits_logits(shared, x, row['units'], window)
    return logits[offset + row['depth'] - 1]
