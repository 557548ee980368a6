"""FedACS Table 1, MNIST column: dynamic heterogeneous systems, one class per client.

Command:   python experiments/fedacs/compare.py --config experiments/fedacs/table1_mnist.py \
               --config.data_dir=DIR
           (one method, one seed: add --methods fedavg_het --seeds 0; one seed of all methods:
            fedjax-het --config experiments/fedacs/table1_mnist.py --config.data_dir=DIR)
Needs:     MNIST prepared by TFDS under DIR (on a networked machine:
           python -c "import tensorflow_datasets as tfds; tfds.builder('mnist', data_dir='DIR').download_and_prepare()")
Paper:     Table 1: rounds to 70% test accuracy (total computation time) FedACS 68 (3548.6 s),
           FedAvg 93 (1.37×), c-a-FedAvg 84 (1.24×), FedVarp 115 (1.69×), FedNova 99 (1.46×), OS 72 (1.06×),
           FedAU never; FedACS +7.5–36% accuracy (Fig. 6). Not run here (no MNIST offline); on a GPU
           about a minute per method.

Setting (paper App. I.3): M = 20 clients, client m holding class ⌊m/2⌋ (the weak half classes
0–4, the strong half 5–9), K = 6 draws with replacement, R = 200, dynamic systems (defaults of
config.systems: half the clients T ~ U{1..10}, q ~ U(0.4, 0.5), the other half T ~ U{20..30},
q ~ U(0, 0.1), redrawn every round), T in local epochs as App. I.3.1 states (T·⌈n_m/B⌉ steps),
η₁ = 0.02, batch 512, step-length calibration (App. I.2), ω ∝ examples. Model: LeNet-5, the
closest registered model to the paper's PyTorch-MNIST CNN (Table 3), which
fedjax_het.models does not provide.
"""
from fedacs_setup import TABLE_COLUMNS, family_configs, shared_config


COLUMNS = TABLE_COLUMNS
TITLE = 'FedACS Table 1, MNIST: dynamic systems, one class per client'


def get_configs():
  """The seven methods on the shared setting (a comparison, fedjax_het.compare)."""
  return family_configs(shared_config('mnist', 'dynamic'))
