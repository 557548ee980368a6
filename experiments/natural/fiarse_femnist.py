"""FIARSE vs HeteroFL on F-EMNIST-62 by writer: four capacities of TFF's CNN.

Command:   fedjax-het --config experiments/natural/fiarse_femnist.py --config.data_dir=DIR
           --workdir runs/natural/fiarse_femnist     (not run here: no copy of the set)
Paper:     FIARSE reports CIFAR-10/100 and AGNews only, no F-EMNIST; the comparison is this
           library's: the γ-submodels (γ = 1/64, 1/16, 1/4, 1) of `simple_cnn` in equal client
           groups, each evaluated on the writers' test images (global: all of them; local: each writer's
           own, `local_test`).
Setting:   natural_setup.femnist (3,400 writers, 10 a round, B 20, 10 steps, lr 10^-1.5), 500
           rounds, uniform aggregation weights, FIARSE's parameter-budget widths, no Scaler.
"""
from fedjax_het.compare import capacity_columns
from natural_setup import femnist

FOUR_SIZES = (1 / 64, 1 / 16, 1 / 4, 1.0)
METHODS = ('heterofl', 'fiarse')
TITLE = 'FIARSE vs HeteroFL on F-EMNIST-62 by writer, 4 capacities'
COLUMNS = capacity_columns(FOUR_SIZES)


def get_configs():
  configs = {}
  for method in METHODS:
    c = femnist()
    c.update(algorithm=method, capacities=FOUR_SIZES, rounds=500,
             aggregation_weights='uniform', local_test=True)
    c.submodel.scaler = False
    configs[method] = c
  return configs
