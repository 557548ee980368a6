"""FedACS Table 4, CIFAR-10 column: static heterogeneous systems, Dirichlet(0.1) labels.

Command:   python experiments/fedacs/compare.py --config experiments/fedacs/table4_cifar10.py \
               --config.data_dir=DIR
Needs:     CIFAR-10 prepared by TFDS under DIR.
Paper:     Table 4: rounds to 40% FedACS 68 (4706.3 s), FedAvg 112 (1.64×), c-a-FedAvg 101 (1.49×),
           FedVarp 148 (2.18×), FedNova 117 (1.72×), OS 72 (1.06×), FedAU never; FedACS +4–12% accuracy.
           Not run here (no CIFAR-10 offline).

As table1_cifar10.py (same model stand-in) with the paper's static systems (see table4_mnist.py).
"""
from fedacs_setup import TABLE_COLUMNS, family_configs, shared_config


COLUMNS = TABLE_COLUMNS
TITLE = 'FedACS Table 4, CIFAR-10: static systems, Dirichlet(0.1)'


def get_configs():
  """The seven methods on the shared setting (a comparison, fedjax_het.compare)."""
  return family_configs(shared_config('cifar10', 'static'))
