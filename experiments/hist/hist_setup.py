"""HIST's experimental protocol, shared by its experiments.

`paper_config` is Sec. VI's setting: 60 clients in N equal cells (clients
j·n_j … (j+1)·n_j − 1 form cell j), every client in every global round, SGD
lr 0.01 without momentum, batch 50, uniform weights at the edge and the cloud,
the 2-shard non-i.i.d. split of the authors' code (sort by label, 120 shards,
2 per client). Per model (authors' code where the paper is silent):
- 'fcnn': MLP 784-300-10 on Fashion-MNIST (238,510 params), H = 20, E = 5,
  50 global rounds;
- 'lenet5': the code's LeNet-5 (VALID convs, 44,426 params = 0.169 MiB) on
  Fashion-MNIST, H = 40, E = 5, 200 rounds (Table I);
- 'cnn': CIFAR-10, H = 40, E = 5, 200 rounds (Table II). The paper's CNN
  (convs 16-32-64 + fc 1024-500-10, 541,094 params) is not in
  `fedjax_het.models`; the package's `simple_cnn` (convs 32-64 + fc
  12544-128-10, 1.6 M params, its 128 fc neurons partitioned) stands in,
  so Table II's MB column is not comparable in absolute terms; the
  HIST/HFedAvg ratios are.
Differences from the paper: no dropout (the models have none); the paper's
"cell-i.i.d., client-non-i.i.d." split is `setting='cell_iid'`
(`partition='cell_shards'`), while `setting='iid'`, which the paper-scale
table files still use, is fully i.i.d.; the latency
model's unstated constants are L0 = 32·d bits and log2 rates.

`scaled_config` is the same protocol offline on scikit-learn's digits: an
MLP 64-300-10 (22,510 params), 60 clients of ~24 images (2 label shards
each), H = 5 steps of batch 10, E = 5, lr 0.05.
"""
import ml_collections

from fedjax_het.config import base_config

# (header, summary key): cost to reach the target and the final accuracy.
COLUMNS = (
    ('rounds to target', 'to_target/round'),
    ('MB per client to target', 'to_target/mb_per_client'),
    ('latency to target (s)', 'to_target/latency_s'),
    ('final acc', 'final_test_accuracy'),
    ('mean acc, last 5 evals', 'mean_test_accuracy_last5'),
)
SNR_GRID_DB = (-20.0, -10.0, 0.0, 10.0, 20.0, 30.0)  # the paper's Fig. 7 range, widened

_MODELS = {
    # model: (dataset, model name, options, H, rounds, target)
    'fcnn': ('fashion_mnist', 'mlp', {'hidden': (300,)}, 20, 50, 0.8),
    'lenet5': ('fashion_mnist', 'lenet5', {'padding': 'valid'}, 40, 200, 0.8),
    'cnn': ('cifar10', 'simple_cnn', {}, 40, 200, 0.7),
}


# setting → partition: 'cell_iid' is the paper's cell-i.i.d., client-non-i.i.d. split
# (the authors' mnist_mix), 'iid' fully i.i.d.
_PARTITIONS = {'noniid': 'shards', 'iid': 'iid', 'cell_iid': 'cell_shards'}


def _hierarchical(config, algorithm: str, num_cells: int, edge_rounds: int):
  config.algorithm = algorithm
  config.hierarchy.num_cells = num_cells
  config.hierarchy.edge_rounds = edge_rounds
  config.clients_per_round = config.num_clients
  return config


def paper_config(algorithm: str, model: str = 'fcnn', num_cells: int = 4,
                 setting: str = 'noniid', edge_rounds: int = 5,
                 local_steps: int | None = None, num_clients: int = 60):
  """Sec. VI's setting for `model` ('fcnn', 'lenet5' or 'cnn')."""
  dataset, name, options, steps, rounds, target = _MODELS[model]
  config = base_config()
  config.dataset = dataset
  config.dataset_options.normalize = True  # the code's Normalize(0.5, 0.5)
  config.num_clients = num_clients
  config.partition = _PARTITIONS[setting]
  config.shards_per_client = 2
  config.model = name
  config.model_options = ml_collections.ConfigDict(options)
  config.rounds = rounds
  config.local_steps = local_steps or steps
  config.batch_size = 50
  config.client_lr = 0.01
  config.target_accuracy = target
  config.eval_every = 1
  config.rounds_per_call = 1
  config.checkpoint_every = 10
  return _hierarchical(config, algorithm, num_cells, edge_rounds)


def scaled_config(algorithm: str, num_cells: int = 4, setting: str = 'noniid',
                  edge_rounds: int = 5, rounds: int = 100,
                  target: float = 0.85):
  """The protocol offline on digits (module docstring)."""
  config = base_config()
  config.dataset = 'digits'
  config.num_clients = 60
  config.partition = 'shards' if setting == 'noniid' else 'iid'
  config.shards_per_client = 2
  config.model = 'mlp'
  config.model_options.hidden = (300,)
  config.rounds = rounds
  config.local_steps = 5
  config.batch_size = 10
  config.client_lr = 0.05
  config.target_accuracy = target
  config.eval_every = 1
  config.rounds_per_call = 1
  config.checkpoint_every = 10
  return _hierarchical(config, algorithm, num_cells, edge_rounds)


def aircomp(config, snr_db: float, channel: str = 'aircomp'):
  """The AirComp experiments' setting (Sec. VI-D): SNR swept in every cell,
  CPUs U(2, 4) GHz everywhere, HIST with the latency-optimal partition sizes
  (Fig. 7's caption; HFedAvg has no partition); `channel='oma'` is the OMA
  baseline."""
  config.hierarchy.edge_channel = channel
  config.hierarchy.partition_sizes = 'optimized'
  config.hierarchy.snr_db_slow = config.hierarchy.snr_db_fast = snr_db
  config.hierarchy.cpu_ghz_slow = (2.0, 4.0)
  return config


# The compared methods and their labels in tables.
METHODS = (('hist', 'HIST'), ('hfedavg', 'HFedAvg'))


def table_configs(model: str, num_clients: int = 60, rounds: dict | None = None,
                  settings=('noniid', 'iid'), **overrides) -> dict:
  """Tables I–II's grid: HIST and HFedAvg × N ∈ {2, 4} cells × `settings`.

  A scaled grid (table1_lenet_fmnist_cpu.py) sets `num_clients`, `rounds`
  (setting → rounds), `settings` and config keys in `overrides`."""
  configs = {}
  for setting in settings:
    for n in (2, 4):
      for algorithm, label in METHODS:
        config = paper_config(algorithm, model, num_cells=n, setting=setting,
                              num_clients=num_clients)
        config.update(overrides)
        if rounds:
          config.rounds = rounds[setting]
        configs[f'{label} N={n} {setting}'] = config
  return configs


def snr_sweep_configs(base) -> dict:
  """Fig. 7's grid: AirComp and OMA × HIST and HFedAvg × SNR_GRID_DB, each
  from `base(algorithm)`, a config of the sweep's setting."""
  configs = {}
  for snr in SNR_GRID_DB:
    for channel in ('aircomp', 'oma'):
      for algorithm, label in METHODS:
        configs[f'{channel.upper()}-{label} {snr:+g} dB'] = aircomp(
            base(algorithm), snr, channel)
  return configs
