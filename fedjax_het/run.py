"""The trainer: config → federated data, model, rounds → logs, checkpoints, plots.

Outputs in the workdir:
  config.json      the resolved config
  metrics.jsonl    one JSON object per evaluated round
  summary.json     final metrics
  curves.png       test accuracy and train loss against rounds
  checkpoints/     orbax checkpoints every `checkpoint_every` rounds

Re-running on a workdir that holds checkpoints resumes from the latest one and
ends bit-identical to an uninterrupted run: all randomness is a function of the
seed and the round index, the host-side counters are checkpointed with the
state, and rounds are grouped into compiled chunks at the same boundaries.
Ctrl-C finishes the current chunk, checkpoints it and exits.
"""
import json
import os
import signal
import time

import jax
import ml_collections
import numpy as np
import tqdm

from fedjax_het import algorithms, config as config_lib, data as data_lib, \
    models, plots
from fedjax_het.checkpoint import RunCheckpoints
from fedjax_het.core.backends import COMPILED_BACKENDS, resolve_backend
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.core.sharding import client_mesh

# Keys that may change when a run is resumed (they do not change the math).
_RESUMABLE_CHANGES = ('rounds', 'progress', 'eval_every', 'eval_batch_size',
                      'checkpoint_every', 'checkpoints_to_keep')


class TrainingDiverged(RuntimeError):
  """The training loss became NaN or infinite."""


class RunInterrupted(RuntimeError):
  """Ctrl-C: the last finished round was checkpointed."""


def build_experiment(config: ml_collections.ConfigDict):
  """Data, model, initial params and algorithm of a validated config."""
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
  }.get(config.partition, {})
  split = data_lib.build_federated(
      dataset, num_clients=config.num_clients, partition=config.partition,
      seed=config.seed, local_test=config.local_test, **partition_kwargs)
  model = models.create_model(config.model, split.num_classes,
                              **config.model_options.to_dict())
  init_key, _ = jax.random.split(jax.random.PRNGKey(config.seed))
  params = models.init_params(model, init_key, dataset.x_train.shape[1:])
  algorithm = algorithms.create_algorithm(config.algorithm, config, model,
                                          split.train)
  return split, model, params, algorithm


class MetricsLog:
  """`metrics.jsonl`: one JSON object per evaluated round, kept in `rows`.

  On resume, rows logged after the restored round (never checkpointed, e.g.
  before a crash) are dropped, so the file continues exactly as an
  uninterrupted run's.
  """

  def __init__(self, path: str, resume_round: int):
    self.path = path
    self.rows = []
    if os.path.exists(path):
      with open(path) as f:
        self.rows = [json.loads(line) for line in f if line.strip()]
    self.rows = [r for r in self.rows if r['round'] <= resume_round]
    with open(path, 'w') as f:
      f.writelines(json.dumps(row) + '\n' for row in self.rows)

  def append(self, row: dict) -> None:
    self.rows.append(row)
    with open(self.path, 'a') as f:
      f.write(json.dumps(row) + '\n')


def new_host_counters() -> dict:
  """Host-side running totals; checkpointed with the state (JSON)."""
  return {'totals': {}, 'wall_time': 0.0, 'loss_sum': 0.0, 'loss_rounds': 0}


def accumulate(host: dict, metrics: dict, seconds: float) -> None:
  """Adds a chunk's per-round metrics (leading round axis) to the totals.

  The train loss is averaged between logged rows; every other round metric
  (bytes, examples, an algorithm's own counters such as simulated latency) is
  a running total since round 0.
  """
  for key, values in metrics.items():
    if key != 'train_loss':
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


def _check_same_run(workdir: str, config: ml_collections.ConfigDict) -> None:
  path = os.path.join(workdir, 'config.json')
  if not os.path.exists(path):
    return
  with open(path) as f:
    previous = json.load(f)
  current = json.loads(config.to_json())
  changed = sorted(k for k in set(previous) | set(current)
                   if k not in _RESUMABLE_CHANGES
                   and previous.get(k) != current.get(k))
  if changed:
    raise config_lib.ConfigError(
        f'workdir {workdir} holds a run with a different config '
        f'({", ".join(changed)}); use a new --workdir to start a new run.')


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

  `client_devices=0` uses the most devices that split the cohort evenly (all
  of them when clients_per_round is a multiple of the device count); the
  sequential backend runs on one device, and asking for more than one
  device with it is a ConfigError.
  """
  backend = resolve_backend(config.backend)
  if backend in COMPILED_BACKENDS:
    devices = config.client_devices or max(
        d for d in range(1, jax.device_count() + 1)
        if config.clients_per_round % d == 0)
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
  if mesh is not None and config.clients_per_round % mesh.devices.size:
    raise config_lib.ConfigError(
        f'clients_per_round={config.clients_per_round} cannot be split evenly '
        f'over {mesh.devices.size} devices; use a multiple of '
        f'{mesh.devices.size} or set client_devices.')
  return RoundRunner(algorithm, backend, config.map_chunk_size, mesh)


def train(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Runs (or resumes) the experiment of `config` in `workdir`.

  Returns the summary dict also written to `summary.json`. Raises ConfigError
  for bad configs, TrainingDiverged on a non-finite loss (the last good
  checkpoint is kept), RunInterrupted after Ctrl-C (the last finished round is
  checkpointed) and CheckpointError for an unreadable checkpoint.
  """
  config_lib.validate(config)
  os.makedirs(workdir, exist_ok=True)
  _check_same_run(workdir, config)
  try:
    split, model, params, algorithm = build_experiment(config)
  except ValueError as e:  # bad dataset/partition/model choices or sizes.
    raise config_lib.ConfigError(str(e)) from e
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    f.write(config.to_json(indent=2))

  state = algorithm.init(params, jax.random.PRNGKey(config.seed))
  runner = make_runner(config, algorithm)
  state = runner.place(state)
  evaluate = algorithm.evaluator(split)
  train_data = runner.place(split.train.to_device())

  checkpoints = RunCheckpoints(workdir, config.checkpoints_to_keep)
  host = new_host_counters()
  round_index = checkpoints.latest_round() or 0
  if round_index > config.rounds:
    checkpoints.close()
    raise config_lib.ConfigError(
        f'workdir {workdir} already holds round {round_index}, beyond '
        f'rounds={config.rounds}; ask for at least {round_index} rounds.')
  if round_index:
    state, host = checkpoints.restore(round_index, state)
  log = MetricsLog(os.path.join(workdir, 'metrics.jsonl'), round_index)

  def log_evaluation() -> dict:
    row = evaluation_row(round_index, host,
                         jax.device_get(evaluate(state.params)))
    log.append(row)
    return row

  num_params = sum(x.size for x in jax.tree.leaves(params))
  chunk_seconds = []
  bar = tqdm.tqdm(total=config.rounds, initial=round_index,
                  disable=not config.progress, unit='round',
                  desc=f'{config.algorithm} on {config.dataset}')
  try:
    with _InterruptFlag() as interrupt:
      while round_index < config.rounds:
        n = min(config.rounds_per_call, config.rounds - round_index)
        tic = time.perf_counter()
        state, metrics = runner.run(state, train_data, n)
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
        accumulate(host, metrics, seconds)
        bar.update(n)
        if round_index % config.eval_every == 0 or round_index == config.rounds:
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
    checkpoints.close()
    if log.rows:
      plots.plot_curves(log.rows, os.path.join(workdir, 'curves.png'),
                        title=f'{config.algorithm} on {config.dataset}')

  summary = _summary(config, log.rows, host, num_params, chunk_seconds)
  with open(os.path.join(workdir, 'summary.json'), 'w') as f:
    json.dump(summary, f, indent=2)
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
