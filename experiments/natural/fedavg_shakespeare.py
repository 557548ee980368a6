"""FedAvg on Shakespeare by speaking role, FedJAX's character LSTM (8-dim embedding, 2 x LSTM 256).

Command:   fedjax-het --config experiments/natural/fedavg_shakespeare.py --config.data_dir=DIR
           (DIR holds shakespeare_{train,test}.sqlite, shakespeare.sqlite, shakespeare_{train,
           test}.h5 or LEAF's shakespeare train/ and test/; README "Natural datasets"; not run
           here: no copy of the set is on this machine)
Published: Reddi et al. 2021, Table 2, Shakespeare, FedAvg (quoted, not re-checked in this
           change): 56.9 % next-character accuracy
           after 1200 rounds (FedAdam 57.0 %); the accuracy leaves out PAD and EOS targets
           (FedJAX's accuracy_no_eos, fedjax_het.data.text).
Setting:   natural_setup.shakespeare: the authors' best FedAvg learning rates for Shakespeare,
           client 1 and server 1 (google-research/federated, optimization/docs/hyperparameters.md);
           FedAdam and the other server optimisers: fedopt_shakespeare.py.
CPU-sized: --config.num_clients=50 --config.rounds=50 --config.model_options.hidden='(64,)'.
"""
from natural_setup import shakespeare


def get_config():
  return shakespeare()
