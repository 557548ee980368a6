"""Composition 3: CSE-FSL vs FSL_AN vs FedAvg under lossy uplinks and unequal local work.

No paper ran this: CSE-FSL's and FSL_AN's papers assume every client runs its whole epoch and
every upload arrives. Here two weak clients of five run 5 of the 17 batches of a round and lose
their uplink with probability 0.3 (the three strong ones: all 17 batches, q = 0.05). A split
client uploads smashed data only for the batches it ran (CSE-FSL: one batch per h = 5 it ran),
and a round whose uplink is down delivers nothing: no server step on its smashed data, no model
in the average, no bytes counted (`methods/split/split_learning.py`).

Command:   fedjax-het --config experiments/composition/split_links_work.py --seeds 3
           (18 runs of 30 rounds; about 6 minutes on 2 CPU cores)

Setting: CSE-FSL's CPU-scaled digits (`experiments/csefsl/csefsl_setup.digits`): 8×8 digits over
5 IID clients, full participation, split LeNet-5 with an MLP aux head, B = 16, 17 batches per
round, η = 0.1, 30 rounds, 1/n averaging. FedAvg trains the same (unsplit) network.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                'csefsl'))

from csefsl_setup import COLUMNS, digits  # noqa: E402

TITLE = 'CSE-FSL vs FSL_AN vs FedAvg, ideal and under lossy links + unequal work (split digits)'
SEEDS = 3
WEAK = {'q': (0.3, 0.3, 0.05, 0.05, 0.05), 'local_work': (5, 5, 17, 17, 17)}


def _config(algorithm: str, systems: bool):
  config = digits()
  config.algorithm = algorithm
  if algorithm == 'cse_fsl':
    config.split.upload_every = 5
  if systems:
    config.systems.update(WEAK)
  return config


def get_configs():
  names = {'cse_fsl': 'cse_fsl h=5', 'fsl_an': 'fsl_an', 'fedavg': 'fedavg'}
  return {f'{label}{" + links & work" if systems else ""}': _config(algorithm, systems)
          for systems in (False, True) for algorithm, label in names.items()}
