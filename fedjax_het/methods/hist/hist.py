"""HIST and hierarchical FedAvg over wireless cells (Fang, Han & Brinton).

A cloud server, N edge servers (cells) and n_j clients in cell j; every client
takes part in every global round t (Algorithm 1):

    x̄_j^{t,0} = p_j^t ⊙ x̄^t                                   (4)
    for e = 0..E-1:   every client i of cell j runs H masked SGD steps
                      from x̄_j^{t,e}                            (5)
                      x̄_j^{t,e+1} = weighted mean over C_j       (6)
    x̄^{t+1} = Σ_j p_j ⊙ x̄_j^{t,E}  (+ mean over cells of shared params)  (7)

On the engine a global round is one round of the `RoundRunner`, run by the
cells part (`fedjax_het.parts.cells`, which FedAvg also runs under): cells
are aggregation segments and start-model rows, the E edge rounds a
`clients.scan` in `local_phase`, each edge aggregation the masked segment mean
by cell (OMA) or its over-the-air twin (AirComp), and the cloud
`combine_segments` (Eq. (7): each coordinate the mean of the cells whose
submodel holds it, i.e. the owner's value for a partitioned neuron and the
mean over cells for shared parameters). HFedAvg is FedAvg always in cells,
with every client in every round and HIST's system model; the cells'
submodel masks are the plans' `mask_table`, indexed by cell.

HFedAvg (the baseline) trains the full model everywhere; HIST
trains, in every global round, fresh disjoint partitions p_j^t of the hidden
neurons (`submodel.disjoint`), of uniform, given or latency-optimal sizes
(`systems.partition_sizing`, Eqs. (19)/(36)).

Edge aggregation is OMA (exact, TDMA latency Eq. (17)) or AirComp
(`edge_channel='aircomp'`, Eqs. (21)-(27), in the cells part; latency Eq.
(35)). Shared parameters are sent and noised too.

Lossy links and unequal work (`config.systems`, the links-and-work part;
our reading, `parts.cells`): one draw of T_m and Z_m per global round for its
E edge rounds; client i runs its own H_i = T_m steps in every edge round, and
an upload that fails (Z_m = 0) leaves its cell's edge mean (6) in every edge
round (under AirComp the client does not transmit); a cell whose every
upload fails keeps its edge model and the cloud (7) leaves it out. The
latency of Eqs. (17)/(35) charges each client its own H_i and is the TDMA
schedule's: a slot is reserved for every client of the cell (n_j), so a lost
upload does not shorten the edge round; bytes count delivered uploads only.
Availability is refused: Algorithm 1 trains every client of every cell.

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
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_het import models
from fedjax_het.methods.fedavg import FedAvg
from fedjax_het.channels import aircomp
from fedjax_het.core import key_streams
from fedjax_het.core.key_streams import Stream
from fedjax_het.core.state import ClientPlan, ServerState, round_key
from fedjax_het.options import ConfigError
from fedjax_het.parts import cells as cells_lib
from fedjax_het.parts import links_work
from fedjax_het.parts.cells import HierarchyOptions
from fedjax_het.submodel import disjoint
from fedjax_het.systems import latency, partition_sizing

PyTree = Any


@dataclasses.dataclass(frozen=True)
class Hierarchy:
  """HIST's reading of the validated `config.hierarchy`: its cells (the
  run's cells part, `parts.cells.Cells`, runs them from the same section) and
  its own keys.

  Attributes:
    num_cells: N; edge_rounds: E; channel: the edge channel.
    edge_weights: 'uniform' (1/n_j) or 'examples'.
    partition_sizes, given_sizes, max_size_ratio: HIST's partition sizing.
    system: the latency model's constants.
    cpu_hz_range: float [N, 2] F_i range of each cell.
  """
  num_cells: int
  edge_rounds: int
  channel: cells_lib.EdgeChannel
  edge_weights: str
  partition_sizes: str
  given_sizes: tuple
  max_size_ratio: float
  system: latency.WirelessSystem
  cpu_hz_range: np.ndarray

  @classmethod
  def from_config(cls, config) -> 'Hierarchy':
    """Reads and checks `config.hierarchy`; raises ValueError (one sentence)."""
    h = HierarchyOptions.from_config(config)
    if config.clients_per_round != config.num_clients:
      raise ConfigError(
          f'{config.algorithm} trains every client of every cell each round, '
          f'so clients_per_round ({config.clients_per_round}) must equal '
          f'num_clients ({config.num_clients}).')
    cpu = np.where(h.slow()[:, None], h.cpu_ghz_slow, h.cpu_ghz_fast) * 1e9
    system = latency.WirelessSystem(
        bandwidth_hz=h.bandwidth_hz, antennas=h.antennas,
        cycles_per_step=h.cycles_per_step, bits_per_param=h.bits_per_param,
        subcarrier_hz=h.subcarrier_hz, symbol_s=h.symbol_s)
    return cls(int(h.num_cells), int(h.edge_rounds),
               cells_lib.EdgeChannel.from_options(h), h.edge_weights,
               h.partition_sizes, tuple(h.given_sizes),
               float(h.max_size_ratio), system, cpu.astype(np.float32))


class HFedAvg(FedAvg):
  """Hierarchical FedAvg: full model, every client, E edge rounds per global
  round.

  FedAvg always in cells (its cells part: cells as segments, the E edge
  rounds, OMA or AirComp edge aggregation, the cloud), under lossy links and
  unequal work when `config.systems` sets them (the module docstring's
  reading), with what HIST's
  system adds: every client in every round, the edge weights of
  `hierarchy.edge_weights`, CPU frequencies and OMA rates per round, and
  latency and MiB-per-client accounting. HIST changes only `cell_masks`.
  """

  name = 'hfedavg'
  option_groups = (HierarchyOptions, links_work.SystemsOptions)
  per_round_metrics = ('partition_dmax',) + FedAvg.per_round_metrics
  always_in_cells = True
  # Algorithm 1 trains every client of every cell in every round: its
  # sampler is its own, so availability is refused (`parts.availability`).
  samples_available_clients = False
  # HIST Sec. VI: N = 2 cells (Tables I-II also run N = 4), E = 5 edge rounds.
  cell_defaults = {'num_cells': 2, 'edge_rounds': 5}

  def __init__(self, config, model, data):
    config = cells_lib.with_method_defaults(config, self.cell_defaults)
    self.hierarchy = Hierarchy.from_config(config)
    super().__init__(config, model, data)
    self.template = models.parameter_shapes(model, data.feature_shape)
    self.total_params = int(sum(math.prod(p.shape)
                                for p in jax.tree.leaves(self.template)))
    self.setup_partition(self.template)

  def setup_partition(self, template: PyTree) -> None:
    """Checks and precomputes the partition of the model (none here)."""
    del template

  def client_weights(self, client_ids: jax.Array) -> jax.Array:
    """Edge weights: 1 per client (1/n_j after the mean, Eq. (6)) or examples."""
    if self.hierarchy.edge_weights == 'examples':
      return self.client_counts[client_ids].astype(jnp.float32)
    return jnp.ones(client_ids.shape, jnp.float32)

  # ---- phase 1: every client, its cell, its resources, its submodel -------
  def sample_clients(self, state: ServerState, key: jax.Array) -> jax.Array:
    """Every client of every cell, in cell order."""
    del state, key
    return jnp.arange(self.num_clients, dtype=jnp.int32)

  def plan_clients(self, state: ServerState, client_ids: jax.Array,
                   keys: jax.Array) -> ClientPlan:
    """The round's F_i, R_i and the cell's submodel mask (each client's cell,
    its segment and start model, is in the plans from `new_plans` on)."""
    plans = super().plan_clients(state, client_ids, keys)
    segment = plans.group
    cpu_key, channel_key = jax.random.split(round_key(state, Stream.HIST_SYSTEM))
    cpu_range = jnp.asarray(self.hierarchy.cpu_hz_range)[segment]
    cpu_hz = latency.draw_cpu_hz(cpu_key, cpu_range[:, 0], cpu_range[:, 1])
    channels = aircomp.rayleigh_channels(channel_key, client_ids.shape[0],
                                         self.hierarchy.channel.antennas)
    rate_bps = latency.oma_rates(channels,
                                 jnp.asarray(self.hierarchy.channel.snr)[segment],
                                 self.hierarchy.system.bandwidth_hz)
    plans = plans.replace(extras={'cpu_hz': cpu_hz, 'rate_bps': rate_bps})
    masks = self.cell_masks(round_key(state), plans)
    if masks is not None:  # a table the clients index by their cell
      plans = plans.replace(mask_table=masks, mask_row=segment)
    return plans

  def cell_masks(self, key: jax.Array, plans: ClientPlan) -> PyTree:
    """Submodel of every cell, bool [N, ...] leaves, or None (full model)."""
    del key, plans
    return None

  # ---- accounting ----------------------------------------------------------
  def round_metrics(self, state: ServerState, plans: ClientPlan,
                    outputs) -> dict[str, jax.Array]:
    """MiB per client (E exchanges, delivered uploads) and simulated latency
    (Eq. (18) with Eq. (17) or (35), each client's own steps H_i =
    `plans.num_steps`); the cells part adds its bytes and AirComp
    statistics."""
    metrics = super().round_metrics(state, plans, outputs)
    # bytes_up is one exchange; the cells part charges E of them after this.
    metrics['mb_per_client'] = (self.hierarchy.edge_rounds * metrics['bytes_up']
                                / self.num_clients / 2**20)
    if plans.mask_table is None:
      trained = jnp.full(plans.weight.shape, float(self.total_params))
    else:
      trained = jax.vmap(_count_true)(plans.mask_table)[plans.mask_row]
    cell_latency = latency.edge_round_latency(
        self.hierarchy.channel.kind, trained, self.total_params, plans.num_steps,
        plans.extras['cpu_hz'], plans.extras['rate_bps'], plans.group,
        self.hierarchy.num_cells, self.hierarchy.system)
    metrics['latency_s'] = latency.global_round_latency(
        cell_latency, self.hierarchy.edge_rounds)
    metrics['partition_dmax'] = jnp.max(trained)
    return metrics


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
      disjoint.uniform_sizes(group.num_units, self.hierarchy.num_cells)
    if h.partition_sizes != 'uniform' and len(self.layout.groups) != 1:
      raise ValueError(f'{h.partition_sizes} partition sizes need a model with '
                       'one partitioned hidden layer, this one has '
                       f'{len(self.layout.groups)}.')
    if h.partition_sizes == 'given':
      disjoint.check_sizes(h.given_sizes, self.hierarchy.num_cells,
                           self.layout.num_units)
    self.size_cap = None
    if h.partition_sizes == 'optimized':  # (19c) on parameters, shared included
      group = self.layout.groups[0]
      self.size_cap = partition_sizing.size_cap(
          group.num_units, self.hierarchy.num_cells, h.max_size_ratio,
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
        self.hierarchy.channel.kind, jnp.ones(plans.weight.shape), self.total_params,
        plans.num_steps, plans.extras['cpu_hz'], plans.extras['rate_bps'],
        plans.group, self.hierarchy.num_cells, h.system)
    group = self.layout.groups[0]
    return partition_sizing.optimal_unit_counts(
        cost, num_units=group.num_units, unit_params=group.unit_params,
        shared_params=self.layout.shared_params, max_units=self.size_cap)

  def cell_masks(self, key: jax.Array, plans: ClientPlan) -> PyTree:
    return disjoint.stacked_partition(
        key_streams.fold(key, Stream.HIST_PARTITION), self.template,
        self.hierarchy.num_cells, self.partition_sizes(plans), self.layout)
