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
  })
  # Engine.
  c.backend = 'vmap'           # vmap | map | sequential
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
