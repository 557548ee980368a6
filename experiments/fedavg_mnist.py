"""FedAvg on MNIST, 100 clients with 2 label shards each (pathological non-IID).

Command:   fedjax-het --config experiments/fedavg_mnist.py --config.data_dir=DIR
Needs:     MNIST prepared by TFDS under DIR (on a networked machine:
           python -c "import tensorflow_datasets as tfds; tfds.builder('mnist', data_dir='DIR').download_and_prepare()")
Paper:     McMahan et al. (2017), Table 2: the 2NN (MLP 784-200-200-10) with E = 1, B = 10,
           C = 0.1 reaches 97% test accuracy in 664 rounds on this pathological non-IID split.
           Not run here (no network to fetch MNIST); a few minutes on a 2-core CPU.
"""
from fedjax_het.config import base_config


def get_config():
  config = base_config()
  config.algorithm = 'fedavg'
  config.dataset = 'mnist'
  config.num_clients = 100
  config.partition = 'shards'
  config.shards_per_client = 2
  config.model = 'mlp'
  config.model_options.hidden = (200, 200)
  config.rounds = 700
  config.clients_per_round = 10
  config.local_steps = 60   # 600 examples per client, batch 10: one epoch
  config.batch_size = 10
  config.client_lr = 0.05
  config.eval_every = 10
  config.rounds_per_call = 10
  config.checkpoint_every = 50
  return config
