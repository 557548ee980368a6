"""Timing variants alternated in one process, and their table relative to the first.

On a shared machine whose speed drifts by tens of percent between processes, the
ratio of two variants timed in turns in one process is the measured quantity
(`method_ratios.py`, `cost_of_realism.py`, `privacy_cost.py`, `buffered.py`, `cpu_lowering.py`).
"""
import time
from typing import Any, Callable

import jax
import numpy as np

from fedjax_het import run
from fedjax_het.tools import bench


def one_round(config) -> tuple[Callable[[Any], Any], Any]:
  """(step, state) of the run of `config`: `step(state)` runs one round on its
  data, placed once; `state` is `bench.initial_state`."""
  split, _, params, method = run.build_experiment(config)
  runner = run.make_runner(config, method)
  data = runner.place(split.train.to_device())
  return lambda s: runner.run(s, data, 1)[0], bench.initial_state(method, runner, params)


def alternate(variants: dict[str, tuple[Callable[[Any], Any], Any]], repeats: int,
              calls: int) -> tuple[dict, dict]:
  """Times each variant's `state = step(state)` in turn, `repeats` times over.

  `variants` maps a name to (step, initial state). Each turn is one warm-up call
  and `calls` timed calls (`bench.time_calls`). Returns ({name: [median wall s per
  call, one per repeat]}, {name: [process CPU s per call, warm-up included, one
  per repeat]}): CPU seconds count every thread's work, a view that is
  insensitive to waiting on a loaded machine.
  """
  states = {name: state for name, (_, state) in variants.items()}
  wall = {name: [] for name in variants}
  cpu = {name: [] for name in variants}
  for _ in range(repeats):
    for name, (step, _) in variants.items():
      started = time.process_time()
      seconds, states[name] = bench.time_calls(step, states[name], calls)
      cpu[name].append((time.process_time() - started) / (calls + 1))
      wall[name].append(float(np.median(seconds)))
  return wall, cpu


def round_table(configs: dict, repeats: int, calls: int, label: str,
                setting: str) -> str:
  """`setting` and the device count on a heading line, then the `ratio_rows`
  table of one round of each run of `configs` ({name: config}, the first the
  reference), timed alternated (`alternate`)."""
  wall, cpu = alternate({name: one_round(config) for name, config in configs.items()},
                        repeats, calls)
  heading = (f'{setting}, {jax.device_count()} device(s); {repeats} repeats x {calls} '
             'rounds (s: per round)')
  return '\n'.join([heading, *ratio_rows(wall, cpu, label)])


def ratio_rows(wall: dict, cpu: dict, label: str = 'variant') -> list[str]:
  """A markdown table: per variant the median over repeats of its wall s and CPU s,
  the repeats' min..max, and both medians as × the first variant's."""
  first = next(iter(wall))
  rows = [f'| {label} | s | repeats | × first | CPU s | × first |',
          '| --- | ---: | --- | ---: | ---: | ---: |']
  for name in wall:
    median, cpu_median = np.median(wall[name]), np.median(cpu[name])
    rows.append(f'| {name} | {median:.4f} | {min(wall[name]):.4f}..{max(wall[name]):.4f} | '
                f'{median / np.median(wall[first]):.2f} | {cpu_median:.4f} | '
                f'{cpu_median / np.median(cpu[first]):.2f} |')
  return rows
