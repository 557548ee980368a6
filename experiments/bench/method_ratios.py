"""Per-round cost of FL methods relative to FedAvg, alternated in one process.

Command:  python experiments/bench/method_ratios.py [--workload W-MLP]
            [--algorithms fedavg,fiarse,heterofl,pruning_greedy] [--num-clients 0]
            [--repeats 4] [--rounds 15] [--cpu-devices 2]

Builds every method's federation on the workload (`bench.workload_config`,
the default path unless `--cpu-devices` says otherwise), compiles each, then
times `--rounds` rounds of each method in turn, `--repeats` times over. A
method's number is the median over repeats of its per-repeat median s/round,
and its ratio is to the first method's (FedAvg): on a shared machine whose
speed drifts by tens of percent between processes, alternating in one
process makes the ratio the measured quantity. Also prints process CPU
seconds per round (both devices' threads), a second, load-insensitive view of
the work done. `--num-clients` replaces the workload's federation size: HIST
trains every client each round, so run it with `--num-clients 50` (the
cohort), FedAvg first on the same federation.
"""
import argparse
import dataclasses

import alternation

from fedjax_het.tools import bench
from fedjax_het.core import sharding


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workload', default='W-MLP', choices=sorted(bench.WORKLOADS))
  parser.add_argument('--algorithms', default='fedavg,fiarse,heterofl,pruning_greedy')
  parser.add_argument('--num-clients', type=int, default=0)
  parser.add_argument('--repeats', type=int, default=4)
  parser.add_argument('--rounds', type=int, default=15)
  parser.add_argument('--cpu-devices', type=int, default=2)
  args = parser.parse_args()
  sharding.set_cpu_device_count(args.cpu_devices)
  workload = bench.WORKLOADS[args.workload]
  if args.num_clients:
    workload = dataclasses.replace(workload, num_clients=args.num_clients)
  names = args.algorithms.split(',')
  print(alternation.round_table(
      {name: bench.workload_config(workload, 'auto', name) for name in names},
      args.repeats, args.rounds, 'method',
      f'{args.workload}, {workload.num_clients} clients, cohort {workload.cohort}'))


if __name__ == '__main__':
  main()
