"""Seconds per round of FedAvg under each client-axis backend, on one workload.

Command:  python experiments/bench/backends.py [--rounds 10] [--workload mlp|cnn]

Workload 'mlp' is PERF_NOTES.md's W-MLP: 1000 synthetic clients × 50 examples
of 28×28×1, MLP 784-200-200-10, cohort 50, 5 SGD steps of batch 10. 'cnn' is
the same federation on 32×32×3 with pfl's simple_cnn (W-PFL). Prints one line
per backend (median/min/max of `rounds` timed rounds after a warm-up round)
and a last line of JSON with all numbers.
"""
import argparse
import json
import time

import jax
import numpy as np

from fedjax_het import algorithms, models
from fedjax_het.config import base_config
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.data import build_federated, load_dataset

WORKLOADS = {
    'mlp': dict(shape=(28, 28, 1), model='mlp', model_options={'hidden': (200, 200)}),
    'cnn': dict(shape=(32, 32, 3), model='simple_cnn', model_options={}),
}


def time_backend(workload: str, backend: str, rounds: int) -> dict:
  spec = WORKLOADS[workload]
  config = base_config()
  config.update(dict(num_clients=1000, clients_per_round=50, local_steps=5,
                     batch_size=10, client_lr=0.05, backend=backend,
                     model=spec['model'], partition='iid'))
  config.model_options = spec['model_options']
  dataset = load_dataset('synthetic', seed=0, num_train=50_000, num_test=100,
                         shape=spec['shape'])
  split = build_federated(dataset, num_clients=1000, partition='iid', seed=0)
  model = models.create_model(config.model, 10, **spec['model_options'])
  params = models.init_params(model, jax.random.PRNGKey(0), spec['shape'])
  algorithm = algorithms.create_algorithm('fedavg', config, model, split.train)
  runner = RoundRunner(algorithm, backend)
  data = split.train.to_device()
  state = algorithm.init(params, jax.random.PRNGKey(1))
  state, _ = runner.run(state, data, 1)  # compile
  jax.block_until_ready(state)
  seconds = []
  for _ in range(rounds):
    tic = time.perf_counter()
    state, _ = runner.run(state, data, 1)
    jax.block_until_ready(state)
    seconds.append(time.perf_counter() - tic)
  return {'workload': workload, 'backend': backend,
          's_per_round_median': float(np.median(seconds)),
          's_per_round_min': float(np.min(seconds)),
          's_per_round_max': float(np.max(seconds)),
          'examples_per_s': 50 * 5 * 10 / float(np.median(seconds))}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--rounds', type=int, default=10)
  parser.add_argument('--workload', choices=sorted(WORKLOADS), default='mlp')
  parser.add_argument('--backends', default='vmap,map,sequential')
  args = parser.parse_args()
  results = []
  for backend in args.backends.split(','):
    result = time_backend(args.workload, backend, args.rounds)
    results.append(result)
    print(f'{backend:>10}: {result["s_per_round_median"]:.4f} s/round '
          f'(min {result["s_per_round_min"]:.4f}, max '
          f'{result["s_per_round_max"]:.4f}), '
          f'{result["examples_per_s"]:.0f} examples/s', flush=True)
  print(json.dumps(results))


if __name__ == '__main__':
  main()
