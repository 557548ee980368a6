"""Shared settings of the naturally partitioned benchmarks (`fedjax_het.data.natural`).

`femnist()` is Federated EMNIST-62 by writer as TFF's and FedJAX's files hold it (3,400 writers,
671,585 train / 77,483 test images), FedAvg with TFF's EMNIST CNN (`simple_cnn` on 28x28x1:
conv 32-64, max-pool, Dense 128, Dense 62; Reddi et al. 2021's model without its dropout).
`shakespeare()` is Shakespeare by speaking role (715 roles) with FedJAX's character LSTM
(`shakespeare_lstm`). Both follow Reddi et al. 2021 ("Adaptive Federated Optimization",
App. D, FedAvg rows; the learning rates as quoted, not re-checked in this change): 10 clients
a round, one local epoch (here a fixed number of local steps,
the mean client's epoch: 198 images / B 20 ≈ 10 steps; ≈ 65 sequences / B 4 ≈ 16 steps), SGD
on the clients, server lr 1.
"""
from fedjax_het.config import base_config


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
