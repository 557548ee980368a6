"""DP-FedAvg's accuracy against ε: FedAvg and FIARSE at ε ∈ {1, 4, 8, ∞}, offline stand-in.

Command:   fedjax-het --config experiments/privacy/epsilon.py --workdir runs/privacy/epsilon
Setting:   privacy_setup.digits_config (digits over 500 writer-like clients, K = 100, 100
           rounds, S = 0.5, δ = 1/N^1.1) and privacy_setup.sweep (σ calibrated to ε by RDP;
           ε = ∞: the same clip, σ = 0); 3 seeds. F-EMNIST's own writers: epsilon_femnist.py.
Measured:  24 runs, 6:23 wall on the shared 2-core machine. Test accuracy %, mean ± std over
           seeds 0-2, ε = 1 / 4 / 8 / ∞: FedAvg 86.02 ± 0.70 / 91.57 ± 1.12 / 91.67 ± 1.21 /
           90.74 ± 1.53; FIARSE's full model 22.78 ± 6.02 / 74.72 ± 4.41 / 86.48 ± 2.94 /
           91.02 ± 1.37 (mean of its 4 sizes 13.36 / 33.89 / 43.84 / 74.19); README
           "Differential privacy" reads them.
"""
from privacy_setup import COLUMNS, SEEDS, digits_config, sweep  # noqa: F401

TITLE = 'DP-FedAvg: test accuracy against ε, digits over 500 writer-like clients'


def get_configs():
  return sweep(digits_config)
