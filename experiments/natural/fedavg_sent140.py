"""FedAvg on LEAF's Sent140 by Twitter user: LEAF's 2-layer LSTM(100) sentiment classifier.

Command:   fedjax-het --config experiments/natural/fedavg_sent140.py --config.data_dir=DIR
           (DIR holds LEAF's data/sent140/data/train/ and test/ as train/ and test/, and GloVe's
           glove.6B.300d.txt, or --config.natural.glove_file=PATH; without GloVe:
           --config.natural.vocabulary=train; README "Natural datasets"; not run here: no copy
           of the set is on this machine)
Setting:   LEAF (Caldas et al. 2018, "LEAF: A Benchmark for Federated Settings"; its code's
           defaults: models/main.py -t large, models/baseline_constants.py): 2 clients a
           round, 24 rounds, B 10, 1 local epoch, SGD lr 0.0003, 25 tokens, LSTM 100 x 2,
           the paper's 300-d GloVe embedding (natural_setup.sent140).
Published: LEAF reports Sent140 as curves (accuracy against rounds and systems budget), no
           single target number; none is quoted here (not re-checked).
CPU-sized: --config.num_clients=100 --config.natural.vocabulary=train
           --config.natural.vocab_size=5000 "--config.model_options={'embed': 100}"
"""
from natural_setup import sent140


def get_config():
  return sent140()
