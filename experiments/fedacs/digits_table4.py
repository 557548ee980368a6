"""FedACS Table 4, scaled to run offline on a CPU: digits, static heterogeneous systems.

Command:   python experiments/fedacs/compare.py --config experiments/fedacs/digits_table4.py
           (or one seed: fedjax-het --config experiments/fedacs/digits_table4.py)
Paper:     Table 4 / Fig. 9, MNIST column: rounds to 70% FedACS 64, FedAvg 92 (1.44×), c-a-FedAvg 68,
           FedVarp 92, FedNova 103, OS and FedAU never.
Measured:  (seeds 0-2) NOT the paper's ordering: accuracy / rounds to 70% / local steps to 70%:
           FedACS 0.672 / 131 / 6213, FedAvg 0.739 / 92 / 10884, c-a-FedAvg 0.751 / 96, FedVarp 0.760 / 111,
           FedNova 0.852 / 70 / 8228, FedAU 0.826 / 98, OS 0.781 / 112. FedACS samples the T = 1, 3, …
           clients most (p ∝ 1/((1 − q)T)), so few one-class clients dominate each round.

As digits_table1.py but with the paper's static systems (App. I.3.1): client m keeps
T_m ∈ {1, 3, …, 39} local steps and success probability 1 − q_m ∈ {0.60, 0.62, …, 0.98}, the two
lists assigned to clients by independent seeded permutations (the paper leaves the pairing open).
Classes are laid out as client m → class m mod 10 ('one_class', as measured above): with q and T
shuffled over the clients there are no halves, and the 'class_blocks' layout of Table 1 is the
same setting in distribution.
"""
from fedacs_setup import TABLE_COLUMNS, family_configs, shared_config


COLUMNS = TABLE_COLUMNS
TITLE = 'FedACS Table 4 (static systems), scaled: digits, one class per client'


def get_configs():
  """The seven methods on the shared setting (a comparison, fedjax_het.compare)."""
  return family_configs(shared_config('digits', 'static', partition='one_class'))
