"""HIST Table I: LeNet-5 on Fashion-MNIST, MB per client to reach 80% test accuracy.

Command (GPU; Fashion-MNIST prepared in TFDS's data_dir):
  python experiments/hist/compare.py --config experiments/hist/table1_lenet_fmnist.py \
      --workdir runs/hist_table1 --config.data_dir=DIR
  (or fedjax-het --config experiments/hist/table1_lenet_fmnist.py for the table alone;
  --config.target_accuracy=0.7 for the 70% row)
Prepare data once: python -c "import tensorflow_datasets as tfds; tfds.builder('fashion_mnist').download_and_prepare()"
Size: 8 runs × 200 global rounds × 60 clients × 5 × 40 steps; not run here (no GPU, no dataset).

Paper (MB per client to reach 70% / 80%; H = 40, E = 5, 60 clients):
              non-iid N=2      non-iid N=4      cell-iid N=2     cell-iid N=4
  HIST        13.20 / 115.30   8.08 / 76.06     4.40 / 38.72     3.32 / 24.72
  HFedAvg     23.66 / 206.18   20.28 / 246.74   6.76 / 86.20     11.84 / 89.58
The paper's MB use its own formula 0.845·(2572 + 59134/N)/61706 MB per round for HIST;
ours count the parameters each client actually uploads (the code's LeNet: 44,426 parameters, of
which fc1's 120 neurons with fc2's rows, 40,920 parameters, are partitioned). Compare rounds to
target and the HIST/HFedAvg MB ratio. 'iid' here is fully i.i.d., not the paper's cell-i.i.d.
split (hist_setup.py).
"""
from hist_setup import COLUMNS as COLUMNS  # read by the comparison runner
from hist_setup import table_configs

TITLE = 'HIST Table I: LeNet-5 on Fashion-MNIST, cost to 80%'


def get_configs():
  return table_configs('lenet5')
