"""The run's configuration: the core keys every run has, and the assembly of all groups.

Experiment files (`experiments/**/*.py`) define `get_config()` that starts from
`base_config()` and sets what the experiment needs; the command line overrides
single keys (`--config.rounds=50`). A key that is not declared is an error, so
a typo never silently falls back to a default.

The core keys are `CoreOptions` below. Each algorithm family declares its own
section next to its code (`fedjax_het.options.OptionGroup`; e.g. `submodel` in
`methods/fiarse/submodels.py`, `hierarchy` in `parts/cells.py`) and checks it
when the algorithm is built; `base_config()` holds every section so that any
experiment file can set any method's keys. `resolve()` gives the config of a
run: the core keys and the sections its method reads (`option_groups`, and
`natural` with partition=natural), a value set in any other section refused
in one line. `describe()` gives every key's one-line description
(`fedjax-het --show-config`).
"""
import dataclasses
import difflib
import math

import ml_collections

from fedjax_het import optim
from fedjax_het.core.backends import BACKENDS
from fedjax_het.options import (ConfigError, OptionGroup, changed_key,
                                check_like_defaults, in_range, is_bool,
                                non_negative, non_negative_int, option,
                                positive, positive_int)

__all__ = ['ConfigError', 'CoreOptions', 'base_config', 'describe',
           'format_config', 'resolve', 'validate']


def _capacities(key: str, value) -> None:
  if (not isinstance(value, (tuple, list)) or not value or
      any(isinstance(g, bool) or not isinstance(g, (int, float)) or
          not 0 < g <= 1 for g in value)):
    raise ConfigError(f'{key} must be a non-empty list of numbers in (0, 1], '
                      f'got {value!r}.')


def _client_sizes(key: str, value) -> None:
  if (not isinstance(value, (tuple, list)) or
      any(isinstance(s, bool) or not isinstance(s, (int, float)) or
          not 0 < s < math.inf for s in value)):
    raise ConfigError(f'{key} must be a list of positive numbers (one relative '
                      f'size per client), got {value!r}.')


@dataclasses.dataclass(frozen=True)
class CoreOptions(OptionGroup):
  """The keys every run has. Sizes are counts, rates are floats."""
  # What to run.
  algorithm: str = option('fedavg', 'the federated method (fedjax_het.methods.ALGORITHMS)')
  seed: int = option(0, 'seed of the data split, the model init and every round\'s draws')
  # Data.
  dataset: str = option('digits', 'digits | synthetic | mnist | fashion_mnist | emnist | cifar10 | cifar100 | imagenet2012 (fedjax_het.data.DATASETS); with partition=natural: fed_emnist | fed_cifar100 | shakespeare | stackoverflow | sent140 | celeba (fedjax_het.data.natural, the `natural` section)')
  data_dir: str = option('', 'directory of the raw dataset files or of TFDS prepared data (\'\' = TFDS\'s default); the natural sets\' files (required)')
  dataset_options: dict = option({}, 'options of the dataset source, e.g. {\'noise\': 3.0} for synthetic')
  num_clients: int = option(100, 'M, the clients of the federation (partition=natural: the files\' clients kept, a subsample drawn with seed when fewer than all)', check=positive_int)
  partition: str = option('dirichlet', 'natural (the files\' writers / speakers / users; natural sets only) | iid | dirichlet | balanced_dirichlet | shards | cell_shards (HIST cell-i.i.d.: N random equal parts, shards within each cell) | one_class (client m: class m mod K) | class_blocks (class ⌊mK/M⌋) | quantity_skew | sized_dirichlet (Dirichlet labels, client sizes ∝ client_sizes)')
  alpha: float = option(0.5, 'Dirichlet concentration (dirichlet, balanced_dirichlet, quantity_skew, sized_dirichlet)', check=positive)
  client_sizes: tuple = option((), 'relative dataset size per client, one per client (partition=sized_dirichlet; e.g. Co-S²P Tab. 7)', check=_client_sizes)
  shards_per_client: int = option(2, 'label shards per client (partition=shards, cell_shards)', check=positive_int)
  min_client_size: int = option(2, 'least examples per client (dirichlet, quantity_skew)', check=positive_int)
  # Model.
  model: str = option('mlp', 'the model (fedjax_het.models)')
  model_options: dict = option({'hidden': (200,)}, 'options of the model, checked by the model')
  init_params_file: str = option('', 'pretrained ViT .npz (google-research/vision_transformer or big_vision) loaded into the initial params (fedjax_het.models.vit_pretrained); \'\' = random init')
  # Round.
  rounds: int = option(100, 'communication rounds', check=positive_int)
  clients_per_round: int = option(10, 'K, clients sampled per round', check=positive_int)
  local_steps: int = option(10, 'local optimiser steps per client and round', check=positive_int)
  batch_size: int = option(16, 'local minibatch size B', check=positive_int)
  client_lr: float = option(0.05, 'client learning rate', check=positive)
  client_momentum: float = option(0.0, 'client heavy-ball momentum', check=in_range(0, 1, closed_high=False))
  client_weight_decay: float = option(0.0, 'client weight decay')
  augment: str = option('none', 'none | crop_flip (CIFAR: random crop with padding 4 and flip) | crop24_jitter (CSE-FSL CIFAR-10: 24x24 crop, flip, colour jitter; centre crop at test)')
  server_lr: float = option(1.0, 'server learning rate η_s on the aggregated pseudo-gradient', check=positive)
  server_optimizer: str = option('sgd', 'the server optimiser on the pseudo-gradient x − x̄ (fedjax_het/optim.py): sgd (with server_momentum: FedAvgM) | adam | yogi | adagrad: FedAdam, FedYogi, FedAdagrad as Reddi et al. 2021\'s Algorithm 2, x ← x + η_s m/(√v + τ) with Δ = x̄ − x', choices=optim.SERVER_OPTIMIZERS)
  server_momentum: float = option(0.0, 'server heavy-ball momentum (server_optimizer=sgd; 0.9 is FedAvgM)', check=in_range(0, 1, closed_high=False))
  server_b1: float = option(0.9, 'β1 of FedAdam / FedYogi / FedAdagrad: m ← β1 m + (1 − β1) Δ (Reddi et al.: 0.9)', check=in_range(0, 1, closed_high=False))
  server_b2: float = option(0.99, 'β2 of FedAdam / FedYogi: v ← β2 v + (1 − β2) Δ², Yogi\'s v ← v − (1 − β2) Δ² sign(v − Δ²) (Reddi et al.: 0.99)', check=in_range(0, 1, closed_high=False))
  server_tau: float = option(1e-3, 'τ, the adaptivity of FedAdam / FedYogi / FedAdagrad, outside the root: m/(√v + τ) (Reddi et al.: 1e-3)', check=positive)
  server_v0: float = option(1e-6, 'v_{−1}, the start of FedAdam / FedYogi / FedAdagrad\'s v (Reddi et al.: ≥ τ²; 1e-6 = τ² at τ = 1e-3; their code\'s Keras optimisers: 0)', check=non_negative)
  server_bias_correction: bool = option(False, 'FedAdam / FedYogi: step η_s √(1 − β2^t)/(1 − β1^t) m/(√v + τ), as the authors\' Keras optimisers (Algorithm 2 has none)', check=is_bool)
  aggregation_weights: str = option('examples', 'client weights in the aggregate: examples held or uniform', choices=('examples', 'uniform'))
  client_sampling: str = option('uniform', 'uniform: K distinct clients; proportional: K draws with replacement ∝ examples (Li et al. 2020, scheme I)', choices=('uniform', 'proportional'))
  capacities: tuple = option((1.0,), 'capacity levels γ in (0, 1], assigned to clients in equal groups (submodel methods)', check=_capacities)
  # Engine.
  backend: str = option('auto', 'auto | vmap | map | sequential (auto: map on CPU, vmap on GPU/TPU)', choices=BACKENDS)
  client_devices: int = option(0, 'devices the cohort is sharded over (0: as many as split it evenly)', check=non_negative_int)
  map_chunk_size: int = option(0, 'clients vmapped together inside lax.map (0: one at a time)', check=non_negative_int)
  scan_unroll: int = option(1, 'unroll factor of the local-step scan', check=positive_int)
  rounds_per_call: int = option(1, 'rounds compiled into one lax.scan call', check=positive_int)
  stream_cohorts: bool = option(False, 'keep the clients\' data on the host and stream each chunk\'s cohorts to the device ahead of use (federations larger than device memory; core/stream.py); same results', check=is_bool)
  # Logging, evaluation, checkpoints.
  local_test: bool = option(False, 'also evaluate on per-client test splits (see local_test_fraction)', check=is_bool)
  local_test_fraction: float = option(0.0, 'with local_test: 0 = shards of the test set following each client\'s train labels; f in (0, 1) = a random fraction f of each client\'s own data held out (Co-S²P\'s 8:2: 0.2)', check=in_range(0, 1, closed_high=False))
  target_accuracy: float = option(0.0, 'summary.json reports the cost to reach it (0: off)', check=in_range(0, 1))
  eval_every: int = option(10, 'rounds between evaluations', check=positive_int)
  eval_batch_size: int = option(512, 'batch size of evaluation', check=positive_int)
  checkpoint_every: int = option(50, 'rounds between checkpoints', check=positive_int)
  checkpoints_to_keep: int = option(2, 'checkpoints kept in the workdir', check=positive_int)
  progress: bool = option(True, 'show progress bars', check=is_bool)
  metric_writers: tuple = option((), 'besides metrics.jsonl: tensorboard, wandb (fedjax_het/logging_writers.py)')

  def validate(self) -> None:
    if self.clients_per_round > self.num_clients:
      raise ConfigError(
          f'clients_per_round ({self.clients_per_round}) exceeds num_clients '
          f'({self.num_clients}).')
    if self.partition == 'sized_dirichlet' and len(
        self.client_sizes) != self.num_clients:
      raise ConfigError(
          f'partition=sized_dirichlet needs client_sizes with one entry per '
          f'client ({self.num_clients}), got {len(self.client_sizes)}.')
    if self.partition == 'natural' and self.local_test_fraction:
      raise ConfigError('partition=natural takes each client\'s local test '
                        'split from the files; set local_test_fraction=0.')
    if self.partition == 'natural' and self.dataset_options:
      raise ConfigError('partition=natural reads the `natural` section, not '
                        'dataset_options; set dataset_options={}.')
    if self.local_test_fraction and not self.local_test:
      raise ConfigError('local_test_fraction splits the local test sets; set '
                        'local_test=True or local_test_fraction=0.')
    optim.check_server_keys(vars(self), vars(CoreOptions()))
    if len(self.capacities) > self.num_clients:
      raise ConfigError(f'{len(self.capacities)} capacity levels need at least '
                        f'as many clients, got num_clients={self.num_clients}.')
    for key in ('eval_every', 'checkpoint_every'):
      if getattr(self, key) % self.rounds_per_call:
        raise ConfigError(
            f'{key} ({getattr(self, key)}) must be a multiple of '
            f'rounds_per_call ({self.rounds_per_call}).')


def option_groups() -> tuple[type[OptionGroup], ...]:
  """The algorithm families' sections, in registry order."""
  from fedjax_het import methods  # pylint: disable=g-import-not-at-top
  from fedjax_het.data.natural import NaturalOptions  # pylint: disable=g-import-not-at-top
  return (NaturalOptions, *methods.OPTION_GROUPS)


def base_config() -> ml_collections.ConfigDict:
  """Every key with its default: the core keys, then every family's section."""
  c = CoreOptions.defaults()
  for group in option_groups():
    c[group.key] = group.defaults()
  return c


def describe() -> dict[str, str]:
  """dotted key → one-line description, for every key of `base_config()`."""
  docs = CoreOptions.describe()
  for group in option_groups():
    docs.update(group.describe())
  return docs


def format_config(config: ml_collections.ConfigDict) -> str:
  """Every key of `config` with its value and one-line description, a line
  each (`fedjax-het --show-config`); a resolved config holds the sections its
  run reads only, and only those are shown."""
  docs = describe()
  lines = []
  for key, doc in docs.items():
    if key.split('.')[0] not in config:
      continue
    node = config
    for part in key.split('.'):
      node = node[part]
    if isinstance(node, ml_collections.ConfigDict):
      node = node.to_dict()
    lines.append(f'{key} = {node!r}')
    lines.append(f'    {doc}')
  return '\n'.join(lines)


# Nested dicts whose keys belong to a component (the model or dataset source).
OPEN_DICTS = ('model_options', 'dataset_options')


def _is_section(key: str, value) -> bool:
  """Whether `key` of a reference config is a section whose keys are the
  library's: not an entry of `OPEN_DICTS`, nor a dict option whose default is
  empty (e.g. `cos2p.device_speeds`), whose keys their component checks."""
  return (isinstance(value, ml_collections.ConfigDict) and bool(value) and
          key not in OPEN_DICTS)


def _dotted_keys(reference: ml_collections.ConfigDict, prefix: str = ''):
  """Every dotted key of `reference`, its sections' names and their keys."""
  for key, value in reference.items():
    yield prefix + key
    if _is_section(key, value):
      yield from _dotted_keys(value, prefix + key + '.')


def nearest_key(dotted: str, reference: ml_collections.ConfigDict) -> str | None:
  """The known key of `reference` closest to the unknown `dotted` (difflib's
  ratio ≥ 0.6): by the whole key ('round' → 'rounds', 'sytems.q' →
  'systems.q'), else by its last part ('upload_every' → 'split.upload_every');
  None when nothing is close."""
  known = list(_dotted_keys(reference))
  close = difflib.get_close_matches(dotted, known, n=1)
  if close:
    return close[0]
  by_leaf = {}
  for key in known:
    by_leaf.setdefault(key.rsplit('.', 1)[-1], key)
  close = difflib.get_close_matches(dotted.rsplit('.', 1)[-1], by_leaf, n=1)
  return by_leaf[close[0]] if close else None


def unknown_key(dotted: str, reference: ml_collections.ConfigDict) -> ConfigError:
  """The one-line error for a key `reference` lacks, with the nearest known
  key where one is close (`nearest_key`)."""
  nearest = nearest_key(dotted, reference)
  hint = f"; did you mean '{nearest}'?" if nearest else '.'
  return ConfigError(f'unknown config key {dotted!r}{hint}')


def check_known_keys(config: ml_collections.ConfigDict,
                     reference: ml_collections.ConfigDict,
                     prefix: str = '', root=None) -> None:
  """Raises ConfigError (`unknown_key`) for a key of `config` that
  `reference` lacks; `root` is the whole reference (default `reference`),
  where the nearest known key is looked for.

  The entries of `OPEN_DICTS`, and of any section whose default is empty
  (an open dict option such as `cos2p.device_speeds`), are passed through to
  their component, which checks them itself.
  """
  root = reference if root is None else root
  for key, value in config.items():
    if key not in reference:
      raise unknown_key(prefix + key, root)
    if isinstance(value, ml_collections.ConfigDict) and _is_section(
        key, reference[key]):
      check_known_keys(value, reference[key], prefix + key + '.', root)


def validate(config: ml_collections.ConfigDict) -> None:
  """Checks a config's keys, core values, algorithm, sections and the kinds
  of its component options; raises ConfigError naming the first problem, the
  same a run meets (`fedjax-het --show-config` refuses what a run would).
  It is `resolve`, its result left out."""
  resolve(config)


def resolve(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The config of the run: `config` checked, holding the core keys and only
  the sections the run reads (`scoped`), with the options its method fixes
  written in (`FederatedAlgorithm.fix_options`). What the run trains with,
  as config.json and `--show-config` show it. A section `config` lacks is at
  its defaults (`with_every_section`), so a resolved config resolves to
  itself."""
  from fedjax_het import methods  # pylint: disable=g-import-not-at-top
  config = with_every_section(config)
  check_known_keys(config, base_config())
  CoreOptions.from_config(config)
  try:
    method = methods.algorithm_class(config.algorithm)
  except ValueError as e:
    raise ConfigError(str(e)) from e
  for group in method.option_groups:
    group.from_config(config)
  config = scoped(config, method)
  optim.refuse_server_keys(config, CoreOptions.defaults(), method)
  resolved = method.fix_options(config)
  check_component_options(config)
  return resolved


def with_every_section(config: ml_collections.ConfigDict
                       ) -> ml_collections.ConfigDict:
  """A copy of `config` with each section it lacks (a resolved config holds
  only its run's) at its defaults: `config` on every key of
  `base_config()`."""
  full = config.copy_and_resolve_references()
  for group in option_groups():
    if group.key not in full:
      full[group.key] = group.defaults()
  return full


def sections_read(config: ml_collections.ConfigDict, method
                  ) -> tuple[type[OptionGroup], ...]:
  """The sections a run of `method` (a class) reads: its `option_groups`,
  and `natural` with partition=natural; in `base_config()`'s order."""
  return tuple(group for group in option_groups()
               if group in method.option_groups or
               (group.key == 'natural' and config.partition == 'natural'))


def scoped(config: ml_collections.ConfigDict, method
           ) -> ml_collections.ConfigDict:
  """A copy of `config` (every section present) holding the core keys and
  the sections a run of `method` reads (`sections_read`) only; a value set in
  any other section is refused (`unread_value`): an option a run accepts
  changes what it does, or it is refused in one line, never ignored."""
  read = sections_read(config, method)
  run_config = config.copy_and_resolve_references()
  for group in option_groups():
    if group not in read:
      unread_value(config, group, method)
      del run_config[group.key]
  return run_config


def unread_value(config: ml_collections.ConfigDict,
                 group: type[OptionGroup], method) -> None:
  """Raises ConfigError, one line naming the key, why `method` does not read
  its section where the method says (`unread_sections`) and the methods that
  read it, where `config` sets a key of `group`, a section the run does not
  read, to another value than its default."""
  from fedjax_het import methods  # pylint: disable=g-import-not-at-top
  key = changed_key(config[group.key], group.defaults())
  if key is None:
    return
  value = config[group.key][key]
  if group.key == 'natural':
    raise ConfigError(f'natural.{key} = {value!r} is set, but only '
                      'partition=natural reads the natural section.')
  readers = [name for name, cls in methods.ALGORITHMS.items()
             if group in cls.option_groups]
  why = method.unread_sections.get(group.key)
  raise ConfigError(
      f'{group.key}.{key} = {value!r} is set, but {config.algorithm} does '
      f'not read the {group.key} section{f": {why}" if why else ""} (read '
      f'by {", ".join(readers)}); leave it unset or choose one of those '
      'methods.')


def check_component_options(config: ml_collections.ConfigDict) -> None:
  """Every `dataset_options` and `model_options` value of the kind of the
  option's default (`options.check_like_defaults`); the dataset or model
  checks which keys it takes and their ranges."""
  from fedjax_het import models  # pylint: disable=g-import-not-at-top
  from fedjax_het.data import sources  # pylint: disable=g-import-not-at-top
  if config.dataset in sources.DATASETS:
    check_like_defaults('dataset_options', config.dataset_options,
                        sources.option_defaults(config.dataset))
  if config.model in models.MODELS:
    check_like_defaults('model_options', config.model_options,
                        models.registry.option_defaults(config.model))
