"""FIARSE Tables 6–7: ablations on CIFAR-100 (4 sizes; 5 sizes by override).

Command (GPU): fedjax-het --config experiments/fiarse/ablation.py --workdir runs/fiarse_t6
  Table 7: add --config.capacities='(0.04, 0.16, 0.36, 0.64, 1.0)'.
  3 seeds × lr {0.1, 0.01} × momentum {0, 0.9} as in the paper (SEEDS, GRID below): mean ± std
  over seeds, each method at its best cell; --seeds 1 for one run per cell.

Paper, Table 6 (Local per size 1/64, 1/16, 1/4, 1 → avg | Global → avg):
  FIARSE             39.12 43.24 43.72 40.96 → 41.76 | 35.04 39.53 41.22 38.71 → 38.63
  Pruning-greedy     34.32 39.36 41.00 38.96 → 38.41 | 30.28 35.93 38.23 36.50 → 35.24
  FIARSE (layerwise) 33.44 38.24 38.64 37.00 → 36.83 | 30.54 35.94 37.12 34.46 → 34.52
Table 7 (0.04 … 1 → avg): FIARSE 45.94 | 42.61, Pruning-greedy 42.75 | 39.70,
  FIARSE (layerwise) 40.95 | 38.49 (Local | Global averages).
"""
from fiarse_setup import FOUR_SIZES, PAPER_GRID, PAPER_SEEDS, columns, paper_config

TITLE = 'FIARSE ablations (Tables 6-7, CIFAR-100)'
SEEDS = PAPER_SEEDS  # runs in <workdir>/<method>/<grid cell>/seed<s>
GRID = PAPER_GRID  # each method's best of lr × momentum (first column, seed mean) opens the table
COLUMNS = columns(FOUR_SIZES)


def get_configs():
  return {m: paper_config(m, dataset='cifar100')
          for m in ('fiarse', 'pruning_greedy', 'fiarse_layerwise')}
