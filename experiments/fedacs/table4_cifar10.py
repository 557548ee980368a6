"""FedACS Table 4, CIFAR-10 column: static heterogeneous systems, Dirichlet(0.1) labels.

Command:   python experiments/fedacs/compare.py --config experiments/fedacs/table4_cifar10.py \
               --config.data_dir=DIR
Needs:     CIFAR-10 prepared by TFDS under DIR.
Paper:     Table 4: rounds to 40% FedACS 68 (4706.3 s), FedAvg 112 (1.64×), c-a-FedAvg 101 (1.49×),
           FedVarp 148 (2.18×), FedNova 117 (1.72×), OS 72 (1.06×), FedAU never; FedACS +4–12% accuracy.
           Not run here (no CIFAR-10 offline).

As table1_cifar10.py (same model stand-in) with the paper's static systems (see table4_mnist.py).
"""
from fedjax_het.algorithms.fedacs import TABLE_COLUMNS, family_configs
from fedjax_het.config import base_config

COLUMNS = TABLE_COLUMNS
TITLE = 'FedACS Table 4, CIFAR-10: static systems, Dirichlet(0.1)'


def shared_config():
  config = base_config()
  config.algorithm = 'fedacs'
  config.dataset = 'cifar10'
  config.dataset_options.normalize = True
  config.num_clients = 20
  config.partition = 'dirichlet'
  config.alpha = 0.1
  config.model = 'lenet5'
  config.model_options = {}
  config.rounds = 200
  config.clients_per_round = 6
  config.batch_size = 1024
  config.client_lr = 0.03
  config.aggregation_weights = 'examples'
  config.systems.model = 'static'
  config.systems.local_work = tuple(range(1, 40, 2))
  config.systems.q = tuple(round(0.40 - 0.02 * i, 2) for i in range(20))
  config.systems.shuffle = True
  config.target_accuracy = 0.4
  config.eval_every = 1
  config.rounds_per_call = 1
  config.checkpoint_every = 50
  return config


def get_configs():
  """The seven methods on the shared setting (a comparison, fedjax_het.compare)."""
  return family_configs(shared_config())
