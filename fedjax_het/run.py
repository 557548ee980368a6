"""The trainer: config → federated data, model, rounds → logs, checkpoints, plots.

Outputs in the workdir:
  config.json      the resolved config
  metrics.jsonl    one JSON object per evaluated round (and, with
                   `metric_writers`, TensorBoard or W&B; logging_writers.py)
  summary.json     final metrics
  curves.png       test accuracy and train loss against rounds
  checkpoints/     orbax checkpoints every `checkpoint_every` rounds

Re-running on a workdir that holds checkpoints resumes from the latest one and
ends bit-identical to an uninterrupted run: all randomness is a function of the
seed and the round index, the host-side counters are checkpointed with the
state, and rounds are grouped into compiled chunks at the same boundaries.
Ctrl-C finishes the current chunk, checkpoints it and exits.

Multi-process runs (`jax.distributed`; the CLI's `--distributed`) run the same
command in every process on one shared workdir: every process trains its part
of the cohort and saves and restores the checkpoints (orbax coordinates them),
and process 0 alone holds the lock and writes config.json, metrics.jsonl,
plots and summary.json.

A run owns its workdir while it runs (`fedjax_het.workdir.lock`). Resume
survives damaged files: it falls back to the newest readable checkpoint, drops
a torn last line of metrics.jsonl, and names the file when one cannot be used;
a failed write (e.g. a full disk) stops the run with the last checkpoint kept.
"""
import contextlib
import json
import os
import re
import signal
import sys
import time

import jax
import ml_collections
import numpy as np
import tqdm

from fedjax_het import methods, config as config_lib, data as data_lib, \
    logging_writers, models, plots, sanity, workdir as workdir_lib
from fedjax_het.checkpoint import RunCheckpoints
from fedjax_het.data import augment as augment_lib
from fedjax_het.data import natural as natural_lib
from fedjax_het.core.backends import COMPILED_BACKENDS, resolve_backend
from fedjax_het.core.rounds import PER_ROUND_METRICS, RoundRunner
from fedjax_het.core import key_streams, sharding
from fedjax_het.core.sharding import client_mesh
from fedjax_het.core.stream import CohortStream
from fedjax_het.models import text as text_models
from fedjax_het.models import vit as vit_lib
from fedjax_het.models import vit_pretrained
from fedjax_het.parts import cells as cells_lib

# Keys that may change when a run is resumed (they do not change the math).
_RESUMABLE_CHANGES = ('rounds', 'progress', 'eval_every', 'eval_batch_size',
                      'checkpoint_every', 'checkpoints_to_keep',
                      'metric_writers', 'stream_cohorts')
# Path keys: `~` and environment variables in them are expanded.
_PATH_KEYS = ('data_dir', 'systems.trace', 'natural.cache_dir', 'natural.glove_file',
              'natural.images_dir')


class TrainingDiverged(RuntimeError):
  """The training loss became NaN or infinite."""


class RunInterrupted(RuntimeError):
  """Ctrl-C: the last finished round was checkpointed."""


def build_experiment(config: ml_collections.ConfigDict):
  """Data, model, initial params and algorithm of a validated config.

  With `init_params_file`, the pretrained ViT checkpoint is loaded into the
  initial params (`models.vit_pretrained`); a missing file or a model that is
  not a ViT is refused before the data are loaded. A text classifier's
  `vocab_size` comes from the data (`FederatedSplit.input_vocab`) unless
  model_options sets it, and Sent140's GloVe vectors become its initial
  embedding (`models.text.load_embeddings`).
  """
  init_file = workdir_lib.expand(config.init_params_file)
  if init_file:
    if config.model not in ('vit', *vit_lib.VIT_PRESETS):
      raise config_lib.ConfigError(
          f'init_params_file loads ViT checkpoints, but model is '
          f'{config.model!r}; use vit, {", ".join(vit_lib.VIT_PRESETS)}, or '
          "init_params_file=''.")
    if not os.path.isfile(init_file):
      raise config_lib.ConfigError(
          f'init_params_file {init_file} does not exist; download a ViT '
          f'checkpoint ({vit_pretrained.DOWNLOAD_HINT}) and pass '
          '--config.init_params_file=PATH.')
  split = _federated_split(config)
  model_options = config.model_options.to_dict()
  if split.input_vocab:  # a text classifier's token ids (Sent140): its embedding rows
    model_options.setdefault('vocab_size', split.input_vocab)
  model = models.create_model(config.model, split.num_classes, **model_options)
  init_key, _ = jax.random.split(jax.random.PRNGKey(config.seed))
  input_shape = augment_lib.output_shape(config.augment,
                                         split.train.feature_shape)
  params = models.init_params(model, init_key, input_shape)
  if init_file:
    params = vit_pretrained.load_pretrained(model, params, init_file,
                                            image_shape=input_shape)
  if split.embeddings is not None:  # Sent140's GloVe vectors
    params = text_models.load_embeddings(params, split.embeddings)
  algorithm = methods.create_algorithm(config.algorithm, config, model,
                                          split.train)
  return split, model, params, algorithm


def _federated_split(config: ml_collections.ConfigDict):
  """The run's `FederatedSplit`: a natural set's own clients
  (partition=natural, `data.natural`), or a centralised set cut by a
  synthetic partition."""
  natural = config.partition == 'natural'
  if natural != (config.dataset in natural_lib.NATURAL_DATASETS):
    raise config_lib.ConfigError(
        f'partition=natural reads the naturally partitioned sets '
        f'({", ".join(natural_lib.NATURAL_DATASETS)}) and they need it; got '
        f'dataset={config.dataset!r} with partition={config.partition!r}.')
  if natural:
    return natural_lib.load_from_config(config)
  dataset = data_lib.load_dataset(config.dataset,
                                  data_dir=config.data_dir or None,
                                  seed=config.seed,
                                  **config.dataset_options.to_dict())
  partition_kwargs = {
      'dirichlet': {'alpha': config.alpha, 'min_size': config.min_client_size},
      'balanced_dirichlet': {'alpha': config.alpha},
      'quantity_skew': {'alpha': config.alpha,
                        'min_size': config.min_client_size},
      'shards': {'shards_per_client': config.shards_per_client},
      'cell_shards': {'shards_per_client': config.shards_per_client,
                      'num_cells': cells_lib.data_cells(
                          methods.algorithm_class(config.algorithm), config)},
      'sized_dirichlet': {'alpha': config.alpha,
                          'sizes': tuple(config.client_sizes)},
  }.get(config.partition, {})
  return data_lib.build_federated(
      dataset, num_clients=config.num_clients, partition=config.partition,
      seed=config.seed, local_test=config.local_test,
      local_test_fraction=config.local_test_fraction, **partition_kwargs)


class MetricsLog:
  """`metrics.jsonl`: one JSON object per evaluated round, kept in `rows`.

  On resume, rows logged after the restored round (never checkpointed, e.g.
  before a crash) are dropped, so the file continues exactly as an
  uninterrupted run's; so is a torn last line (a crash while writing it).
  Every row also goes to the `writers` (TensorBoard, W&B).
  """

  def __init__(self, path: str, resume_round: int,
               writers: list[logging_writers.MetricWriter] = (),
               write: bool = True):
    self.path = path
    self.writers = list(writers)
    self.write = write  # False: keep the rows only (a non-primary process)
    self.rows = [r for r in workdir_lib.read_metrics(path)
                 if r['round'] <= resume_round]
    if write:
      workdir_lib.write_text(
          path, ''.join(json.dumps(row) + '\n' for row in self.rows))

  def append(self, row: dict) -> None:
    self.rows.append(row)
    if not self.write:
      return
    with open(self.path, 'a') as f:
      f.write(json.dumps(row) + '\n')
    for writer in self.writers:
      writer.write(row['round'], row)

  def close(self) -> None:
    for writer in self.writers:
      writer.close()


def new_host_counters() -> dict:
  """Host-side running totals; checkpointed with the state (JSON)."""
  return {'totals': {}, 'wall_time': 0.0, 'loss_sum': 0.0, 'loss_rounds': 0}


def accumulate(host: dict, metrics: dict, seconds: float,
               per_round: tuple[str, ...] = ()) -> None:
  """Adds a chunk's per-round metrics (leading round axis) to the totals.

  The train loss is averaged between logged rows; the metrics named in
  `per_round` (the algorithm's `per_round_metrics` and the runner's
  `useful_step_fraction`: values of a round, e.g. HIST's d_max or AirComp
  MSE, not counters) are logged as the last round's value; every other
  round metric (bytes, examples, an algorithm's own counters such as
  simulated latency) is a running total since round 0.

  `seconds` is the wall time since the previous call (the first call of a
  session: since the session started), so `host['wall_time']` is the whole
  run's: loading, compiling, training, evaluating and checkpointing.
  """
  for key, values in metrics.items():
    if key in per_round:
      host['totals'][key] = float(np.asarray(values).reshape(-1)[-1])
    elif key != 'train_loss':
      host['totals'][key] = host['totals'].get(key, 0.0) + float(
          np.sum(values))
  host['wall_time'] += seconds
  host['loss_sum'] += float(np.sum(metrics['train_loss']))
  host['loss_rounds'] += int(np.size(metrics['train_loss']))


def evaluation_row(round_index: int, host: dict, test: dict) -> dict:
  """A metrics.jsonl row; the train loss is averaged since the previous row.

  `test` holds the evaluator's scalars: `accuracy` and `loss` (logged as
  test_accuracy, test_loss) and any others under their own names (e.g. the
  per-capacity accuracies of submodel methods).
  """
  row = {'round': round_index,
         'train_loss': host['loss_sum'] / host['loss_rounds']}
  row.update({f'test_{k}' if k in ('accuracy', 'loss') else k: float(v)
              for k, v in test.items()})
  row.update(host['totals'])
  row['wall_time'] = host['wall_time']
  host['loss_sum'], host['loss_rounds'] = 0.0, 0
  return row


def expand_paths(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """A copy of `config` with `~` and $VARIABLES expanded in the path keys."""
  config = config.copy_and_resolve_references()
  for dotted in _PATH_KEYS:
    *parents, leaf = dotted.split('.')
    if parents and parents[0] not in config:  # a section the run does not read
      continue
    node = config
    for part in parents:
      node = node[part]
    node[leaf] = workdir_lib.expand(node[leaf])
  return config


# config.json's one key beside the config: the key-stream table's revision.
_REVISION_KEY = 'key_streams_revision'


def run_record(config: ml_collections.ConfigDict) -> dict:
  """What a run records of itself (config.json, its checkpoints): the resolved
  config and the revision of the key streams it draws from."""
  return {**json.loads(config.to_json()), _REVISION_KEY: key_streams.REVISION}


def _read_config_json(path: str) -> dict:
  previous = workdir_lib.read_json(
      path, 'restore it, or delete it to resume with the current config.')
  if not isinstance(previous, dict):
    raise workdir_lib.WorkdirError(f'{path} is not a JSON config object.')
  return previous


def _on_library_keys(stored: dict, defaults: dict) -> dict:
  """`stored` on the keys the library has now, recursively into sections
  (not into open dicts such as model_options, whose keys are the run's own):
  a key it lacks (a section or option added since) takes its default, and a
  key the library no longer has is left out. A method that read a removed
  key is refused by its key streams revision first (`key_streams.CHANGED`),
  so such a key was not read by the run (e.g. `cos2p.mu` under FedAvg
  before revision 4)."""
  aligned = {}
  for key, default in defaults.items():
    if key not in stored:
      aligned[key] = default
    elif (isinstance(default, dict) and default and
          isinstance(stored[key], dict) and key not in config_lib.OPEN_DICTS):
      aligned[key] = _on_library_keys(stored[key], default)
    else:
      aligned[key] = stored[key]
  return aligned


def _check_same_run(workdir: str, config: ml_collections.ConfigDict,
                    checkpoints: RunCheckpoints) -> None:
  """ConfigError unless `config` may resume the run held in `workdir`: the
  one in its config.json or, if that is lost, the one stored with its
  newest checkpoint."""
  path = os.path.join(workdir, 'config.json')
  lost = not os.path.exists(path)
  stored = checkpoints.stored_config() if lost else _read_config_json(path)
  if stored is None:
    return
  # Keys added to the library since the run started (a new method's
  # section, a new option) count as their defaults; keys removed since are
  # left out (`_on_library_keys`), after the revision's refusal. A section
  # one side lacks (a run's config holds the sections it reads) counts as
  # its defaults.
  stored = dict(stored)
  full = config_lib.with_every_section(config)
  refusal = key_streams.resume_refusal(stored.pop(_REVISION_KEY, 1), full)
  if refusal:
    raise config_lib.ConfigError(
        f'workdir {workdir} holds a run that cannot resume bit-identically: '
        f'{refusal}; use a new --workdir.')
  base = json.loads(config_lib.base_config().to_json())
  previous = _on_library_keys(stored, base)
  current = json.loads(full.to_json())
  resumable = _RESUMABLE_CHANGES
  method = methods.ALGORITHMS.get(config.algorithm)
  if getattr(method, 'schedule_depends_on_rounds', False):
    resumable = tuple(k for k in resumable if k != 'rounds')
  changed = sorted(k for k in set(previous) | set(current)
                   if k not in resumable and previous.get(k) != current.get(k))
  if changed == ['rounds']:
    raise config_lib.ConfigError(
        f'{config.algorithm} schedules its training by the total rounds, so '
        f'the run in {workdir} (rounds={previous.get("rounds")}) cannot be '
        f'resumed with rounds={config.rounds}; use a new --workdir.')
  if changed:
    source = (', read from its checkpoints as config.json is missing'
              if lost else '')
    raise config_lib.ConfigError(
        f'workdir {workdir} holds a run with a different config '
        f'({", ".join(changed)}{source}); use a new --workdir to start a new '
        'run.')


class _InterruptFlag:
  """SIGINT sets a flag; the loop checkpoints at the end of the chunk."""

  def __init__(self):
    self.raised = False
    self._previous = None

  def __enter__(self):
    try:
      self._previous = signal.signal(signal.SIGINT, self._handle)
    except ValueError:  # not in the main thread: leave Ctrl-C alone.
      self._previous = None
    return self

  def _handle(self, signum, frame):
    del signum, frame
    if self.raised:  # second Ctrl-C: stop at once.
      raise KeyboardInterrupt
    self.raised = True

  def __exit__(self, *exc):
    if self._previous is not None:
      signal.signal(signal.SIGINT, self._previous)


def make_runner(config: ml_collections.ConfigDict, algorithm) -> RoundRunner:
  """The round runner of `config`: its backend, sharded over `client_devices`.

  The cohort sharded is the algorithm's (`cohort_size`, the clients or slots
  a round maps over: clients_per_round, every client for OS or FedACS's full
  participation, HIST's cells, a clock's slots). `client_devices=0` uses the
  most devices that split it evenly (all of them when it is a multiple of
  the device count); the sequential backend runs on one device, and asking
  for more than one device with it is a ConfigError.
  """
  cohort = algorithm.cohort_size
  backend = resolve_backend(config.backend)
  if config.map_chunk_size and backend != 'map':
    raise config_lib.ConfigError(
        f'map_chunk_size={config.map_chunk_size} is read by backends map and '
        f'auto only, got backend {config.backend!r}; set backend=map or leave '
        'it 0.')
  if backend in COMPILED_BACKENDS:
    devices = config.client_devices or max(
        d for d in range(1, jax.device_count() + 1)
        if cohort % d == 0)
  elif config.client_devices > 1:
    raise config_lib.ConfigError(
        f'backend {backend!r} runs on one device; client_devices='
        f'{config.client_devices} needs backend vmap, map or auto.')
  else:
    devices = 1
  try:
    mesh = client_mesh(devices)
  except ValueError as e:
    raise config_lib.ConfigError(str(e)) from e
  if mesh is not None and cohort % mesh.devices.size:
    raise config_lib.ConfigError(
        f'{config.algorithm} runs a cohort of {cohort} clients per round, '
        f'which cannot be split evenly over {mesh.devices.size} devices; use '
        f'a multiple of {mesh.devices.size} or set client_devices.')
  return RoundRunner(algorithm, config.backend, config.map_chunk_size, mesh)


def resolved_for_run(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """`config` as a run trains with it: resolved (`config.resolve`), its metric
  writers checked, `~` and $VARIABLES expanded in its paths."""
  config = config_lib.resolve(config)
  logging_writers.check(config.metric_writers)
  return expand_paths(config)


def checked_experiment(config: ml_collections.ConfigDict):
  """`build_experiment(config)` and the warnings about its federation
  (`sanity.data_warnings`): (split, model, params, algorithm, warnings). A bad
  dataset, partition, model or size, a missing data_dir or file, or more
  clients than a natural set's files hold is a ConfigError."""
  try:
    split, model, params, algorithm = build_experiment(config)
  except ValueError as e:  # bad dataset/partition/model choices or sizes.
    raise config_lib.ConfigError(str(e)) from e
  return (split, model, params, algorithm,
          sanity.data_warnings(split, config.batch_size))


def loaded_data_summary(split) -> dict | None:
  """What a natural set's files gave (`natural.NaturalSplit.summary`: format,
  files, clients kept and dropped, examples), None for other data."""
  return split.summary if isinstance(split, natural_lib.NaturalSplit) else None


def check(config: ml_collections.ConfigDict
          ) -> tuple[ml_collections.ConfigDict, list[str], dict | None]:
  """What a run checks before it trains, without a workdir and without
  training (`fedjax-het --show-config`): the config resolved
  (`resolved_for_run`), the data loaded and the federation built and checked
  against the model (`checked_experiment`: a natural set's files read, its
  clients counted against num_clients), the cohort's devices (`make_runner`).

  Returns:
    (the config as the run trains with it, the warnings about its federation,
    the `loaded_data_summary` a run prints).
  """
  config = resolved_for_run(config)
  split, *_, algorithm, warnings = checked_experiment(config)
  make_runner(config, algorithm)
  return config, warnings, loaded_data_summary(split)


def train(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Runs (or resumes) the experiment of `config` in `workdir`.

  Returns the summary dict also written to `summary.json`. Raises ConfigError
  for bad configs, TrainingDiverged on a non-finite loss (the last good
  checkpoint is kept), RunInterrupted after Ctrl-C (the last finished round is
  checkpointed), CheckpointError when no checkpoint can be read or saved, and
  WorkdirError when the workdir is busy, unusable or a write fails.
  """
  started = time.perf_counter()
  config = resolved_for_run(config)
  workdir = workdir_lib.expand(workdir)
  workdir_lib.create(workdir)
  held = (workdir_lib.lock(workdir) if jax.process_index() == 0 else
          contextlib.nullcontext())
  with held:
    try:
      with contextlib.closing(RunCheckpoints(
          workdir, config.checkpoints_to_keep,
          run_record(config))) as checkpoints:
        return _train_locked(config, workdir, started, checkpoints)
    except OSError as e:
      raise workdir_lib.WorkdirError(
          f'{workdir_lib.describe_os_error(e)}; the checkpoints in {workdir} '
          'are kept: fix this and run the same command again to resume.'
      ) from e


def _run_name(workdir: str, config: ml_collections.ConfigDict) -> str:
  """'<workdir name> (<algorithm> on <dataset>)', the progress bar's label;
  a seed's run of a comparison (<label>/seed<s>) is named '<label>/seed<s>'."""
  parent, name = os.path.split(os.path.normpath(workdir))
  if re.fullmatch(r'seed\d+', name):
    name = f'{os.path.basename(parent)}/{name}'
  return f'{name} ({config.algorithm} on {config.dataset})'


def _restore(checkpoints: RunCheckpoints, state, config, workdir: str):
  """(round, state, host counters) to continue from: the newest readable
  checkpoint, or round 0."""
  latest = checkpoints.latest_round() or 0
  if latest > config.rounds:
    raise config_lib.ConfigError(
        f'workdir {workdir} already holds round {latest}, beyond '
        f'rounds={config.rounds}; ask for at least {latest} rounds.')
  round_index, state, host = checkpoints.restore_latest(state)
  return round_index, state, host or new_host_counters()


def _train_locked(config: ml_collections.ConfigDict, workdir: str,
                  started: float, checkpoints: RunCheckpoints) -> dict:
  """`train` once the workdir is held; `started` is the session's start."""
  _check_same_run(workdir, config, checkpoints)
  primary = jax.process_index() == 0
  split, _, params, algorithm, warnings = checked_experiment(config)
  if primary:
    workdir_lib.write_text(os.path.join(workdir, 'config.json'),
                           json.dumps(run_record(config), indent=2))
    data_summary = loaded_data_summary(split)
    if data_summary is not None:  # what the files gave
      print(natural_lib.format_summary(data_summary), flush=True)
      workdir_lib.write_text(os.path.join(workdir, natural_lib.SUMMARY_FILE),
                             json.dumps(data_summary, indent=2))
    sanity.report(warnings)

  state = algorithm.init(params, jax.random.PRNGKey(config.seed))
  runner = make_runner(config, algorithm)
  state = runner.place(state)
  evaluate = algorithm.state_evaluator(split)
  if config.stream_cohorts:  # the data stay on the host, cohorts streamed
    stream = CohortStream(runner, split.train, last_round=config.rounds)
    run_chunk = stream.run
  else:
    # On the device without padding: memory follows Σ counts (the same batches).
    train_data = runner.place(split.train.ragged().to_device())
    run_chunk = lambda state, n: runner.run(state, train_data, n)

  # The processes' first collective (orbax's) follows unequally long compiles.
  sharding.barrier('built')
  round_index, state, host = _restore(checkpoints, state, config, workdir)
  finished = os.path.join(workdir, 'summary.json')
  if round_index == config.rounds and os.path.exists(finished):
    # A finished run: its summary (timings included) stands as written.
    return workdir_lib.read_json(
        finished, 'delete it and run the same command again to write it '
        'anew from metrics.jsonl and the last checkpoint.')
  log = MetricsLog(os.path.join(workdir, 'metrics.jsonl'), round_index,
                   logging_writers.create(config, workdir) if primary else [],
                   write=primary)

  def log_evaluation() -> dict:
    row = evaluation_row(round_index, host,
                         jax.device_get(evaluate(state)))
    log.append(row)
    return row

  num_params = sum(x.size for x in jax.tree.leaves(params))
  chunk_seconds = []
  compiled_rounds = 0  # rounds per call of the last compiled chunk
  clock = started
  bar = tqdm.tqdm(total=config.rounds, initial=round_index,
                  disable=not config.progress, unit='round',
                  desc=_run_name(workdir, config))
  try:
    with _InterruptFlag() as interrupt:
      while round_index < config.rounds:
        n = min(config.rounds_per_call, config.rounds - round_index)
        if n != compiled_rounds:
          bar.set_postfix_str('compiling…')
        tic = time.perf_counter()
        state, metrics = run_chunk(state, n)
        metrics = jax.device_get(metrics)
        seconds = time.perf_counter() - tic
        finite = np.isfinite(metrics['train_loss'])
        if not finite.all():
          last = checkpoints.latest_round()
          raise TrainingDiverged(
              'training diverged: the train loss is not finite in round '
              f'{round_index + 1 + int(np.argmin(finite))}; the last good '
              'checkpoint is round '
              f'{last if last is not None else "none (no checkpoint yet)"}.')
        round_index += n
        chunk_seconds.append(seconds / n)
        compiled_rounds = n
        clock, elapsed = time.perf_counter(), time.perf_counter() - clock
        accumulate(host, metrics, elapsed,
                   algorithm.per_round_metrics + PER_ROUND_METRICS)
        bar.update(n)
        if round_index % config.eval_every == 0 or round_index == config.rounds:
          bar.set_postfix_str('evaluating…')
          row = log_evaluation()
          bar.set_postfix(loss=f'{row["train_loss"]:.3f}',
                          acc=f'{row["test_accuracy"]:.3f}')
        if (round_index % config.checkpoint_every == 0 or
            round_index == config.rounds or interrupt.raised):
          checkpoints.save(round_index, state, host)
        if interrupt.raised:
          raise RunInterrupted(
              f'interrupted: round {round_index} is checkpointed in {workdir}; '
              'run the same command again to resume.')
    if host['loss_rounds']:  # rounds checkpointed at Ctrl-C, never logged
      log_evaluation()
  finally:
    bar.close()
    # A failed run's plot may fail too (a full disk): report the first error.
    with (contextlib.suppress(OSError) if sys.exc_info()[0] else
          contextlib.nullcontext()):
      log.close()
      if log.rows and primary:
        plots.plot_curves(log.rows, os.path.join(workdir, 'curves.png'),
                          title=f'{config.algorithm} on {config.dataset}')

  host['wall_time'] += time.perf_counter() - clock
  summary = _summary(config, log.rows, host, num_params, chunk_seconds)
  summary.update(algorithm.summary_facts())
  per_round = algorithm.per_round_metrics + PER_ROUND_METRICS
  summary['last_round'] = {k: summary['totals'].pop(k) for k in per_round
                           if k in summary['totals']}
  late = sanity.chance_warnings(summary, split.test_y)
  summary['warnings'] = warnings + late
  if primary:
    sanity.report(late)
    workdir_lib.write_text(os.path.join(workdir, 'summary.json'),
                           json.dumps(summary, indent=2))
  return summary


def reached_target(rows: list[dict], target: float) -> dict | None:
  """The first logged row whose test accuracy is ≥ `target`, or None.

  Its running totals are the cost of reaching the target: bytes, examples
  and any counter the algorithm logs (simulated latency, local steps, ...).
  """
  for row in rows:
    if row['test_accuracy'] >= target:
      return row
  return None


def _summary(config, rows, host, num_params, chunk_seconds) -> dict:
  final = rows[-1]
  # The first chunk of this session includes compilation.
  steady = chunk_seconds[1:] or chunk_seconds
  last = rows[-5:]
  summary = {
      'algorithm': config.algorithm,
      'dataset': config.dataset,
      'model': config.model,
      'rounds': final['round'],
      'num_params': int(num_params),
      'final_test_accuracy': final['test_accuracy'],
      'best_test_accuracy': max(r['test_accuracy'] for r in rows),
      'mean_test_accuracy_last5': float(
          np.mean([r['test_accuracy'] for r in last])),
      'final_test_loss': final['test_loss'],
      'final_train_loss': final['train_loss'],
      'totals': dict(host['totals']),
      'wall_time_s': host['wall_time'],
      's_per_round_median': float(np.median(steady)) if steady else None,
      'final': final,
  }
  if config.target_accuracy:
    summary['target_accuracy'] = config.target_accuracy
    summary['to_target'] = reached_target(rows, config.target_accuracy)
  return summary
