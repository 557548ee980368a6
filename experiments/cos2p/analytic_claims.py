"""Co-S²P's memory, time and resource-utilisation claims under the analytic cost model.

Command:   python experiments/cos2p/analytic_claims.py
Paper:     Li et al., "Unity is Power: Semi-Asynchronous Collaborative Training
           of Large-Scale Models with Structured Pruning in Resource-Limited
           Clients". Text and Fig. 5/9/10: vs FedRolex, Co-S²P needs ≈ 22% less
           memory and ≈ 24% less training time per round "on all devices".
           Tables 1/2: RU (%) of FedAvg(Full) 63.5/60.0/61.4, FedRolex
           72.5/82.4/78.2, Co-S²P 87.9/92.4/90.6, Async 100 in E1/E2/E3.
Model:     fedjax_het.systems.vit_cost (spec §6, an inference: the paper
           measured real Jetsons) and the round clock fedjax_het.systems.clock.
           Per experiment, the NX/AGX64 speed ratio is fitted so that
           synchronous FedAvg(Full) has the paper's RU (AGX32/AGX64 = 200/275);
           then every method runs ROUNDS rounds with lognormal jitter σ = 0.05.
Runtime:   a few seconds on one CPU core; no JAX work.
"""
import numpy as np

from fedjax_het.systems import vit_cost

import paper_settings

ROUNDS = 40
SIGMA = 0.05
PAPER_MEMORY_CHANGE = -22.0  # % vs FedRolex
PAPER_TIME_CHANGE = -24.0
TOLERANCE = 5.0  # percentage points for calling a claim reproduced
GIB = 2**30


def print_devices(experiment, speeds) -> tuple[list[float], list[float]]:
  print(f'  {"device":7s} {"memory GiB: Co-S²P":>19s} {"FedRolex":>9s} '
        f'{"change":>8s} | {"s/round: Co-S²P":>16s} {"(q<Q̂)":>8s} '
        f'{"FedRolex":>9s} {"change":>8s}')
  rows = paper_settings.compare_devices(experiment, speeds)
  for row in rows:
    print(f'  {row.device:7s} {row.cos2p_memory / GIB:19.2f} '
          f'{row.fedrolex_memory / GIB:9.2f} {row.memory_change:7.1f}% | '
          f'{row.cos2p_seconds:16.0f} {row.cos2p_mask_seconds:8.0f} '
          f'{row.fedrolex_seconds:9.0f} {row.time_change:7.1f}%')
  return ([row.memory_change for row in rows],
          [row.time_change for row in rows])


def print_ru(experiment, speeds) -> dict[str, float]:
  """Simulated RU (Eq. 17 and busy form, %) of every method next to the paper's."""
  ru = {}
  print(f'  {"method":9s} {"RU Eq.17":>9s} {"busy":>6s} {"paper":>6s} '
        f'{"max τ":>6s}')
  for method in paper_settings.METHODS:
    schedule = paper_settings.simulate_method(experiment, method, rounds=ROUNDS,
                                        speeds=speeds, sigma=SIGMA)
    ru[method] = 100 * schedule.ru_eq17()
    print(f'  {method:9s} {ru[method]:9.1f} {100 * schedule.ru_busy():6.1f} '
          f'{experiment.paper_ru[method]:6.1f} {schedule.max_staleness:6d}')
    if method == 'cos2p':
      busy = 100 * schedule.ru_busy_per_round()
      split = experiment.mask_rounds
      print(f'  {"":9s} busy RU in the mask phase (q < {split}): '
            f'{np.nanmean(busy[:split]):.1f}, after: '
            f'{np.nanmean(busy[split:]):.1f}')
  return ru


def verdict(claim: str, model: list[float], paper: float) -> None:
  """Prints whether every model value lies within TOLERANCE of the paper's."""
  ok = all(abs(value - paper) <= TOLERANCE for value in model)
  shown = ', '.join(f'{value:.1f}' for value in model)
  print(f'  {claim}: model {shown} vs paper {paper:.1f} → '
        f'{"reproduced" if ok else "NOT reproduced"} (±{TOLERANCE:g} points)')


def main():
  for name in paper_settings.PAPER_EXPERIMENTS:
    experiment = paper_settings.paper_experiment(name)
    ratio = paper_settings.fit_speed_ratio(experiment)
    speeds = vit_cost.nx_ratio_speeds(ratio)
    print(f'{name}: {experiment.model}, {len(experiment.clients)} clients, '
          f'μ = {experiment.mu}, T_clk = {experiment.t_clk:g} s, '
          f'Q̂ = {experiment.mask_rounds}; fitted NX/AGX64 speed ratio '
          f'{ratio:.3f}')
    memory, time = print_devices(experiment, speeds)
    ru = print_ru(experiment, speeds)
    verdict('memory vs FedRolex, % per device', memory, PAPER_MEMORY_CHANGE)
    verdict('time/round vs FedRolex, % per device', time, PAPER_TIME_CHANGE)
    paper = experiment.paper_ru
    for base in ('fedavg', 'fedrolex'):
      print(f'  RU Co-S²P/{base}: model ×{ru["cos2p"] / ru[base]:.2f}, '
            f'paper ×{paper["cos2p"] / paper[base]:.2f}')
    verdict('RU of Co-S²P (Eq. 17), %', [ru['cos2p']], paper['cos2p'])
    print()


if __name__ == '__main__':
  main()
