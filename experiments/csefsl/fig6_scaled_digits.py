"""CSE-FSL Fig. 6 scaled to a CPU: ordered vs sampled vs random order of the server's updates.

Command:   fedjax-het --config experiments/csefsl/fig6_scaled_digits.py --workdir runs/csefsl/fig6_scaled
           --seeds 3
Paper:     ordered and random arrival give nearly identical accuracy (L318).
Setting:   scaled_digits.py's (csefsl_setup.digits: 5 IID clients, all in every round, 17 batches per
           round, 30 rounds), CSE-FSL at h = 1 and 5; 'natural' serves clients in ascending id (Eq. 11,
           "ordered"), 'sampled' in the cohort's sampled order (a new permutation per round; what
           'natural' meant before), 'random' a fresh permutation per block.
Measured:  see the README (CSE-FSL section).
"""
from csefsl_setup import COLUMNS, digits, server_orders

TITLE = 'CSE-FSL server update order (Fig. 6), digits'


def get_configs():
  return server_orders(digits(), hs=(1, 5), orders=('natural', 'sampled', 'random'))
