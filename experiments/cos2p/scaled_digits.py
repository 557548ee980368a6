"""Co-S²P vs FedAvg (Full), FedRolex, RAM-Fed, FedPM, PruneFL, FedAvg+PLATON, FedAvg+AdaViT,
FedAvg+Q-ViT, Co-S²P (sync) and Co-S²P (Async.), scaled to a CPU.

Command:   fedjax-het --config experiments/cos2p/scaled_digits.py --workdir runs/cos2p/scaled --seeds 3
Paper:     Table 1, ViT-Tiny / ImageNet200 (E1), server Top-1/Top-5/F1 | client Top-1/Top-5/F1 | RU %:
           FedAvg(Full) 38.7/63.6/37.3 | 39.2/64.1/37.1 | 63.5;  FedRolex 24.3/48.0/23.1 | 20.7/45.8/20.5 | 72.5;
           RAM-Fed 23.6/46.0/21.5 | 19.4/41.2/19.3 | 69.9;  Co-S²P 33.1/59.2/31.9 | 31.8/56.6/30.5 | 87.9;
           Co-S²P(Async.) 27.7/53.2/27.3 | 26.7/49.8/26.7 | 100;  PruneFL 21.8/42.2/19.1 | 20.2/39.1/17.1 |
           69.2;  FA+PLATON 19.3/42.7/19.1 | 16.5/37.5/17.4 | 70.4;  FA+AdaViT 17.9/36.1/16.2 |
           14.3/34.5/14.0 | 67.3;  FA+Q-ViT 17.6/40.1/15.8 |
           14.9/34.8/13.6 | 70.7;  FedPM 16.2/38.7/15.5 | 14.2/34.0/12.9 | 71.8.
Measured:  see the README (Co-S²P section) for the table of the last run.

Scaled setting (E1's client mix, budgets, μ, T_clk and clock on a model and data a CPU trains):
- data: scikit-learn's 8×8 digits (1437 training images) over E1's 8 clients (1 Xavier NX 8GB,
  3 AGX Orin 32GB, 4 AGX Orin 64GB) with Tab. 7's relative sizes (8277 : 24960 : 36992) and
  Dirichlet(1.5) labels; each client's local test split follows its label mix (`local_test`).
- model: a ViT with E1's depth L = 8 (so the budgets give E1's windows: the NX board trains 2 blocks
  at 25% width, the AGX boards 6 blocks at 75%), width 64, MLP 128, 8 heads, patch 4.
- training: Adan (proximal weight decay 0.05), lr 0.005, B = 32, one local epoch per round
  (E = 5 in the paper), masks in the first sixth of the rounds (Q̂ = 20 of 120) for one epoch
  at η̂ = 0.01, λ1 = 1, λ2 = 0.2, t = 3; μ = 0.5, T_clk = 60 s.
- budget: every method trains for the same 12,000 virtual seconds (FedAvg (Full): 18 rounds;
  the others as many rounds as their clock fits: a round of Co-S²P(Async.) is one arrival).
- clock: the analytic model (`systems.vit_cost`) with the E1 fit of the Jetson speeds (NX /
  AGX64 = 0.134, AGX32 / AGX64 = 200 / 275: simulated FedAvg (Full) then has the paper's RU),
  the speeds and the 1 Gbit/s link scaled so that an AGX64 board's FedAvg round computes and
  transfers for as long as at paper scale (`speed_scale`, `bandwidth_bps`), so T_clk = 60 s
  keeps its meaning; jitter σ = 0.05.
- baselines are synchronous (μ = 1, T_clk = 0); FedRolex, RAM-Fed, PLATON and PruneFL train every
  block at width √R_n; AdaViT's decisions aim at a usage of √R_n for heads, sub-layers and
  tokens (the clock charges width √R_n); FedPM trains mask scores over the frozen initial weights; Q-ViT trains
  at bit-widths whose memory ratio is R_n; PruneFL prunes on client 0 for 20 steps first and
  reconfigures ten times; Co-S²P (sync) is μ = 1, T_clk = 0; Co-S²P (Async.) μ = 1/8, T_clk = 0.
"""
from cos2p_setup import COLUMNS, TABLE_ROWS, scaled_config, table_row, with_time_budget

TITLE = 'Co-S²P scaled comparison: digits, E1 client mix'
CURVES = ('virtual_seconds',)


def row_config(label: str):
  """The config of row `label` (`LABELS`), its rounds fitted to the time budget."""
  config = table_row(scaled_config(), 'cos2p' if label == 'cos2p_sync' else label)
  if label == 'cos2p_sync':   # the baselines' rows are synchronous (`table_row`)
    config.clock.update(mu=1.0, t_clk=0.0)
  config = with_time_budget(config)
  if config.algorithm == 'prunefl':   # pruning on client 0, ten reconfigurations
    config.prunefl.update(init_steps=20,
                          reconfig_every=max(1, config.rounds // 10))
  return config


LABELS = (*TABLE_ROWS, 'cos2p_sync')


def get_configs():
  return {label: row_config(label) for label in LABELS}
