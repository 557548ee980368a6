"""HIST Fig. 6(a, b): latency-optimal vs uniform partition sizes, OMA, N = 4, E = 5.

Command (GPU; Fashion-MNIST prepared in TFDS's data_dir):
  python experiments/hist/compare.py --config experiments/hist/mask_opt.py \
      --workdir runs/hist_mask_opt --config.data_dir=DIR
Size: 4 runs × 50 global rounds; not run here (no GPU, no dataset).

Paper (figure only): per global round the optimised sizes converge slightly slower than uniform
ones but reach 80% with clearly lower training latency (cells 1-2: 1-2 GHz and 30 dB, cells 3-4:
2-4 GHz and 40 dB; Eq. (19) with d_j ≤ 1.5·d/N). Fig. 6's "various settings" are read as
H ∈ {20, 40}.
"""
from hist_setup import COLUMNS as COLUMNS  # read by the comparison runner
from hist_setup import paper_config

TITLE = 'HIST Fig. 6: optimised vs uniform partition sizes (OMA)'


def get_configs():
  configs = {}
  for h in (20, 40):
    for sizes in ('uniform', 'optimized'):
      config = paper_config('hist', 'fcnn', num_cells=4, local_steps=h)
      config.hierarchy.partition_sizes = sizes
      configs[f'{sizes} H={h}'] = config
  return configs
