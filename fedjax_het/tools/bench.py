"""`fedjax-het bench`: seconds per round of a fixed workload, against two physical limits.

    fedjax-het bench --workload W-MLP|W-PFL|W-FIARSE|W-TAIL|W-EMNIST [--backend B] [--rounds R]
                     [--algorithm A] [--num-clients M] [--cohort K] [--local-steps S]
                     [--conv-impl auto|xla|im2col] [--client-devices N] [--cpu-devices N]
                     [--stream [--feature-dtype float32|uint8]] [--processes N]

Workloads (synthetic data of the papers' shapes; the README's Speed section has the peers' numbers):
* W-MLP: 1000 clients × 50 examples of 28×28×1, MLP 784-200-200-10, cohort 50,
  5 SGD steps of batch 10.
* W-PFL: pfl-research's CIFAR-10 benchmark: the same federation on 32×32×3 with
  simple_cnn (1.6 M params).
* W-FIARSE: FIARSE's CIFAR-10 setting: 100 clients × 500 images, ResNet-18 with
  static BN, cohort 10, 100 steps of batch 20, FIARSE with capacities
  {1/64, 1/16, 1/4, 1}.
* W-TAIL: heavy-tailed client sizes, StackOverflow-shaped: 10,000 clients whose sizes follow
  `stackoverflow_sizes` (a Pareto law fitted to TFF's StackOverflow train split, capped at
  TFF's 256), sequences of 20 synthetic tokens over StackOverflow's 10,004 ids, a small
  next-token LSTM (embedding 8, LSTM 16), cohort 50, one local epoch of batch 16
  (`systems.work_unit='epochs'`), stored ragged (`data.RaggedData`).
* W-EMNIST: FedJAX's EMNIST reference: 3,400 writers of 28×28×1 images, 62 classes, sizes
  from `emnist_sizes` (F-EMNIST's mean and LEAF's spread), simple_cnn, cohort 10, one local
  epoch of batch 20, stored ragged. experiments/bench/fedjax_reference.py times its 1,500
  rounds.
  `--num-clients 342477 --stream` is StackOverflow's population, streamed from memmapped files.

For each run it prints one line per measurement and, last, one JSON object:
`s_per_round_{median,min,max}` (rounds after one compiling warm-up round, each a
`RoundRunner.run` call blocked until done), `examples_per_s`, `centralized_s`
(one model taking the round's cohort × steps minibatches as jitted SGD steps
in one `lax.scan`, best of up to 5 runs: the same arithmetic with no
federation), `roofline_s` (the round's FLOPs, from XLA's cost analysis of one
minibatch step, divided by the matmul FLOP/s measured in the same process),
`roofline_fraction` = roofline_s / median, `memory_s` (XLA's bytes accessed
per step over the measured copy bandwidth: an upper bound on memory time, as
cache hits count as traffic), peak memory, the client data size and
`useful_step_fraction` (the rounds' median of useful ÷ computed local steps,
`core.rounds.step_metrics`).

Hierarchical methods (hfedavg, hist) train every client of every cell each round: their
federation is one cohort (num_clients = cohort, unless `--num-clients` says otherwise) and a
round is one edge round of two cells (`hierarchy.num_cells = 2, edge_rounds = 1`), so a round does the FedAvg round's local
work; compare with `--algorithm fedavg --num-clients 50`.

`--processes N` runs the benchmark in N processes on this machine, joined by
`jax.distributed` on localhost (gloo collectives on CPU), the cohort sharded over all their
devices; each process is pinned to its share of the cores and holds one XLA CPU device unless
`--cpu-devices` says otherwise. Process 0 measures the limits on its own cores (the roofline's
FLOP/s is its rate times the process count; the centralised limit is one process's) and prints
the report (with `processes`); the others only run the rounds. It is what a multi-host run does, on one host.

`--stream` writes the federation (seeded, in blocks, ragged: `data.write_ragged`) to .npy files
in a temporary directory, keeps it on the host as np.memmap and streams each round's cohort to
the device ahead of use (`core.stream`); it adds the host and device data bytes and the largest
anonymous RSS after a round (file-backed pages of the memmap are page cache, counted apart).
W-TAIL's federation is always written this way; without `--stream` it is then placed on the
device whole.
"""
import argparse
import dataclasses
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_het import methods, models, run
from fedjax_het.methods.hist.hist import HFedAvg
from fedjax_het.config import base_config
from fedjax_het.core import sharding
from fedjax_het.core.stream import CohortStream
from fedjax_het.data import RaggedData, write_ragged

CAPACITIES = (1 / 64, 1 / 16, 1 / 4, 1.0)


@dataclasses.dataclass(frozen=True)
class Workload:
  """A benchmark federation: model, data shape, cohort and local work."""
  model: str
  model_options: dict
  shape: tuple
  num_clients: int
  examples_per_client: int
  cohort: int
  local_steps: int
  batch_size: int
  algorithm: str = 'fedavg'
  num_classes: int = 10
  map_chunk_size: int = 0   # clients vmapped together in lax.map (backend map)
  sizes: str = 'equal'      # 'equal': examples_per_client each; 'stackoverflow': that law
  work_unit: str = 'steps'  # local_steps counts steps, or epochs of each client's data
  tokens: bool = False      # shape is a token sequence, labels its next tokens


# StackOverflow's client sizes. TFF's `stackoverflow.load_data` documents the train split:
# 342,477 users holding 135,818,730 examples, users with fewer than 100 sentences removed. A
# Pareto law with that floor, x_min = 100, and that mean, 396.6 examples, has
# α = mean / (mean − x_min) = 1.337: median 100·2^(1/α) = 168, 90th percentile
# 100·10^(1/α) = 561, P(n > 256) = (100/256)^α = 0.285. TFF's benchmark (Reddi et al. 2021)
# caps every user at 256 examples, as `stackoverflow_sizes` does.
SO_USERS, SO_EXAMPLES, SO_MIN_SIZE, SO_CAP = 342_477, 135_818_730, 100, 256

# F-EMNIST-62's client sizes. TFF's `emnist.load_data` documents the train split: 3,400 writers
# holding 671,585 examples (mean 197.5); LEAF (Caldas et al. 2018, Table 1) gives FEMNIST's
# spread, 226.83 ± 88.94 samples per user, a coefficient of variation of 0.392. A log-normal
# law with that mean and that coefficient (σ² = ln(1 + 0.392²)) stands in for the writers'
# sizes, clipped to [1, 600] (3× the mean; P(n > 600) ≈ 0.1%).
EMNIST_WRITERS, EMNIST_EXAMPLES, EMNIST_CV, EMNIST_CAP = 3_400, 671_585, 88.94 / 226.83, 600


WORKLOADS = {
    'W-MLP': Workload('mlp', {'hidden': (200, 200)}, (28, 28, 1), 1000, 50, 50,
                      5, 10),
    'W-PFL': Workload('simple_cnn', {}, (32, 32, 3), 1000, 50, 50, 5, 10),
    'W-FIARSE': Workload('resnet18', {'norm': 'static_bn'}, (32, 32, 3), 100,
                         500, 10, 100, 20, algorithm='fiarse'),
    # FedJAX's EMNIST reference: F-EMNIST-62 by writer (sizes from `emnist_sizes`), its CNN
    # (simple_cnn: conv 32, conv 64, pool, dense 128; FedJAX's has dropout, this none), 10
    # clients a round, one local epoch of batch 20 (experiments/bench/fedjax_reference.py).
    'W-EMNIST': Workload('simple_cnn', {}, (28, 28, 1), EMNIST_WRITERS, EMNIST_CAP, 10, 1,
                         20, num_classes=62, sizes='emnist', work_unit='epochs'),
    'W-TAIL': Workload('lstm', {'embed': 8, 'hidden': (16,)}, (20,), 10_000, SO_CAP, 50, 1,
                       16, num_classes=10_004, sizes='stackoverflow', work_unit='epochs',
                       tokens=True),
}


def stackoverflow_sizes(num_clients: int, seed: int = 0) -> np.ndarray:
  """int32 [M] client sizes min(⌊x_min·(1 − u)^(−1/α)⌋, 256), u ~ U[0, 1): the Pareto law
  above (x_min = 100, α = 1.337, StackOverflow's floor and mean), capped as TFF caps."""
  mean = SO_EXAMPLES / SO_USERS
  alpha = mean / (mean - SO_MIN_SIZE)
  u = np.random.default_rng([seed, 1]).random(num_clients)
  return np.minimum(SO_MIN_SIZE * (1 - u)**(-1 / alpha), SO_CAP).astype(np.int32)


def emnist_sizes(num_clients: int, seed: int = 0) -> np.ndarray:
  """int32 [M] client sizes of the log-normal law above (F-EMNIST's mean 197.5 and LEAF's
  coefficient of variation 0.392), rounded and clipped to [1, 600]."""
  sigma2 = np.log1p(EMNIST_CV**2)
  mu = np.log(EMNIST_EXAMPLES / EMNIST_WRITERS) - sigma2 / 2
  sizes = np.random.default_rng([seed, 2]).lognormal(mu, np.sqrt(sigma2), num_clients)
  return np.clip(np.rint(sizes), 1, EMNIST_CAP).astype(np.int32)


def client_sizes(workload: Workload, seed: int = 0) -> np.ndarray:
  """int32 [M] examples per client of the workload's size law."""
  if workload.sizes == 'stackoverflow':
    return stackoverflow_sizes(workload.num_clients, seed)
  if workload.sizes == 'emnist':
    return emnist_sizes(workload.num_clients, seed)
  return np.full(workload.num_clients, workload.examples_per_client, np.int32)


def time_calls(step: Callable[[Any], Any], state, rounds: int) -> tuple[list, Any]:
  """Seconds of `rounds` calls of `state = step(state)` after a warm-up call."""
  state = jax.block_until_ready(step(state))
  seconds = []
  for _ in range(rounds):
    tic = time.perf_counter()
    state = jax.block_until_ready(step(state))
    seconds.append(time.perf_counter() - tic)
  return seconds, state


def matmul_case() -> tuple[Callable, jax.Array, float]:
  """The matmul that measures a device's FLOP/s: (jitted x @ x, a random n×n f32
  matrix, the FLOPs of one call); n = 2048 on CPU, 8192 on accelerators."""
  n = 2048 if jax.default_backend() == 'cpu' else 8192
  a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
  return jax.jit(lambda x: x @ x), a, 2 * n**3


def measure_machine() -> dict:
  """Best-of-5 f32 matmul FLOP/s and copy bandwidth (bytes read + written) of the default device."""
  matmul, a, matmul_flops = matmul_case()
  matmul_s = min(time_calls(matmul, a, 5)[0])
  x = jnp.zeros((1 << 26,), jnp.float32)  # 256 MiB
  copy_s = min(time_calls(jax.jit(lambda v: v + 1.0), x, 5)[0])
  return {'matmul_flops_per_s': matmul_flops / matmul_s,
          'copy_bytes_per_s': 2 * x.nbytes / copy_s}


def _cost(jitted, *args) -> tuple[float, float]:
  analysis = jitted.lower(*args).compile().cost_analysis()
  if isinstance(analysis, (list, tuple)):  # older JAX: one dict per program
    analysis = analysis[0]
  return float(analysis.get('flops', 0.0)), float(analysis.get('bytes accessed', 0.0))


def centralized_program(workload: Workload, model, params,
                        compiler_options: dict | None = None) -> tuple[Callable, float, float]:
  """The round's cohort × steps minibatches as one model's jitted SGD steps in one `lax.scan`.

  Returns the compiled `run(params) -> params` (compiled with XLA `compiler_options`, e.g.
  {'xla_cpu_experimental_ynn_fusion_type': ...}; None: the defaults) and the FLOPs and bytes
  accessed of one minibatch step by XLA's cost analysis.
  """
  steps = cohort_steps(workload)
  key_x, key_y = jax.random.split(jax.random.PRNGKey(2))
  if workload.tokens:  # token ids in, the next tokens out
    xs = jax.random.randint(key_x, (steps, workload.batch_size, *workload.shape), 1,
                            workload.num_classes)
    ys = jax.random.randint(key_y, xs.shape, 1, workload.num_classes)
  else:
    xs = jax.random.normal(key_x, (steps, workload.batch_size, *workload.shape))
    ys = jax.random.randint(key_y, (steps, workload.batch_size), 0, workload.num_classes)

  def sgd(p, batch):
    def loss(p):
      logits = model.apply({'params': p}, batch[0], train=True)
      return optax.softmax_cross_entropy_with_integer_labels(logits, batch[1]).mean()
    grads = jax.grad(loss)(p)
    return jax.tree.map(lambda w, g: w - 0.01 * g, p, grads), None

  flops, bytes_accessed = _cost(jax.jit(lambda p, b: sgd(p, b)[0]), params, (xs[0], ys[0]))
  run_all = jax.jit(lambda p: jax.lax.scan(sgd, p, (xs, ys))[0])
  return (run_all.lower(params).compile(compiler_options=compiler_options), flops,
          bytes_accessed)


def centralized(workload: Workload, model, params, rounds: int) -> dict:
  """The centralised limit: best of up to 5 runs of `centralized_program`, and its cost."""
  run_all, flops, bytes_accessed = centralized_program(workload, model, params)
  seconds, _ = time_calls(run_all, params, max(1, min(rounds, 5)))
  steps = cohort_steps(workload)
  return {'centralized_s': min(seconds), 'round_flops': flops * steps,
          'round_bytes_accessed': bytes_accessed * steps}


def peak_memory() -> tuple[int, str]:
  """Peak bytes in use on the default device, or the process's peak RSS on CPU."""
  stats = jax.local_devices()[0].memory_stats() or {}
  if 'peak_bytes_in_use' in stats:
    return int(stats['peak_bytes_in_use']), 'device'
  scale = 1 if sys.platform == 'darwin' else 1024  # ru_maxrss is KiB on Linux
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale, 'host_rss'


def workload_config(workload: Workload, backend: str = 'auto', algorithm: str = 'fedavg',
                    client_devices: int = 0):
  """The config of `workload` run by `algorithm` (synthetic data of its shape)."""
  config = base_config()
  config.update(dict(
      algorithm=algorithm, model=workload.model, num_clients=workload.num_clients,
      clients_per_round=workload.cohort, local_steps=workload.local_steps,
      batch_size=workload.batch_size, client_lr=0.01, backend=backend,
      client_devices=client_devices, aggregation_weights='uniform', partition='iid',
      dataset='synthetic', seed=0, map_chunk_size=workload.map_chunk_size))
  config.dataset_options = dict(
      num_train=workload.num_clients * workload.examples_per_client,
      num_test=workload.num_classes, shape=workload.shape, num_classes=workload.num_classes)
  config.model_options = dict(workload.model_options)
  config.systems.work_unit = workload.work_unit
  if trains_every_client(algorithm):
    config.hierarchy.update(num_cells=2, edge_rounds=1)
  if methods.ALGORITHMS[algorithm].supports_capacities:
    config.capacities = CAPACITIES
    # HeteroFL's Scaler needs normalisation layers (it diverges on the MLP).
    config.submodel.scaler = 'norm' in workload.model_options
  return config


def build_federation(workload: Workload, backend: str = 'auto',
                     algorithm: str = 'fedavg', client_devices: int = 0):
  """The workload's experiment: (split, model, params, method, runner).

  What `federated_round` times; peers' harnesses (experiments/bench/) build
  their rounds from the same data, model, initial params and cohort sampling.
  """
  config = workload_config(workload, backend, algorithm, client_devices)
  split, model, params, method = run.build_experiment(config)
  return split, model, params, method, run.make_runner(config, method)


def initial_state(method, runner, params):
  """The runner's first state: `method.init` of a copy of `params` with key
  PRNGKey(1), placed (the runner donates its state; `params` stays usable)."""
  return runner.place(method.init(jax.tree.map(jnp.copy, params), jax.random.PRNGKey(1)))


def cohort_steps(workload: Workload) -> int:
  """The local steps of a round's cohort: cohort · local_steps, where a client's unit of work
  is an epoch times its mean ⌈n/B⌉ over the clients (the expected cohort's steps)."""
  per_unit = 1.0
  if workload.work_unit == 'epochs':
    per_unit = float(np.mean(-(-client_sizes(workload) // workload.batch_size)))
  return round(workload.cohort * workload.local_steps * per_unit)


def round_timings(workload: Workload, seconds: list[float]) -> dict:
  """The report's federation sizes and the s/round of timed rounds `seconds`:
  median, min, max, and examples/s = cohort steps · batch / median."""
  median = float(np.median(seconds))
  examples = cohort_steps(workload) * workload.batch_size
  return {'num_clients': workload.num_clients, 'cohort': workload.cohort,
          'local_steps': workload.local_steps, 'batch_size': workload.batch_size,
          'work_unit': workload.work_unit, 'cohort_steps': cohort_steps(workload),
          'rounds_timed': len(seconds),
          's_per_round_median': median, 's_per_round_min': float(np.min(seconds)),
          's_per_round_max': float(np.max(seconds)),
          'examples_per_s': examples / median}


def trains_every_client(algorithm: str) -> bool:
  """Whether the method's rounds train every client (the hierarchical ones)."""
  return issubclass(methods.ALGORITHMS[algorithm], HFedAvg)


def federated_round(workload: Workload, backend: str, algorithm: str, rounds: int,
                    client_devices: int) -> tuple[dict, Any, Any]:
  """Times `rounds` rounds of the workload; returns timings, model and initial params."""
  split, model, params, method, runner = build_federation(
      workload, backend, algorithm, client_devices)
  data = runner.place(split.train.to_device())
  state = initial_state(method, runner, params)
  fractions = []  # useful ÷ computed local steps of each round

  def one_round(s):
    s, metrics = runner.run(s, data, 1)
    fractions.append(metrics['useful_step_fraction'])
    return s

  seconds, _ = time_calls(one_round, state, rounds)
  return {'backend': runner.backend,
          'devices': 1 if runner.mesh is None else int(runner.mesh.devices.size),
          'seconds': seconds,
          'useful_step_fraction': float(np.median(fractions)),
          'data_bytes_per_client': int(split.train.x[0].nbytes + split.train.y[0].nbytes)
          }, model, params


def federation_blocks(workload: Workload, counts: np.ndarray, feature_dtype: str = 'float32',
                      seed: int = 0):
  """The workload's synthetic rows, client after client, as (x, y) blocks of about 64 MiB (a
  block seeded by (seed, its first client)). Token workloads: x uint16 ids uniform over
  [1, V) (the model casts them to int32), y int32 the next token of each; otherwise
  standard normal (float32) or 0/1 (uint8, 4x smaller: the model's first layer casts them)
  features and uniform int32 labels."""
  row_bytes = int(np.prod(workload.shape)) * (2 if workload.tokens else
                                               np.dtype(feature_dtype).itemsize)
  block = max(1, (64 << 20) // (row_bytes * workload.examples_per_client))
  for start in range(0, len(counts), block):
    rng = np.random.default_rng([seed, start])
    rows = int(counts[start:start + block].sum())
    if workload.tokens:
      tokens = rng.integers(1, workload.num_classes, (rows, workload.shape[0] + 1), np.int32)
      yield tokens[:, :-1].astype(np.uint16), tokens[:, 1:]
      continue
    if feature_dtype == 'uint8':
      x = rng.integers(0, 2, (rows, *workload.shape), np.uint8)
    else:
      x = rng.standard_normal((rows, *workload.shape), np.float32)
    yield x, rng.integers(0, workload.num_classes, rows, np.int32)


def host_federation(workload: Workload, directory: str, feature_dtype: str = 'float32',
                    seed: int = 0) -> RaggedData:
  """The workload's synthetic federation written ragged to `directory` (`federation_blocks`,
  sizes from `client_sizes`) and opened read-only memmapped: the whole federation never sits
  in memory. Its draw length is `examples_per_client` (the size law's cap)."""
  counts = client_sizes(workload, seed)
  return write_ragged(directory, counts, federation_blocks(workload, counts, feature_dtype, seed),
                      max_examples=workload.examples_per_client)


def host_memory() -> dict:
  """This process's resident memory from /proc (Linux; {} elsewhere): peak (VmHWM), now
  anonymous (RssAnon: arrays, buffers) and file-backed (RssFile: mapped pages, reclaimable)."""
  fields = {'VmHWM': 'peak_rss_bytes', 'RssAnon': 'rss_anon_bytes',
            'RssFile': 'rss_file_bytes'}
  try:
    with open('/proc/self/status') as f:
      lines = [line.split() for line in f]
  except OSError:
    return {}
  return {fields[l[0][:-1]]: int(l[1]) * 1024 for l in lines if l and l[0][:-1] in fields}


def host_round(workload: Workload, backend: str, algorithm: str, rounds: int,
               client_devices: int, feature_dtype: str, stream: bool) -> tuple[dict, Any, Any]:
  """`federated_round` on `host_federation`'s files: cohorts streamed from them
  (`core.stream.CohortStream`, one round per call, the next prefetched) or, without
  `stream`, the federation placed on the device whole (ragged)."""
  config = workload_config(workload, backend, algorithm, client_devices)
  with tempfile.TemporaryDirectory(prefix='fedjax_het_stream_') as directory:
    tic = time.perf_counter()
    data = host_federation(workload, directory, feature_dtype)
    generate_s = time.perf_counter() - tic
    model = models.create_model(workload.model, workload.num_classes,
                                **workload.model_options)
    init_key, _ = jax.random.split(jax.random.PRNGKey(config.seed))
    params = models.init_params(model, init_key, workload.shape)
    method = methods.create_algorithm(algorithm, config, model, data)
    runner = run.make_runner(config, method)
    if stream:
      run_round = CohortStream(runner, data).run
    else:
      placed = runner.place(data.to_device())
      run_round = lambda s, n: runner.run(s, placed, n)
    state = initial_state(method, runner, params)
    anon, fractions = [], []  # per round: anonymous RSS, useful ÷ computed steps

    def step(s):
      s, metrics = jax.block_until_ready(run_round(s, 1))
      anon.append(host_memory().get('rss_anon_bytes', 0))
      fractions.append(metrics['useful_step_fraction'])
      return s

    seconds, _ = time_calls(step, state, rounds)
    row_bytes = (data.x.nbytes + data.y.nbytes) // len(data.y)
    counts = np.asarray(data.counts)
  return {'backend': runner.backend,
          'devices': 1 if runner.mesh is None else int(runner.mesh.devices.size),
          'seconds': seconds, 'useful_step_fraction': float(np.median(fractions)),
          'stream': stream, 'feature_dtype': str(data.x.dtype),
          'client_sizes': {'mean': float(counts.mean()), 'min': int(counts.min()),
                           'median': float(np.median(counts)), 'max': int(counts.max())},
          # Σ counts × row + counts and offsets, as stored (padded: M × max × row)
          'data_bytes_per_client': data.nbytes / workload.num_clients,
          'host_data_bytes': data.nbytes,
          'padded_data_bytes': workload.num_clients * workload.examples_per_client * row_bytes,
          # the running round's padded cohort and the prefetched next one
          'device_data_bytes': (2 * workload.cohort * workload.examples_per_client * row_bytes
                                if stream else data.nbytes),
          'generate_s': generate_s, 'max_rss_anon_bytes': max(anon),
          }, model, params


def benchmark(workload_name: str, backend: str = 'auto', rounds: int = 10,
              algorithm: str | None = None, client_devices: int = 0,
              conv_impl: str = '', stream: bool = False, feature_dtype: str = 'float32',
              **overrides: int) -> dict | None:
  """Runs one benchmark; returns the result dict printed as the last line
  (None in a process other than 0 of a multi-process run).

  `overrides` replace the workload's num_clients, cohort or local_steps;
  None keeps the workload's own. `stream` keeps the federation in host memmap files
  (features of `feature_dtype`) and streams the cohorts (`streamed_round`).
  """
  if feature_dtype != 'float32' and not stream:
    raise ValueError('--feature-dtype applies to --stream (on-device data are float32).')
  if workload_name not in WORKLOADS:
    raise ValueError(f'unknown workload {workload_name!r}; choose one of '
                     f'{", ".join(WORKLOADS)}.')
  if feature_dtype != 'float32' and WORKLOADS[workload_name].tokens:
    raise ValueError(f'{workload_name} stores token ids (uint16); --feature-dtype is for '
                     'image features.')
  if algorithm is not None and algorithm not in methods.ALGORITHMS:
    raise ValueError(f'unknown algorithm {algorithm!r}; choose one of '
                     f'{", ".join(sorted(methods.ALGORITHMS))}.')
  overrides = {k: v for k, v in overrides.items() if v is not None}
  for key, value in overrides.items():
    if value < 1:
      raise ValueError(f'--{key.replace("_", "-")} must be at least 1, got '
                       f'{value}.')
  workload = dataclasses.replace(WORKLOADS[workload_name], **overrides)
  if conv_impl:
    if workload.model == 'mlp':
      raise ValueError(f'{workload_name} has no convolutions (--conv-impl).')
    workload = dataclasses.replace(
        workload, model_options={**workload.model_options, 'conv_impl': conv_impl})
  algorithm = algorithm or workload.algorithm
  if trains_every_client(algorithm) and 'num_clients' not in overrides:
    workload = dataclasses.replace(workload, num_clients=workload.cohort)
  if stream or workload.sizes != 'equal':
    timed, model, params = host_round(workload, backend, algorithm, rounds, client_devices,
                                      feature_dtype, stream)
  else:
    timed, model, params = federated_round(workload, backend, algorithm, rounds,
                                           client_devices)
  if jax.process_index() != 0:
    return None
  limit = centralized(workload, model, params, rounds)
  machine = measure_machine()
  # Process 0 measures on its share of the cores: the round has them all.
  machine['matmul_flops_per_s'] *= jax.process_count()
  timings = round_timings(workload, timed.pop('seconds'))
  median = timings['s_per_round_median']
  roofline_s = limit['round_flops'] / machine['matmul_flops_per_s']
  memory, memory_source = peak_memory()
  return {
      'workload': workload_name, 'algorithm': algorithm, **timed,
      'conv_impl': workload.model_options.get('conv_impl', 'auto'),
      'platform': jax.default_backend(), 'device_kind': jax.local_devices()[0].device_kind,
      'processes': jax.process_count(), **timings,
      'centralized_s': limit['centralized_s'],
      'centralized_ratio': median / limit['centralized_s'],
      'round_flops': limit['round_flops'],
      **machine,
      'roofline_s': roofline_s, 'roofline_fraction': roofline_s / median,
      'memory_s': limit['round_bytes_accessed'] / machine['copy_bytes_per_s'],
      'peak_memory_bytes': memory, 'peak_memory_source': memory_source,
      **host_memory(),
  }


def parse_args(argv: list[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
      prog='fedjax-het bench', description=__doc__.splitlines()[0])
  parser.add_argument('--workload', default='W-MLP', choices=sorted(WORKLOADS))
  parser.add_argument('--backend', default='auto',
                      choices=('auto', 'vmap', 'map', 'sequential'))
  parser.add_argument('--rounds', type=int, default=10, help='timed rounds (after a warm-up)')
  parser.add_argument('--algorithm', help="default: the workload's (fedavg, W-FIARSE: fiarse)")
  parser.add_argument('--num-clients', type=int, help='clients in the federation')
  parser.add_argument('--cohort', type=int, help='clients per round')
  parser.add_argument('--local-steps', type=int)
  parser.add_argument('--map-chunk-size', type=int,
                      help='with --backend map: clients vmapped together inside '
                      'lax.map (default: one at a time)')
  parser.add_argument('--conv-impl', default='', choices=('', 'auto', 'xla', 'im2col'),
                      help="convolutions of the workload's model (default: auto)")
  parser.add_argument('--client-devices', type=int, default=0,
                      help='devices to shard the cohort over (0: all)')
  parser.add_argument('--stream', action='store_true',
                      help='keep the federation in memmapped host files (a temporary '
                      'directory) and stream each round\'s cohort to the device')
  parser.add_argument('--feature-dtype', default='float32', choices=('float32', 'uint8'),
                      help='with --stream: features stored as float32 or 0/1 uint8')
  parser.add_argument('--cpu-devices', type=int, default=0,
                      help='split the CPU into this many XLA devices (default: '
                      'one per core, up to 8, as fedjax-het does; CPU only)')
  parser.add_argument('--processes', type=int, default=1,
                      help='run in this many processes on this machine, joined by '
                      'jax.distributed on localhost, the cohort sharded over all their '
                      'devices')
  # Set by --processes in the processes it starts.
  parser.add_argument('--distributed', action='store_true', help=argparse.SUPPRESS)
  parser.add_argument('--pin-cpus', default='', help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.rounds < 1:
    parser.error('--rounds must be at least 1')
  if args.processes < 1:
    parser.error('--processes must be at least 1')
  if args.processes > 1 and args.stream:
    parser.error('--stream runs in one process (--processes 1)')
  return args


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def launch_processes(argv: list[str], processes: int, cpu_devices: int) -> int:
  """`fedjax-het bench argv --distributed` in `processes` processes on this machine.

  They meet at a coordinator on a free localhost port (JAX_COORDINATOR_ADDRESS,
  JAX_NUM_PROCESSES, JAX_PROCESS_ID: `sharding.initialize_distributed`); each is
  pinned to an equal share of this process's cores (when there are enough) and
  gets `cpu_devices` XLA CPU devices (default 1). Prints process 0's output and
  returns the first non-zero exit status, with that process's output on stderr.
  """
  port = _free_port()
  cores = sorted(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else []
  shares = (np.array_split(cores, processes) if len(cores) >= processes
            else [None] * processes)
  children = []
  for index, share in enumerate(shares):
    env = {**os.environ, 'JAX_COORDINATOR_ADDRESS': f'localhost:{port}',
           'JAX_NUM_PROCESSES': str(processes), 'JAX_PROCESS_ID': str(index)}
    sharding.set_cpu_device_count(cpu_devices or 1, env)
    pin = [] if share is None else ['--pin-cpus', ','.join(str(c) for c in share)]
    children.append(subprocess.Popen(
        [sys.executable, '-m', 'fedjax_het', 'bench', *argv, '--distributed', *pin],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
  outputs = [child.communicate()[0] for child in children]
  print(outputs[0], end='', flush=True)
  for index, (child, output) in enumerate(zip(children, outputs)):
    if child.returncode:
      print(f'fedjax-het bench: process {index} of {processes} exited with status '
            f'{child.returncode}:\n{output[-3000:]}', file=sys.stderr)
      return child.returncode
  return 0


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  args = parse_args(argv)
  if args.processes > 1 and not args.distributed:
    return launch_processes(argv, args.processes, args.cpu_devices)
  if args.pin_cpus:  # before XLA sizes its thread pool
    os.sched_setaffinity(0, {int(c) for c in args.pin_cpus.split(',')})
  if args.cpu_devices:
    sharding.set_cpu_device_count(args.cpu_devices)
  if args.distributed:
    sharding.initialize_distributed()
  try:
    result = benchmark(args.workload, args.backend, args.rounds, args.algorithm,
                       args.client_devices, args.conv_impl, args.stream,
                       args.feature_dtype, num_clients=args.num_clients,
                       cohort=args.cohort, local_steps=args.local_steps,
                       map_chunk_size=args.map_chunk_size)
  except ValueError as e:
    print(f'fedjax-het bench: error: {e}', file=sys.stderr)
    return 2
  if result is None:
    return 0
  processes = f' in {result["processes"]} processes' if result['processes'] > 1 else ''
  print(f'{result["workload"]} {result["algorithm"]}/{result["backend"]} on '
        f'{result["devices"]} {result["platform"]} device(s){processes}'
        f'{" (streamed)" if result.get("stream") else ""}: '
        f'{result["s_per_round_median"]:.4f} s/round (min {result["s_per_round_min"]:.4f}, '
        f'max {result["s_per_round_max"]:.4f}), {result["examples_per_s"]:.0f} examples/s')
  print(f'centralised {result["centralized_s"]:.4f} s ({result["centralized_ratio"]:.2f}x); '
        f'roofline {result["roofline_s"]:.4f} s at '
        f'{result["matmul_flops_per_s"] / 1e9:.0f} GFLOP/s '
        f'({100 * result["roofline_fraction"]:.0f}% reached); memory bound '
        f'{result["memory_s"]:.4f} s at {result["copy_bytes_per_s"] / 1e9:.1f} GB/s; '
        f'peak memory {result["peak_memory_bytes"] / 2**20:.0f} MiB '
        f'({result["peak_memory_source"]})')
  print(json.dumps(result), flush=True)
  return 0
