"""FedAvg on StackOverflow next-word prediction by user, TFF's LSTM (embedding 96, LSTM 670).

Command:   fedjax-het --config experiments/natural/fedavg_stackoverflow.py --config.data_dir=DIR
           --config.stream_cohorts=True     (memmapped in DIR/fedjax_het_cache)
           (DIR holds stackoverflow_{train,test}.sqlite, stackoverflow.sqlite or
           stackoverflow_{train,test}.h5, and stackoverflow.word_count; not run here: no copy of
           the set is on this machine. 342,477 users x 256 rows x 20 tokens of int32 x and y are
           ~14 GB padded: streamed from the memmapped cache.)
Published: Reddi et al. 2021, Table 2, Stack Overflow NWP, FedAvg (quoted, not re-checked in
           this change): 19.5 % accuracy (FedAdam
           25.2 %); their accuracy leaves out PAD, EOS and OOV targets, ours PAD and EOS
           (fedjax_het.data.text), so ours counts OOV hits too.
Setting:   the authors' best FedAvg learning rates for Stack Overflow NWP, client 10^-0.5, server 1
           (google-research/federated, optimization/docs/hyperparameters.md); FedAdam and the
           other server optimisers: fedopt_stackoverflow.py.
CPU-sized: --config.num_clients=200 --config.clients_per_round=10 --config.natural.vocab_size=1000.
"""
from natural_setup import stackoverflow


def get_config():
  return stackoverflow()
