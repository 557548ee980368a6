"""FedAvg on Federated EMNIST-62 by writer (TFF's CNN).

Command:   fedjax-het --config experiments/natural/fedavg_femnist.py --config.data_dir=DIR
           (DIR holds federated_emnist_{train,test}.sqlite, emnist_all.sqlite, fed_emnist_{train,
           test}.h5 or LEAF's femnist train/ and test/; README "Natural datasets"; not run here:
           no copy of the set is on this machine)
Setting:   natural_setup.femnist at the authors' best FedAvg learning rates for EMNIST CR, client
           10^-1 and server 1 (google-research/federated, optimization/docs/hyperparameters.md;
           natural_setup.reddi); FedAdam and the other server optimisers: fedopt_femnist.py.
Published: Reddi et al. 2021 (Adaptive Federated Optimization), Table 2, EMNIST CR, FedAvg
           (quoted from the paper, not re-checked against it in this change):
           84.9 % test accuracy after 1500 rounds (FedAdam 85.6 %).
CPU-sized: --config.num_clients=100 --config.rounds=100 (a seeded subsample of writers).
"""
from natural_setup import femnist, reddi


def get_config():
  return reddi(femnist(), 'fedavg')
