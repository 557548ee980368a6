"""FedACS Table 1's systems setting on real Fashion-MNIST, CPU scale: dynamic systems, one class per client.

Command:   fedjax-het --config experiments/fedacs/fmnist_table1.py --workdir /work/runs/fmnist/fedacs --seeds 3
Paper:     Table 1, MNIST column: rounds to 70% FedACS 68, FedAvg 93 (1.37×), c-a-FedAvg 84 (1.24×),
           FedVarp 115 (1.69×), FedNova 99 (1.46×), OS 72 (1.06×), FedAU never: FedACS fewest.
Measured:  (filled in below after the run)

Setting: fedacs_setup.shared_config('fashion_mnist', 'dynamic'): the digits_table1.py protocol on the
60000/10000 Fashion-MNIST images (IDX files): M = 20 clients, client m holding class ⌊m/2⌋
('class_blocks': the weak half clients 0–9 hold classes 0–4, the strong half 10–19 classes 5–9),
K = 6 draws with replacement, R = 120 (the paper's 200, cut for CPU time), dynamic systems (clients 0–9 T ~ U{1..10} local steps and
q ~ U(0.4, 0.5) redrawn every round, clients 10–19 T ~ U{20..30}, q ~ U(0, 0.1)), step-length
calibration, ω ∝ examples, MLP 784-200-10, batch 16, η₁ = 0.05, threshold 70% (the paper's MNIST).
Scalings: local work in SGD steps, not epochs (an epoch of a 3000-image client is ~190 steps);
an MLP instead of the paper's CNN; evaluation every 5 rounds (rounds to target are multiples of 5).
"""
from fedacs_setup import TABLE_COLUMNS, family_configs, shared_config


COLUMNS = TABLE_COLUMNS
TITLE = 'FedACS Table 1 (dynamic systems), scaled: Fashion-MNIST, one class per client (disjoint halves)'


# Four of the seven methods (CPU time): FedACS, FedAvg, c-a-FedAvg (the paper's best baseline
# after OS, which trains all 20 clients every round, ~3× the compute) and FedNova (the best on
# the scaled digits table).
METHODS = ('fedacs', 'fedavg_het', 'ca_fedavg', 'fednova')


def get_configs():
  """The four methods on the shared setting (a comparison, fedjax_het.compare)."""
  return family_configs(shared_config('fashion_mnist', 'dynamic', rounds=120), METHODS)
