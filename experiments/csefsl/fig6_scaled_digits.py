"""CSE-FSL Fig. 6 scaled to a CPU: ordered vs sampled vs random order of the server's updates.

Command:   fedjax-het --config experiments/csefsl/fig6_scaled_digits.py --workdir runs/csefsl/fig6_scaled
           --seeds 3
Paper:     ordered and random arrival give nearly identical accuracy (L318).
Setting:   scaled_digits.py's (csefsl_setup.digits: 5 IID clients, all in every round, 17 batches per
           round, 30 rounds), CSE-FSL at h = 1 and 5; 'natural' serves clients in ascending id (Eq. 11,
           "ordered"), 'sampled' in the cohort's sampled order (a new permutation per round; what
           'natural' meant before), 'random' a fresh permutation per block.
Measured:  3 seeds, mean ± std, acc % last 5 evals / final (the README has the before/after):
           h=1: natural 93.2 ± 0.8 / 96.1 ± 1.9, sampled 92.5 ± 0.9 / 96.0 ± 2.3, random 92.7 ± 0.9 /
           96.0 ± 1.0; h=5: natural 84.4 ± 1.4 / 91.5 ± 2.9, sampled 83.2 ± 2.5 / 93.1 ± 2.4, random
           82.9 ± 2.0 / 93.2 ± 1.3. Within one std of each other, as in the paper.
"""
from csefsl_setup import COLUMNS, digits, server_orders

TITLE = 'CSE-FSL server update order (Fig. 6), digits'


def get_configs():
  return server_orders(digits(), hs=(1, 5), orders=('natural', 'sampled', 'random'))
