"""FedJAX's EMNIST reference run, timed: 1,500 rounds of FedAvg on W-EMNIST.

Command:   python experiments/bench/fedjax_reference.py [--rounds 1500] [--chunk 100]
               [--backend auto] [--num-clients 3400]
Anchor:    FedJAX (Ro et al. 2021) reports its EMNIST FedAvg reference, 1,500 rounds of 10
           clients, each one local epoch of batch 20 with its CNN, in "a few minutes" on TPU.
Workload:  `fedjax-het bench`'s W-EMNIST (fedjax_het/tools/bench.py): 3,400 writers of synthetic
           28×28×1 images with F-EMNIST's size law, 62 classes, simple_cnn, stored ragged and
           placed on the device whole. Rounds run `--chunk` at a time in one compiled call
           (`RoundRunner.run`'s scan over rounds), as a training run with rounds_per_call =
           chunk does; no evaluation is timed.

It prints one JSON object: `compile_s` (the first call less a steady call of the same
rounds), `total_s` (the `--rounds` rounds after that first call, every call blocked until
done), `s_per_round`, examples/s over the expected real steps (the mean ⌈n/B⌉ of the
federation × cohort × rounds), and the mean
`useful_step_fraction` of the rounds where the engine reports it.
"""
import argparse
import dataclasses
import json
import tempfile
import time

import jax
import numpy as np

from fedjax_het import methods, models, run
from fedjax_het.tools import bench


def parse_args(argv=None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--rounds', type=int, default=1500, help='rounds timed (default 1500)')
  parser.add_argument('--chunk', type=int, default=100, help='rounds per compiled call')
  parser.add_argument('--backend', default='auto', help='auto | vmap | map | sequential')
  parser.add_argument('--num-clients', type=int, default=bench.EMNIST_WRITERS)
  args = parser.parse_args(argv)
  if args.rounds < 1 or args.chunk < 1 or args.rounds % args.chunk:
    parser.error(f'--rounds ({args.rounds}) must be a positive multiple of --chunk '
                 f'({args.chunk}).')
  return args


def timed_calls(step, state, calls: int) -> tuple[list[float], object, list]:
  """Seconds of each of `calls` calls `state, metrics = step(state)`, blocked until done."""
  seconds, metrics = [], []
  for _ in range(calls):
    tic = time.perf_counter()
    state, m = jax.block_until_ready(step(state))
    seconds.append(time.perf_counter() - tic)
    metrics.append(jax.device_get(m))
  return seconds, state, metrics


def main(argv=None) -> dict:
  args = parse_args(argv)
  workload = dataclasses.replace(bench.WORKLOADS['W-EMNIST'], num_clients=args.num_clients)
  config = bench.workload_config(workload, args.backend)
  with tempfile.TemporaryDirectory(prefix='fedjax_het_emnist_') as directory:
    data = bench.host_federation(workload, directory)
    model = models.create_model(workload.model, workload.num_classes, **workload.model_options)
    params = models.init_params(model, jax.random.PRNGKey(0), workload.shape)
    method = methods.create_algorithm('fedavg', config, model, data)
    runner = run.make_runner(config, method)
    placed = runner.place(data.to_device())
    step = lambda s: runner.run(s, placed, args.chunk)
    state = bench.initial_state(method, runner, params)
    (first,), state, _ = timed_calls(step, state, 1)
    seconds, state, metrics = timed_calls(step, state, args.rounds // args.chunk)
    counts = np.asarray(data.counts)
  steady = float(np.median(seconds))
  real_steps = np.ceil(counts / workload.batch_size).mean() * workload.cohort * args.rounds
  fractions = [np.asarray(m['useful_step_fraction']) for m in metrics
               if 'useful_step_fraction' in m]
  result = {
      'workload': 'W-EMNIST', 'rounds': args.rounds, 'chunk': args.chunk,
      'num_clients': args.num_clients, 'backend': runner.backend,
      'platform': jax.default_backend(), 'device_kind': jax.local_devices()[0].device_kind,
      'compile_s': first - steady, 'total_s': float(np.sum(seconds)),
      's_per_round': float(np.sum(seconds)) / args.rounds,
      'examples_per_s': real_steps * workload.batch_size / float(np.sum(seconds)),
      'useful_step_fraction': float(np.mean(fractions)) if fractions else None,
  }
  print(json.dumps(result))
  return result


if __name__ == '__main__':
  main()
