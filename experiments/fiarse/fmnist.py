"""FIARSE vs HeteroFL vs FedRolex on real Fashion-MNIST, LeNet-5, 4 capacities, CPU scale.

Command:   fedjax-het --config experiments/fiarse/fmnist.py --workdir /work/runs/fmnist/fiarse --seeds 3
Paper:     FIARSE Table 1, CIFAR-10 (ResNet-18, 100 clients, 800 rounds), test accuracy %,
           Local | Model(1/64, 1/16, 1/4, 1) | Global:
             HeteroFL 68.88 | 60.24 69.32 72.18 73.76 | 66.05
             FedRolex 67.18 | 54.60 64.96 70.08 79.08 | 65.98
             FIARSE   77.04 | 73.12 77.20 77.24 82.04 | 73.75
           (FIARSE first at every size, Local and Global; the paper has no Fashion-MNIST table).
Measured:  (filled in below after the run)

Setting: fiarse_setup.scaled_fmnist_config: the scaled protocol (50 clients, balanced Dirichlet 0.3,
10 clients × 10 steps of batch 16 per round, uniform weights, parameter-budget widths, no Scaler)
on the 60000/10000 Fashion-MNIST images (normalised) with LeNet-5 (44,426 params). Scalings for
CPU time: 20 rounds (the digits version 300), lr 0.05 with momentum 0.9 (lr 0.05 without momentum
and 5 local steps: HeteroFL seed 0 at 12% after 20 rounds), one evaluation at the end, on the global test set only: no local
test shards (so no Local column) and no unparticipated-size sweep.
"""
from fiarse_setup import FOUR_SIZES, columns, scaled_fmnist_config

METHODS = ('heterofl', 'fedrolex', 'fiarse')
TITLE = 'FIARSE vs HeteroFL vs FedRolex on Fashion-MNIST (LeNet-5, scaled), 4 sizes'
COLUMNS = columns(FOUR_SIZES)
SEEDS = 3


def get_configs():
  return {m: scaled_fmnist_config(m) for m in METHODS}
