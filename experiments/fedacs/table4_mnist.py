"""FedACS Table 4, MNIST column: static heterogeneous systems, one class per client.

Command:   python experiments/fedacs/compare.py --config experiments/fedacs/table4_mnist.py \
               --config.data_dir=DIR
Needs:     MNIST prepared by TFDS under DIR (see table1_mnist.py).
Paper:     Table 4: rounds to 70% FedACS 64 (4307.7 s), FedAvg 92 (1.44×), c-a-FedAvg 68 (1.07×),
           FedVarp 92 (1.44×), FedNova 103 (1.61×), OS and FedAU never; FedACS +11–34% accuracy.
           Not run here (no MNIST offline).

As table1_mnist.py (same model stand-in) with the paper's static systems (App. I.3.1): client m
keeps T_m ∈ {1, 3, …, 39} and 1 − q_m ∈ {0.60, 0.62, …, 0.98}, assigned to clients by independent
seeded permutations (the pairing is not stated).
"""
from fedacs_setup import TABLE_COLUMNS, family_configs, shared_config


COLUMNS = TABLE_COLUMNS
TITLE = 'FedACS Table 4, MNIST: static systems, one class per client'


def get_configs():
  """The seven methods on the shared setting (a comparison, fedjax_het.compare)."""
  return family_configs(shared_config('mnist', 'static'))
