"""Co-S²P's experiments E1–E3 (Tabs. 6/7 and the RU of Tabs. 1/2) and the
analytic claims built on them: each client's device, data size, budget and
batch; each method's round time and virtual clock; the NX/AGX speed ratio that
gives FedAvg the paper's RU; Co-S²P vs FedRolex per device type.

Paper-experiment helpers on top of the library's analytic cost model
(`fedjax_het.systems.vit_cost`); the E1–E3 configs, `cos2p_setup.py` and
`analytic_claims.py` beside this file read them.
"""
import dataclasses
import math

import numpy as np

from fedjax_het.methods.cos2p.vit_engine import (client_windows,
                                                 window_offsets,
                                                 window_submodel)
from fedjax_het.options import ConfigError, in_range
from fedjax_het.systems import clock
from fedjax_het.systems.vit_cost import (PAPER_VITS, TRAIN_FRACTION, Submodel,
                                         ViTShape, client_cost, device,
                                         nx_ratio_speeds, round_seconds)


@dataclasses.dataclass(frozen=True)
class ClientSpec:
  """One client of Tab. 6/7: device type, dataset size, budget R_n, batch B_n."""
  device: str
  dataset_size: int
  budget: float
  batch: int

  @property
  def train_samples(self) -> int:
    return int(TRAIN_FRACTION * self.dataset_size)


@dataclasses.dataclass(frozen=True)
class PaperExperiment:
  """E1–E3: model, clients, μ, T_clk (s), E, Q̂, Ê, the paper's RU (%, Tab. 1/2)."""
  model: str
  clients: tuple[ClientSpec, ...]
  mu: float
  t_clk: float
  epochs: int
  mask_rounds: int
  mask_epochs: int
  paper_ru: dict[str, float]

  @property
  def shape(self) -> ViTShape:
    return PAPER_VITS[self.model]


def _clients(*groups) -> tuple[ClientSpec, ...]:
  """(device, count, dataset size, budget, batch) groups, expanded."""
  return tuple(ClientSpec(name, size, budget, batch)
               for name, count, size, budget, batch in groups
               for _ in range(count))


PAPER_EXPERIMENTS = {
    'E1': PaperExperiment(
        'vit_tiny', _clients(('nx8', 1, 8277, 0.0625, 8),
                             ('agx32', 3, 24960, 0.5625, 64),
                             ('agx64', 4, 36992, 0.5625, 128)),
        mu=0.5, t_clk=60.0, epochs=5, mask_rounds=20, mask_epochs=5,
        paper_ru={'fedavg': 63.5, 'fedrolex': 72.5, 'cos2p': 87.9,
                  'async': 100.0}),
    'E2': PaperExperiment(
        'vit_base', _clients(('nx8', 1, 6285, 0.0625, 8),
                             ('nx16', 2, 11770, 0.0625, 32),
                             ('agx32', 3, 17502, 0.0625, 64),
                             ('agx64', 10, 28047, 0.5625, 128)),
        mu=0.4, t_clk=100.0, epochs=5, mask_rounds=10, mask_epochs=5,
        paper_ru={'fedavg': 60.0, 'fedrolex': 82.4, 'cos2p': 92.4,
                  'async': 100.0}),
    'E3': PaperExperiment(
        'vit_base_ext', _clients(('nx8', 1, 4737, 0.015625, 8),
                                 ('nx16', 2, 9476, 0.0625, 32),
                                 ('agx32', 3, 18932, 0.25, 64),
                                 ('agx64', 10, 29372, 0.5625, 128)),
        mu=0.4, t_clk=150.0, epochs=5, mask_rounds=10, mask_epochs=5,
        paper_ru={'fedavg': 61.4, 'fedrolex': 78.2, 'cos2p': 90.6,
                  'async': 100.0}),
}


def paper_experiment(name: str) -> PaperExperiment:
  if name not in PAPER_EXPERIMENTS:
    raise ConfigError(f'unknown experiment {name!r}; known experiments are '
                      f'{", ".join(PAPER_EXPERIMENTS)}.')
  return PAPER_EXPERIMENTS[name]


def paper_clients(name: str) -> list[ClientSpec]:
  """The clients of experiment 'E1', 'E2' or 'E3' (Tab. 6/7), grouped by type."""
  return list(paper_experiment(name).clients)


METHODS = ('fedavg', 'fedrolex', 'cos2p', 'async')


def method_windows(experiment: PaperExperiment,
                   method: str) -> tuple[np.ndarray, np.ndarray]:
  """(D_n, R_w) of every client under `method`, the ViT engine's
  (`vit_engine.client_windows`, ρ = 1): 'fedavg' the full model,
  'fedrolex' width √R_n at full depth, 'cos2p' and 'async' the Co-S²P
  window."""
  if method not in METHODS:
    raise ConfigError(f'unknown method {method!r}; choose one of '
                      f'{", ".join(METHODS)}.')
  budgets = np.asarray([c.budget for c in experiment.clients], np.float64)
  return client_windows(budgets, experiment.shape.depth, 1.0,
                        full_width=method == 'fedavg',
                        full_depth=method == 'fedrolex')


def method_submodel(experiment: PaperExperiment, method: str, client: int,
                    round_index: int) -> Submodel:
  """Client `client`'s submodel under `method` when dispatched in round q:
  the ViT engine's window (`vit_engine.window_submodel`) at the shared
  rolling offset h(q) = q mod (L − D_max + 1); Co-S²P's clients learn their
  masks."""
  depths, widths = method_windows(experiment, method)
  offset = window_offsets(round_index, depths, experiment.shape.depth,
                          'shared')[client]
  sub = window_submodel(int(offset), int(depths[client]),
                        float(widths[client]), depths)
  return dataclasses.replace(sub, learns_mask=method in ('cos2p', 'async'))


def method_round_seconds(experiment: PaperExperiment, method: str, client: int,
                         round_index: int,
                         speeds: dict[str, float] | None = None,
                         bandwidth_bps: float = 1e9) -> float:
  """T_n(q) of a client under `method`; Co-S²P learns masks in rounds q < Q̂."""
  spec = experiment.clients[client]
  sub = method_submodel(experiment, method, client, round_index)
  mask_epochs = (experiment.mask_epochs if sub.learns_mask and
                 round_index < experiment.mask_rounds else 0)
  return round_seconds(experiment.shape, sub, device(spec.device, speeds),
                       train_samples=spec.train_samples, batch=spec.batch,
                       steps=experiment.epochs * math.ceil(spec.train_samples / spec.batch),
                       mask_epochs=mask_epochs, bandwidth_bps=bandwidth_bps)


def method_durations(experiment: PaperExperiment, method: str,
                     speeds: dict[str, float] | None = None,
                     bandwidth_bps: float = 1e9) -> clock.Duration:
  """`method_round_seconds` as a clock duration (client, dispatch_round, index)."""
  cache = {}

  def duration(client: int, dispatch_round: int, dispatch_index: int) -> float:
    del dispatch_index
    key = (client, dispatch_round)
    if key not in cache:
      cache[key] = method_round_seconds(experiment, method, client,
                                        dispatch_round, speeds, bandwidth_bps)
    return cache[key]

  return duration


def simulate_method(experiment: PaperExperiment, method: str, *, rounds: int,
                    speeds: dict[str, float] | None = None, sigma: float = 0.0,
                    seed: int = 0) -> clock.Schedule:
  """The clock under `method`: FedAvg and FedRolex synchronous (μ = 1,
  T_clk = 0), Co-S²P at the experiment's μ and T_clk, Async at μ = 1/N,
  T_clk = 0; durations jittered by exp(σ·z)."""
  num_clients = len(experiment.clients)
  mu, t_clk = {'cos2p': (experiment.mu, experiment.t_clk),
               'async': (1 / num_clients, 0.0)}.get(method, (1.0, 0.0))
  duration = clock.with_jitter(method_durations(experiment, method, speeds),
                               sigma, seed)
  return clock.simulate(duration, num_clients=num_clients, rounds=rounds,
                        mu=mu, t_clk=t_clk)


def fit_speed_ratio(experiment: PaperExperiment,
                    target_ru: float | None = None, *, low: float = 1e-3,
                    high: float = 1.0, bandwidth_bps: float = 1e9) -> float:
  """The NX/AGX64 speed ratio at which synchronous FedAvg(Full) has RU `target_ru`.

  RU (Eq. 17, %, the paper's FedAvg value by default) of one synchronous
  round without jitter rises with the ratio while the NX boards are the
  slowest; bisection in log space on [low, high] (AGX32/AGX64 = 200/275).
  """
  target = experiment.paper_ru['fedavg'] if target_ru is None else target_ru
  in_range(0, 100, closed_low=False)('target_ru', target)

  def ru(ratio: float) -> float:
    duration = method_durations(experiment, 'fedavg', nx_ratio_speeds(ratio),
                                bandwidth_bps)
    schedule = clock.simulate(duration, num_clients=len(experiment.clients),
                              rounds=1, mu=1.0, t_clk=0.0)
    return 100 * schedule.ru_eq17()

  if not ru(low) <= target <= ru(high):
    raise ConfigError(f'target_ru {target!r} is outside the RU '
                      f'[{ru(low):.1f}, {ru(high):.1f}] reachable with NX/AGX '
                      f'speed ratios in [{low:g}, {high:g}].')
  log_low, log_high = math.log(low), math.log(high)
  for _ in range(60):
    middle = (log_low + log_high) / 2
    if ru(math.exp(middle)) < target:
      log_low = middle
    else:
      log_high = middle
  return math.exp((log_low + log_high) / 2)


@dataclasses.dataclass(frozen=True)
class DeviceComparison:
  """Co-S²P vs FedRolex on one device type (bytes, seconds per round).

  Co-S²P's memory is the largest over the rolling offsets h(q); its time per
  round is the mean over one cycle of offsets after the mask phase
  (`cos2p_seconds`) and the mean over the mask-phase rounds q < Q̂
  (`cos2p_mask_seconds`, NaN if Q̂ = 0).
  """
  device: str
  cos2p_memory: float
  fedrolex_memory: float
  cos2p_seconds: float
  cos2p_mask_seconds: float
  fedrolex_seconds: float

  @property
  def memory_change(self) -> float:
    """Co-S²P's memory relative to FedRolex's, %."""
    return 100 * (self.cos2p_memory / self.fedrolex_memory - 1)

  @property
  def time_change(self) -> float:
    """Co-S²P's time per round after the mask phase relative to FedRolex's, %."""
    return 100 * (self.cos2p_seconds / self.fedrolex_seconds - 1)


def compare_devices(experiment: PaperExperiment,
                    speeds: dict[str, float] | None = None
                    ) -> list[DeviceComparison]:
  """Co-S²P vs FedRolex for the first client of each device type."""
  shape = experiment.shape
  depth_max = int(method_windows(experiment, 'cos2p')[0].max())
  cycle = shape.depth - depth_max + 1  # the offsets h(q) repeat every cycle
  late = range(experiment.mask_rounds, experiment.mask_rounds + cycle)
  early = range(experiment.mask_rounds)
  firsts = {}
  for index, spec in enumerate(experiment.clients):
    firsts.setdefault(spec.device, index)

  def memory(method, client, q):
    sub = method_submodel(experiment, method, client, q)
    return client_cost(shape, sub, experiment.clients[client].batch
                       ).memory_bytes

  def mean_seconds(method, client, rounds):
    return sum(method_round_seconds(experiment, method, client, q, speeds)
               for q in rounds) / len(rounds)

  return [DeviceComparison(
      device=name,
      cos2p_memory=max(memory('cos2p', n, q) for q in late),
      fedrolex_memory=memory('fedrolex', n, 0),
      cos2p_seconds=mean_seconds('cos2p', n, late),
      cos2p_mask_seconds=(mean_seconds('cos2p', n, early) if early else
                          math.nan),
      fedrolex_seconds=mean_seconds('fedrolex', n, [0]))
          for name, n in firsts.items()]
