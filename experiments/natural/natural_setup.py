"""Shared settings of the naturally partitioned benchmarks (`fedjax_het.data.natural`).

`femnist()` is Federated EMNIST-62 by writer as TFF's and FedJAX's files hold it (3,400 writers,
671,585 train / 77,483 test images), FedAvg with TFF's EMNIST CNN (`simple_cnn` on 28x28x1:
conv 32-64, max-pool, Dense 128, Dense 62; Reddi et al. 2021's model without its dropout).
`shakespeare()` is Shakespeare by speaking role (715 roles) with FedJAX's character LSTM
(`shakespeare_lstm`). `sent140()` and `celeba()` are LEAF's baselines (Caldas et al. 2018,
"LEAF: A Benchmark for Federated Settings"; the settings of its code, below). Both follow Reddi et al. 2021 ("Adaptive Federated Optimization",
App. D, FedAvg rows; the learning rates as quoted, not re-checked in this change): 10 clients
a round, one local epoch (here a fixed number of local steps,
the mean client's epoch: 198 images / B 20 ≈ 10 steps; ≈ 65 sequences / B 4 ≈ 16 steps), SGD
on the clients, server lr 1.

`reddi(c, method)` puts a task's config on one of Reddi et al.'s server optimisers with the
authors' best learning rates and ε for the task (`REDDI_BEST`, google-research/federated,
optimization/docs/hyperparameters.md, base-10 logs), run as their code ran them
(`REDDI_SERVERS`): Keras's optimisers, i.e. FedAdam and FedYogi bias-corrected with β1 = 0.9,
β2 = 0.999 and accumulators from 0, FedAdagrad without momentum from 0, FedAvgM SGD with
momentum 0.9 (fedjax_het/optim.py; the library's defaults are the paper's Algorithm 2 instead).
`fedopt_row(c)` is a task's row of their Table 2: the five methods side by side.
"""
from fedjax_het.config import base_config

# Task → method → (client lr, server lr, ε) as base-10 logs, the best of Reddi et al.'s tuning
# (hyperparameters.md, "Best hyperparameters"); FedAvg and FedAvgM have no ε.
REDDI_BEST = {
    'fed_emnist': {'fedadagrad': (-1.5, -1, -2), 'fedadam': (-1.5, -2.5, -4),
                   'fedyogi': (-1.5, -2.5, -4), 'fedavgm': (-1.5, -0.5, None),
                   'fedavg': (-1, 0, None)},
    'shakespeare': {'fedadagrad': (0, -0.5, -1), 'fedadam': (0, -2, -3), 'fedyogi': (0, -2, -3),
                    'fedavgm': (0, -0.5, None), 'fedavg': (0, 0, None)},
    'stackoverflow': {'fedadagrad': (-0.5, -1.5, -4), 'fedadam': (-0.5, -2, -5),
                      'fedyogi': (-0.5, -2, -5), 'fedavgm': (-0.5, 0, None),
                      'fedavg': (-0.5, 0, None)},
}
# Method → the server keys of the authors' runs (hyperparameters.md, "Configuring optimizers":
# Keras's defaults β1 = 0.9, β2 = 0.999; adagrad's and yogi's initial accumulator 0; Keras's
# Adam starts at 0 too; FedAvgM is sgd with momentum 0.9).
REDDI_SERVERS = {
    'fedavg': {},
    'fedavgm': {'server_momentum': 0.9},
    'fedadagrad': {'server_optimizer': 'adagrad', 'server_b1': 0.0, 'server_v0': 0.0},
    'fedadam': {'server_optimizer': 'adam', 'server_b2': 0.999, 'server_v0': 0.0,
                'server_bias_correction': True},
    'fedyogi': {'server_optimizer': 'yogi', 'server_b2': 0.999, 'server_v0': 0.0,
                'server_bias_correction': True},
}


def natural(dataset: str, num_clients: int):
  """A natural set's common settings: its own clients, evaluated on their test splits."""
  c = base_config()
  c.update(algorithm='fedavg', dataset=dataset, partition='natural', num_clients=num_clients,
           clients_per_round=10, server_lr=1.0, eval_every=50, checkpoint_every=100,
           rounds_per_call=10)
  return c


def femnist(num_clients: int = 3400):
  """F-EMNIST-62 by writer: 1500 rounds, B 20, 10 local steps, client lr 10^-1.5."""
  c = natural('fed_emnist', num_clients)
  c.update(model='simple_cnn', rounds=1500, batch_size=20, local_steps=10,
           client_lr=10 ** -1.5)
  c.model_options = {}
  return c


def shakespeare(num_clients: int = 715):
  """Shakespeare by role: 1200 rounds, B 4, 16 local steps, client lr 1."""
  c = natural('shakespeare', num_clients)
  c.update(model='shakespeare_lstm', rounds=1200, batch_size=4, local_steps=16, client_lr=1.0)
  c.model_options = {}
  return c


def stackoverflow(num_clients: int = 342477):
  """StackOverflow next-word prediction by user: 50 clients a round, 1500 rounds, B 16, at most
  256 posts a user (TFF's max_elements_per_user) so 16 local steps, client lr 10^-0.5."""
  c = natural('stackoverflow', num_clients)
  c.update(model='stackoverflow_lstm', rounds=1500, clients_per_round=50, batch_size=16,
           local_steps=16, client_lr=10 ** -0.5)
  c.natural.max_examples = 256
  c.model_options = {}
  return c


def sent140(num_clients: int = 1000):
  """LEAF's Sent140 baseline (models/main.py defaults with -t large, baseline_constants.py):
  FedAvg, 2 clients a round, 24 rounds evaluated every 2, B 10, one local epoch, SGD lr 0.0003;
  `sent140_lstm` on LEAF's first 25 words with GloVe's vocabulary. One epoch is one step here:
  a Sent140 user has 2.4 tweets on average (1,600,498 / 660,120), fewer than B. LEAF trains on
  every user of its files; 1,000 is a seeded subsample, since the count depends on LEAF's
  preprocess flags (a larger num_clients than the files hold stops and names their count)."""
  c = natural('sent140', num_clients)
  c.update(model='sent140_lstm', rounds=24, clients_per_round=2, eval_every=2,
           checkpoint_every=24, rounds_per_call=2, batch_size=10, local_steps=1,
           client_lr=3e-4)
  c.model_options = {}
  return c


def celeba(num_clients: int = 9343):
  """LEAF's CelebA baseline (models/main.py defaults with -t large, baseline_constants.py):
  FedAvg, 2 clients a round, 400 rounds evaluated every 20, B 10, one local epoch, SGD lr 0.1;
  `leaf_cnn` on 84x84 RGB. One epoch is 2 steps here: a celebrity has 21.4 images on average
  (200,288 / 9,343), 90 % of them in train (LEAF's -t sample --tf 0.9). All 9,343 celebrities of
  LEAF's full-size files (./preprocess.sh -s niid --sf 1.0 -k 5 -t sample)."""
  c = natural('celeba', num_clients)
  c.update(model='leaf_cnn', rounds=400, clients_per_round=2, eval_every=20,
           checkpoint_every=100, batch_size=10, local_steps=2, client_lr=0.1)
  c.model_options = {}
  return c


def reddi(c, method: str):
  """`c`, a task's config (femnist, shakespeare, stackoverflow), with Reddi et al.'s server
  optimiser `method` (REDDI_SERVERS) and its best learning rates and ε for the task."""
  client, server, eps = REDDI_BEST[c.dataset][method]
  c.update(client_lr=10.0 ** client, server_lr=10.0 ** server, **REDDI_SERVERS[method])
  if eps is not None:
    c.server_tau = 10.0 ** eps
  return c


def fedopt_row(task):
  """label → config: Reddi et al.'s five methods on the task `task()` builds."""
  return {method: reddi(task(), method) for method in REDDI_SERVERS}
