"""HIST Fig. 7(c): latency against the number of clients per cell n_j, N = 4, H = 40, E = 5.

Command (GPU; Fashion-MNIST prepared in TFDS's data_dir):
  python experiments/hist/compare.py --config experiments/hist/aircomp_nj_sweep.py \
      --workdir runs/hist_nj --config.data_dir=DIR
Size: 20 runs × 50 global rounds (FCNN, 40 to 120 clients); not run here (no GPU, no dataset).

Paper (figure only): AirComp-HIST has the lowest latency; OMA-HIST's latency grows with n_j (TDMA
slots), AirComp-HIST's falls from n_j = 10 to 20 and rises past 25. Other settings as Sec. VI-C
(cells 1-2: 1-2 GHz and 30 dB, cells 3-4: 2-4 GHz and 40 dB); the training set is split over
4·n_j clients with 2 label shards each; HIST uses the latency-optimal partition sizes (Eq. (19) /
(36)), as Fig. 7's caption says.
"""
from hist_setup import COLUMNS as COLUMNS  # read by the comparison runner
from hist_setup import METHODS, paper_config

TITLE = 'HIST Fig. 7(c): latency to 80% against n_j'


def get_configs():
  configs = {}
  for n_j in (10, 15, 20, 25, 30):
    for channel in ('aircomp', 'oma'):
      for algorithm, label in METHODS:
        config = paper_config(algorithm, 'fcnn', num_cells=4, local_steps=40,
                              num_clients=4 * n_j)
        config.hierarchy.edge_channel = channel
        config.hierarchy.partition_sizes = 'optimized'  # Fig. 7's caption
        configs[f'{channel.upper()}-{label} n_j={n_j}'] = config
  return configs
