"""CSE-FSL Fig. 6: ordered (clients 1..n, Eq. 11) vs random order of the server's updates.

Command:   fedjax-het --config experiments/csefsl/fig6_server_order.py --config.data_dir=DIR
           --workdir runs/csefsl/fig6                           (GPU, real CIFAR-10; not run here)
           The CPU-scaled form is fig6_scaled_digits.py.
Paper:     ordered and random arrival give nearly identical accuracy on CIFAR-10 IID and F-EMNIST
           non-IID (L318). 'natural' is the ordered arrival (ascending client id), 'random' a fresh
           permutation per block (`split.server_order`).
"""
from csefsl_setup import COLUMNS, cifar10, server_orders

TITLE = 'CSE-FSL server update order (Fig. 6), CIFAR-10'


def get_configs():
  return server_orders(cifar10(iid=True), hs=(5, 10))
