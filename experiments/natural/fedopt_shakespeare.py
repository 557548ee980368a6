"""Reddi et al. 2021 (Adaptive Federated Optimization), Table 2's Shakespeare row by speaking
role: FedAdagrad, FedAdam, FedYogi, FedAvgM and FedAvg side by side.

Command:   fedjax-het --config experiments/natural/fedopt_shakespeare.py --config.data_dir=DIR
           --workdir runs/natural/fedopt_shakespeare     (not run here: no copy of the set)
Setting:   natural_setup.shakespeare (715 roles, 10 a round, B 4, 16 local steps, 1200 rounds),
           each method at the authors' best client lr / server lr / ε for Shakespeare (base-10
           logs; FedAdagrad 0 / -0.5 / -1, FedAdam and FedYogi 0 / -2 / -3, FedAvgM 0 / -0.5,
           FedAvg 0 / 0) and their code's optimisers (natural_setup.reddi).
Published: Table 2, Shakespeare: FedAdam 57.0 %, FedAvg 56.9 % (quoted in fedavg_shakespeare.py,
           not re-checked here); FedAdagrad, FedYogi, FedAvgM: not sourced.
"""
from natural_setup import fedopt_row, shakespeare

TITLE = 'Reddi et al. Table 2, Shakespeare (by speaking role)'


def get_configs():
  return fedopt_row(shakespeare)
