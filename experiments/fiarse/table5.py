"""FIARSE Table 5: five capacities {0.04, 0.16, 0.36, 0.64, 1}, with FjORD.

Command (GPU): fedjax-het --config experiments/fiarse/table5.py --workdir runs/fiarse_t5_c10
  CIFAR-100: add --config.dataset=cifar100.
  3 seeds × lr {0.1, 0.01} × momentum {0, 0.9} as in the paper (SEEDS, GRID below): mean ± std
  over seeds, each method at its best cell; --seeds 1 for one run per cell.

Paper (Local | Model(0.04, 0.16, 0.36, 0.64, 1) | Global):
  CIFAR-10   HeteroFL 72.93 | 64.05 71.80 75.75 77.25 75.80 | 70.38
             FedRolex 73.36 | 60.55 70.09 74.45 80.25 81.45 | 71.07
             ScaleFL  74.32 | 71.95 73.24 73.90 74.00 78.50 | 68.94
             FjORD    74.04 | 73.00 73.20 73.55 72.30 78.15 | 72.64
             FIARSE   81.79 | 77.75 82.15 81.40 82.90 84.75 | 78.13
  CIFAR-100  HeteroFL 35.01 | 30.15 33.60 36.10 37.75 37.45 | 32.60
             FedRolex 38.51 | 28.40 37.75 41.10 42.10 43.19 | 36.09
             ScaleFL  42.43 | 42.90 44.75 42.49 42.05 39.95 | 40.21
             FjORD    43.11 | 42.19 43.90 45.00 42.25 42.20 | 40.73
             FIARSE   45.94 | 44.35 45.65 47.80 47.00 44.90 | 42.61
"""
from fiarse_setup import FIVE_SIZES, PAPER_GRID, PAPER_SEEDS, columns, paper_config

TITLE = 'FIARSE Table 5 (5 sizes, 10% participation)'
SEEDS = PAPER_SEEDS  # runs in <workdir>/<method>/<grid cell>/seed<s>
GRID = PAPER_GRID  # each method's best of lr × momentum (first column, seed mean) opens the table
COLUMNS = columns(FIVE_SIZES)


def get_configs():
  return {m: paper_config(m, capacities=FIVE_SIZES)
          for m in ('heterofl', 'fedrolex', 'scalefl', 'fjord', 'fiarse')}
