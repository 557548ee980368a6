"""DrJAX peer: FedAvg written with DrJAX's MapReduce primitives on `fedjax-het bench`'s workloads.

Command:  python experiments/bench/drjax_peer.py [--workload W-MLP|W-PFL]
            [--rounds 10] [--cpu-devices 2] [--client-devices 0] [--no-check]

DrJAX (google/drjax; `pip install fedjax_het[peers]`) is the other JAX
library of federated primitives. Its `map_fn` is `jax.vmap` with the clients
axis sharded over a device mesh (`spmd_axis_name` plus sharding constraints
on a mesh axis named like the placement); `broadcast` tiles the server model
to the clients and `reduce_mean` averages over them. One FedAvg round here:

    params_c = broadcast(params)                                 # [K, ...]
    delta_c  = map_fn(local SGD: S steps of batch B, lr η_c)     # [K, ...]
    params  ← params − η_s · reduce_mean(delta_c)                # η_s = 1

under one `jax.jit` (a `drjax.program` with placements {'clients': K}), the
federated data on device as an argument, the server state donated, the
cohort axis sharded over the same one-axis 'clients' mesh that `fedjax-het
bench` uses (`sharding.client_mesh`; 1 device: plain vmap). The workload
(synthetic data, model, initial params, client lr 0.01, uniform weights,
server lr 1) is `bench.build_federation`'s, and the cohort and each client's
minibatch rows are drawn with fedjax_het's samplers
(`FederatedAlgorithm.plan_round`, `core.batching.batch_indices`), so a DrJAX
round does the same arithmetic as a fedjax_het FedAvg round; the local SGD
loop, the client axis and the aggregation are DrJAX + plain JAX.

Prints one JSON line per run: s/round median/min/max over `--rounds` rounds
after a compiling warm-up (`bench.time_calls`, as `fedjax-het bench` times its
rounds), examples/s and, unless `--no-check`, the largest difference between
the parameters after one DrJAX round and after one fedjax_het FedAvg round
(`RoundRunner`, backend auto, the same mesh) from the same state.
`--cpu-devices` splits the CPU into XLA devices; its default (2) is what
`fedjax-het` picks on the 2-core benchmark machine.
"""
import argparse
import dataclasses
import json
import logging

import drjax
import jax
import jax.numpy as jnp
import optax

from fedjax_het.tools import bench
from fedjax_het.core import batching, sharding


def make_round(method, model, data, mesh):
  """One jitted FedAvg round `state -> state` written with DrJAX primitives.

  `method` is the fedjax_het FedAvg built for the workload: its config gives
  the local steps, batch size and learning rates, its `plan_round` the
  cohort and the clients' keys.
  """
  config = method.config
  cohort, steps, batch_size = (config.clients_per_round, config.local_steps,
                               config.batch_size)
  client_lr, server_lr = config.client_lr, config.server_lr
  max_examples = data.y.shape[1]
  epochs_bound = batching.epochs_per_batch(batch_size, method.min_client_count)

  def loss(params, x, y):
    logits = model.apply({'params': params}, x, train=True)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

  @drjax.program(placements={'clients': cohort})
  def fedavg_round(state, data):
    plans = method.plan_round(state, data)

    def client_update(params, client_id, key):
      count = data.counts[client_id]

      def sgd_step(p, s):
        rows = batching.batch_indices(
            key, s, count, batch_size=batch_size, max_examples=max_examples,
            max_epochs_per_batch=epochs_bound)
        grads = jax.grad(loss)(p, data.x[client_id, rows],
                               data.y[client_id, rows])
        return jax.tree.map(lambda w, g: w - client_lr * g, p, grads), None

      end, _ = jax.lax.scan(sgd_step, params, jnp.arange(steps))
      return jax.tree.map(jnp.subtract, params, end)

    starts = drjax.broadcast(state.params, mesh=mesh)
    deltas = drjax.map_fn(client_update, (starts, plans.client_id, plans.key),
                          mesh=mesh)
    mean_delta = drjax.reduce_mean(deltas)
    params = jax.tree.map(lambda w, d: w - server_lr * d, state.params,
                          mean_delta)
    return state.replace(params=params, round=state.round + 1)

  return jax.jit(fedavg_round, donate_argnums=0)


def max_abs_difference(a, b) -> float:
  return max(float(jnp.max(jnp.abs(x - y)))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def check_against_fedjax_het(method, runner, round_fn, params, data) -> dict:
  """One DrJAX round and one fedjax_het round from the same state: how far apart.

  Both rounds draw the same cohort and minibatch rows (same state key and
  round, same samplers), so the parameters agree up to float rounding (the
  order of the sums over clients and devices).
  """
  # Both rounds donate their state.
  ours, _ = runner.run(bench.initial_state(method, runner, params), data, 1)
  peer = round_fn(bench.initial_state(method, runner, params), data)
  scale = max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(ours.params))
  moved = max_abs_difference(ours.params, params)
  diff = max_abs_difference(ours.params, peer.params)
  return {'compared_with': 'fedjax_het FedAvg round (RoundRunner, same cohort '
                           'and minibatch rows)',
          'max_abs_diff': diff, 'max_abs_param': scale,
          'max_abs_update': moved,
          'allclose': bool(diff <= 1e-5 * max(scale, 1.0))}


def peer_benchmark(workload_name: str, rounds: int = 10, client_devices: int = 0,
                   check: bool = True, **overrides) -> dict:
  """Times `rounds` DrJAX FedAvg rounds of a `fedjax-het bench` workload."""
  overrides = {k: v for k, v in overrides.items() if v is not None}
  workload = dataclasses.replace(bench.WORKLOADS[workload_name], **overrides)
  if workload.algorithm != 'fedavg':
    raise ValueError(f'{workload_name} runs {workload.algorithm}; the DrJAX '
                     'peer is FedAvg (W-MLP, W-PFL).')
  split, model, params, method, runner = bench.build_federation(
      workload, 'auto', 'fedavg', client_devices)
  mesh = runner.mesh  # the cohort's mesh of `fedjax-het bench`, or None
  data = runner.place(split.train.to_device())
  round_fn = make_round(method, model, data, mesh)
  state = bench.initial_state(method, runner, params)
  seconds, _ = bench.time_calls(lambda s: round_fn(s, data), state, rounds)
  result = {
      'workload': workload_name, 'peer': 'drjax', 'algorithm': 'fedavg',
      'drjax_version': drjax.__version__, 'jax_version': jax.__version__,
      'map_fn': 'vmap, clients axis sharded' if mesh is not None else 'vmap',
      'devices': 1 if mesh is None else int(mesh.devices.size),
      'platform': jax.default_backend(), 'seconds': seconds,
      **bench.round_timings(workload, seconds),
  }
  if check:
    result['check'] = check_against_fedjax_het(method, runner, round_fn,
                                               params, data)
  return result


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workload', default='W-MLP', choices=('W-MLP', 'W-PFL'))
  parser.add_argument('--rounds', type=int, default=10)
  parser.add_argument('--cpu-devices', type=int, default=2,
                      help='split the CPU into this many XLA devices')
  parser.add_argument('--client-devices', type=int, default=0,
                      help='devices to shard the cohort over (0: all)')
  parser.add_argument('--num-clients', type=int)
  parser.add_argument('--cohort', type=int)
  parser.add_argument('--local-steps', type=int)
  parser.add_argument('--no-check', dest='check', action='store_false',
                      help='skip the comparison with a fedjax_het round')
  args = parser.parse_args()
  sharding.set_cpu_device_count(args.cpu_devices)
  # DrJAX logs a warning per traced primitive when there is no mesh (1 device).
  logging.getLogger('absl').setLevel(logging.ERROR)
  print(json.dumps(peer_benchmark(
      args.workload, args.rounds, args.client_devices, args.check,
      num_clients=args.num_clients, cohort=args.cohort,
      local_steps=args.local_steps)), flush=True)


if __name__ == '__main__':
  main()
