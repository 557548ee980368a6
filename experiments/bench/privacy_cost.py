"""The cost of privacy: FedAvg's s/round with DP-FedAvg and secure aggregation, as × plain FedAvg.

Command:  python experiments/bench/privacy_cost.py [--workload W-MLP] [--num-clients 1000]
            [--cohort 50] [--repeats 4] [--rounds 15]

One federation of the workload (`bench.workload_config`, uniform weights), the same cohort of
`--cohort` clients a round in every variant, each variant built from the same config with the
privacy sections changed (`cost_of_realism.variant_config`), compiled, then timed in turns in
one process (`alternation.alternate`):

  dp, clip only      dp.clip_norm S = 1, σ = 0: every update clipped to S (parts/dp.py)
  dp                 S = 1 and dp.noise_multiplier σ = 1: the clip, and N(0, σ²S²) on every
                     coordinate of the sum
  secagg             secagg.bits = 16 in the range [−1, 1): every client term encoded in fixed
                     point, summed modulo 2^16, decoded (parts/secagg.py)
  dp + secagg        both (the clip, then the encoding; the noise enters before the decode)

The accountant runs on the host when the run is built, never in a round (`dp.accountant =
'none'` here, so the bench needs no [dp] extra). A variant's wall number is the median over
repeats of its per-repeat median s/round; the ratio is to plain FedAvg's, alternated so that
machine drift cancels.
"""
import argparse
import dataclasses

import alternation
from cost_of_realism import variant_config

from fedjax_het.tools import bench

CLIP = {'dp.clip_norm': 1.0, 'dp.accountant': 'none'}
DP = {**CLIP, 'dp.noise_multiplier': 1.0}
SECAGG = {'secagg.bits': 16, 'secagg.clip_range': 1.0}
VARIANTS = {
    'FedAvg': {},
    'dp, clip only (S = 1, σ = 0)': CLIP,
    'dp (S = 1, σ = 1)': DP,
    'secagg (b = 16)': SECAGG,
    'dp + secagg': {**DP, **SECAGG},
}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workload', default='W-MLP', choices=sorted(bench.WORKLOADS))
  parser.add_argument('--num-clients', type=int, default=1000)
  parser.add_argument('--cohort', type=int, default=50)
  parser.add_argument('--repeats', type=int, default=4)
  parser.add_argument('--rounds', type=int, default=15)
  args = parser.parse_args()
  workload = dataclasses.replace(bench.WORKLOADS[args.workload],
                                 num_clients=args.num_clients, cohort=args.cohort)
  print(alternation.round_table(
      {name: variant_config(workload, changes) for name, changes in VARIANTS.items()},
      args.repeats, args.rounds, 'FedAvg with',
      f'{args.workload}, {workload.num_clients} clients, cohort {workload.cohort}'))


if __name__ == '__main__':
  main()
