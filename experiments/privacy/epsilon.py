"""DP-FedAvg's accuracy against ε: FedAvg and FIARSE at ε ∈ {1, 4, 8, ∞}, offline stand-in.

Command:   fedjax-het --config experiments/privacy/epsilon.py --workdir runs/privacy/epsilon
Setting:   privacy_setup.digits_config (digits over 500 writer-like clients, K = 100, 100
           rounds, S = 0.5, δ = 1/N^1.1) and privacy_setup.sweep (σ calibrated to ε by RDP;
           ε = ∞: the same clip, σ = 0); 3 seeds. F-EMNIST's own writers: epsilon_femnist.py.
"""
from privacy_setup import COLUMNS, SEEDS, digits_config, sweep  # noqa: F401

TITLE = 'DP-FedAvg: test accuracy against ε, digits over 500 writer-like clients'


def get_configs():
  return sweep(digits_config)
