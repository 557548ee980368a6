"""Co-S²P vs FedAvg (Full), FedRolex, RAM-Fed, Co-S²P (sync) and Co-S²P (Async.), scaled to a CPU.

Command:   fedjax-het --config experiments/cos2p/scaled_digits.py --workdir runs/cos2p/scaled --seeds 3
Paper:     Table 1, ViT-Tiny / ImageNet200 (E1), server Top-1/Top-5/F1 | client Top-1/Top-5/F1 | RU %:
           FedAvg(Full) 38.7/63.6/37.3 | 39.2/64.1/37.1 | 63.5;  FedRolex 24.3/48.0/23.1 | 20.7/45.8/20.5 | 72.5;
           RAM-Fed 23.6/46.0/21.5 | 19.4/41.2/19.3 | 69.9;  Co-S²P 33.1/59.2/31.9 | 31.8/56.6/30.5 | 87.9;
           Co-S²P(Async.) 27.7/53.2/27.3 | 26.7/49.8/26.7 | 100.
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
- baselines are synchronous (μ = 1, T_clk = 0); FedRolex and RAM-Fed train every block at width
  √R_n; Co-S²P (sync) is μ = 1, T_clk = 0; Co-S²P (Async.) μ = 1/8, T_clk = 0.
"""
import ml_collections
import numpy as np

from fedjax_het import run
from fedjax_het.config import base_config
from fedjax_het.systems import vit_cost

TITLE = 'Co-S²P scaled comparison: digits, E1 client mix'
CURVES = ('virtual_seconds',)
COLUMNS = (
    ('server top-1', 'final/test_accuracy'),
    ('server top-5', 'final/top5_accuracy'),
    ('server F1', 'final/f1_weighted'),
    ('client top-1', 'final/client_accuracy'),
    ('client top-5', 'final/client_top5_accuracy'),
    ('client F1', 'final/client_f1_weighted'),
    ('RU (Eq. 17)', 'ru_eq17'),
    ('RU (busy)', 'ru_busy'),
    ('virtual h', 'virtual_time_s'),
    ('h to 80%', 'to_target/virtual_seconds'),
    ('s/round', 's_per_round_median'),
)
DEVICES = ('nx8',) + ('agx32',) * 3 + ('agx64',) * 4
BUDGETS = (0.0625,) + (0.5625,) * 7
SIZES = (8277,) + (24960,) * 3 + (36992,) * 4
VIT = {'depth': 8, 'hidden': 64, 'mlp': 128, 'heads': 8, 'patch': 4}
E1_NX_RATIO = 0.134
# Every method trains for the same virtual time: FedAvg (Full)'s 18 rounds.
VIRTUAL_SECONDS = 12_000.0
MAX_ROUNDS = 2000


def clock_scales(batch: int) -> tuple[float, float]:
  """(FLOP/s scale, bandwidth in bit/s) that make an AGX64 board's FedAvg
  (Full) round on the scaled model and data take E1's paper-scale compute
  time and transfer time (`systems.vit_cost`)."""
  e1 = vit_cost.paper_experiment('E1')
  scaled_shape = vit_cost.ViTShape(image=8, channels=1, num_classes=10, **VIT)
  full = lambda shape: vit_cost.Submodel(0, shape.depth, train_embedding=True)
  paper = vit_cost.client_cost(e1.shape, full(e1.shape), 128)
  scaled = vit_cost.client_cost(scaled_shape, full(scaled_shape), batch)
  paper_flops = 5 * int(0.8 * SIZES[-1]) * paper.step_flops
  scaled_flops = 1 * round(1437 * SIZES[-1] / sum(SIZES)) * scaled.step_flops
  bytes_ratio = ((scaled.download_bytes + scaled.upload_bytes) /
                 (paper.download_bytes + paper.upload_bytes))
  return scaled_flops / paper_flops, 1e9 * bytes_ratio


def rounds_within(config, seconds: float) -> int:
  """Rounds of `config`'s virtual clock that end within `seconds`."""
  probe = config.copy_and_resolve_references()
  probe.rounds = MAX_ROUNDS
  algorithm = run.build_experiment(probe)[3]
  return int(np.searchsorted(algorithm.schedule.end_time, seconds,
                             side='right'))


def get_configs():
  c = base_config()
  c.update(dataset='digits', model='vit', num_clients=8, clients_per_round=8,
           partition='sized_dirichlet', alpha=1.5, client_sizes=SIZES,
           local_test=True, local_test_fraction=0.2, batch_size=32,
           client_lr=0.005, client_weight_decay=0.05, target_accuracy=0.8,
           progress=False)
  c.model_options = dict(VIT)
  c.cos2p.update(budgets=BUDGETS, device_types=DEVICES, epochs=1,
                 mask_epochs=1, mask_lr=0.01, lambda_budget=1.0,
                 lambda_kd=0.2, temperature=3.0,
                 device_speeds=ml_collections.ConfigDict(
                     vit_cost.nx_ratio_speeds(E1_NX_RATIO)))
  c.cos2p.speed_scale, c.cos2p.bandwidth_bps = clock_scales(c.batch_size)
  runs = {
      'fedavg_full': ('vit_fedavg', 1.0, 0.0),
      'fedrolex': ('vit_fedrolex', 1.0, 0.0),
      'ram_fed': ('ram_fed', 1.0, 0.0),
      'cos2p': ('cos2p', 0.5, 60.0),
      'cos2p_sync': ('cos2p', 1.0, 0.0),
      'cos2p_async': ('cos2p', 1 / 8, 0.0),
  }
  configs = {}
  for label, (algorithm, mu, t_clk) in runs.items():
    config = c.copy_and_resolve_references()
    config.algorithm = algorithm
    config.cos2p.update(mu=mu, t_clk=t_clk)
    rounds = rounds_within(config, VIRTUAL_SECONDS)
    # Masks are learned in the first sixth of training (E1: 20 of 120 rounds).
    config.cos2p.mask_rounds = rounds // 6
    config.update(rounds=rounds, eval_every=max(1, rounds // 18),
                  checkpoint_every=rounds, rounds_per_call=max(1, rounds // 18))
    configs[label] = config
  return configs
