"""Reddi et al. 2021 (Adaptive Federated Optimization), Table 2's EMNIST CR row on F-EMNIST-62
by writer: FedAdagrad, FedAdam, FedYogi, FedAvgM and FedAvg side by side.

Command:   fedjax-het --config experiments/natural/fedopt_femnist.py --config.data_dir=DIR
           --workdir runs/natural/fedopt_femnist     (not run here: no copy of the set)
Setting:   natural_setup.femnist (3,400 writers, 10 a round, B 20, 10 local steps, 1500 rounds),
           each method at the authors' best client lr / server lr / ε for EMNIST CR (base-10
           logs; FedAdagrad -1.5 / -1 / -2, FedAdam and FedYogi -1.5 / -2.5 / -4, FedAvgM
           -1.5 / -0.5, FedAvg -1 / 0) and their code's optimisers (natural_setup.reddi).
Published: Table 2, EMNIST CR: FedAdam 85.6 %, FedAvg 84.9 % (quoted in fedavg_femnist.py, not
           re-checked here); FedAdagrad, FedYogi, FedAvgM: not sourced.
"""
from natural_setup import fedopt_row, femnist

TITLE = 'Reddi et al. Table 2, EMNIST CR (F-EMNIST-62 by writer)'


def get_configs():
  return fedopt_row(femnist)
