"""FedAvg, FIARSE and HeteroFL, synchronous vs buffered-async at equal virtual time on a trace.

Command:   python experiments/fedbuff/compare.py [--seeds 0,1,2] [--sync-rounds 15]
             [--out /tmp/fedbuff_compare]
Setting:   40 synthetic clients (noise 3, Dirichlet 0.5; seed-dependent data, init and sampling),
           an MLP 64, 5 local steps of batch 10, lr 0.05; FIARSE and HeteroFL with capacities
           (0.25, 0.5, 1) (HeteroFL without its scaler, which diverges on an MLP). Round times come
           from a synthetic device-capacity file written in FedScale's format
           (`traces.write_capacity`, 40 devices, ms per sample log-normal with median 20 ms and
           σ = 1: a long tail of slow devices; 10 Mbit/s links) and converted by `fedjax-het
           traces`, the same file for every run. Synchronous: the clock's Alg. 1 at μ = 1 (every
           client a round, the round waits for the slowest), `--sync-rounds` rounds; its virtual
           time T (per seed) is the budget. Buffered-async: FedBuff's clock, K = 10 a server
           step, C = 20 in flight, τ_max = 5, 1/√(1 + τ) over the buffer's sum (FedScale's), as
           many server steps as end by T (read from the simulated schedule). Prints, per method
           and mode, the final test accuracy over the seeds (mean, sd and min..max), the virtual
           time and the updates aggregated; asserts nothing.
"""
import argparse
import os

import numpy as np

from fedjax_het import run
from fedjax_het.config import base_config
from fedjax_het.systems import traces

NUM_CLIENTS = 40
METHODS = ('fedavg', 'fiarse', 'heterofl')


def write_trace(directory: str) -> str:
  """The synthetic device file in FedScale's format, converted to the clock's .npz."""
  rng = np.random.default_rng(0)
  capacity = traces.DeviceCapacity(
      ids=np.arange(NUM_CLIENTS), ms_per_sample=20.0 * np.exp(rng.normal(size=NUM_CLIENTS)),
      kbps=np.full(NUM_CLIENTS, 10_000.0))
  pickled, npz = os.path.join(directory, 'capacity.pkl'), os.path.join(directory, 'trace.npz')
  traces.write_capacity(pickled, capacity)
  if traces.traces_command(['--capacity', pickled, '--out', npz]):
    raise SystemExit('fedjax-het traces failed')
  return npz


def config_of(method: str, seed: int, trace: str, rounds: int, buffered: bool):
  c = base_config()
  c.update(algorithm=method, dataset='synthetic', num_clients=NUM_CLIENTS, partition='dirichlet',
           alpha=0.5, model='mlp', rounds=rounds, local_steps=5, batch_size=10, client_lr=0.05,
           eval_every=rounds, checkpoint_every=rounds, seed=seed, clients_per_round=NUM_CLIENTS)
  c.dataset_options = {'noise': 3.0}
  c.model_options.hidden = (64,)
  if method != 'fedavg':
    c.capacities = (0.25, 0.5, 1.0)
  if method == 'heterofl':
    c.submodel.scaler = False
  c.clock.device_trace = trace
  if buffered:
    c.clients_per_round = 10
    c.clock.update(buffer_size=10, concurrency=20, tau_max=5, staleness_weight='fedscale',
                   staleness_normalisation='sum')
  return c


def steps_within(config, budget: float) -> int:
  """Server steps of `config`'s buffered schedule that end by `budget` virtual seconds."""
  method = run.build_experiment(config)[3]
  return int(np.sum(method.parts['clock'].clock.simulated.end_time <= budget))


def train(config, out: str, name: str) -> dict:
  summary = run.train(config, os.path.join(out, name))
  return {'accuracy': summary['final_test_accuracy'], 'virtual': summary['virtual_time_s'],
          'updates': summary['totals']['arrivals'], 'rounds': config.rounds}


def spread(values) -> str:
  v = np.asarray(values)
  return f'{v.mean():.3f} ± {v.std(ddof=1):.3f} ({v.min():.3f}..{v.max():.3f})'


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--seeds', default='0,1,2')
  parser.add_argument('--sync-rounds', type=int, default=15)
  parser.add_argument('--out', default='/tmp/fedbuff_compare')
  args = parser.parse_args()
  os.makedirs(args.out, exist_ok=True)
  trace = write_trace(args.out)
  seeds = [int(s) for s in args.seeds.split(',')]
  results = {}
  for method in METHODS:
    for seed in seeds:
      sync = train(config_of(method, seed, trace, args.sync_rounds, False), args.out,
                   f'{method}_sync_{seed}')
      probe = config_of(method, seed, trace, 20 * args.sync_rounds, True)
      steps = steps_within(probe, sync['virtual'])
      asynchronous = train(config_of(method, seed, trace, steps, True), args.out,
                           f'{method}_buffered_{seed}')
      for mode, result in (('synchronous', sync), ('buffered', asynchronous)):
        results.setdefault((method, mode), []).append(result)
      print(method, seed, sync, asynchronous, flush=True)
  print(f'\nseeds {seeds}; accuracy: mean ± sd (min..max) over the seeds')
  print('| method | mode | test accuracy | virtual s | rounds (steps) | updates |')
  print('| --- | --- | --- | ---: | ---: | ---: |')
  for (method, mode), rows in results.items():
    mean = lambda key: np.mean([r[key] for r in rows])
    print(f'| {method} | {mode} | {spread([r["accuracy"] for r in rows])} | '
          f'{mean("virtual"):.0f} | {mean("rounds"):.0f} | {mean("updates"):.0f} |')


if __name__ == '__main__':
  main()
