"""Comparisons: several configs run side by side, one Markdown table and plot.

An experiment file that defines `get_configs()` (an ordered dict label →
config) instead of `get_config()` is a comparison. `fedjax-het --config FILE`
then trains every config in `<workdir>/<label>` (each resumable like a single
run; command-line overrides apply to all of them), and writes

  <workdir>/comparison.md    the table (also printed)
  <workdir>/comparison.json  label → summary
  <workdir>/comparison.png   bar chart of the table's accuracy columns, and
                             accuracy against capacity where it was swept.

Columns are (header, key) pairs read from each run's `summary.json`; a dotted
key with '/' descends into it (`final/local_accuracy`, `to_target/round`). The file may
set `COLUMNS`; the default reports final and last-5 accuracy. For submodel
methods, `capacity_columns(capacities)` gives FIARSE's Table 1 layout: Local
(mean of Model(γ)), Model(γ) per capacity, Global and Global per capacity.

Seeds: `fedjax-het --config FILE --seeds N` (or `SEEDS = N` in the file; the flag wins) trains
every config with seeds config.seed, config.seed + 1, …, + N − 1, run s in
`<workdir>/<label>/seed<s>`. The table then shows mean ± std over the seeds of every numeric
column (std with ddof = 1, the sample standard deviation; `[k/N]` where only k seeds have a
value, e.g. a target not always reached), followed by one row per seed; comparison.json holds
label → {seeds, stats: key → {mean, std, count}, summaries (per seed)}, and the plot's error bars
are ± std. A single-config file run with N > 1 seeds is a comparison of one label, its file
name. With one seed (the default) runs go to `<workdir>/<label>` as before.

Best-of grid (FIARSE §5: each method's best of lr ∈ {0.1, 0.01} × momentum ∈ {0, 0.9} over 3
seeds): a file setting `GRID = {'client_lr': (0.1, 0.01), 'client_momentum': (0.0, 0.9)}` (dotted
keys allowed) runs every config at every cell of the grid, in `<workdir>/<label>/<cell>` with
`<cell>` = 'client_lr=0.1,client_momentum=0.9', and the table opens with each label's best cell:
the highest mean over seeds of `SELECT` (default: the first accuracy column), then lists every
cell. comparison.json adds `best`: label → its best cell's label.
"""
import json
import os
from typing import Callable, Sequence

import ml_collections
import numpy as np

from fedjax_het import plots, workdir as workdir_lib
from fedjax_het.config import ConfigError
from fedjax_het.evaluation import capacity_key

Column = tuple[str, str]
DEFAULT_COLUMNS: tuple[Column, ...] = (
    ('final acc', 'final_test_accuracy'),
    ('mean acc, last 5 evals', 'mean_test_accuracy_last5'),
    ('best acc', 'best_test_accuracy'),
)


def capacity_columns(capacities: Sequence[float]) -> list[Column]:
  """FIARSE Table 1 columns: Local, Model(γ)…, Global, Global(γ)…."""
  keys = [capacity_key(g) for g in capacities]
  return ([('Local', 'final/local_accuracy')] +
          [(f'local γ={k}', f'final/local_accuracy@{k}') for k in keys] +
          [('Global', 'final/test_accuracy')] +
          [(f'global γ={k}', f'final/accuracy@{k}') for k in keys])


def lookup(summary: dict, key: str):
  """summary[a][b]… for 'a/b…', or None where a level is missing."""
  node = summary
  for part in key.split('/'):
    if not isinstance(node, dict) or part not in node:
      return None
    node = node[part]
  return node


def _is_accuracy(key: str) -> bool:
  return 'accuracy' in key


def format_cell(key: str, value) -> str:
  if value is None:
    return '–'
  if _is_accuracy(key):
    return f'{100 * value:.2f}'
  if isinstance(value, float):
    return f'{value:.4g}'
  return str(value)


def markdown_table(summaries: dict[str, dict],
                   columns: Sequence[Column]) -> str:
  """A Markdown table: one row per label, one column per (header, key)."""
  lines = ['| method | ' + ' | '.join(h for h, _ in columns) + ' |',
           '| --- |' + ' --- |' * len(columns)]
  for label, summary in summaries.items():
    cells = [format_cell(key, lookup(summary, key)) for _, key in columns]
    lines.append(f'| {label} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def capacity_sweep(summary: dict) -> dict[float, float]:
  """γ → global accuracy of the γ-submodel, over trained and swept sizes."""
  final = summary.get('final', {})
  sweep = {}
  for key, value in final.items():
    for prefix in ('accuracy@', 'unparticipated_accuracy@'):
      if key.startswith(prefix):
        sweep[float(key[len(prefix):])] = value
  return dict(sorted(sweep.items()))


def seed_stats(values: Sequence) -> dict:
  """Mean, sample std (ddof = 1; None below 2 values) and count of the numeric values.

  None and non-numeric entries (a missing key, a target not reached) are left out.
  """
  numbers = [float(v) for v in values
             if isinstance(v, (int, float)) and not isinstance(v, bool)]
  return {'mean': float(np.mean(numbers)) if numbers else None,
          'std': float(np.std(numbers, ddof=1)) if len(numbers) > 1 else None,
          'count': len(numbers)}


def format_stats(key: str, stats: dict, runs: int) -> str:
  """'mean ± std' in the column's format, with [count/runs] where seeds lack a value."""
  text = format_cell(key, stats['mean'])
  if stats['std'] is not None:
    text += ' ± ' + format_cell(key, stats['std'])
  if 0 < stats['count'] < runs:
    text += f' [{stats["count"]}/{runs}]'
  return text


def seeds_table(runs: dict[str, dict[int, dict]], columns: Sequence[Column]) -> str:
  """Mean ± std over each label's seeds, one row per label, then one row per seed.

  Args:
    runs: label → seed → that run's summary.
    columns: the table's (header, summary key) columns.
  """
  lines = ['| method | ' + ' | '.join(h for h, _ in columns) + ' |',
           '| --- |' + ' --- |' * len(columns)]
  for label, by_seed in runs.items():
    stats = stats_by_key(list(by_seed.values()), columns)
    cells = [format_stats(key, stats[key], len(by_seed)) for _, key in columns]
    lines.append(f'| {label} | ' + ' | '.join(cells) + ' |')
  per_seed = {f'{label} (seed {seed})': summary
              for label, by_seed in runs.items() for seed, summary in by_seed.items()}
  return '\n'.join(lines) + '\n\nPer seed:\n\n' + markdown_table(per_seed, columns)


def stats_by_key(summaries: list[dict], columns: Sequence[Column]) -> dict[str, dict]:
  """key → `seed_stats` of that column over the summaries."""
  return {key: seed_stats([lookup(s, key) for s in summaries]) for _, key in columns}


def expand_grid(configs: dict[str, ml_collections.ConfigDict],
                grid: dict[str, Sequence]) -> dict[str, ml_collections.ConfigDict]:
  """label → config for every (label, cell) of the grid; cell labels 'label/k=v,k=v'.

  Raises ConfigError (one line) for a grid key the configs lack or an empty value list.
  """
  keys = list(grid)
  for key in keys:
    if not grid[key]:
      raise ConfigError(f'GRID[{key!r}] has no values.')
  cells = [{}]
  for key in keys:
    cells = [{**cell, key: value} for cell in cells for value in grid[key]]
  expanded = {}
  for label, config in configs.items():
    for cell in cells:
      variant = config.copy_and_resolve_references()
      for key, value in cell.items():
        *parents, leaf = key.split('.')
        node = variant
        for part in parents:
          node = node.get(part) if isinstance(node, ml_collections.ConfigDict) else None
        if not isinstance(node, ml_collections.ConfigDict) or leaf not in node:
          raise ConfigError(f'GRID key {key!r} is not a config key.')
        node[leaf] = value
      expanded[label + '/' + ','.join(f'{k}={v}' for k, v in cell.items())] = variant
  return expanded


def best_cells(runs: dict[str, dict[int, dict]], select: str) -> dict[str, str]:
  """For each grid label 'base/cell' of `runs`, base → the cell label with the highest mean of
  `select` over its seeds (a cell with no value never wins unless all lack one)."""
  best = {}
  for label, by_seed in runs.items():
    base = label.rsplit('/', 1)[0]
    mean = seed_stats([lookup(s, select) for s in by_seed.values()])['mean']
    score = -np.inf if mean is None else mean
    if base not in best or score > best[base][1]:
      best[base] = (label, score)
  return {base: label for base, (label, _) in best.items()}


def _run_dir(workdir: str, label: str, seed: int, seeds: int) -> str:
  return os.path.join(workdir, label, *([f'seed{seed}'] if seeds > 1 else []))


def _train_seeds(configs, workdir, train, seeds) -> dict[str, dict[int, dict]]:
  """label → seed → summary; seeds config.seed … config.seed + seeds − 1, one run each."""
  runs = {}
  for label, config in configs.items():
    runs[label] = {}
    for seed in range(config.seed, config.seed + seeds):
      run_dir = _run_dir(workdir, label, seed, seeds)
      seeded = config.copy_and_resolve_references()
      seeded.seed = seed
      runs[label][seed] = train(seeded, run_dir)
  return runs


def _plot(runs: dict[str, dict[int, dict]], columns: Sequence[Column], path: str, title: str,
          spread: bool) -> None:
  """The accuracy columns' bars and the capacity sweep: seed means, with ± std if `spread`."""
  accuracy_columns = [(h, k) for h, k in columns if _is_accuracy(k)]
  bars, errors, sweeps, sweep_errors = {}, {}, {}, {}
  for label, by_seed in runs.items():
    stats = stats_by_key(list(by_seed.values()), accuracy_columns)
    bars[label] = [stats[k]['mean'] for _, k in accuracy_columns]
    errors[label] = [stats[k]['std'] for _, k in accuracy_columns]
    per_seed = [capacity_sweep(s) for s in by_seed.values()]
    sweep = {g: seed_stats([c.get(g) for c in per_seed]) for g in sorted(set().union(*per_seed))}
    sweeps[label] = {g: st['mean'] for g, st in sweep.items()}
    sweep_errors[label] = {g: st['std'] for g, st in sweep.items()}
  plots.plot_comparison(bars, [h for h, _ in accuracy_columns], sweeps, path, title=title,
                        errors=errors if spread else None,
                        sweep_errors=sweep_errors if spread else None)


def _plot_curves(runs: dict[str, dict[int, dict]], workdir: str, seeds: int,
                 keys: Sequence[str], title: str) -> None:
  """comparison_curves.png: each run's test accuracy against the running
  totals `keys` of its metrics.jsonl (e.g. GB exchanged, communication rounds)."""
  curves = {}
  for label, by_seed in runs.items():
    curves[label] = []
    for seed in by_seed:
      curves[label].append(workdir_lib.read_metrics(
          os.path.join(_run_dir(workdir, label, seed, seeds), 'metrics.jsonl'), torn_tail=False))
  plots.accuracy_against_figure(curves, list(keys), title).savefig(
      os.path.join(workdir, 'comparison_curves.png'), dpi=110)


def _tables(runs: dict[str, dict[int, dict]], columns: Sequence[Column], seeds: int) -> str:
  """The Markdown table of `runs`: one row per label, or mean ± std and per-seed rows."""
  if seeds == 1:
    return markdown_table({label: next(iter(by_seed.values())) for label, by_seed in runs.items()},
                          columns)
  return seeds_table(runs, columns)


def run_comparison(configs: dict[str, ml_collections.ConfigDict], workdir: str,
                   train: Callable[[ml_collections.ConfigDict, str], dict],
                   columns: Sequence[Column] = DEFAULT_COLUMNS,
                   title: str = '', seeds: int = 1, grid: dict | None = None,
                   select: str | None = None, curves: Sequence[str] = ()) -> str:
  """Trains every config (resuming finished or partial runs) → the table.

  Args:
    configs: label → config.
    workdir: the comparison's directory; run `label` goes to workdir/label (with seeds > 1,
      workdir/label/seed<s>).
    train: `fedjax_het.run.train` (passed in to keep this module light).
    columns: the table's (header, summary key) columns.
    title: heading of the table and plot.
    seeds: runs per config, with seeds config.seed, config.seed + 1, …; above 1 the table
      shows mean ± std (ddof = 1) per column and the per-seed rows.
    grid: key → values; every config runs at every cell (`expand_grid`) and the table opens
      with each label's best cell by the mean of `select` (default: the first accuracy
      column).
    curves: running totals of the runs' metrics.jsonl (e.g. 'gb', 'comm_rounds', 'bytes_up')
      to plot test accuracy against, in comparison_curves.png (none: no such plot).

  Returns:
    The Markdown table (with its heading), also written to comparison.md.
  """
  if not configs:
    raise ValueError('get_configs() returned no config.')
  if not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 1:
    raise ConfigError(f'the number of seeds must be a positive integer, got {seeds!r}.')
  workdir_lib.create(workdir)
  if grid:
    configs = expand_grid(configs, grid)
  runs = _train_seeds(configs, workdir, train, seeds)
  if seeds == 1:
    results = {label: by_seed[configs[label].seed] for label, by_seed in runs.items()}
  else:
    title = (f'{title}, ' if title else '') + f'mean ± std over {seeds} seeds'
    results = {label: {'seeds': list(by_seed),
                       'stats': stats_by_key(list(by_seed.values()), columns),
                       'summaries': list(by_seed.values())}
               for label, by_seed in runs.items()}
  table = _tables(runs, columns, seeds)
  if seeds > 1:
    table += ('\n\nmean ± std: the sample standard deviation (ddof = 1) over the seeds; [k/N]: '
              'only k of the N seeds have a value.')
  if grid:
    select = select or next(k for _, k in columns if _is_accuracy(k))
    best = best_cells(runs, select)
    table = (f'Best cell of the grid per method (highest mean {select}):\n\n' +
             _tables({label: runs[label] for label in best.values()}, columns, seeds) +
             '\n\nEvery cell:\n\n' + table)
    results = {'best': best, 'cells': results}
  text = (f'## {title}\n\n' if title else '') + table + '\n'
  try:
    workdir_lib.write_text(os.path.join(workdir, 'comparison.md'), text)
    workdir_lib.write_text(os.path.join(workdir, 'comparison.json'),
                           json.dumps(results, indent=2))
    _plot(runs, columns, os.path.join(workdir, 'comparison.png'), title, spread=seeds > 1)
    if curves:
      _plot_curves(runs, workdir, seeds, curves, title)
  except OSError as e:
    raise workdir_lib.WorkdirError(
        f'cannot write the comparison in {workdir} ({workdir_lib.describe_os_error(e)}); its '
        'runs are kept: fix this and run the same command again.') from e
  return text
