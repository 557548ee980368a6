"""HIST vs HFedAvg offline (digits), N ∈ {2, 4, 6}: MB per client and latency to 90%.

Command:   python experiments/hist/compare.py --config experiments/hist/scaled_n_sweep.py
           (fedjax-het --config experiments/hist/scaled_n_sweep.py gives the bare table)
Expected:  6 runs of 60 global rounds, about 3 minutes on 2 CPU cores.
Setting:   hist_setup.scaled_config: 60 clients with 2 label shards each, cells of 60/N
           clients, MLP 64-300-10, H = 5, E = 5, OMA edge aggregation with the paper's
           latency constants (cells 1..N/2: 1-2 GHz, 30 dB; the others 2-4 GHz, 40 dB).
Paper's shape (Table II, CIFAR, 70%): HIST needs 1/1.9 (N = 2) and 1/3.4 (N = 4) of
HFedAvg's MB per client.
"""
from hist_setup import COLUMNS as COLUMNS  # read by the comparison runner
from hist_setup import METHODS, scaled_config

TITLE = 'HIST vs HFedAvg on digits (scaled), cost to 90%'
TARGET = 0.9


def get_configs():
  configs = {}
  for n in (2, 4, 6):
    for algorithm, label in METHODS:
      config = scaled_config(algorithm, n, rounds=60, target=TARGET)
      configs[f'{label} N={n}'] = config
  return configs
