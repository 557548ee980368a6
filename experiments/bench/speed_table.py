"""The README's Speed table from one run: our methods, our run modes and the peers, alternated.

Command:  python experiments/bench/speed_table.py [--workloads W-MLP,W-PFL]
            [--repeats 3] [--rounds 10] [--peers drjax,torch] [--out runs/speed.jsonl]

Every case is a fresh process (`fedjax-het bench ...`, `drjax_peer.py`,
`torch_peer.py`), each printing one JSON line; the cases of a workload run
one after another and the whole list is repeated `--repeats` times, so a
drift of the machine's speed (other jobs, thermal) spreads over every case
instead of landing on one. Each case's number is the median over the repeats
of its per-process median s/round; the spread is the repeats' min..max.

Cases per workload (`fedjax-het bench` on the default path: `auto` backend,
one XLA CPU device per core, the cohort sharded over them):
  fedavg, fiarse, heterofl      the workload's federation (capacities
                                {1/64, 1/16, 1/4, 1} for the submodel methods);
  fedavg@cohort, hist           a federation of one cohort (HIST trains every
                                client each round; one edge round per round),
                                FedAvg on the same federation for its ratio;
  fedavg --processes 2          two jax.distributed processes on this machine;
  fedavg --stream               (W-MLP) the federation in memmapped host files;
  drjax, torch                  the peers (`--peers`), FedAvg on the same data,
                                initial params and minibatch rows.

Prints a markdown table (s/round median and spread, ratio to our FedAvg on
the same federation, examples/s) and the centralised limit and roofline of
the FedAvg case; `--out` appends every JSON line with its case and repeat.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = [sys.executable, '-m', 'fedjax_het', 'bench']


def cases(workload: str, rounds: int, cohort: int, peers: list[str]) -> dict:
  """{case name: (command, FedAvg case its ratio is to)} for one workload."""
  base = [*BENCH, '--workload', workload, '--rounds', str(rounds)]
  one_cohort = ['--num-clients', str(cohort)]
  table = {
      'fedavg': (base, 'fedavg'),
      'fiarse': (base + ['--algorithm', 'fiarse'], 'fedavg'),
      'heterofl': (base + ['--algorithm', 'heterofl'], 'fedavg'),
      'fedavg@cohort': (base + one_cohort, 'fedavg@cohort'),
      'hist': (base + one_cohort + ['--algorithm', 'hist'], 'fedavg@cohort'),
      'fedavg, 2 processes': (base + ['--processes', '2'], 'fedavg'),
  }
  if workload == 'W-MLP':
    table['fedavg, streamed'] = (base + ['--stream'], 'fedavg')
  peer_args = ['--workload', workload, '--rounds', str(rounds), '--no-check']
  if 'drjax' in peers:
    table['DrJAX'] = ([sys.executable, os.path.join(HERE, 'drjax_peer.py'),
                       *peer_args], 'fedavg')
  if 'torch' in peers:
    table['PyTorch loop'] = ([sys.executable, os.path.join(HERE, 'torch_peer.py'),
                              *peer_args], 'fedavg')
  return table


def run_case(command: list[str]) -> dict:
  """The last JSON line a case prints; raises with its output if it fails."""
  done = subprocess.run(command, capture_output=True, text=True)
  if done.returncode:
    raise RuntimeError(f'{" ".join(command)} failed:\n{done.stdout[-2000:]}'
                       f'{done.stderr[-3000:]}')
  return json.loads(done.stdout.strip().splitlines()[-1])


def table_rows(results: dict, table: dict) -> list[str]:
  """Markdown rows: case, s/round median (min..max over repeats), ratio, examples/s."""
  medians = {name: float(np.median([r['s_per_round_median'] for r in runs]))
             for name, runs in results.items()}
  rows = ['| case | s/round | repeats min..max | × our FedAvg | examples/s |',
          '| --- | ---: | --- | ---: | ---: |']
  for name, runs in results.items():
    per_repeat = [r['s_per_round_median'] for r in runs]
    reference = table[name][1]
    rows.append(f'| {name} | {medians[name]:.4f} | {min(per_repeat):.4f}..'
                f'{max(per_repeat):.4f} | {medians[name] / medians[reference]:.2f} | '
                f'{np.median([r["examples_per_s"] for r in runs]):,.0f} |')
  return rows


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workloads', default='W-MLP,W-PFL')
  parser.add_argument('--repeats', type=int, default=3)
  parser.add_argument('--rounds', type=int, default=10,
                      help='timed rounds per process (W-PFL: at most 3)')
  parser.add_argument('--peers', default='drjax,torch',
                      help='comma-separated: drjax, torch (empty: none)')
  parser.add_argument('--out', default='', help='append every JSON line here')
  args = parser.parse_args()
  peers = [p for p in args.peers.split(',') if p]
  from fedjax_het.tools import bench  # pylint: disable=g-import-not-at-top
  for workload in args.workloads.split(','):
    rounds = args.rounds if bench.WORKLOADS[workload].model == 'mlp' else min(args.rounds, 3)
    table = cases(workload, rounds, bench.WORKLOADS[workload].cohort, peers)
    results = {name: [] for name in table}
    for repeat in range(args.repeats):
      for name, (command, _) in table.items():
        result = run_case(command)
        results[name].append(result)
        print(f'{workload} repeat {repeat} {name}: {result["s_per_round_median"]:.4f} '
              f's/round', flush=True)
        if args.out:
          with open(args.out, 'a') as f:
            f.write(json.dumps({'case': name, 'repeat': repeat, **result}) + '\n')
    fedavg = results['fedavg']
    print(f'\n{workload}: {args.repeats} repeats × {rounds} rounds per process; '
          f'centralised limit {np.median([r["centralized_s"] for r in fedavg]):.4f} s, '
          f'roofline {np.median([r["roofline_s"] for r in fedavg]):.4f} s '
          f'({bench.WORKLOADS[workload].cohort} clients × '
          f'{bench.WORKLOADS[workload].local_steps} steps per round)\n')
    print('\n'.join(table_rows(results, table)), flush=True)


if __name__ == '__main__':
  main()
