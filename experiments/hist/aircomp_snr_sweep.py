"""HIST Fig. 7(a, b): AirComp vs OMA edge aggregation over the SNR, N = 4, H = 40, E = 5.

Command (GPU; Fashion-MNIST prepared in TFDS's data_dir):
  python experiments/hist/compare.py --config experiments/hist/aircomp_snr_sweep.py \
      --workdir runs/hist_snr --config.data_dir=DIR
Size: 24 runs × 50 global rounds (FCNN); not run here (no GPU, no dataset).

Paper (figures only): AirComp-HIST converges about as well as OMA-HIST for SNR > −10 dB and
oscillates at −20 dB; the latency to 80% falls with the SNR for all four methods and
AirComp-HIST is fastest at every SNR (CPUs U(2, 4) GHz in all cells). The SNR grid is not given;
we use {−20, −10, 0, 10, 20, 30} dB. AirComp noise is real Gaussian with
variance MSE = 1/(SNR·g) per element (Eq. 25); --config.hierarchy.aircomp_noise=complex halves it
(summary.json names the model). HIST uses the latency-optimal partition sizes (Fig. 7's caption).
"""
from hist_setup import COLUMNS as COLUMNS  # read by the comparison runner
from hist_setup import paper_config, snr_sweep_configs

TITLE = 'HIST Fig. 7: AirComp vs OMA over the SNR (cost to 80%)'


def get_configs():
  return snr_sweep_configs(lambda algorithm: paper_config(
      algorithm, 'fcnn', num_cells=4, local_steps=40))
