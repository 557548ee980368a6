"""The cost of realism: FedAvg's s/round with each kind of heterogeneity on, as × plain FedAvg.

Command:  python experiments/bench/cost_of_realism.py [--workload W-MLP] [--num-clients 50]
            [--repeats 4] [--rounds 15]

One federation of the workload (`bench.workload_config`) with `--num-clients` clients, all of
them in every round's cohort (the virtual clock dispatches every idle client, so the plain
round it is compared with trains the same N), each variant built from the same config with one
section changed, compiled, then timed in turns in one process (`alternation.alternate`):

  links         systems.q = 0.2 for every client (lossy uplinks, weight w·Z)
  work          systems.local_work T_m = 1..5 in turn (the scan keeps 5 steps, frozen after T_m)
  availability  systems.availability = 'bernoulli', P(online) = 0.8 (offline slots idle)
  clock         clock.mu = 0.5, client rounds of 1..5 s (about half the clients arrive per round)
  cells         hierarchy.num_cells = 2, one edge round (the cohort grouped by cell)
  links + work + clock   the three together (availability is refused on the clock)

A variant's wall number is the median over repeats of its per-repeat median s/round; the
ratio is to plain FedAvg's, alternated so that machine drift cancels.
"""
import argparse
import dataclasses

import alternation

from fedjax_het.tools import bench

VARIANTS = {
    'FedAvg': {},
    'links': {'systems.q': (0.2,)},
    'work': {'systems.local_work': 'cycle'},
    'availability': {'systems.availability': 'bernoulli', 'systems.available_p': (0.8,)},
    'clock': {'clock.mu': 0.5, 'clock.client_seconds': 'cycle'},
    'cells': {'hierarchy.num_cells': 2},
    'links + work + clock': {'systems.q': (0.2,), 'systems.local_work': 'cycle',
                             'clock.mu': 0.5, 'clock.client_seconds': 'cycle'},
}


def variant_config(workload: bench.Workload, changes: dict):
  """The workload's FedAvg config with `changes` ({'section.key': value}; 'cycle': the
  values 1..local_steps in turn over the clients) applied."""
  config = bench.workload_config(workload)
  config.rounds = 10_000   # the clock's schedule covers every timed round
  cycle = tuple(1 + n % workload.local_steps for n in range(workload.num_clients))
  for dotted, value in changes.items():
    section, key = dotted.split('.')
    config[section][key] = (cycle if value == 'cycle' and key == 'local_work' else
                            tuple(map(float, cycle)) if value == 'cycle' else value)
  return config


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workload', default='W-MLP', choices=sorted(bench.WORKLOADS))
  parser.add_argument('--num-clients', type=int, default=50)
  parser.add_argument('--repeats', type=int, default=4)
  parser.add_argument('--rounds', type=int, default=15)
  args = parser.parse_args()
  workload = dataclasses.replace(bench.WORKLOADS[args.workload],
                                 num_clients=args.num_clients, cohort=args.num_clients)
  print(alternation.round_table(
      {name: variant_config(workload, changes) for name, changes in VARIANTS.items()},
      args.repeats, args.rounds, 'FedAvg with',
      f'{args.workload}, {workload.num_clients} clients, all in every cohort'))


if __name__ == '__main__':
  main()
