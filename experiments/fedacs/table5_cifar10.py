"""FedACS Table 5: CIFAR-10, dynamic heterogeneous systems, Dirichlet α ∈ {0.05, 0.2, 0.35}.

Command:   for a in 0.05 0.2 0.35; do t=$([ $a = 0.35 ] && echo 0.4 || echo 0.35);
             python experiments/fedacs/compare.py --config experiments/fedacs/table5_cifar10.py \
               --workdir runs/fedacs_table5_a$a --config.alpha=$a --config.target_accuracy=$t \
               --config.data_dir=DIR; done
Needs:     CIFAR-10 prepared by TFDS under DIR.
Paper:     Table 5, rounds to threshold (35%, 35%, 40%): FedACS 107 / 51 / 36, FedAvg 149 / 88 / 88,
           c-a-FedAvg 142 / 88 / 90, FedVarp – / 156 / 159, FedNova – / 125 / 94, OS 110 / 54 / 32,
           FedAU never. Not run here (no CIFAR-10 offline).

As table1_cifar10.py (same model stand-in, see there) with α = 0.05 and threshold 35% by default.
"""
from fedacs_setup import TABLE_COLUMNS, family_configs, shared_config


COLUMNS = TABLE_COLUMNS
TITLE = 'FedACS Table 5, CIFAR-10: dynamic systems, Dirichlet α sweep'


def get_configs():
  """The seven methods on the shared setting (a comparison, fedjax_het.compare)."""
  return family_configs(shared_config('cifar10', 'dynamic', alpha=0.05,
                                       target_accuracy=0.35))
