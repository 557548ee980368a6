"""Buffered-async FedAvg (K slots a server step) against a synchronous round; 10,000 clients.

Command:  python experiments/bench/buffered.py [--repeats 3] [--calls 5]
            [--clients 10000] [--cpu-devices 1] [--host-clients 100000 --host-steps 2000]

1. Speed (issue 36's goal: ≤ 1.2×): W-MLP's federation (1,000 clients, 50 examples each, MLP
   200-200, 5 local steps of batch 10, `bench.WORKLOADS`), synchronous FedAvg with
   clients_per_round = K = 50 against FedAvg in buffered mode (K = 50, C = 60, τ_max = 5,
   1/√(1 + τ) over the buffer's sum: FedScale's setting), same model, same data, same initial
   params; one call is one round (a server step), alternated in one process
   (`alternation.alternate`), median s per call over the repeats.
2. Scale: `--clients` synthetic clients (20 examples of 8×8, MLP 32, 2 local steps of batch 10),
   C = 100, K = 50, τ_max = 5: wall s per server step (median of `--calls`, after a warm-up
   call), and the memory the clock adds per client: host bytes of the simulated schedule (the
   events and steps of `systems.buffered.BufferedSchedule`, beside the [Q, N] arrays of
   `systems.clock.Schedule` it replaced, Q = the steps simulated) and of one call's round
   inputs ([1, K] leaves), and device bytes of the server state (params, optimiser state and
   the version table of τ_max + 1 models), which has no per-client row; the federated data on
   the device and the process's peak memory are reported beside them.
3. Host schedule alone (with --host-clients): FedBuff's clock for `--host-clients` clients and
   `--host-steps` server steps (C = 100, K = 50, τ_max = 5, 2 s rounds with σ = 0.5 jitter):
   wall s of the simulation and its summary facts, its result's bytes and the peak Python/numpy
   memory it allocates (tracemalloc, in a second, traced run).
Prints, asserts nothing.
"""
import argparse
import dataclasses
import time
import tracemalloc

import alternation
import jax
import numpy as np

from fedjax_het import run
from fedjax_het.core import sharding
from fedjax_het.parts.clock import ClockOptions, VirtualClock
from fedjax_het.systems import clock as clock_lib
from fedjax_het.tools import bench

FEDBUFF = dict(concurrency=60, tau_max=5, staleness_weight='fedscale',
               staleness_normalisation='sum')


def buffered(config, buffer_size: int, **clock):
  """`config` in buffered mode: K slots a server step (clients_per_round = K)."""
  config = config.copy_and_resolve_references()
  config.clients_per_round = buffer_size
  config.clock.update(buffer_size=buffer_size, **clock)
  return config


def speed(repeats: int, calls: int) -> None:
  workload = bench.WORKLOADS['W-MLP']
  synchronous = bench.workload_config(workload, 'auto', 'fedavg')
  synchronous.rounds = (repeats * (calls + 1)) + 1
  variants = {'FedAvg, K = 50 a round': synchronous,
              'buffered FedAvg, K = 50, C = 60': buffered(synchronous, workload.cohort,
                                                          **FEDBUFF)}
  print(alternation.round_table(
      variants, repeats, calls, 'round',
      f'W-MLP, {workload.num_clients} clients (a buffered round is a server step)'))


def tree_bytes(tree) -> int:
  return sum(x.nbytes for x in jax.tree.leaves(tree))


def schedule_bytes(schedule) -> int:
  """Bytes of a schedule dataclass's arrays (and scalars)."""
  return sum(np.asarray(x).nbytes for x in dataclasses.asdict(schedule).values())


def scale(num_clients: int, calls: int) -> None:
  workload = dataclasses.replace(
      bench.WORKLOADS['W-MLP'], model_options={'hidden': (32,)}, shape=(8, 8, 1),
      num_clients=num_clients, examples_per_client=20, cohort=50, local_steps=2)
  config = buffered(bench.workload_config(workload, 'auto', 'fedavg'), 50,
                    concurrency=100, tau_max=5)
  config.rounds = calls + 1
  split, _, params, method = run.build_experiment(config)
  runner = run.make_runner(config, method)
  data = runner.place(split.train.to_device())
  clock = method.parts['clock'].clock
  host = schedule_bytes(clock.simulated)
  dense = schedule_bytes(clock.simulated.schedule)   # what the run held before
  inputs = tree_bytes(method.round_inputs(0, 1))
  state = bench.initial_state(method, runner, params)
  device = tree_bytes(state)
  seconds, state = bench.time_calls(lambda s: runner.run(s, data, 1)[0], state, calls)
  print(f'{num_clients} clients, C = 100, K = 50, τ_max = 5, {calls} server steps '
        f'(after a warm-up step), {jax.device_count()} device(s)')
  print(f'  wall s per server step: median {np.median(seconds):.4f} '
        f'(min {min(seconds):.4f}, max {max(seconds):.4f})')
  print(f'  host schedule: {host / 1e3:.1f} kB for {config.rounds} steps = '
        f'{host / num_clients / config.rounds:.2f} B per client per step simulated '
        f'({host / config.rounds / 50:.0f} B per arrival); the [Q, N] Schedule: '
        f'{dense / 1e6:.2f} MB = {dense / num_clients / config.rounds:.1f} B per client per step')
  print(f'  round inputs of a step: {inputs} B ([1, K] leaves, none per client)')
  print(f'  device server state: {device / 1e6:.3f} MB (params, optimiser state, the version '
        f'table of {config.clock.tau_max + 1} models: '
        f'{tree_bytes(state.extras["start"]) / 1e6:.3f} MB), no row per client')
  print(f'  device data: {tree_bytes(data) / 1e6:.1f} MB = '
        f'{tree_bytes(data) / num_clients:.0f} B per client (the federation itself)')
  peak, where = bench.peak_memory()
  print(f'  peak {where}: {peak / 1e6:.0f} MB (the whole process, both parts)')


def host_only(num_clients: int, steps: int) -> None:
  def simulate():
    options = ClockOptions(buffer_size=50, concurrency=100, tau_max=5, jitter=0.5)
    virtual = VirtualClock(options, num_clients=num_clients, rounds=steps, seed=0,
                           duration=clock_lib.with_jitter(lambda n, q, i: 2.0, 0.5, 0))
    return virtual.simulate(), virtual.summary_facts()

  start = time.perf_counter()
  simulated, facts = simulate()
  seconds = time.perf_counter() - start
  tracemalloc.start()   # again, traced (slower): the memory it allocates
  simulate()
  peak = tracemalloc.get_traced_memory()[1]
  tracemalloc.stop()
  print(f'host schedule alone: {num_clients} clients, {steps} server steps, C = 100, K = 50')
  print(f'  simulate + summary facts: {seconds:.1f} s wall; result {schedule_bytes(simulated) / 1e6:.1f} '
        f'MB; peak allocated {peak / 1e6:.0f} MB ({facts["virtual_time_s"]:.0f} virtual s)')


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--repeats', type=int, default=3)
  parser.add_argument('--calls', type=int, default=5)
  parser.add_argument('--clients', type=int, default=10_000)
  parser.add_argument('--cpu-devices', type=int, default=1)
  parser.add_argument('--host-clients', type=int, default=0)
  parser.add_argument('--host-steps', type=int, default=2000)
  args = parser.parse_args()
  sharding.set_cpu_device_count(args.cpu_devices)
  if args.host_clients:
    host_only(args.host_clients, args.host_steps)
    return
  speed(args.repeats, args.calls)
  scale(args.clients, args.calls)


if __name__ == '__main__':
  main()
