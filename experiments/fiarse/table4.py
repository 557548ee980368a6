"""FIARSE Table 4: Table 1 with 20% participation (20 of 100 clients per round).

Command (GPU): fedjax-het --config experiments/fiarse/table4.py --workdir runs/fiarse_t4_c10
  CIFAR-100: add --config.dataset=cifar100.
  3 seeds × lr {0.1, 0.01} × momentum {0, 0.9} as in the paper (SEEDS, GRID below): mean ± std
  over seeds, each method at its best cell; --seeds 1 for one run per cell.

Paper (Local | Model(1/64, 1/16, 1/4, 1) | Global):
  CIFAR-10   HeteroFL 69.93 | 61.40 69.02 72.36 76.76 | 67.92
             FedRolex 68.64 | 53.16 67.00 71.60 82.80 | 66.75
             ScaleFL  72.05 | 68.44 71.12 70.36 78.28 | 67.27
             FIARSE   79.65 | 73.84 80.00 80.40 84.36 | 76.61
  CIFAR-100  HeteroFL 32.23 | 28.32 31.52 33.96 35.12 | 30.30
             FedRolex 33.00 | 21.36 34.12 36.72 39.80 | 31.33
             ScaleFL  39.57 | 37.92 39.60 41.84 38.92 | 37.63
             FIARSE   42.27 | 40.32 43.28 43.52 41.96 | 38.97
"""
from fiarse_setup import FOUR_SIZES, PAPER_GRID, PAPER_SEEDS, columns, paper_config

TITLE = 'FIARSE Table 4 (4 sizes, 20% participation)'
SEEDS = PAPER_SEEDS  # runs in <workdir>/<method>/<grid cell>/seed<s>
GRID = PAPER_GRID  # each method's best of lr × momentum (first column, seed mean) opens the table
COLUMNS = columns(FOUR_SIZES)


def get_configs():
  return {m: paper_config(m, clients_per_round=20)
          for m in ('heterofl', 'fedrolex', 'scalefl', 'fiarse')}
