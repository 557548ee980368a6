"""AirComp vs OMA edge aggregation offline (digits), N = 4, SNR ∈ {−20, …, 30} dB.

Command:   python experiments/hist/compare.py --config experiments/hist/scaled_snr_sweep.py
           (fedjax-het --config experiments/hist/scaled_snr_sweep.py gives the bare table)
Expected:  24 runs of 50 global rounds, about 6 minutes on 2 CPU cores.
Setting:   hist_setup.scaled_config with N = 4 cells of 15 clients and the AirComp
           experiments' systems (CPUs U(2, 4) GHz everywhere, the SNR swept in every cell;
           M = 10 antennas, max-min beamformer, channel-inversion precoders, real noise of
           variance 1/(SNR·g) on every sent element, model noise γ·Z, Eqs. (24)-(28)).
Paper's shape (Fig. 7): AirComp-HIST as accurate as OMA-HIST above −10 dB, oscillating at
−20 dB; latency to target falls with the SNR and AirComp-HIST is fastest at every SNR.
"""
from hist_setup import COLUMNS as COLUMNS  # read by the comparison runner
from hist_setup import scaled_config, snr_sweep_configs

TITLE = 'AirComp vs OMA on digits (scaled), N = 4, cost to 90%'
TARGET = 0.9


def get_configs():
  return snr_sweep_configs(lambda algorithm: scaled_config(
      algorithm, 4, rounds=50, target=TARGET))
