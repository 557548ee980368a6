"""Training latency of hierarchical FL over wireless cells (HIST, Secs. IV-A, V-E).

Only the clients' computation and uplink count (edge and cloud delays and the
downlink are ignored, [L245]); a client's CPU frequency F_i and uplink rate R_i
are fixed within a global round. For a cell j whose submodel holds
d_j = ||p_j||_1 of the model's d parameters, one edge round (H local steps and
one upload) takes

    OMA (TDMA), Eq. (17):  T_j = max_{i∈C_j} { H d_j V0/(F_i d) + n_j d_j L0/(R_i d) },
    AirComp, Eq. (35):     T_j = max_{i∈C_j} { H d_j V0/(F_i d) } + d_j t_s/(B/Δf),

and a global round (E edge rounds, the slowest cell sets the pace) takes
E·max_j T_j, Eq. (18). Rates are R_i = B log2(1 + SNR_j ||h_i||²) with Rayleigh
h_i ~ CN(0, I_M) (Sec. VI-C; the log base is not stated, we use log2), and the
full-model load is L0 = 32·d bits (not stated; float32 parameters). In the
AirComp case every client sends one parameter per OFDM subcarrier and symbol,
all clients at once, so the upload does not depend on n_j (Eq. (34)).

All functions are pure `jnp` over a client axis with per-client cell ids
(segment ids), so cells of unequal size work and everything runs in the
compiled round.
"""
import dataclasses

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class WirelessSystem:
  """Physical constants of the latency model; defaults are the paper's (Sec. VI-C).

  Attributes:
    bandwidth_hz: B, uplink bandwidth of each cell (9 MHz).
    antennas: M, receive antennas of an edge server (10).
    cycles_per_step: V0, CPU cycles of one mini-batch update of the full
      model (1e6).
    bits_per_param: L0/d, bits per uploaded parameter (32; not in the paper).
    subcarrier_hz: Δf, OFDM subcarrier spacing (15 kHz, 5G NR).
    symbol_s: t_s, OFDM symbol duration (1/14 ms, 5G NR).
  """
  bandwidth_hz: float = 9e6
  antennas: int = 10
  cycles_per_step: float = 1e6
  bits_per_param: float = 32.0
  subcarrier_hz: float = 15e3
  symbol_s: float = 1.0 / 14e3

  def __post_init__(self):
    for name in ('bandwidth_hz', 'antennas', 'cycles_per_step',
                 'bits_per_param', 'subcarrier_hz', 'symbol_s'):
      if not getattr(self, name) > 0:
        raise ValueError(f'{name} must be positive, got '
                         f'{getattr(self, name)!r}.')


def aircomp_upload_time(d, *, bandwidth_hz: float = 9e6,
                        subcarrier_hz: float = 15e3,
                        symbol_s: float = 1.0 / 14e3):
  """Seconds to send d parameters over the air, Eq. (34): d/(B/Δf)·t_s.

  B/Δf subcarriers carry one analog parameter each per OFDM symbol of t_s
  seconds. With the paper's B = 9 MHz, Δf = 15 kHz (600 subcarriers) and
  t_s = 1/14 ms, the full FCNN (d = 238,510) takes ≈ 28.4 ms.
  """
  return d / (bandwidth_hz / subcarrier_hz) * symbol_s


def oma_rates(channels: jax.Array, snr: jax.Array,
              bandwidth_hz: float) -> jax.Array:
  """Uplink rates R_i = B log2(1 + SNR_i ||h_i||²) in bit/s.

  Args:
    channels: complex [C, M] SIMO channels h_i.
    snr: float [C] linear P/σ0² of each client's cell.
    bandwidth_hz: B.
  """
  gain = jnp.sum(jnp.abs(channels)**2, axis=-1)
  return bandwidth_hz * jnp.log2(1.0 + snr * gain)


def compute_time(params_trained: jax.Array, total_params: int,
                 steps: jax.Array, cpu_hz: jax.Array,
                 system: WirelessSystem) -> jax.Array:
  """H d_j V0/(F_i d): seconds of H local steps on a d_j-parameter submodel. [C]."""
  return steps * params_trained * system.cycles_per_step / (cpu_hz *
                                                            total_params)


def cell_client_counts(segment: jax.Array, num_cells: int) -> jax.Array:
  """n_j, clients per cell. int32 [N]."""
  ones = jnp.ones(segment.shape, jnp.int32)
  return jax.ops.segment_sum(ones, segment, num_segments=num_cells)


def edge_round_latency(channel: str, params_uploaded: jax.Array,
                       total_params: int, steps: jax.Array,
                       cpu_hz: jax.Array, rate_bps: jax.Array,
                       segment: jax.Array, num_cells: int,
                       system: WirelessSystem) -> jax.Array:
  """T_j of one edge round in every cell, Eq. (17) ('oma') or (35) ('aircomp').

  Args:
    channel: 'oma' (TDMA, n_j uploads one after another) or 'aircomp'.
    params_uploaded: float [C], d_j of each client's cell.
    total_params: d.
    steps: [C] local steps H.
    cpu_hz: [C] F_i.
    rate_bps: [C] R_i (unused by 'aircomp').
    segment: int [C] cell of each client.
    num_cells: N.
    system: constants.

  Returns:
    float [N] seconds.
  """
  compute = compute_time(params_uploaded, total_params, steps, cpu_hz, system)
  if channel == 'oma':
    n_j = cell_client_counts(segment, num_cells)[segment]
    per_client = compute + (n_j * params_uploaded * system.bits_per_param /
                            rate_bps)
    return jax.ops.segment_max(per_client, segment, num_segments=num_cells)
  if channel == 'aircomp':
    slowest = jax.ops.segment_max(compute, segment, num_segments=num_cells)
    cell_params = jax.ops.segment_max(params_uploaded, segment,
                                      num_segments=num_cells)
    return slowest + aircomp_upload_time(
        cell_params, bandwidth_hz=system.bandwidth_hz,
        subcarrier_hz=system.subcarrier_hz, symbol_s=system.symbol_s)
  raise ValueError(f"unknown channel {channel!r}; choose 'oma' or 'aircomp'.")


def global_round_latency(cell_latency: jax.Array, edge_rounds: int) -> jax.Array:
  """E·max_j T_j: the slowest cell paces the global round, Eq. (18)."""
  return edge_rounds * jnp.max(cell_latency)


def draw_cpu_hz(key: jax.Array, low_hz: jax.Array,
                high_hz: jax.Array) -> jax.Array:
  """F_i ~ U(low_i, high_i), one draw per client (per global round)."""
  return jax.random.uniform(key, low_hz.shape, minval=low_hz, maxval=high_hz)
