"""Seconds per round of FL methods under each client-axis backend, one workload.

Command:  python experiments/bench/backends.py [--rounds 10] [--workload mlp|cnn]
            [--backends vmap,map,sequential] [--algorithms fedavg,fiarse,heterofl]

Workload 'mlp' is PERF_NOTES.md's W-MLP: 1000 synthetic clients × 50 examples
of 28×28×1, MLP 784-200-200-10, cohort 50, 5 SGD steps of batch 10. 'cnn' is
the same federation on 32×32×3 with pfl's simple_cnn (W-PFL). Prints one line
per backend (median/min/max of `rounds` timed rounds after a warm-up round),
the centralised limit (one model taking the round's 50 × 5 SGD steps of
batch 10 in one jitted `lax.scan`) and a last line of JSON with all numbers.
Submodel methods (FIARSE, HeteroFL, ...) run FIARSE's four capacities
{1/64, 1/16, 1/4, 1} in equal client groups on the same federation, so their
rows measure the overhead of thresholds, masks and partial averaging.
"""
import argparse
import json
import time

import jax
import numpy as np
import optax

from fedjax_het import algorithms, models
from fedjax_het.config import base_config
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.data import build_federated, load_dataset

WORKLOADS = {
    'mlp': dict(shape=(28, 28, 1), model='mlp', model_options={'hidden': (200, 200)}),
    'cnn': dict(shape=(32, 32, 3), model='simple_cnn', model_options={}),
}


COHORT, LOCAL_STEPS, BATCH = 50, 5, 10
CAPACITIES = (1 / 64, 1 / 16, 1 / 4, 1.0)


def _median_seconds(step, state, rounds):
  state = step(state)  # compile
  jax.block_until_ready(state)
  seconds = []
  for _ in range(rounds):
    tic = time.perf_counter()
    state = step(state)
    jax.block_until_ready(state)
    seconds.append(time.perf_counter() - tic)
  return seconds


def _summarise(name, workload, seconds, algorithm='fedavg'):
  median = float(np.median(seconds))
  return {'workload': workload, 'backend': name, 'algorithm': algorithm,
          's_per_round_median': median,
          's_per_round_min': float(np.min(seconds)),
          's_per_round_max': float(np.max(seconds)),
          'examples_per_s': COHORT * LOCAL_STEPS * BATCH / median}


def time_centralized(workload: str, rounds: int) -> dict:
  """One model, the round's examples as COHORT × LOCAL_STEPS jitted SGD steps."""
  spec = WORKLOADS[workload]
  model = models.create_model(spec['model'], 10, **spec['model_options'])
  params = models.init_params(model, jax.random.PRNGKey(0), spec['shape'])
  steps = COHORT * LOCAL_STEPS
  x = jax.random.normal(jax.random.PRNGKey(1), (steps, BATCH) + spec['shape'])
  y = jax.random.randint(jax.random.PRNGKey(2), (steps, BATCH), 0, 10)

  def loss(p, xb, yb):
    logits = model.apply({'params': p}, xb)
    return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

  @jax.jit
  def epoch(p):
    def sgd(p, batch):
      g = jax.grad(loss)(p, *batch)
      return jax.tree.map(lambda w, gw: w - 0.05 * gw, p, g), None
    return jax.lax.scan(sgd, p, (x, y))[0]

  return _summarise('centralized', workload, _median_seconds(epoch, params, rounds))


def time_backend(workload: str, backend: str, rounds: int,
                 algorithm: str = 'fedavg') -> dict:
  spec = WORKLOADS[workload]
  config = base_config()
  config.update(dict(num_clients=1000, clients_per_round=COHORT,
                     local_steps=LOCAL_STEPS, batch_size=BATCH, client_lr=0.05,
                     backend=backend, aggregation_weights='uniform',
                     model=spec['model'], partition='iid'))
  if algorithms.ALGORITHMS[algorithm].supports_capacities:
    config.capacities = CAPACITIES
    config.submodel.scaler = False  # HeteroFL's Scaler needs norms (no MLP)
  config.model_options = spec['model_options']
  dataset = load_dataset('synthetic', seed=0, num_train=50_000, num_test=100,
                         shape=spec['shape'])
  split = build_federated(dataset, num_clients=1000, partition='iid', seed=0)
  model = models.create_model(config.model, 10, **spec['model_options'])
  params = models.init_params(model, jax.random.PRNGKey(0), spec['shape'])
  method = algorithms.create_algorithm(algorithm, config, model, split.train)
  runner = RoundRunner(method, backend)
  data = split.train.to_device()
  state = method.init(params, jax.random.PRNGKey(1))
  seconds = _median_seconds(lambda s: runner.run(s, data, 1)[0], state, rounds)
  return _summarise(backend, workload, seconds, algorithm)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--rounds', type=int, default=10)
  parser.add_argument('--workload', choices=sorted(WORKLOADS), default='mlp')
  parser.add_argument('--backends', default='vmap,map,sequential')
  parser.add_argument('--algorithms', default='fedavg')
  args = parser.parse_args()
  runs = [(a, b) for a in args.algorithms.split(',')
          for b in args.backends.split(',')] + [('fedavg', 'centralized')]
  results = []
  for algorithm, backend in runs:
    if backend == 'centralized':
      result = time_centralized(args.workload, args.rounds)
    else:
      result = time_backend(args.workload, backend, args.rounds, algorithm)
    results.append(result)
    name = f'{algorithm}/{backend}'
    print(f'{name:>22}: {result["s_per_round_median"]:.4f} s/round '
          f'(min {result["s_per_round_min"]:.4f}, max '
          f'{result["s_per_round_max"]:.4f}), '
          f'{result["examples_per_s"]:.0f} examples/s', flush=True)
  limit = results[-1]['s_per_round_median']
  for result in results[:-1]:
    result['centralized_ratio'] = result['s_per_round_median'] / limit
  print('ratio to centralised: ' + ', '.join(
      f'{r["algorithm"]}/{r["backend"]} {r["centralized_ratio"]:.2f}×'
      for r in results[:-1]))
  print(json.dumps(results))


if __name__ == '__main__':
  main()
