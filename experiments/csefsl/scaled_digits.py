"""CSE-FSL vs FSL_MC / FSL_OC / FSL_AN (and FedAvg), scaled to run offline on a CPU.

Command:   fedjax-het --config experiments/csefsl/scaled_digits.py --workdir runs/csefsl/scaled
Paper:     Table V ordering (CIFAR-10 IID, 200 epochs): MC 80.55 > AN 77.75 > CSE h=5 76.52 >
           h=10 75.75 > OC 73.74; load MC = OC (172.46 GB) > AN (86.80) > CSE (÷h); storage
           CSE (1.61 M) ≈ OC (1.50 M) ≪ MC (5.34) < AN (5.46).
Measured:  (seed 0, 30 rounds, ≈4 min for all six on 2 shared CPU cores) acc last 5 evals / final /
           load GB / server storage params / comm rounds / s per round:
           fsl_mc 59.56 / 91.39 / 0.02233 / 106,930 / 2550 / 0.045   (the same accuracies as fedavg)
           fsl_oc 91.67 / 94.72 / 0.02233 /  31,674 / 2550 / 0.048
           fsl_an 86.72 / 94.72 / 0.01333 / 110,180 / 2550 / 0.068
           cse h=1 91.72 / 93.33 / 0.01333 / 34,924 / 2550 / 0.067
           cse h=5 85.39 / 94.17 / 0.005317 / 34,924 / 450 / 0.064
           fedavg 59.56 / 91.39 / – / – / – / 0.074
           FSL_OC re-run after issue #29 (3 seeds, mean ± std; clipped at 1.2, csefsl_setup.FSL_OC_CLIP,
           clients served in ascending id): 88.0 ± 0.3 / 93.6 ± 0.6; unclipped in ascending id
           91.6 ± 0.7 / 96.3 ± 0.6; before (unclipped, sampled order): 92.1 ± 1.4 / 96.0 ± 1.6.
           Orderings: load MC = OC > AN = CSE h=1 > CSE h=5 (÷ ~2.5 here: the model exchange is a larger
           share on this small model); storage CSE ≈ OC ≪ MC < AN, as in Table V. Accuracy at 30
           rounds on digits does not reproduce the paper's MC > AN > CSE ordering (all reach 91-95%).

Scaled setting: scikit-learn's 8×8 digits (1437 training images), n = 5 clients (IID, ~287 each),
full participation, split LeNet-5 cut after conv2 (smashed 2×2×16 = 64 floats), MLP aux head,
B = 16, one local epoch of 17 batches per round, η = 0.1, 30 rounds; CSE-FSL h ∈ {1, 5}.
"""
from csefsl_setup import COLUMNS, digits, family

TITLE = 'CSE-FSL scaled comparison: digits, 5 clients'
# comparison_curves.png: accuracy against GB exchanged and against communication rounds.
CURVES = ('gb', 'comm_rounds')


def get_configs():
  c = digits()
  configs = family(c, hs=(1, 5))
  configs['fedavg'] = c.copy_and_resolve_references()
  configs['fedavg'].algorithm = 'fedavg'
  return configs
