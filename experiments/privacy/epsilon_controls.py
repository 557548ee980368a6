"""Two controls of epsilon.py's FIARSE rows: where its loss under DP comes from.

Command:   fedjax-het --config experiments/privacy/epsilon_controls.py
           --workdir runs/privacy/epsilon_controls
Setting:   epsilon.py's (privacy_setup.digits_config, S = 0.5, σ calibrated to ε by RDP), at
           ε ∈ {4, ∞}, 3 seeds:
           - FIARSE with one capacity, γ = 1 for every client: no mask, every coordinate
             divided by the cohort, as FedAvg's (the clients still run FIARSE's program);
           - HeteroFL with epsilon.py's four capacities: the same per-coordinate division of
             the noised sum as FIARSE's (a coordinate outside the γ = 1/4 submodel by the γ = 1
             group alone), but static width masks that do not follow the noised parameters.
Measured:  12 runs, 2:51 wall on the shared 2-core machine. Test accuracy %, mean ± std over
           seeds 0-2, ε = 4 / ∞: FIARSE one size 89.63 ± 1.58 / 92.41 ± 1.31; HeteroFL's full
           model 80.74 ± 3.67 / 89.63 ± 0.42, mean of its 4 sizes 47.96 ± 3.02 / 48.66 ± 5.19
           (epsilon.py's FIARSE: 74.72 ± 4.41 / 91.02 ± 1.37 and 33.89 ± 3.21 / 74.19 ± 2.26);
           README "Differential privacy" reads them.
"""
import math

from privacy_setup import COLUMNS, SEEDS, digits_config, sweep  # noqa: F401

TITLE = 'DP-FedAvg: controls of the FIARSE rows, digits over 500 writer-like clients'
EPSILONS = (4.0, math.inf)


def one_size(method: str):
  """`digits_config(method)` with every client at γ = 1."""
  config = digits_config(method)
  config.capacities = (1.0,)
  return config


def get_configs():
  return {**sweep(one_size, {'FIARSE, one size γ = 1': 'fiarse'}, EPSILONS),
          **sweep(digits_config, {'HeteroFL': 'heterofl'}, EPSILONS)}
