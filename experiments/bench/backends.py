"""Every client-axis backend and several FL methods on one benchmark workload.

Command:  python experiments/bench/backends.py [--workload W-MLP] [--rounds 10]
            [--backends vmap,map,sequential] [--algorithms fedavg,fiarse,heterofl]
            [--cpu-devices N]

Runs `fedjax_het.tools.bench.benchmark` (what `fedjax-het bench` prints) for each
method × backend and prints a table of median s/round, the ratio to FedAvg on
the same backend (the overhead of a method's thresholds, masks and partial
averaging; submodel methods run FIARSE's capacities {1/64, 1/16, 1/4, 1} in
equal client groups) and the ratio to the centralised limit, then all results
as one JSON line. `--cpu-devices` splits the CPU into XLA devices (the
`fedjax-het` command's default is one per core; this script's is 1).
"""
import argparse
import json

from fedjax_het.tools import bench
from fedjax_het.core import sharding


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workload', default='W-MLP')
  parser.add_argument('--rounds', type=int, default=10)
  parser.add_argument('--backends', default='vmap,map,sequential')
  parser.add_argument('--algorithms', default='fedavg,fiarse,heterofl')
  parser.add_argument('--cpu-devices', type=int, default=1)
  args = parser.parse_args()
  sharding.set_cpu_device_count(args.cpu_devices)
  results = []
  for algorithm in args.algorithms.split(','):
    for backend in args.backends.split(','):
      # The sequential backend runs on one device.
      devices = 1 if backend == 'sequential' else 0
      results.append(bench.benchmark(args.workload, backend, args.rounds,
                                     algorithm, devices))
  fedavg = {r['backend']: r['s_per_round_median'] for r in results
            if r['algorithm'] == 'fedavg'}
  print(f'\n{args.workload}: median s/round (this machine)')
  print('| method | backend | devices | s/round | × FedAvg | × centralised | roofline |')
  print('| --- | --- | ---: | ---: | ---: | ---: | ---: |')
  for r in results:
    ratio = (f'{r["s_per_round_median"] / fedavg[r["backend"]]:.2f}'
             if r['backend'] in fedavg else '-')
    print(f'| {r["algorithm"]} | {r["backend"]} | {r["devices"]} | '
          f'{r["s_per_round_median"]:.4f} | {ratio} | '
          f'{r["centralized_ratio"]:.2f} | {100 * r["roofline_fraction"]:.0f}% |')
  print(json.dumps(results))


if __name__ == '__main__':
  main()
