"""FIARSE Table 1: four capacities {1/64, 1/16, 1/4, 1}, 10% participation.

Command (GPU, CIFAR-10 prepared in TFDS's data_dir):
  fedjax-het --config experiments/fiarse/table1.py --workdir runs/fiarse_t1_c10
  CIFAR-100: add --config.dataset=cifar100 (and another --workdir).
  3 seeds × lr {0.1, 0.01} × momentum {0, 0.9} as in the paper (SEEDS, GRID below): mean ± std
  over seeds, each method at its best cell; --seeds 1 for one run per cell.
Prepare data once: python -c "import tensorflow_datasets as tfds; tfds.builder('cifar10').download_and_prepare()"
  or extract cifar-10-python.tar.gz into DIR and add --config.data_dir=DIR (no TFDS needed).

Paper (test accuracy %, Local | Model(1/64, 1/16, 1/4, 1) | Global):
  CIFAR-10   HeteroFL 68.88 | 60.24 69.32 72.18 73.76 | 66.05
             FedRolex 67.18 | 54.60 64.96 70.08 79.08 | 65.98
             ScaleFL  72.10 | 69.04 71.64 70.08 77.64 | 67.37
             FIARSE   77.04 | 73.12 77.20 77.24 82.04 | 73.75
  CIFAR-100  HeteroFL 31.75 | 27.24 29.80 33.52 36.44 | 30.67
             FedRolex 31.67 | 21.00 30.84 36.44 38.40 | 29.89
             ScaleFL  39.69 | 36.16 40.48 42.56 39.56 | 37.56
             FIARSE   41.76 | 39.12 43.24 43.72 40.96 | 38.63
Protocol and deviations: fiarse_setup.py.
"""
from fiarse_setup import FOUR_SIZES, PAPER_GRID, PAPER_SEEDS, columns, paper_config

TITLE = 'FIARSE Table 1 (4 sizes, 10% participation)'
SEEDS = PAPER_SEEDS  # runs in <workdir>/<method>/<grid cell>/seed<s>
GRID = PAPER_GRID  # each method's best of lr × momentum (first column, seed mean) opens the table
COLUMNS = columns(FOUR_SIZES)


def get_configs():
  return {m: paper_config(m) for m in ('heterofl', 'fedrolex', 'scalefl',
                                       'fiarse')}
