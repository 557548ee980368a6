"""FedACS Table 1, CIFAR-10 column: dynamic heterogeneous systems, Dirichlet(0.1) labels.

Command:   python experiments/fedacs/compare.py --config experiments/fedacs/table1_cifar10.py \
               --config.data_dir=DIR
Needs:     CIFAR-10 prepared by TFDS under DIR (tfds.builder('cifar10', data_dir=DIR).download_and_prepare()
           on a networked machine).
Paper:     Table 1: rounds to 40% test accuracy FedACS 100 (6928.9 s), FedAvg 143 (1.43×), c-a-FedAvg 130
           (1.30×), FedVarp 165 (1.65×), FedNova 161 (1.61×), OS 80 (0.8×), FedAU never; FedACS +7–11%
           accuracy (Fig. 6). Table 5 (same setting, α = 0.05/0.2/0.35): table5_cifar10.py.
           Not run here (no CIFAR-10 offline); on a GPU a few minutes per method.

Setting: M = 20, labels split by Dirichlet α = 0.1, K = 6 draws with replacement,
R = 200, the paper's dynamic systems (config.systems defaults), η₁ = 0.03, batch 1024, calibration on,
ω ∝ examples, per-channel standardised images, no augmentation. Model: LeNet-5 as the closest
registered model to the paper's CIFAR CNN (conv32-conv32-FC256-FC64; Table 3), which
fedjax_het.models does not provide. CINIC-10 (the third column) has no dataset source here.
"""
from fedacs_setup import TABLE_COLUMNS, family_configs, shared_config


COLUMNS = TABLE_COLUMNS
TITLE = 'FedACS Table 1, CIFAR-10: dynamic systems, Dirichlet(0.1)'


def get_configs():
  """The seven methods on the shared setting (a comparison, fedjax_het.compare)."""
  return family_configs(shared_config('cifar10', 'dynamic'))
