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
"""
import json
import os
from typing import Callable, Sequence

import ml_collections

from fedjax_het import plots
from fedjax_het.algorithms.submodels import capacity_key

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


def run_comparison(configs: dict[str, ml_collections.ConfigDict], workdir: str,
                   train: Callable[[ml_collections.ConfigDict, str], dict],
                   columns: Sequence[Column] = DEFAULT_COLUMNS,
                   title: str = '') -> str:
  """Trains every config (resuming finished or partial runs) → the table.

  Args:
    configs: label → config.
    workdir: the comparison's directory; run `label` goes to workdir/label.
    train: `fedjax_het.run.train` (passed in to keep this module light).
    columns: the table's (header, summary key) columns.
    title: heading of the table and plot.

  Returns:
    The Markdown table (with its heading), also written to comparison.md.
  """
  if not configs:
    raise ValueError('get_configs() returned no config.')
  os.makedirs(workdir, exist_ok=True)
  summaries = {}
  for label, config in configs.items():  # each run's progress bar says `label`
    summaries[label] = train(config, os.path.join(workdir, label))
  table = markdown_table(summaries, columns)
  text = (f'## {title}\n\n' if title else '') + table + '\n'
  with open(os.path.join(workdir, 'comparison.md'), 'w') as f:
    f.write(text)
  with open(os.path.join(workdir, 'comparison.json'), 'w') as f:
    json.dump(summaries, f, indent=2)
  accuracy_columns = [(h, k) for h, k in columns if _is_accuracy(k)]
  plots.plot_comparison(
      {label: [lookup(s, k) for _, k in accuracy_columns]
       for label, s in summaries.items()},
      [h for h, _ in accuracy_columns],
      {label: capacity_sweep(s) for label, s in summaries.items()},
      os.path.join(workdir, 'comparison.png'), title=title)
  return text
