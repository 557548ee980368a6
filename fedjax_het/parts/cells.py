"""The cells part: a cloud over N edge cells, E edge rounds per global round.

HIST's hierarchy (Fang, Han & Brinton, Algorithm 1) as a part a method runs
under. The method plans its cohort; the part groups it by cell (clients
0..n_0-1 form cell 0, and so on) and runs the global round t as

    x̄_j^{t,0} = p_j^t ⊙ x̄^t                                   (4)
    for e = 0..E-1:   every planned client i of cell j runs H local steps
                      from x̄_j^{t,e}                            (5)
                      x̄_j^{t,e+1} = weighted mean over its cell  (6)
    x̄^{t+1} = Σ_j p_j ⊙ x̄_j^{t,E}  (+ mean over cells of shared params)  (7)

(p_j: what cell j's clients hold, `held_masks`: HIST's disjoint partitions,
the union of the capacity levels' submodels of its clients under the
submodel methods, the full model for FedAvg, HFedAvg and FSL_MC, FedAvg on
the composed split model). On the engine:
- `assign`: cells are aggregation segments and start-model rows
  (`plan.group` = `plan.start_model` = the client's cell);
- `local_phase`: the E edge rounds are a `clients.scan` (a `lax.scan` in the
  round's jit, a host loop under the sequential backend), so the client
  program compiles once whatever E; edge round e > 0 folds e into the
  clients' keys, so every edge round draws fresh minibatches;
- `edge_aggregate`: Eq. (6) exact (OMA: the ratio of the cells' segment sums,
  added up inside the client map) or over the air (AirComp,
  `channels.aircomp.over_the_air_mean`): clients send δ_i = (x_{i,0} −
  x_{i,H})/γ (Eq. (21)), cell j receives δ̂_j = Σ ŵ_i δ_i + Z_j over fresh
  Rayleigh channels with a max-min beamformer (Eqs. (22)-(25)) and sets
  x̄_j ← x̄_j − γ·δ̂_j (Eq. (27)), so the model noise is γZ;
- `cloud`: Eq. (7) as `combine_segments` of the cells' means, per coordinate
  over the cells holding it.

Edge rule (`EDGE_RULES`, the method's): 'mean' is Eq. (6), the weighted mean
Σ_{i∈j} w_i Δ_i / Σ_{i∈j} w_i (FedAvg, the submodel methods, HIST). 'draws'
is the FedACS family's rule (3) restricted to the cell: the K_j draws of
cell j move its edge model by (1/K_j) Σ_{k∈j} Z_k c_k Δ_k (w_k = Z_k c_k,
the flat round's link outcomes and coefficients), a sum over the cell's
draws divided by their number, not by their weight; the cloud weighs the
cells by their draws, x̄^{t+1} = x̄^t − Σ_j (K_j/K)(x̄^t − x̄_j^{t,E}), cells
whose updates were all lost included (they moved by 0). With E = 1 and OMA
this is flat rule (3), (1/K) Σ_k Z_k c_k Δ_k. Under AirComp the edge's
noisy weighted mean is scaled by Σ_{k∈j} w_k / K_j.

Cohort: the part groups whatever cohort the method plans, fixed for the E
edge rounds of a global round. HIST and HFedAvg plan every client, as HIST's
Algorithm 1. FedAvg (and the submodel methods, FedAvg on submodels) keeps its
own sampling, K clients per global round with the same ids and keys as
without cells, and the sampled clients of cell j are its participants: the
reading closest to Algorithm 1 that keeps FedAvg's cohort, since with
clients_per_round = num_clients it is Algorithm 1 itself (every client, one
cohort for the E edge rounds), with FedAvg's weights. A cell none of whose
clients is sampled (or all of whose updates are lost) has coverage 0 and is
left out of the cloud mean. The edge weights are the method's client weights
(FedAvg's `aggregation_weights`, times its link outcomes under the systems
part). The FedACS family's rule-(3) methods (fedacs, fedavg_het, ca_fedavg,
fednova; `methods.fedacs.systems_aware`) keep their own sampling in the same
way: their K draws, grouped by cell, with the 'draws' edge rule. The clients
run without per-client state rows (`ServerState.clients`: these methods keep
none the clients read).

Lossy links and unequal work (`parts.links_work`, `config.systems`; read by
FedAvg, the submodel and FedACS families, HIST and HFedAvg): our reading is
one draw per global round, the part's (it draws once per round), for all E
edge rounds. Client m runs its own T_m local steps in every edge round, and
when its link is down in the round (Z_m = 0, weight w_m·Z_m = 0) it still
trains from its cell's edge model but its upload is lost in every edge round:
it enters no edge mean (OMA), and under AirComp it does not transmit (no
precoder, left out of the beamformer's design). A cell whose every upload is
lost keeps its edge model (it moves by 0) and holds no coordinate for the
cloud (coverage 0), which leaves it out of its mean; a coordinate no cell
holds (a lost cell's HIST partition) keeps its value.

Accounting (`charge`): every planned client downloads its edge model and
uploads its update once per edge round, so bytes_down / bytes_up (delivered
uploads only) and the other per-exchange counts (`PER_EDGE_ROUND_METRICS`)
are E times the flat round's; the edge-cloud backhaul is not charged (as in
HIST). With AirComp, `aircomp_mse`, `beamformer_gain` and
`beamformer_initial_gain` are the means over the cells that receive (some
upload arrives) and the edge rounds (a round's values, `PER_ROUND_METRICS`).
Simulated latency needs HIST's system model (CPU frequencies, bandwidth) and
is charged by HIST and HFedAvg only.
"""
import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from fedjax_het.channels import aircomp
from fedjax_het import models
from fedjax_het.core import aggregation, parts
from fedjax_het.core.key_streams import Stream
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState, \
    round_key
from fedjax_het.options import (ConfigError, OptionGroup, finite,
                                non_negative_int, option, positive,
                                positive_int, same_value)

PyTree = Any

# Round metrics of the part that are a round's value, not a running total.
PER_ROUND_METRICS = ('aircomp_mse', 'beamformer_gain',
                     'beamformer_initial_gain')
# Round metrics of one exchange (or one local phase) per client, E times the
# flat round's in cells (examples are added up over the edge rounds): the
# bytes, the FedACS family's uploads and steps, FSL_MC's split accounting.
PER_EDGE_ROUND_METRICS = ('bytes_down', 'bytes_up', 'uploads', 'local_steps',
                          'smashed_bytes_up', 'grad_bytes_down',
                          'model_bytes_up', 'model_bytes_down', 'gb',
                          'comm_rounds')


@dataclasses.dataclass(frozen=True)
class HierarchyOptions(OptionGroup):
  """`config.hierarchy`: a cloud over N edge cells (the cells part).

  A global round is E edge rounds of `local_steps` (H) steps at every planned
  client, each followed by an edge aggregation. `num_cells` and `edge_rounds`
  default to the method's own values (`with_method_defaults`): one cell and
  one edge round, no hierarchy, for a method the part is optional for;
  HIST's Sec. VI values for HIST and HFedAvg. The other defaults are HIST's
  Sec. VI-C. Keys marked HIST are read by HIST and HFedAvg only.
  """
  key = 'hierarchy'
  num_cells: int = option(0, "N edge servers; 0: the method's default (HIST and HFedAvg: 2, Sec. VI's N = 2 of Tables I-II; any other method: 1, no cells)", check=non_negative_int)
  cell_sizes: tuple = option((), 'n_j; () = num_clients split evenly, in client order')
  edge_rounds: int = option(0, "E edge rounds per global round; 0: the method's default (HIST and HFedAvg: 5, Sec. VI; any other method: 1)", check=non_negative_int)
  edge_weights: str = option('uniform', "HIST: edge mean over a cell's clients: uniform (1/n_j, Eq. (6)) | examples (∝ examples held); aggregation_weights is not read", choices=('uniform', 'examples'))
  cloud_weights: str = option('uniform', 'cloud mean over cells: uniform | clients (∝ cell weight)', choices=('uniform', 'clients'))
  partition_sizes: str = option('uniform', 'HIST: uniform | optimized (Eq. 19 / 36) | given', choices=('uniform', 'optimized', 'given'))
  given_sizes: tuple = option((), "HIST: neurons per cell when partition_sizes='given'")
  max_size_ratio: float = option(1.5, 'HIST: (19c) d_j ≤ ratio·d/N on parameters, shared ones included (ε_th = 9δ1² gives 1.5)', check=positive)
  edge_channel: str = option('oma', 'oma (TDMA, exact) | aircomp (over the air, noisy)', choices=('oma', 'aircomp'))
  aircomp_noise: str = option('real', 'real (var MSE, Eq. 25) | complex (real part, MSE/2) | none', choices=aircomp.NOISE_KINDS)
  aircomp_power: float = option(1.0, 'precoder power budget P_j (SNR = P_j/σ0²)', check=positive)
  beamformer_sca_steps: int = option(20, 'SCA iterations of the max-min beamformer', check=positive_int)
  beamformer_inner_steps: int = option(80, 'mirror-prox steps per SCA iteration', check=positive_int)
  slow_cells: int = option(-1, 'cells 0..slow_cells-1 use the *_slow values (-1: N//2)')
  cpu_ghz_slow: tuple = option((1.0, 2.0), 'HIST: CPU frequency range F_i of slow cells (GHz)')
  cpu_ghz_fast: tuple = option((2.0, 4.0), 'HIST: ... and of the other cells')
  snr_db_slow: float = option(30.0, 'SNR P_j/σ0² of slow cells (OMA rates and AirComp)', check=finite)
  snr_db_fast: float = option(40.0, '... and of the other cells', check=finite)
  bandwidth_hz: float = option(9e6, 'HIST: B per cell', check=positive)
  antennas: int = option(10, 'M antennas at each edge server', check=positive_int)
  cycles_per_step: float = option(1e6, 'HIST: V0, CPU cycles per full-model mini-batch step', check=positive)
  bits_per_param: float = option(32.0, 'HIST: L0/d', check=positive)
  subcarrier_hz: float = option(15e3, 'HIST: Δf (AirComp latency, 5G NR)', check=positive)
  symbol_s: float = option(1.0 / 14e3, 'HIST: t_s (AirComp latency, 5G NR)', check=positive)

  def validate(self) -> None:
    for key in ('cpu_ghz_slow', 'cpu_ghz_fast'):
      low_high = tuple(getattr(self, key))
      if len(low_high) != 2 or not 0 < low_high[0] <= low_high[1]:
        raise ConfigError(f'hierarchy.{key} must be a range (low, high) of '
                          f'positive GHz, got {low_high!r}.')
    if not (self.slow_cells == -1 or 0 <= self.slow_cells <= self.num_cells):
      raise ConfigError(f'hierarchy.slow_cells must be in '
                        f'[0, {self.num_cells}] or -1, got {self.slow_cells}.')

  def slow(self) -> np.ndarray:
    """bool [N]: which cells take the *_slow values."""
    n = self.num_cells
    return np.arange(n) < (n // 2 if self.slow_cells == -1 else self.slow_cells)


# The keys the part reads: the cells and, with AirComp, the channel; the
# cloud weights under the 'mean' edge rule only ('draws' weighs by K_j/K).
CELL_KEYS = ('num_cells', 'cell_sizes', 'edge_rounds', 'cloud_weights',
             'edge_channel')
# How an edge server combines its clients' deltas (module docstring).
EDGE_RULES = ('mean', 'draws')
# The AirComp channel's own keys; HIST's OMA rates read the others too.
AIRCOMP_ONLY_KEYS = ('aircomp_noise', 'aircomp_power', 'beamformer_sca_steps',
                     'beamformer_inner_steps')
AIRCOMP_KEYS = AIRCOMP_ONLY_KEYS + ('slow_cells', 'snr_db_slow', 'snr_db_fast',
                                    'antennas')


# `num_cells` / `edge_rounds` at 0 mean the method's default; a method that
# runs with or without cells defaults to one cell and one edge round (off).
METHOD_DEFAULT = 0
FLAT = {'num_cells': 1, 'edge_rounds': 1}


def with_method_defaults(config: ml_collections.ConfigDict,
                         defaults: dict) -> ml_collections.ConfigDict:
  """`config` with each of `hierarchy.num_cells` / `edge_rounds` left at 0
  replaced by the method's `defaults` (a copy; `config` itself when none is
  0), so the resolved config states what ran."""
  unset = {key: value for key, value in defaults.items()
           if config.hierarchy[key] == METHOD_DEFAULT}
  if not unset:
    return config
  resolved = config.copy_and_resolve_references()
  resolved.hierarchy.update(unset)
  return resolved


def is_on(section: ml_collections.ConfigDict) -> bool:
  """Whether `config.hierarchy` asks for cells: more than one cell or edge
  round, or the AirComp channel (one cell, one edge round and OMA are a
  flat round)."""
  return (section.num_cells > 1 or section.edge_rounds > 1 or
          section.edge_channel == 'aircomp')


def aircomp_key_refusal(key: str, value, method: str) -> ConfigError:
  """The one-line refusal of an AirComp key `hierarchy.<key>` set under
  OMA for `method`."""
  return ConfigError(
      f'hierarchy.{key} = {value!r} is set, but {method} reads it only with '
      "hierarchy.edge_channel='aircomp' (OMA edge sums are exact); leave it "
      'unset.')


def refuse_aircomp_keys_under_oma(config: ml_collections.ConfigDict,
                                  method: str) -> None:
  """Raises `aircomp_key_refusal` for an AirComp channel key
  (`AIRCOMP_ONLY_KEYS`) set while `config.hierarchy` is OMA."""
  section, defaults = config.hierarchy, HierarchyOptions.defaults()
  if section.edge_channel == 'aircomp':
    return
  for key in AIRCOMP_ONLY_KEYS:
    if not same_value(section[key], defaults[key]):
      raise aircomp_key_refusal(key, section[key], method)


def refuse_unread_keys(config: ml_collections.ConfigDict, method: str,
                       readers: str, edge_rule: str = 'mean',
                       cell_defaults: dict = FLAT) -> None:
  """Raises ConfigError (one line naming the key) for a `hierarchy` key set
  that a method holding the part without HIST's system model does not read:
  any key while the part is off, HIST's own keys, the AirComp keys under
  OMA, and `cloud_weights` under the 'draws' edge rule (rule (3) weighs the
  cells by their draws). `readers`: the methods that read HIST's keys;
  `cell_defaults`: the method's `num_cells` / `edge_rounds`, also unset."""
  section = config.hierarchy
  defaults = {**HierarchyOptions.defaults(), **cell_defaults}
  read = CELL_KEYS + (AIRCOMP_KEYS if section.edge_channel == 'aircomp'
                      else ())
  for key, default in defaults.items():
    value = section[key]
    if same_value(value, default):
      continue
    start = f'hierarchy.{key} = {value!r} is set, but {method}'
    if not is_on(section):
      raise ConfigError(
          f'{start} runs without cells at one cell, one edge round and OMA; '
          'set hierarchy.num_cells, edge_rounds or edge_channel=aircomp, or '
          'leave it unset.')
    if key == 'cloud_weights' and edge_rule == 'draws':
      raise ConfigError(f'{start} does not read it: its rule (3) in cells '
                        'weighs the cells by their draws K_j/K; leave it '
                        'unset.')
    if key in AIRCOMP_KEYS and key not in read:
      raise aircomp_key_refusal(key, value, method)
    if key not in read:
      raise ConfigError(
          f'{start} does not read it: edge weights, partition sizing and the '
          f'latency model are HIST\'s (read by {readers}); leave it unset.')


@dataclasses.dataclass(frozen=True)
class EdgeChannel:
  """How edge servers sum their clients' updates: 'oma' (exact) or
  'aircomp' (over the air) with its noise kind, power P, beamformer solver
  steps, M antennas and the linear SNR of every cell, float [N]."""
  kind: str
  noise: str
  power: float
  sca_steps: int
  inner_steps: int
  antennas: int
  snr: np.ndarray

  @classmethod
  def from_options(cls, options: 'HierarchyOptions') -> 'EdgeChannel':
    """The channel of a validated `config.hierarchy`."""
    snr_db = np.where(options.slow(), options.snr_db_slow,
                      options.snr_db_fast)
    return cls(options.edge_channel, options.aircomp_noise,
               float(options.aircomp_power), int(options.beamformer_sca_steps),
               int(options.beamformer_inner_steps), int(options.antennas),
               (10.0**(snr_db / 10)).astype(np.float32))


class Cells(parts.Part):
  """The cells part of a run (module docstring): it places each planned
  client in its cell (`place`), takes over the local phase (E edge rounds)
  and the cloud's combination of the cells (`combine`), makes the cells the
  aggregation segments and charges E exchanges (`metrics`).

  On for a method listing the part when `config.hierarchy` asks for cells
  (`is_on`), or always for a method defined in cells (`always_in_cells`:
  HIST, HFedAvg); the method's `edge_rule` and `cell_defaults` say how its
  edge servers combine deltas and its own N and E.

  Attributes:
    cell_sizes: n_j per cell; clients 0..n_0-1 form cell 0, and so on.
    edge_rounds: E.
    edge_rule: 'mean' (Eq. (6)) or 'draws' (rule (3) in the cell).
    cloud_weights: 'uniform' or 'clients' ('clients' under 'draws': the
      cells' cover is their draw count K_j).
    channel: the `EdgeChannel`.
    cell_of_client: int32 [M] each client's cell.
    template: the model's parameter shapes and dtypes (the deltas' dtypes).
    gamma: the clients' step size γ (AirComp's Eqs. (21), (27)).
    sums_deltas_in_map: OMA's edge means need only the cells' sums of the
      deltas, added up inside the client map; AirComp reads every client's
      delta (its channel).
  """
  name = 'cells'
  takes_over = frozenset({'local_phase', 'combine'})

  def __init__(self, options: HierarchyOptions, num_clients: int,
               template: PyTree, gamma: float, edge_rule: str = 'mean'):
    assert edge_rule in EDGE_RULES, edge_rule
    n = options.num_cells
    sizes = options.cell_sizes or tuple(
        int(s) for s in np.diff(np.linspace(0, num_clients, n + 1).round()))
    if len(sizes) != n:
      raise ConfigError(f'hierarchy.cell_sizes lists {len(sizes)} cells but '
                        f'num_cells is {n}.')
    if min(sizes) < 1:
      raise ConfigError(f'every cell needs at least one client, got cell '
                        f'sizes {list(sizes)} for {num_clients} clients.')
    if sum(sizes) != num_clients:
      raise ConfigError(f'hierarchy.cell_sizes {list(sizes)} add up to '
                        f'{sum(sizes)}, not num_clients={num_clients}.')
    self.cell_sizes = tuple(sizes)
    self.edge_rounds = int(options.edge_rounds)
    self.edge_rule = edge_rule
    self.cloud_weights = ('clients' if edge_rule == 'draws' else
                          options.cloud_weights)
    self.channel = EdgeChannel.from_options(options)
    self.cell_of_client = jnp.asarray(
        np.repeat(np.arange(n), self.cell_sizes), jnp.int32)
    self.template = template
    self.gamma = gamma
    self.sums_deltas_in_map = self.channel.kind == 'oma'
    self._edge_aggregate = jax.jit(self.edge_aggregate)

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict, template: PyTree,
                  edge_rule: str = 'mean') -> 'Cells':
    """The part of `config.hierarchy` (checked; ConfigError in one line)."""
    return cls(HierarchyOptions.from_config(config), config.num_clients,
               template, config.client_lr, edge_rule)

  @classmethod
  def check(cls, method, config: ml_collections.ConfigDict
            ) -> ml_collections.ConfigDict:
    """`config` with the method's N and E where it leaves them at 0; a
    `hierarchy` key the method does not read refused in one line. A method
    defined in cells (`always_in_cells`: HIST's, with its system model)
    reads every key, the AirComp channel's own only with AirComp."""
    config = with_method_defaults(config, method.cell_defaults)
    if method.always_in_cells:
      refuse_aircomp_keys_under_oma(config, method.name)
    else:
      refuse_unread_keys(config, method.name, 'hist, hfedavg',
                         method.edge_rule, method.cell_defaults)
    return config

  @classmethod
  def build(cls, method, config, data) -> 'Cells | None':
    config = with_method_defaults(config, method.cell_defaults)
    if not (method.always_in_cells or is_on(config.hierarchy)):
      return None
    return cls.from_config(
        config, models.parameter_shapes(method.model, data.feature_shape),
        method.edge_rule)

  def segments(self, count: int) -> int:
    del count
    return self.num_cells

  def sums_in_map(self, flag: bool) -> bool:
    del flag
    return self.sums_deltas_in_map

  @property
  def num_cells(self) -> int:
    return len(self.cell_sizes)

  def facts(self) -> dict:
    """summary.json's edge channel and noise model (AirComp's 'real' noise
    has the full MSE per element, twice what a receiver keeping the real part
    of the complex noise sees, 'complex')."""
    noise = {'real': 'real Gaussian, variance MSE per element (Eq. 25)',
             'complex': 'real part of complex Gaussian, variance MSE/2',
             'none': 'none (noiseless)'}[self.channel.noise]
    return {'edge_channel': self.channel.kind,
            'aircomp_noise': noise if self.channel.kind == 'aircomp' else
                             'none (OMA: exact)'}

  # ---- phase 1 ------------------------------------------------------------
  def place(self, plans: ClientPlan) -> ClientPlan:
    """`plans` [K] with each client's cell as its segment and start model."""
    segment = self.cell_of_client[plans.client_id]
    return plans.replace(group=segment, start_model=segment)

  # ---- phase 2: E edge rounds ----------------------------------------------
  def edge_aggregate(self, key: jax.Array, outputs: ClientOutput,
                     plans: ClientPlan) -> tuple[PyTree, dict]:
    """One edge aggregation: each cell's step, x̄_j − x̄_j^{next}.

    The weighted mean of its clients' deltas (Eq. (6)/(27)) under the 'mean'
    rule; under 'draws' that mean times Σ_{k∈j} w_k / K_j, i.e. rule (3)'s
    (1/K_j) Σ_{k∈j} w_k Δ_k (`draw_scale`).

    Returns:
      ([N, ...] steps, per-cell stats {name: float [N]}; empty for OMA).
    """
    means, stats = self.edge_means(key, outputs, plans)
    if self.edge_rule == 'draws':
      scale = self.draw_scale(plans)
      means = jax.tree.map(
          lambda m: (m * scale.reshape((-1,) + (1,) * (m.ndim - 1))
                     ).astype(m.dtype), means)
    return means, stats

  def draw_scale(self, plans: ClientPlan) -> jax.Array:
    """float [N]: Σ_{k∈j} w_k / K_j, the factor from cell j's weighted mean
    to its rule-(3) step (0 for a cell without draws)."""
    return aggregation.ratio(self.cell_weights(plans), self.cell_draws(plans))

  def cell_weights(self, plans: ClientPlan) -> jax.Array:
    """float [N]: Σ_{k∈j} w_k, each cell's total active client weight."""
    return aggregation.segment_sum(plans.active_weight(), plans.group,
                                   self.num_cells)

  def cell_draws(self, plans: ClientPlan) -> jax.Array:
    """float [N]: K_j, the active slots (draws) of each cell."""
    return aggregation.segment_sum(plans.is_active().astype(jnp.float32),
                                   plans.group, self.num_cells)

  def edge_means(self, key: jax.Array, outputs: ClientOutput,
                 plans: ClientPlan) -> tuple[PyTree, dict]:
    """Per-cell weighted mean of the client deltas, Eq. (6)/(27).

    OMA (exact) divides the cells' sums `outputs.delta_sums`; AirComp sends
    the deltas `outputs.delta` [K, ...] over the air.

    Returns:
      ([N, ...] mean deltas, per-cell stats {name: float [N]}; empty for OMA).
    """
    c = self.channel
    if c.kind == 'oma':
      means, _ = aggregation.mean_of_sums(outputs.delta_sums, self.template)
      return means, {}
    deltas = outputs.delta
    gamma = self.gamma
    channel_key, noise_key = jax.random.split(key)
    channels = aircomp.rayleigh_channels(channel_key, plans.weight.shape[0],
                                         c.antennas)
    accumulated_grads = jax.tree.map(lambda d: d / gamma, deltas)  # Eq. (21)
    means, _, stats = aircomp.over_the_air_mean(
        noise_key, accumulated_grads, plans.weight, plans.group,
        self.num_cells, channels, plans.client_masks(),
        snr=jnp.asarray(c.snr), power=c.power, noise=c.noise,
        sca_steps=c.sca_steps, inner_steps=c.inner_steps)
    return jax.tree.map(lambda m: gamma * m, means), {   # Eq. (27)
        'aircomp_mse': stats.mse, 'beamformer_gain': stats.gain,
        'beamformer_initial_gain': stats.initial_gain}

  def local_phase(self, run_clients: Callable[..., ClientOutput],
                  state: ServerState, plans: ClientPlan, data,
                  clients) -> ClientOutput:
    """E edge rounds of H local steps, each closed by an edge aggregation.

    `run_clients(clients, plans, data, table=...)` is the method's
    (`FederatedAlgorithm.run_clients`). `moved[j]` = x̄^t − x̄_j^{t,e} is
    carried per cell; a client starts edge round e from its cell's
    x̄_j^{t,e} (its row of the table of edge models), with its round key
    (e = 0) or the key with e folded in.

    Returns:
      the cohort's `ClientOutput`: `delta_sums` of the cells' x̄^t −
      x̄_j^{t,E} (one row per cell weighted by the cell's total client
      weight, or its draws K_j under 'draws'; masked by `held_masks`),
      losses and stats averaged and examples summed over the edge rounds.
    """
    params = state.params
    aircomp_key = round_key(state, Stream.HIST_AIRCOMP)

    def edge_round(moved, e):
      edge_params = jax.tree.map(lambda p, m: p[None] - m, params, moved)
      # e ≥ 1 is folded in beside the epochs: a known exception of
      # `core.key_streams`, kept for the pinned results.
      keys = jnp.where(e == 0, plans.key, jax.vmap(
          jax.random.fold_in, in_axes=(0, None))(plans.key, e))
      outputs = run_clients(clients, plans.replace(key=keys), data,
                            table=edge_params)
      means, stats = self._edge_aggregate(jax.random.fold_in(aircomp_key, e),
                                          outputs, plans)
      return (jax.tree.map(jnp.add, moved, means),
              (outputs.loss, outputs.num_examples, stats))

    moved = jax.tree.map(
        lambda p: jnp.zeros((self.num_cells,) + p.shape, p.dtype), params)
    moved, (losses, examples, stats) = clients.scan(
        edge_round, moved, jnp.arange(self.edge_rounds))
    # Per client: its cell's statistic, averaged over the edge rounds.
    extras = {name: jnp.mean(value, axis=0)[plans.group]
              for name, value in stats.items()}
    # The cloud's input: every client of cell j holds x̄^t − x̄_j^{t,E}, so
    # the cohort's segment sums are those of one row per cell weighted by
    # the cell's total client weight, or under 'draws' its draws K_j (no
    # [K, ...] copy of the edge models).
    cell_weight = (self.cell_draws(plans) if self.edge_rule == 'draws' else
                   self.cell_weights(plans))
    cells = jnp.arange(self.num_cells)
    delta_sums = aggregation.segment_sums(
        moved, cell_weight, cells, self.num_cells, self.held_masks(plans),
        values_masked=True)
    return ClientOutput(
        delta=None, delta_sums=delta_sums,
        loss=jnp.mean(losses, axis=0),
        num_examples=jnp.sum(examples, axis=0),
        extras=extras or None)

  def held_masks(self, plans: ClientPlan) -> PyTree:
    """The coordinates each cell's edge model holds, bool [N, ...] leaves:
    the union of the submodels (`plans.mask_table` rows [T, ...]) of its
    clients with weight (HIST: its partition; submodel methods: the union of
    its clients' capacity levels' submodels); None without a table (the full model).
    One [N, T] @ [T, ...] product, not a gather of the cohort's masks."""
    if plans.mask_table is None:
      return None
    rows = jax.tree.leaves(plans.mask_table)[0].shape[0]
    sends = plans.delivers().astype(jnp.float32)
    uses = aggregation.segment_sum(                      # [N, T]
        jax.nn.one_hot(plans.mask_row, rows) * sends[:, None], plans.group,
        self.num_cells)
    return jax.tree.map(
        lambda t: jnp.tensordot(uses, t.astype(jnp.float32), axes=1) > 0,
        plans.mask_table)

  # ---- phase 3: the cloud ----------------------------------------------------
  def combine(self, means: PyTree, coverage: PyTree) -> PyTree:
    """The cloud, Eq. (7): per coordinate, the mean over the cells holding it.

    A partitioned coordinate is held by one cell and gets its value (the sum
    of disjoint pieces); a shared one is averaged over the cells, with equal
    weights ('uniform', the paper) or by the cells' total client weight
    ('clients'; under the 'draws' rule their draws, Σ_j (K_j/K) of rule
    (3)); a cell with no planned client holds nothing.
    """

    def combine(mean, cover):
      weight = cover if self.cloud_weights == 'clients' else (
          cover > 0).astype(jnp.float32)
      weight = weight.reshape(weight.shape + (1,) * (mean.ndim - weight.ndim))
      total = _sum_rows(weight)
      combined = _sum_rows(weight * mean) / jnp.where(total > 0, total, 1.0)
      return combined.astype(mean.dtype)

    return jax.tree.map(combine, means, coverage)

  def metrics(self, metrics: dict[str, jax.Array], plans: ClientPlan,
              outputs: ClientOutput) -> dict[str, jax.Array]:
    """The flat round's `metrics` with E exchanges per client (the
    `PER_EDGE_ROUND_METRICS` it holds) and, with AirComp, its statistics:
    the means over the cells that receive, those with a client whose upload
    arrives (a cell whose every upload is lost designs no beamformer: its
    gain is the minimum over no client, +inf)."""
    metrics = dict(metrics)
    for key in PER_EDGE_ROUND_METRICS:  # one exchange per edge round
      if key in metrics:
        metrics[key] = self.edge_rounds * metrics[key]
    if outputs.extras:
      sends = plans.delivers()
      senders = aggregation.segment_sum(sends.astype(jnp.float32),
                                        plans.group, self.num_cells)
      receiving = jnp.maximum(jnp.sum(senders > 0), 1)
      for name in PER_ROUND_METRICS:
        # Each cell's value appears once per sender: the mean over cells.
        metrics[name] = jnp.sum(jnp.where(
            sends, outputs.extras[name] / jnp.maximum(senders[plans.group], 1),
            0.0)) / receiving
    return metrics


def data_cells(method, config: ml_collections.ConfigDict) -> int:
  """How many cells `config` runs `method` (a method class) in (1: none),
  known before the data are: a partition by cells (`partition='cell_shards'`)
  splits the data along them."""
  if Cells not in method.part_types():
    return 1
  return with_method_defaults(config, method.cell_defaults).hierarchy.num_cells


def _sum_rows(x: jax.Array) -> jax.Array:
  """Σ_j x[j] over the short leading (cell) axis as elementwise adds in row
  order: XLA:CPU's reduction over a leading axis of 2 took 6 ms for the
  W-MLP model, the adds fuse into one pass."""
  return functools.reduce(jnp.add, list(x))
