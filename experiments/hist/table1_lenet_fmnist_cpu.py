"""HIST Table I on real Fashion-MNIST at CPU scale: LeNet-5, rounds and MB per client to 70%.

Command:   fedjax-het --config experiments/hist/table1_lenet_fmnist_cpu.py --workdir runs/fmnist/hist
Paper (Table I, 60 clients, H = 40, E = 5, batch 50; rounds / MB per client to 70%):
              non-iid N=2     non-iid N=4     cell-iid N=2    cell-iid N=4
  HIST        30 / 13.20      34 / 8.08       10 / 4.40       14 / 3.32
  HFedAvg     28 / 23.66      24 / 20.28      8 / 6.76        14 / 11.84
Measured (seed 0, one run each; 2 shared CPU cores, 4–15 min a run; the 70% target was not
reached in the rounds run, so the costs are to 60% and 65%; MiB per client, HIST 0.457 and HFedAvg
0.847 per round (paper's formula: 0.44 / 0.845)):
                       rounds/MB to 60%  rounds/MB to 65%  final acc (round)  wall   paper to 70%
  non-iid N=2 HIST     9 / 4.11          13 / 5.94         0.663 (15)         890 s  30 / 13.20
              HFedAvg  6 / 5.08          9 / 7.63          0.680 (15)         451 s  28 / 23.66
  cell-iid N=2 HIST    7 / 3.20          9 / 4.11          0.656 (10)         484 s  10 / 4.40
              HFedAvg  5 / 4.24          6 / 5.08          0.676 (10)         699 s  8 / 6.76
  cell-iid N=4 HIST    9 / 2.36          not in 10         0.634 (10)         451 s  14 / 3.32
              HFedAvg  6 / 5.08          7 / 5.93          0.688 (10)         231 s  14 / 11.84
  non-iid N=4 HIST     13 / 3.41         not in 15         0.616 (15)         305 s  34 / 8.08
              HFedAvg  9 / 7.63          10 / 8.47         0.683 (15)         304 s  24 / 20.28
The paper's direction holds in all four settings (HIST more rounds, less MB to 60%: 0.75–0.81× of
HFedAvg's at N=2, 0.45–0.46× at N=4), with one seed and a smaller saving than the paper's at 70%;
HIST also needs more rounds at N=4 cell-iid, where the paper has 14 vs 14.

Scalings from table1_lenet_fmnist.py (hist_setup.paper_config('lenet5')), all for 2 shared CPU cores:
12 clients instead of 60 (N=2: 6 per cell, N=4: 3 per cell; non-iid: the same 2-shard split,
24 shards of 2500 images), batch 10 instead of 50, H = 10 steps instead of 40 with lr 0.04 instead
of 0.01 (the same lr × steps per edge round), E = 5 as the paper; 10 global rounds cell-iid, 15
non-iid (no early stop in the runner: the rounds to 70% are read from the evaluation every round;
one global round takes ~45 s on the shared CPU).
cell_iid is the paper's cell-i.i.d., client-non-i.i.d. split (partition='cell_shards': 12 clients
make each cell's 6 or 3 clients' 2 shards straddle 2-3 classes each, so clients are less skewed
than the paper's 2-class clients).
MB are the MiB each client actually uploads (not the paper's formula), so compare rounds and the
HIST/HFedAvg MB ratio.
"""
import hist_setup
from hist_setup import table_configs

COLUMNS = hist_setup.COLUMNS  # read by the comparison runner

TITLE = 'HIST Table I on Fashion-MNIST, CPU scale: LeNet-5, cost to 70%'


def get_configs():
  return table_configs('lenet5', num_clients=12, rounds={'cell_iid': 10, 'noniid': 15},
                       settings=('cell_iid', 'noniid'),
                       data_dir='/usr/share/datasets/fashion-mnist', batch_size=10,
                       local_steps=10, client_lr=0.04, target_accuracy=0.7)
