"""FedBuff (buffered asynchronous FedAvg) on the virtual clock: FedScale's FEMNIST setting.

Command:   fedjax-het --config experiments/fedbuff/femnist.py --config.data_dir=DIR
           (DIR holds the F-EMNIST files of experiments/natural/fedavg_femnist.py; README
           "Natural datasets"; not run here: no copy of the set is on this machine)
Setting:   FedScale's FedBuff FEMNIST benchmark (its repository's benchmark configs, as issue 36
           quotes them): a buffer of K = 50 updates per server step, C = 60 clients in flight,
           staleness bound τ_max = 5, weight 1/√(1 + τ) normalised by the buffer's sum
           (clock.staleness_weight='fedscale', staleness_normalisation='sum'), on the natural
           F-EMNIST-62 reader with natural_setup.femnist's model and local training (TFF's CNN,
           B 20, 10 local steps); a round is a server step of K slots (clients_per_round = K).
           With clock.device_trace=FILE.npz (fedjax-het traces) the round times and who is
           online come from FedScale's device files.
CPU-sized: experiments/fedbuff/femnist_cpu.py, on synthetic data (README, "The buffered clock").
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                'natural'))

from natural_setup import femnist as natural_femnist  # noqa: E402
from fedjax_het.config import base_config  # noqa: E402


def fedbuff(config, *, buffer_size, concurrency):
  """`config` on FedBuff's clock: K, C, τ_max = 5, 1/√(1 + τ) over the buffer's sum; a
  server step's cohort is its K slots."""
  config.clients_per_round = buffer_size
  config.clock.update(buffer_size=buffer_size, concurrency=concurrency, tau_max=5,
                      staleness_weight='fedscale', staleness_normalisation='sum')
  return config


def femnist():
  """FedScale's setting: K = 50, C = 60 on the 3,400 F-EMNIST writers."""
  return fedbuff(natural_femnist(), buffer_size=50, concurrency=60)


def get_config():
  return femnist()
