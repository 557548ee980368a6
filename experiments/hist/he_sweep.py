"""HIST Fig. 5: the edge period H and the global period E, N = 3, FCNN on Fashion-MNIST.

Command (GPU; Fashion-MNIST prepared in TFDS's data_dir):
  python experiments/hist/compare.py --config experiments/hist/he_sweep.py \
      --workdir runs/hist_he --config.data_dir=DIR   (add --config.partition=iid for iid)
Size: 5 runs × 50 global rounds; not run here (no GPU, no dataset).

Paper (figure only): larger E ∈ {5, 10, 15} is better; in the non-iid setting H ∈ {20, 40, 60}
first speeds and then slows convergence (H = 40 best).
"""
from hist_setup import COLUMNS as COLUMNS  # read by the comparison runner
from hist_setup import paper_config

TITLE = 'HIST Fig. 5: H and E, N = 3'


def get_configs():
  configs = {}
  for e in (5, 10, 15):
    configs[f'H=40 E={e}'] = paper_config('hist', 'fcnn', num_cells=3,
                                          edge_rounds=e, local_steps=40)
  for h in (20, 60):
    configs[f'H={h} E=5'] = paper_config('hist', 'fcnn', num_cells=3,
                                         local_steps=h)
  return configs
