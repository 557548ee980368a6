"""FIARSE's protocol at CPU scale, every method, offline (digits).

Command:   fedjax-het --config experiments/fiarse/scaled.py --workdir runs/fiarse_scaled
Expected:  ~5 minutes on 2 CPU cores; prints Local/Global accuracy per
           capacity {1/64, 1/16, 1/4, 1} for all seven methods and writes
           comparison.{md,json,png} (with the unparticipated-size sweep).
Five sizes: add --config.capacities='(0.04, 0.16, 0.36, 0.64, 1.0)'.
`fiarse_plain_mask` is FIARSE with submodel.tcb_bias=False: the plain masked gradient that the
official code's Tables 1–7 come from (its Bern backward never runs), beside Eq. (3)'s `fiarse`.
Measured (3 seeds, the two alone: 7.2 min): Local / Global, mean ± std: fiarse 93.79 ± 0.17 /
93.50 ± 0.21, fiarse_plain_mask 92.67 ± 0.30 / 92.43 ± 0.21 (Eq. (3)'s factor helps ~1 point).
Setting: fiarse_setup.scaled_config (50 clients, balanced Dirichlet 0.3,
MLP 64-200-200-10, 300 rounds of 10 clients × 10 steps).
"""
from fiarse_setup import FOUR_SIZES, columns, scaled_config

METHODS = ('heterofl', 'fedrolex', 'fjord', 'scalefl', 'pruning_greedy',
           'fiarse_layerwise', 'fiarse')
TITLE = 'FIARSE protocol on digits (scaled), 4 sizes'
COLUMNS = columns(FOUR_SIZES)


def get_configs():
  configs = {m: scaled_config(m) for m in METHODS}
  configs['fiarse_plain_mask'] = scaled_config('fiarse')
  configs['fiarse_plain_mask'].submodel.tcb_bias = False
  return configs
