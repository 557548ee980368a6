"""Reddi et al. 2021 (Adaptive Federated Optimization), Table 2's Stack Overflow NWP row by user:
FedAdagrad, FedAdam, FedYogi, FedAvgM and FedAvg side by side.

Command:   fedjax-het --config experiments/natural/fedopt_stackoverflow.py --config.data_dir=DIR
           --config.stream_cohorts=True --workdir runs/natural/fedopt_stackoverflow
           (not run here: no copy of the set; DIR as in fedavg_stackoverflow.py)
Setting:   natural_setup.stackoverflow (342,477 users, 50 a round, B 16, 16 local steps, 1500
           rounds), each method at the authors' best client lr / server lr / ε for Stack Overflow
           NWP (base-10 logs; FedAdagrad -0.5 / -1.5 / -4, FedAdam and FedYogi -0.5 / -2 / -5,
           FedAvgM -0.5 / 0, FedAvg -0.5 / 0) and their code's optimisers (natural_setup.reddi).
Published: Table 2, Stack Overflow NWP: FedAdam 25.2 %, FedAvg 19.5 % (quoted in
           fedavg_stackoverflow.py, not re-checked here; their accuracy leaves out OOV targets,
           ours counts them); FedAdagrad, FedYogi, FedAvgM: not sourced.
"""
from natural_setup import fedopt_row, stackoverflow

TITLE = 'Reddi et al. Table 2, Stack Overflow NWP (by user)'


def get_configs():
  return fedopt_row(stackoverflow)
