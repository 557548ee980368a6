"""Core configuration keys, their defaults and validation.

Experiment files (`experiments/**/*.py`) define `get_config()` that starts from
`base_config()` and sets what the experiment needs; the command line overrides
single keys (`--config.rounds=50`). A key that is not declared here is an error,
so a typo never silently falls back to a default.
"""
import ml_collections

from fedjax_het.core.backends import BACKENDS


class ConfigError(ValueError):
  """An invalid configuration; the message is one sentence for the user."""


def base_config() -> ml_collections.ConfigDict:
  """Every core key with its default. Sizes are counts, rates are floats."""
  c = ml_collections.ConfigDict()
  # What to run.
  c.algorithm = 'fedavg'
  c.seed = 0
  # Data.
  c.dataset = 'digits'
  c.data_dir = ''              # TFDS data_dir ('' = TFDS's default location)
  # Options of the dataset source, e.g. {'noise': 3.0, 'shape': (28, 28, 1)} for
  # synthetic, {'emnist_split': 'byclass'}, {'normalize': True}.
  c.dataset_options = ml_collections.ConfigDict()
  c.num_clients = 100
  c.partition = 'dirichlet'    # iid | dirichlet | balanced_dirichlet | shards | one_class | quantity_skew
  c.alpha = 0.5                # Dirichlet concentration (dirichlet, balanced_dirichlet, quantity_skew)
  c.shards_per_client = 2      # shards partition only
  c.min_client_size = 2        # dirichlet / quantity_skew lower bound on examples per client
  # Model.
  c.model = 'mlp'
  c.model_options = ml_collections.ConfigDict({'hidden': (200,)})
  # Round.
  c.rounds = 100
  c.clients_per_round = 10
  c.local_steps = 10
  c.batch_size = 16
  c.client_lr = 0.05
  c.client_momentum = 0.0
  c.client_weight_decay = 0.0
  c.augment = 'none'           # none | crop_flip (CIFAR: random crop pad 4 + flip)
  c.server_lr = 1.0
  c.server_momentum = 0.0
  c.aggregation_weights = 'examples'   # examples | uniform
  # uniform: K distinct clients uniformly; proportional: K draws with
  # replacement, P(client m) ∝ its examples (Li et al. 2020, scheme I, which
  # pairs it with aggregation_weights='uniform').
  c.client_sampling = 'uniform'
  # Capacity levels γ in (0, 1], assigned to clients in equal groups (submodel
  # methods train a γ-fraction of the model; (1.0,) = everyone trains it all).
  c.capacities = (1.0,)
  # Submodel methods (FIARSE, HeteroFL, FedRolex, FjORD, ScaleFL, ...).
  c.submodel = ml_collections.ConfigDict({
      # Per-coordinate partial-averaging denominator: 'nonzero' counts the
      # clients whose update of the entry is non-zero (FIARSE's code, Sec. 3
      # Agg), 'mask' the clients whose submodel holds it (App. C.1 Eq. 12,
      # HeteroFL); 'auto' uses the method's own rule.
      'partial_average': 'auto',
      # FIARSE thresholds: 'model' (one top-k over all maskable parameters),
      # 'layer' (one per layer / ResNet stage) or 'shard' (one per prefix in
      # threshold_shards).
      'threshold_granularity': 'model',
      'threshold_shards': (),
      # Width methods: r = sqrt(γ) ('sqrt') or the widest r holding at most a
      # γ fraction of the parameters ('params').
      'width_rule': 'sqrt',
      # HeteroFL/FedRolex Scaler: hidden outputs divided by r in training.
      'scaler': True,
      # Extra capacities evaluated on the global test set as unparticipated
      # clients (FIARSE Fig. 4), e.g. (0.01, 0.05, 0.1, 0.5).
      'eval_capacities': (),
      # ScaleFL (algorithms/scalefl.py; needs model_options.exits=True): the
      # depth s of capacity γ is the shallowest whose full-width submodel
      # holds ≥ scalefl_depth_tolerance·γ of the parameters, then the width r
      # is the widest holding ≤ γ.
      'scalefl_depth_tolerance': 0.8,
      # Self-distillation of the earlier exits from the deepest: weight g of
      # the KD term, temperature T, and the fraction of `rounds` after which
      # KD switches on (ScaleFL code: T = 3, KD after 25% of the rounds;
      # g = 0.05 is the one value its README gives).
      'scalefl_kd_weight': 0.05,
      'scalefl_temperature': 3.0,
      'scalefl_kd_start': 0.25,
  })
  # System heterogeneity (fedjax_het/systems/heterogeneity.py): every round each
  # client m has an upload failure probability q_m and local work T_m. Read by
  # the FedACS family (fedavg_het, fedacs, ca_fedavg, fedvarp, fednova, fedau, os).
  c.systems = ml_collections.ConfigDict({
      'model': 'static',      # static | dynamic | markov | trace
      'q': (0.0,),            # static: q_m per client (one value = every client)
      'local_work': (),       # static/markov: T_m per client (() = local_steps for all)
      'shuffle': False,       # static: assign q and T to clients by seeded random permutations
      'work_unit': 'steps',   # steps | epochs (T epochs = T·⌈n_m/B⌉ steps)
      'dynamic_q': ((0.4, 0.5), (0.0, 0.1)),  # dynamic: q ~ U(lo, hi) per equal client group
      'dynamic_work': ((1, 10), (20, 30)),    # dynamic: T ~ U{lo..hi} per group, redrawn every round
      'markov_fail': (0.1,),     # markov: P(link on → off) per round, per client (one value = all)
      'markov_recover': (0.5,),  # markov: P(link off → on) per round
      'trace': '',            # trace: .npz with q and local_work [rounds, M]; row r mod rounds
  })
  # The FedACS family of methods (algorithms/fedacs.py and its baselines).
  c.fedacs = ml_collections.ConfigDict({
      # with_replacement: K draws from the method's p, rule (3); uniform: K distinct
      # clients, rule (19); full: all M clients, rule (21). (client_sampling is unused.)
      'participation': 'with_replacement',
      'calibrate': True,      # App. I.2: per-round client lr giving FedAvg's expected step length
      'prox_mu': 0.0,         # FedProx local solver ½μ‖x − X‖² (0: plain SGD)
      'fedvarp_form': 'paper',  # paper: stale updates fill failed uploads (Eq. 114) | saga: original
      'fedau_cutoff': 100000,   # FedAU: longest participation interval recorded (rounds)
  })
  # Hierarchical FL (HIST, HFedAvg; specs/hist.md): a cloud over N edge cells;
  # a global round is E edge rounds of local_steps (H) steps at every client
  # followed by an edge aggregation; every client trains in every round, so
  # clients_per_round must equal num_clients. Defaults: the paper's Sec. VI-C.
  c.hierarchy = ml_collections.ConfigDict({
      'num_cells': 2,                  # N edge servers
      'cell_sizes': (),                # n_j; () = num_clients split evenly, in client order
      'edge_rounds': 5,                # E edge rounds per global round
      'cloud_weights': 'uniform',      # cloud mean over cells: uniform | clients (∝ cell weight)
      'partition_sizes': 'uniform',    # HIST: uniform | optimized (Eq. 19 / 36) | given
      'given_sizes': (),               # neurons per cell when partition_sizes='given'
      'max_size_ratio': 1.5,           # (19c) d_j ≤ ratio·d/N (ε_th = 9δ1² gives 1.5)
      'edge_channel': 'oma',           # oma (TDMA, exact) | aircomp (over the air, noisy)
      'aircomp_noise': 'real',         # real (var MSE, Eq. 25) | complex (real part, MSE/2) | none
      'aircomp_power': 1.0,            # precoder power budget P_j (SNR = P_j/σ0²)
      'beamformer_sca_steps': 20,      # SCA iterations of the max-min beamformer
      'beamformer_inner_steps': 80,    # mirror-prox steps per SCA iteration
      'slow_cells': -1,                # cells 0..slow_cells-1 use the *_slow values (-1: N//2)
      'cpu_ghz_slow': (1.0, 2.0),      # CPU frequency range F_i of slow cells
      'cpu_ghz_fast': (2.0, 4.0),      # ... and of the other cells
      'snr_db_slow': 30.0,             # SNR P_j/σ0² of slow cells (OMA rates and AirComp)
      'snr_db_fast': 40.0,             # ... and of the other cells
      'bandwidth_hz': 9e6,             # B per cell
      'antennas': 10,                  # M at each edge server
      'cycles_per_step': 1e6,          # V0, CPU cycles per full-model mini-batch step
      'bits_per_param': 32.0,          # L0/d
      'subcarrier_hz': 15e3,           # Δf (AirComp, 5G NR)
      'symbol_s': 1.0 / 14e3,          # t_s (AirComp, 5G NR)
  })
  # Engine.
  c.backend = 'auto'           # auto | vmap | map | sequential (auto: map on CPU, vmap on GPU/TPU)
  c.client_devices = 0         # devices the cohort is sharded over (0: as many as split it evenly)
  c.map_chunk_size = 0         # clients vmapped together inside lax.map (0: one at a time)
  c.scan_unroll = 1            # unroll factor of the local-step scan
  c.rounds_per_call = 1        # rounds compiled into one lax.scan call
  # Logging, evaluation, checkpoints.
  c.local_test = False         # also split the test set into per-client shards
  c.target_accuracy = 0.0      # summary.json reports the cost to reach it (0: off)
  c.eval_every = 10
  c.eval_batch_size = 512
  c.checkpoint_every = 50
  c.checkpoints_to_keep = 2
  c.progress = True
  c.metric_writers = ()        # besides metrics.jsonl: 'tensorboard', 'wandb' (fedjax_het/logging_writers.py)
  return c


# Nested dicts whose keys belong to a component (the model or dataset source).
OPEN_DICTS = ('model_options', 'dataset_options')

_POSITIVE_INTS = ('num_clients', 'clients_per_round', 'rounds', 'local_steps',
                  'batch_size', 'eval_every', 'eval_batch_size',
                  'checkpoint_every', 'checkpoints_to_keep', 'rounds_per_call',
                  'scan_unroll', 'shards_per_client', 'min_client_size')
_CHOICES = {
    'backend': BACKENDS,
    'aggregation_weights': ('examples', 'uniform'),
    'client_sampling': ('uniform', 'proportional'),
}


def check_known_keys(config: ml_collections.ConfigDict,
                     reference: ml_collections.ConfigDict,
                     prefix: str = '') -> None:
  """Raises ConfigError for a key of `config` that `reference` lacks.

  The entries of `OPEN_DICTS` are passed through to their component, which
  checks them itself.
  """
  for key, value in config.items():
    if key not in reference:
      raise ConfigError(f'unknown config key {prefix + key!r}.')
    if isinstance(value, ml_collections.ConfigDict) and isinstance(
        reference[key], ml_collections.ConfigDict) and key not in OPEN_DICTS:
      check_known_keys(value, reference[key], prefix + key + '.')


def validate(config: ml_collections.ConfigDict,
             extra_keys: ml_collections.ConfigDict | None = None) -> None:
  """Checks a resolved config; raises ConfigError naming the first problem.

  Args:
    config: the config to check.
    extra_keys: keys an algorithm declares on top of `base_config()`.
  """
  reference = base_config()
  if extra_keys is not None:
    reference.update(extra_keys)
  check_known_keys(config, reference)
  for key in _POSITIVE_INTS:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ConfigError(f'{key} must be a positive integer, got {value!r}.')
  for key in ('client_devices', 'map_chunk_size'):
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
      raise ConfigError(f'{key} must be a non-negative integer, got {value!r}.')
  for key, choices in _CHOICES.items():
    if config[key] not in choices:
      raise ConfigError(f'{key} must be one of {", ".join(choices)}, '
                        f'got {config[key]!r}.')
  if config.clients_per_round > config.num_clients:
    raise ConfigError(
        f'clients_per_round ({config.clients_per_round}) exceeds num_clients '
        f'({config.num_clients}).')
  for key in ('client_lr', 'server_lr'):
    if not config[key] > 0:
      raise ConfigError(f'{key} must be positive, got {config[key]!r}.')
  for key in ('client_momentum', 'server_momentum'):
    if not 0 <= config[key] < 1:
      raise ConfigError(f'{key} must be in [0, 1), got {config[key]!r}.')
  if config.alpha <= 0:
    raise ConfigError(f'alpha must be positive, got {config.alpha!r}.')
  capacities = config.capacities
  if (not isinstance(capacities, (tuple, list)) or not capacities or
      any(isinstance(g, bool) or not isinstance(g, (int, float)) or
          not 0 < g <= 1 for g in capacities)):
    raise ConfigError('capacities must be a non-empty list of numbers in '
                        f'(0, 1], got {capacities!r}.')
  if len(capacities) > config.num_clients:
    raise ConfigError(f'{len(capacities)} capacity levels need at least as '
                      f'many clients, got num_clients={config.num_clients}.')
  if not 0 <= config.target_accuracy <= 1:
    raise ConfigError('target_accuracy must be in [0, 1], got '
                      f'{config.target_accuracy!r}.')
  for key in ('eval_every', 'checkpoint_every'):
    if config[key] % config.rounds_per_call:
      raise ConfigError(
          f'{key} ({config[key]}) must be a multiple of rounds_per_call '
          f'({config.rounds_per_call}).')
