"""HIST Table II: a CNN on CIFAR-10, MB per client to reach 70% test accuracy.

Command (GPU; CIFAR-10 prepared in TFDS's data_dir):
  python experiments/hist/compare.py --config experiments/hist/table2_cnn_cifar.py \
      --workdir runs/hist_table2 --config.data_dir=DIR
  (--config.target_accuracy=0.5 for the 50% row)
Prepare data once: python -c "import tensorflow_datasets as tfds; tfds.builder('cifar10').download_and_prepare()"
Size: 8 runs × 200 global rounds × 60 clients × 5 × 40 steps; not run here (no GPU, no dataset).

Paper (MB per client to reach 50% / 70%; H = 40, E = 5, 60 clients):
              non-iid N=2       non-iid N=4       cell-iid N=2      cell-iid N=4
  HIST        177.50 / 856.14   110.64 / 528.18   114.76 / 584.52   74.72 / 394.84
  HFedAvg     392.16 / 1609.92  392.16 / 1795.68  227.04 / 1217.76  268.32 / 1568.64
At 70% non-iid HIST needs 1/1.88 (N = 2) and 1/3.4 (N = 4) of HFedAvg's communication.
The model is the package's simple_cnn, not the paper's CNN (hist_setup.py): absolute MB differ,
the ratios are the comparison.
"""
from hist_setup import COLUMNS as COLUMNS  # read by the comparison runner
from hist_setup import table_configs

TITLE = 'HIST Table II: CNN on CIFAR-10, cost to 70%'


def get_configs():
  return table_configs('cnn')
