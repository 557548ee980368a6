"""HIST and hierarchical FedAvg over wireless cells (Fang, Han & Brinton).

A cloud server, N edge servers (cells) and n_j clients in cell j; every client
takes part in every global round t (Algorithm 1):

    x̄_j^{t,0} = p_j^t ⊙ x̄^t                                   (4)
    for e = 0..E-1:   every client i of cell j runs H masked SGD steps
                      from x̄_j^{t,e}                            (5)
                      x̄_j^{t,e+1} = weighted mean over C_j       (6)
    x̄^{t+1} = Σ_j p_j ⊙ x̄_j^{t,E}  (+ mean over cells of shared params)  (7)

On the engine a global round is one round of the `RoundRunner`:
- cells are aggregation segments: `plan.segment` is a client's cell, and each
  edge aggregation is the masked segment mean by cell (OMA: the ratio of the
  segment sums, added up inside the client map) or its over-the-air twin
  `channels.aircomp.over_the_air_mean`; the cells' submodel masks are the
  plans' `mask_table`, indexed by cell;
- the E edge rounds run in `local_phase` as a `clients.scan` (a `lax.scan`
  inside the round's jit, a host loop under the sequential backend); client
  programs start from their cell's row of the table of edge models
  (`plan.start_model` = the cell), and edge round e > 0 folds e into the
  clients' keys so every edge round draws fresh minibatches;
- every client of cell j ends holding x̄^t − x̄_j^{t,E}, the edge model after
  the last edge aggregation; `local_phase` returns the cohort's segment sums
  of these (`ClientOutput.delta_sums`, one row per cell weighted by the
  cell's total client weight), so the base class's segment mean by cell
  returns every cell's edge model and `combine_segments` is the cloud (Eq. (7):
  each coordinate is the mean of the cells whose submodel holds it, i.e. the
  owner's value for a partitioned neuron and the mean over cells for shared
  parameters).

HFedAvg (the baseline) trains the full model everywhere; HIST
trains, in every global round, fresh disjoint partitions p_j^t of the hidden
neurons (`submodel.disjoint`), of uniform, given or latency-optimal sizes
(`systems.partition_sizing`, Eqs. (19)/(36)).

Edge aggregation is OMA (exact, TDMA latency Eq. (17)) or AirComp
(`edge_channel='aircomp'`): clients send δ_i = (x_{i,0} − x_{i,H})/γ (Eq.
(21), the sign the paper intends), the edge server receives the noisy mean
δ̂_j = Σ ŵ_i δ_i + Z_j over fresh Rayleigh channels with a max-min beamformer
(Eqs. (22)-(25)), and sets x̄_j ← x̄_j − γ·δ̂_j (Eq. (27)), so the model noise
is γZ. Shared parameters are sent and noised too.

Accounting per global round (`round_metrics`): summed by the trainer,
bytes_up / bytes_down (E submodel exchanges per client), `mb_per_client`
(MiB uploaded per client: the x-axis of Fig. 3 and the unit of Tables I/II)
and `latency_s` (Eq. (18) with Eq. (17) or (35)); logged as the last round's
value (`per_round_metrics`), `partition_dmax` (d_max^t of Thm 1) and, with
AirComp, `aircomp_mse`, `beamformer_gain` and `beamformer_initial_gain`
(means over cells and edge rounds). summary.json names the edge channel and
the AirComp noise model (`summary_facts`). CPU frequencies
F_i ~ U(range of the cell) and OMA channels h_i^t are drawn once per global
round, AirComp channels once per edge round.
"""
import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_het.methods.base import FederatedAlgorithm
from fedjax_het import models
from fedjax_het.channels import aircomp
from fedjax_het.core import aggregation, key_streams
from fedjax_het.core.key_streams import Stream
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState, \
    round_key
from fedjax_het.options import (ConfigError, OptionGroup, finite, option,
                                positive, positive_int)
from fedjax_het.submodel import disjoint
from fedjax_het.systems import latency, partition_sizing

PyTree = Any


@dataclasses.dataclass(frozen=True)
class HierarchyOptions(OptionGroup):
  """`config.hierarchy`: a cloud over N edge cells (HIST, HFedAvg).

  A global round is E edge rounds of `local_steps` (H) steps at every client,
  each followed by an edge aggregation; every client trains in every round.
  Defaults: the paper's Sec. VI-C.
  """
  key = 'hierarchy'
  num_cells: int = option(2, 'N edge servers', check=positive_int)
  cell_sizes: tuple = option((), 'n_j; () = num_clients split evenly, in client order')
  edge_rounds: int = option(5, 'E edge rounds per global round', check=positive_int)
  edge_weights: str = option('uniform', "edge mean over a cell's clients: uniform (1/n_j, Eq. (6)) | examples (∝ examples held); aggregation_weights is not read", choices=('uniform', 'examples'))
  cloud_weights: str = option('uniform', 'cloud mean over cells: uniform | clients (∝ cell weight)', choices=('uniform', 'clients'))
  partition_sizes: str = option('uniform', 'HIST: uniform | optimized (Eq. 19 / 36) | given', choices=('uniform', 'optimized', 'given'))
  given_sizes: tuple = option((), "neurons per cell when partition_sizes='given'")
  max_size_ratio: float = option(1.5, '(19c) d_j ≤ ratio·d/N on parameters, shared ones included (ε_th = 9δ1² gives 1.5)', check=positive)
  edge_channel: str = option('oma', 'oma (TDMA, exact) | aircomp (over the air, noisy)', choices=('oma', 'aircomp'))
  aircomp_noise: str = option('real', 'real (var MSE, Eq. 25) | complex (real part, MSE/2) | none', choices=aircomp.NOISE_KINDS)
  aircomp_power: float = option(1.0, 'precoder power budget P_j (SNR = P_j/σ0²)', check=positive)
  beamformer_sca_steps: int = option(20, 'SCA iterations of the max-min beamformer', check=positive_int)
  beamformer_inner_steps: int = option(80, 'mirror-prox steps per SCA iteration', check=positive_int)
  slow_cells: int = option(-1, 'cells 0..slow_cells-1 use the *_slow values (-1: N//2)')
  cpu_ghz_slow: tuple = option((1.0, 2.0), 'CPU frequency range F_i of slow cells (GHz)')
  cpu_ghz_fast: tuple = option((2.0, 4.0), '... and of the other cells')
  snr_db_slow: float = option(30.0, 'SNR P_j/σ0² of slow cells (OMA rates and AirComp)', check=finite)
  snr_db_fast: float = option(40.0, '... and of the other cells', check=finite)
  bandwidth_hz: float = option(9e6, 'B per cell', check=positive)
  antennas: int = option(10, 'M antennas at each edge server', check=positive_int)
  cycles_per_step: float = option(1e6, 'V0, CPU cycles per full-model mini-batch step', check=positive)
  bits_per_param: float = option(32.0, 'L0/d', check=positive)
  subcarrier_hz: float = option(15e3, 'Δf (AirComp, 5G NR)', check=positive)
  symbol_s: float = option(1.0 / 14e3, 't_s (AirComp, 5G NR)', check=positive)

  def validate(self) -> None:
    for key in ('cpu_ghz_slow', 'cpu_ghz_fast'):
      low_high = tuple(getattr(self, key))
      if len(low_high) != 2 or not 0 < low_high[0] <= low_high[1]:
        raise ConfigError(f'hierarchy.{key} must be a range (low, high) of '
                          f'positive GHz, got {low_high!r}.')
    if not (self.slow_cells == -1 or 0 <= self.slow_cells <= self.num_cells):
      raise ConfigError(f'hierarchy.slow_cells must be in '
                        f'[0, {self.num_cells}] or -1, got {self.slow_cells}.')


@dataclasses.dataclass(frozen=True)
class Hierarchy:
  """The validated `config.hierarchy` of a run with `num_clients` clients.

  Attributes:
    cell_sizes: n_j per cell; clients 0..n_0-1 form cell 0, and so on.
    edge_rounds: E.
    system: the latency model's constants.
    cpu_hz_range: float [N, 2] F_i range of each cell.
    snr: float [N] linear SNR of each cell.
    (other fields as in `config.hierarchy`).
  """
  cell_sizes: tuple
  edge_rounds: int
  edge_weights: str
  cloud_weights: str
  partition_sizes: str
  given_sizes: tuple
  max_size_ratio: float
  edge_channel: str
  aircomp_noise: str
  aircomp_power: float
  sca_steps: int
  inner_steps: int
  system: latency.WirelessSystem
  cpu_hz_range: np.ndarray
  snr: np.ndarray

  @property
  def num_cells(self) -> int:
    return len(self.cell_sizes)

  @classmethod
  def from_config(cls, config) -> 'Hierarchy':
    """Reads and checks `config.hierarchy`; raises ValueError (one sentence)."""
    h = HierarchyOptions.from_config(config)
    num_clients = config.num_clients
    n = h.num_cells
    sizes = h.cell_sizes or tuple(
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
    if config.clients_per_round != num_clients:
      raise ConfigError(
          f'{config.algorithm} trains every client of every cell each round, '
          f'so clients_per_round ({config.clients_per_round}) must equal '
          f'num_clients ({num_clients}).')
    slow = n // 2 if h.slow_cells == -1 else h.slow_cells
    is_slow = np.arange(n) < slow
    cpu = np.where(is_slow[:, None], h.cpu_ghz_slow, h.cpu_ghz_fast) * 1e9
    snr_db = np.where(is_slow, h.snr_db_slow, h.snr_db_fast)
    system = latency.WirelessSystem(
        bandwidth_hz=h.bandwidth_hz, antennas=h.antennas,
        cycles_per_step=h.cycles_per_step, bits_per_param=h.bits_per_param,
        subcarrier_hz=h.subcarrier_hz, symbol_s=h.symbol_s)
    return cls(sizes, int(h.edge_rounds), h.edge_weights, h.cloud_weights, h.partition_sizes,
               tuple(h.given_sizes), float(h.max_size_ratio), h.edge_channel,
               h.aircomp_noise, float(h.aircomp_power),
               int(h.beamformer_sca_steps), int(h.beamformer_inner_steps),
               system, cpu.astype(np.float32),
               (10.0**(snr_db / 10)).astype(np.float32))


class HFedAvg(FederatedAlgorithm):
  """Hierarchical FedAvg: full model, E edge rounds per global round.

  The shared mechanism of both hierarchical methods: cells as segments, the
  E edge rounds in `local_phase`, OMA or AirComp edge aggregation, the cloud
  as `combine_segments`, latency and byte accounting. HIST changes only
  `cell_masks`.
  """

  name = 'hfedavg'
  option_groups = (HierarchyOptions,)
  per_round_metrics = ('partition_dmax', 'aircomp_mse', 'beamformer_gain',
                       'beamformer_initial_gain')

  def __init__(self, config, model, data):
    self.hierarchy = Hierarchy.from_config(config)
    super().__init__(config, model, data)
    self.num_segments = self.hierarchy.num_cells
    self.edge_rounds = self.hierarchy.edge_rounds
    self.cell_of_client = jnp.asarray(
        np.repeat(np.arange(self.num_segments), self.hierarchy.cell_sizes),
        jnp.int32)
    self.template = models.parameter_shapes(model, data.x.shape[2:])
    self.total_params = int(sum(math.prod(p.shape)
                                for p in jax.tree.leaves(self.template)))
    self.setup_partition(self.template)
    self._edge_aggregate = jax.jit(self.edge_aggregate)

  def setup_partition(self, template: PyTree) -> None:
    """Checks and precomputes the partition of the model (none here)."""
    del template

  def client_weights(self, client_ids: jax.Array) -> jax.Array:
    """Edge weights: 1 per client (1/n_j after the mean, Eq. (6)) or examples."""
    if self.hierarchy.edge_weights == 'examples':
      return self.client_counts[client_ids].astype(jnp.float32)
    return jnp.ones(client_ids.shape, jnp.float32)

  def summary_facts(self) -> dict:
    """The edge channel and its noise model (AirComp's 'real' noise has the
    full MSE per element, twice what a receiver keeping the real part of the
    complex noise sees, 'complex')."""
    h = self.hierarchy
    noise = {'real': 'real Gaussian, variance MSE per element (Eq. 25)',
             'complex': 'real part of complex Gaussian, variance MSE/2',
             'none': 'none (noiseless)'}[h.aircomp_noise]
    return {'edge_channel': h.edge_channel,
            'aircomp_noise': noise if h.edge_channel == 'aircomp' else
                             'none (OMA: exact)'}

  # ---- phase 1: every client, its cell, its resources, its submodel -------
  def sample_clients(self, state: ServerState, key: jax.Array) -> jax.Array:
    """Every client of every cell, in cell order."""
    del state, key
    return jnp.arange(self.num_clients, dtype=jnp.int32)

  def plan_clients(self, state: ServerState, client_ids: jax.Array,
                   keys: jax.Array) -> ClientPlan:
    """Cells as segments and start models; the round's F_i, R_i; the cell's
    submodel mask."""
    plans = super().plan_clients(state, client_ids, keys)
    h = self.hierarchy
    segment = self.cell_of_client[client_ids]
    cpu_key, channel_key = jax.random.split(round_key(state, Stream.HIST_SYSTEM))
    cpu_range = jnp.asarray(h.cpu_hz_range)[segment]
    cpu_hz = latency.draw_cpu_hz(cpu_key, cpu_range[:, 0], cpu_range[:, 1])
    channels = aircomp.rayleigh_channels(channel_key, client_ids.shape[0],
                                         h.system.antennas)
    rate_bps = latency.oma_rates(channels, jnp.asarray(h.snr)[segment],
                                 h.system.bandwidth_hz)
    plans = plans.replace(segment=segment, start_model=segment,
                          extras={'cpu_hz': cpu_hz, 'rate_bps': rate_bps})
    masks = self.cell_masks(round_key(state), plans)
    if masks is not None:  # a table the clients index by their cell
      plans = plans.replace(mask_table=masks, mask_row=segment)
    return plans

  def cell_masks(self, key: jax.Array, plans: ClientPlan) -> PyTree:
    """Submodel of every cell, bool [N, ...] leaves, or None (full model)."""
    del key, plans
    return None

  # ---- phase 2: E edge rounds --------------------------------------------
  @property
  def sums_deltas_in_map(self) -> bool:
    """OMA's edge means need only the cells' sums of the deltas, added up
    inside the client map; AirComp reads every client's delta (its channel)."""
    return self.hierarchy.edge_channel == 'oma'

  def edge_aggregate(self, key: jax.Array, outputs: ClientOutput,
                     plans: ClientPlan) -> tuple[PyTree, dict]:
    """One edge aggregation: per-cell mean of the client deltas, Eq. (6)/(27).

    OMA (exact) divides the cells' sums `outputs.delta_sums`; AirComp sends
    the deltas `outputs.delta` [K, ...] over the air.

    Returns:
      ([N, ...] mean deltas, per-cell stats {name: float [N]}; empty for OMA).
    """
    h = self.hierarchy
    if h.edge_channel == 'oma':
      means, _ = aggregation.mean_of_sums(outputs.delta_sums, self.template)
      return means, {}
    deltas = outputs.delta
    gamma = self.config.client_lr
    channel_key, noise_key = jax.random.split(key)
    channels = aircomp.rayleigh_channels(channel_key, plans.weight.shape[0],
                                         h.system.antennas)
    accumulated_grads = jax.tree.map(lambda d: d / gamma, deltas)  # Eq. (21)
    means, _, stats = aircomp.over_the_air_mean(
        noise_key, accumulated_grads, plans.weight, plans.segment,
        self.num_segments, channels, plans.client_masks(),
        snr=jnp.asarray(h.snr),
        power=h.aircomp_power, noise=h.aircomp_noise, sca_steps=h.sca_steps,
        inner_steps=h.inner_steps)
    return jax.tree.map(lambda m: gamma * m, means), {   # Eq. (27)
        'aircomp_mse': stats.mse, 'beamformer_gain': stats.gain,
        'beamformer_initial_gain': stats.initial_gain}

  def local_phase(self, state: ServerState, plans: ClientPlan, data,
                  clients) -> ClientOutput:
    """E edge rounds of H local steps, each closed by an edge aggregation.

    `moved[j]` = x̄^t − x̄_j^{t,e} is carried per cell; a client starts edge
    round e from its cell's x̄_j^{t,e} (its row of the table of edge
    models), with its round key (e = 0) or the key with e folded in. The edge
    rounds are a `clients.scan`, so the client program compiles once,
    whatever E.
    """
    params = state.params
    aircomp_key = round_key(state, Stream.HIST_AIRCOMP)

    def edge_round(moved, e):
      edge_params = jax.tree.map(lambda p, m: p[None] - m, params, moved)
      # e ≥ 1 is folded in beside the epochs: a known exception of
      # `core.key_streams`, kept for the pinned results.
      keys = jnp.where(e == 0, plans.key, jax.vmap(
          jax.random.fold_in, in_axes=(0, None))(plans.key, e))
      outputs = self.run_clients(clients, plans.replace(key=keys), data,
                                 table=edge_params)
      means, stats = self._edge_aggregate(jax.random.fold_in(aircomp_key, e),
                                          outputs, plans)
      return (jax.tree.map(jnp.add, moved, means),
              (outputs.loss, outputs.num_examples, stats))

    moved = jax.tree.map(
        lambda p: jnp.zeros((self.num_segments,) + p.shape, p.dtype), params)
    moved, (losses, examples, stats) = clients.scan(
        edge_round, moved, jnp.arange(self.edge_rounds))
    # Per client: its cell's statistic, averaged over the edge rounds.
    extras = {name: jnp.mean(value, axis=0)[plans.segment]
              for name, value in stats.items()}
    # The cloud's input: every client of cell j holds x̄^t − x̄_j^{t,E}, so
    # the cohort's segment sums are those of one row per cell weighted by
    # the cell's total client weight (no [K, ...] copy of the edge models).
    cell_weight = aggregation.segment_sum(plans.active_weight(),
                                          plans.segment, self.num_segments)
    cells = jnp.arange(self.num_segments)
    delta_sums = aggregation.segment_sums(
        moved, cell_weight, cells, self.num_segments, plans.mask_table,
        values_masked=True)
    return ClientOutput(
        delta=None, delta_sums=delta_sums,
        loss=jnp.mean(losses, axis=0),
        num_examples=jnp.sum(examples, axis=0),
        extras=extras or None)

  # ---- phase 3: the cloud -------------------------------------------------
  def combine_segments(self, means: PyTree, coverage: PyTree) -> PyTree:
    """The cloud, Eq. (7): per coordinate, the mean over the cells holding it.

    A partitioned coordinate is held by one cell and gets its value (the sum
    of disjoint pieces); a shared one is averaged over the cells, with equal
    weights ('uniform', the paper) or by the cells' total client weight
    ('clients').
    """

    def combine(mean, cover):
      weight = cover if self.hierarchy.cloud_weights == 'clients' else (
          cover > 0).astype(jnp.float32)
      weight = weight.reshape(weight.shape + (1,) * (mean.ndim - weight.ndim))
      total = _sum_rows(weight)
      combined = _sum_rows(weight * mean) / jnp.where(total > 0, total, 1.0)
      return combined.astype(mean.dtype)

    return jax.tree.map(combine, means, coverage)

  def round_metrics(self, state: ServerState, plans: ClientPlan,
                    outputs: ClientOutput) -> dict[str, jax.Array]:
    """Bytes, MiB per client, simulated latency and AirComp statistics."""
    metrics = super().round_metrics(state, plans, outputs)
    h = self.hierarchy
    for key in ('bytes_down', 'bytes_up'):  # one exchange per edge round
      metrics[key] = self.edge_rounds * metrics[key]
    metrics['mb_per_client'] = metrics['bytes_up'] / self.num_clients / 2**20
    if plans.mask_table is None:
      trained = jnp.full(plans.weight.shape, float(self.total_params))
    else:
      trained = jax.vmap(_count_true)(plans.mask_table)[plans.mask_row]
    cell_latency = latency.edge_round_latency(
        h.edge_channel, trained, self.total_params, plans.num_steps,
        plans.extras['cpu_hz'], plans.extras['rate_bps'], plans.segment,
        self.num_segments, h.system)
    metrics['latency_s'] = latency.global_round_latency(cell_latency,
                                                        self.edge_rounds)
    metrics['partition_dmax'] = jnp.max(trained)
    if outputs.extras:
      clients_in_cell = latency.cell_client_counts(plans.segment,
                                                   self.num_segments)
      for name, per_client in outputs.extras.items():
        # Each cell's value appears n_j times: the mean over cells.
        metrics[name] = jnp.sum(per_client / clients_in_cell[plans.segment]
                                ) / self.num_segments
    return metrics


def _sum_rows(x: jax.Array) -> jax.Array:
  """Σ_j x[j] over the short leading (cell) axis as elementwise adds in row
  order: XLA:CPU's reduction over a leading axis of 2 took 6 ms for the
  W-MLP model, the adds fuse into one pass."""
  return functools.reduce(jnp.add, list(x))


def _count_true(mask: PyTree) -> jax.Array:
  """Number of True entries of a mask pytree (float32 scalar)."""
  return sum(jnp.sum(m).astype(jnp.float32) for m in jax.tree.leaves(mask))


class HIST(HFedAvg):
  """HIST: every cell trains a fresh disjoint partition of the hidden neurons."""

  name = 'hist'

  def setup_partition(self, template: PyTree) -> None:
    h = self.hierarchy
    self.layout = disjoint.partition_layout(template)
    for group in self.layout.groups:
      disjoint.uniform_sizes(group.num_units, self.num_segments)
    if h.partition_sizes != 'uniform' and len(self.layout.groups) != 1:
      raise ValueError(f'{h.partition_sizes} partition sizes need a model with '
                       'one partitioned hidden layer, this one has '
                       f'{len(self.layout.groups)}.')
    if h.partition_sizes == 'given':
      disjoint.check_sizes(h.given_sizes, self.num_segments,
                           self.layout.num_units)
    self.size_cap = None
    if h.partition_sizes == 'optimized':  # (19c) on parameters, shared included
      group = self.layout.groups[0]
      self.size_cap = partition_sizing.size_cap(
          group.num_units, self.num_segments, h.max_size_ratio,
          unit_params=group.unit_params,
          shared_params=self.layout.shared_params)

  def partition_sizes(self, plans: ClientPlan) -> jax.Array | None:
    """Neurons per cell this round: uniform (None), given, or Eq. (19)/(36)."""
    h = self.hierarchy
    if h.partition_sizes == 'uniform':
      return None
    if h.partition_sizes == 'given':
      return jnp.asarray(h.given_sizes, jnp.int32)
    # Latency per parameter of each cell: T_j of a one-parameter submodel.
    cost = latency.edge_round_latency(
        h.edge_channel, jnp.ones(plans.weight.shape), self.total_params,
        plans.num_steps, plans.extras['cpu_hz'], plans.extras['rate_bps'],
        plans.segment, self.num_segments, h.system)
    group = self.layout.groups[0]
    return partition_sizing.optimal_unit_counts(
        cost, num_units=group.num_units, unit_params=group.unit_params,
        shared_params=self.layout.shared_params, max_units=self.size_cap)

  def cell_masks(self, key: jax.Array, plans: ClientPlan) -> PyTree:
    return disjoint.stacked_partition(
        key_streams.fold(key, Stream.HIST_PARTITION), self.template,
        self.num_segments, self.partition_sizes(plans), self.layout)
