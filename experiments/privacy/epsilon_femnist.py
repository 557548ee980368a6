"""DP-FedAvg's accuracy against ε on F-EMNIST-62 by writer: FedAvg and FIARSE, ε ∈ {1, 4, 8, ∞}.

Command:   fedjax-het --config experiments/privacy/epsilon_femnist.py --config.data_dir=DIR
           --workdir runs/privacy/epsilon_femnist     (not run here: no copy of the set)
Setting:   privacy_setup.femnist_config (3,400 writers, TFF's CNN, K = 100, 500 rounds, S = 0.5,
           δ = 1/N^1.1) and privacy_setup.sweep; 3 seeds. The offline stand-in: epsilon.py.
"""
from privacy_setup import COLUMNS, SEEDS, femnist_config, sweep  # noqa: F401

TITLE = 'DP-FedAvg: test accuracy against ε, F-EMNIST-62 by writer'


def get_configs():
  return sweep(femnist_config)
