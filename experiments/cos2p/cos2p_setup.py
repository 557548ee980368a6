"""Shared settings of the scaled Co-S²P experiments (E1's client mix on digits).

`scaled_config()` is the common config of every method (data, model, training, clock; see
scaled_digits.py for the setting), `with_time_budget(config)` gives a config as many rounds as its
virtual clock fits in `VIRTUAL_SECONDS` (so methods are compared at equal virtual time; Co-S²P's
clock charges the masks its clients learn, so its fit trains the mask phases first), and
`COLUMNS` is the Table-1 layout read from each run's summary.json. `paper_config(...)` is the
paper-scale config of E1–E3 (the e*_imagenet*.py files), and `table_row(config, label)` turns
Co-S²P's config into any row of Tables 1–2 (`TABLE_ROWS`).
"""
import jax
import ml_collections
import numpy as np

from fedjax_het import methods, run
from fedjax_het.config import base_config
from fedjax_het.methods.cos2p.vit_engine import Cos2pOptions
from fedjax_het.systems import vit_cost

import paper_settings

COLUMNS = (
    ('server top-1', 'final/test_accuracy'),
    ('server top-5', 'final/top5_accuracy'),
    ('server F1', 'final/f1_weighted'),
    ('client top-1', 'final/client_accuracy'),
    ('client top-5', 'final/client_top5_accuracy'),
    ('client F1', 'final/client_f1_weighted'),
    ('RU (Eq. 17)', 'ru_eq17'),
    ('RU (busy)', 'ru_busy'),
    ('virtual s', 'virtual_time_s'),
    ('virtual s to 80%', 'to_target/virtual_seconds'),
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


# Tables 1–2's rows: label -> algorithm. Co-S²P(Async.) is clock.mu = 1/N, clock.t_clk = 0; the
# baselines are the paper's synchronous ones, clock.mu = 1, clock.t_clk = 0 (`table_row` sets them:
# a ViT baseline reads the clock section, synchronous at its defaults).
TABLE_ROWS = {
    'fedavg_full': 'vit_fedavg', 'fedavg_platon': 'vit_fedavg_platon',
    'fedavg_adavit': 'vit_fedavg_adavit', 'fedavg_qvit': 'vit_fedavg_qvit', 'fedpm': 'fedpm',
    'prunefl': 'prunefl', 'ram_fed': 'ram_fed', 'fedrolex': 'vit_fedrolex', 'cos2p': 'cos2p',
    'cos2p_async': 'cos2p'}


def table_row(config, label: str):
  """Co-S²P's `config` as the row `label` of Tables 1–2 (a copy)."""
  row = config.copy_and_resolve_references()
  row.algorithm = TABLE_ROWS[label]
  # A baseline trains with its fixed options (e.g. λ2 = 0), whatever Co-S²P's
  # row sets, without Co-S²P's keys it does not read (a method refuses
  # those) and synchronously, as in the paper: its config says so.
  method = methods.algorithm_class(row.algorithm)
  row.cos2p.update({key: value for key, value in Cos2pOptions.defaults().items()
                    if key not in method.reads_keys})
  for dotted, value in method.fixed_options.items():   # 'section.key'
    section, key = dotted.split('.')
    row[section][key] = value
  if row.algorithm != 'cos2p':
    row.clock.update(mu=1.0, t_clk=0.0)
  if label == 'cos2p_async':
    row.clock.update(mu=1.0 / row.num_clients, t_clk=0.0)
  if row.algorithm == 'vit_fedavg_adavit':
    row.model_options['decisions'] = True
  return row


def table_configs(config) -> dict:
  """Every row of Tables 1–2 (`TABLE_ROWS`) from Co-S²P's `config`."""
  return {label: table_row(config, label) for label in TABLE_ROWS}


def clock_scales(batch: int) -> tuple[float, float]:
  """(FLOP/s scale, bandwidth in bit/s) that make an AGX64 board's FedAvg
  (Full) round on the scaled model and data take E1's paper-scale compute
  time and transfer time (`systems.vit_cost`)."""
  e1 = paper_settings.paper_experiment('E1')
  scaled_shape = vit_cost.ViTShape(image=8, channels=1, num_classes=10, **VIT)
  full = lambda shape: vit_cost.Submodel(0, shape.depth, train_embedding=True)
  paper = vit_cost.client_cost(e1.shape, full(e1.shape), 128)
  scaled = vit_cost.client_cost(scaled_shape, full(scaled_shape), batch)
  paper_flops = 5 * int(0.8 * SIZES[-1]) * paper.step_flops
  scaled_flops = 1 * round(1437 * SIZES[-1] / sum(SIZES)) * scaled.step_flops
  bytes_ratio = ((scaled.download_bytes + scaled.upload_bytes) /
                 (paper.download_bytes + paper.upload_bytes))
  return scaled_flops / paper_flops, 1e9 * bytes_ratio


def rounds_within(config, seconds: float, bound: int = MAX_ROUNDS) -> int:
  """Rounds of `config`'s virtual clock that end within `seconds`, of the
  first `bound` simulated: the clock the run follows where it charges the
  masks clients learn (Co-S²P: its mask phases are trained first,
  `train_mask_phases`), else the clock projected from the config."""
  probe = config.copy_and_resolve_references()
  probe.rounds = bound
  split, _, params, algorithm = run.build_experiment(probe)
  if getattr(algorithm, 'charges_realised_masks', False) and probe.cos2p.mask_rounds:
    train_mask_phases(probe, algorithm, params, split.train)
  return int(np.searchsorted(algorithm.schedule.end_time, seconds,
                             side='right'))


def masked_rounds_within(config, seconds: float, guess: int) -> int:
  """`rounds_within` for Co-S²P, whose fit trains on a clock of `bound`
  rounds simulated at every mask draw: 2·`guess` rounds (a fit near `guess`),
  or MAX_ROUNDS where they all fit."""
  bound = min(2 * guess + 1, MAX_ROUNDS)
  rounds = rounds_within(config, seconds, bound)
  return rounds if rounds < bound else rounds_within(config, seconds)


def train_mask_phases(config, algorithm, params, train) -> None:
  """Trains `algorithm` (Co-S²P) from `params` until every update of a
  mask round (dispatched in a round < Q̂) has arrived. From then on no
  mask changes, so its `schedule` (the masks held, projected on) is the
  clock of a run with `config`'s seed (`methods.cos2p.cos2p`)."""
  state = algorithm.init(params, jax.random.PRNGKey(config.seed))
  runner = run.make_runner(config, algorithm)
  data = runner.place(train.to_device())
  while True:
    first = int(state.round)
    draws = np.flatnonzero(algorithm.draws_masks(algorithm.schedule).any(1))
    if not draws.size or draws[-1] < first:
      break
    state, _ = runner.run(state, data, int(draws[-1]) + 1 - first)
  algorithm.prepare_rounds(state, int(state.round), 1)   # every mask held


def scaled_config():
  """Every method's common config: data, model, training and the clock."""
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
  c.clock.update(mu=0.5, t_clk=60.0)
  return c


def with_time_budget(config):
  """`config` with the rounds its clock fits in VIRTUAL_SECONDS (Co-S²P:
  with the masks its clients learn in the first sixth of them, Q̂ = 20 of
  120 in E1) and about 18 evaluations."""
  config = config.copy_and_resolve_references()
  if 'mask_rounds' in methods.algorithm_class(config.algorithm).reads_keys:
    # Q̂ = rounds // 6 and the rounds fitted with Q̂'s mask phases and the
    # masks they draw: from Q̂ = 0 (full width), until Q̂ stays.
    config.cos2p.mask_rounds = 0
    rounds = rounds_within(config, VIRTUAL_SECONDS)
    for _ in range(4):
      if config.cos2p.mask_rounds == rounds // 6:
        break
      config.cos2p.mask_rounds = rounds // 6
      rounds = masked_rounds_within(config, VIRTUAL_SECONDS, rounds)
  else:
    rounds = rounds_within(config, VIRTUAL_SECONDS)
  chunk = max(1, rounds // 18)
  config.update(rounds=rounds, eval_every=chunk, rounds_per_call=chunk,
                checkpoint_every=chunk * (rounds // chunk + 1))
  return config


def paper_config(experiment: str, *, dataset_options: dict, init_params_file: str,
                 rounds: int, client_lr: float, mask_lr: float, lambda_budget: float,
                 lambda_kd: float):
  """Co-S²P at paper scale (App. E, Tab. 6/7). The clients, model, μ, T_clk, E, Q̂ and Ê come
  from `paper_settings.PAPER_EXPERIMENTS[experiment]`; the rest is each experiment's own."""
  setting = paper_settings.paper_experiment(experiment)
  clients = setting.clients
  config = base_config()
  config.algorithm = 'cos2p'
  config.dataset = 'imagenet2012'
  config.dataset_options = dataset_options
  config.model = setting.model
  config.model_options = {}
  config.init_params_file = init_params_file
  config.num_clients = len(clients)
  config.clients_per_round = len(clients)
  config.partition = 'sized_dirichlet'
  config.alpha = 1.5
  config.client_sizes = tuple(c.dataset_size for c in clients)
  config.local_test = True
  config.local_test_fraction = 0.2
  config.augment = 'none'
  config.rounds = rounds
  config.batch_size = 32
  config.client_lr = client_lr
  config.client_weight_decay = 0.05
  config.eval_every = 10
  config.checkpoint_every = 10
  config.eval_batch_size = 256
  c = config.cos2p
  c.budgets = tuple(client.budget for client in clients)
  c.device_types = tuple(client.device for client in clients)
  c.optimizer = 'adan'
  c.epochs = setting.epochs
  c.mask_rounds = setting.mask_rounds
  c.mask_epochs = setting.mask_epochs
  c.mask_lr = mask_lr
  c.lambda_budget = lambda_budget
  c.lambda_kd = lambda_kd
  c.temperature = 3.0
  config.clock.mu = setting.mu
  config.clock.t_clk = setting.t_clk
  return config
