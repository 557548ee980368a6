"""HIST Figs. 3, 4 and 6(c): FCNN 784-300-10 on Fashion-MNIST, N ∈ {2, 4, 6, 8}.

Command (GPU; Fashion-MNIST prepared in TFDS's data_dir):
  python experiments/hist/compare.py --config experiments/hist/fcnn_n_sweep.py \
      --workdir runs/hist_fcnn_n --config.data_dir=DIR
Size: 12 runs × 50 global rounds (H = 20, E = 5, 60 clients); not run here (no GPU, no dataset).

Paper (figures only): HIST reaches 80% with less communication than HFedAvg, and its
cost falls from N = 2 to 6 while HFedAvg's grows in the non-iid setting; at N = 8 HIST degrades.
Fig. 6(c) (OMA latency to 80%): falls from N = 2 to 6 for all methods; HIST with latency-optimal
partition sizes (Eq. 19) is fastest at every N, and HFedAvg's latency jumps at N = 8.
"""
from hist_setup import COLUMNS as COLUMNS  # read by the comparison runner
from hist_setup import paper_config

TITLE = 'HIST FCNN on Fashion-MNIST, N sweep (cost to 80%)'


def get_configs():
  configs = {}
  for n in (2, 4, 6, 8):
    configs[f'HIST N={n}'] = paper_config('hist', 'fcnn', num_cells=n)
    optimized = paper_config('hist', 'fcnn', num_cells=n)
    optimized.hierarchy.partition_sizes = 'optimized'
    configs[f'HIST-opt N={n}'] = optimized
    configs[f'HFedAvg N={n}'] = paper_config('hfedavg', 'fcnn', num_cells=n)
  return configs
