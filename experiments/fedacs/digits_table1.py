"""FedACS Table 1, scaled to run offline on a CPU: digits, dynamic heterogeneous systems.

Command:   python experiments/fedacs/compare.py --config experiments/fedacs/digits_table1.py
           (all seven methods × seeds 0,1,2 → Table 1's layout with ratios to FedACS and accuracy
           curves; ≈ 6 min on 2 CPU cores), or one seed through the shared comparison table:
           fedjax-het --config experiments/fedacs/digits_table1.py
Paper:     Table 1 / Fig. 6, MNIST column: rounds to 70% FedACS 68, FedAvg 93 (1.37×), c-a-FedAvg 84,
           FedVarp 115, FedNova 99, OS 72, FedAU never; FedACS +7.5–36% accuracy.
Measured:  (seeds 0-2, 5.4 min, class_blocks layout) accuracy over the last 5 rounds (mean ± std) /
           rounds to 70% / local steps to 70%: FedACS 0.694 ± 0.014 / 139 / 4626, FedAvg
           0.674 ± 0.063 / 126 (0.91×) / 11710 (2.53×), c-a-FedAvg 0.769 / 100, FedVarp 0.788 / 80,
           FedNova 0.851 ± 0.048 / 69 / 6562, FedAU 0.821 / 89, OS 0.687 / 129: NOT the paper's
           ordering (FedACS ≈ FedAvg within spread; FedNova best). With the m mod 10 layout
           (partition=one_class, both halves holding all classes) it was FedACS 0.897 vs FedAvg 0.751.

Scaled setting: scikit-learn's 8×8 digits (1437 training images) over M = 20 clients holding one
class each, client m class ⌊m/2⌋ (so clients 0–9 hold classes 0–4 and clients 10–19 classes 5–9), K = 6 draws with replacement per round, R = 200 rounds, the
paper's dynamic systems (App. I.3.1: clients 0–9 redraw T ~ U{1..10} local steps and
q ~ U(0.4, 0.5) every round, clients 10–19 T ~ U{20..30} and q ~ U(0, 0.1)), step-length calibration
on, ω ∝ examples held, an MLP 64-200-10 (a CNN on 8×8 digits is ~25× slower here and learns no
better), batch 16, η₁ = 0.05, threshold 70% as the paper's MNIST.
"""
from fedacs_setup import TABLE_COLUMNS, family_configs, shared_config


COLUMNS = TABLE_COLUMNS
TITLE = 'FedACS Table 1 (dynamic systems), scaled: digits, one class per client (disjoint halves)'


def get_configs():
  """The seven methods on the shared setting (a comparison, fedjax_het.compare)."""
  return family_configs(shared_config('digits', 'dynamic'))
