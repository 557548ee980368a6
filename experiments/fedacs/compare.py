"""FedACS's Table-1-style comparison: every method on one config, as Markdown plus a plot.

Command:   python experiments/fedacs/compare.py --config experiments/fedacs/digits_table1.py \
               [--methods fedacs,fedavg_het,...] [--seeds 0,1,2] [--workdir DIR] [--config.KEY=VALUE ...]

Runs each method (default: the FedACS family) for each seed (default 0,1,2) with the trainer, in
DIR/<method>/seed<s> (DIR defaults to runs/<config name>; re-running reuses finished runs), then
writes DIR/comparison.md, DIR/comparison.json and DIR/comparison.png and prints the table. Per
method, over seeds:

- accuracy: test accuracy averaged over the last 5 logged rounds (paper App. I.3.4), mean ± std;
- rounds: first round reaching `target_accuracy`, mean over the seeds that reach it (n/N when not
  all do; – when none), with the ratio to FedACS as in Table 1;
- communication: successful uploads × model bytes until then (MB);
- computation: Σ local SGD steps of the sampled clients until then (the hardware-free stand-in
  for the paper's summed training time).
"""
import json
import os
import sys

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

from fedjax_het import algorithms, cli, run  # pylint: disable=g-import-not-at-top
from fedjax_het.config import ConfigError  # pylint: disable=g-import-not-at-top

USAGE = __doc__.split('\n\n')[1]


def split_args(argv: list[str]) -> tuple[list[str], list[int], list[str]]:
  """(methods, seeds, remaining trainer arguments) from the command line."""
  methods, seeds, rest = list(algorithms.FEDACS_FAMILY), [0, 1, 2], []
  args = list(argv)
  while args:
    arg = args.pop(0)
    name, eq, value = arg.partition('=')
    if name in ('--methods', '--seeds'):
      if not eq:
        if not args:
          raise ConfigError(f'{name} needs a value.')
        value = args.pop(0)
      items = [v for v in value.split(',') if v]
      if name == '--methods':
        unknown = [m for m in items if m not in algorithms.ALGORITHMS]
        if unknown or not items:
          raise ConfigError(f'unknown method(s) {unknown or items}; choose '
                            f'from {", ".join(algorithms.FEDACS_FAMILY)}.')
        methods = items
      else:
        try:
          seeds = [int(v) for v in items]
        except ValueError as e:
          raise ConfigError(f'--seeds takes integers, got {value!r}.') from e
    else:
      rest.append(arg)
  return methods, seeds, rest


def read_rows(workdir: str) -> list[dict]:
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f if line.strip()]


def run_one(config, run_dir: str) -> tuple[dict, list[dict]]:
  """Trains (or reuses) one run; a diverged run keeps the rows it logged."""
  try:
    summary = run.train(config, run_dir)
  except run.TrainingDiverged as e:
    print(f'  {e}', file=sys.stderr)
    rows = read_rows(run_dir)
    target = config.target_accuracy
    summary = {'diverged': True, 'mean_test_accuracy_last5': None,
               'to_target': run.reached_target(rows, target) if target
                            else None}
  return summary, read_rows(run_dir)


def method_stats(summaries: list[dict]) -> dict:
  """Accuracy and cost-to-target of one method over its seeds.

  A diverged run (non-finite loss) counts as never reaching the target after
  its last logged round and is left out of the accuracy.
  """
  accuracy = [s['mean_test_accuracy_last5'] for s in summaries
              if not s.get('diverged')]
  reached = [s['to_target'] for s in summaries if s.get('to_target')]

  def mean_of(key):
    return float(np.mean([r[key] for r in reached])) if reached else None

  return {
      'accuracy_mean': float(np.mean(accuracy)) if accuracy else None,
      'accuracy_std': float(np.std(accuracy)) if accuracy else None,
      'diverged': len(summaries) - len(accuracy),
      'reached': len(reached),
      'runs': len(summaries),
      'rounds': mean_of('round'),
      'bytes_up': mean_of('bytes_up'),
      'local_steps': mean_of('local_steps'),
  }


def markdown_table(stats: dict[str, dict], target: float) -> str:
  """Table 1's layout: cost to the target and its ratio to FedACS."""
  reference = stats.get('fedacs')

  def cell(name, key, scale=1.0, fmt='{:.0f}'):
    s = stats[name]
    if s[key] is None:
      return '–'
    text = fmt.format(s[key] / scale)
    if reference and reference[key]:
      text += f' ({s[key] / reference[key]:.2f}×)'
    if s['reached'] < s['runs']:
      text += f' [{s["reached"]}/{s["runs"]}]'
    return text

  lines = [
      f'| algorithm | test accuracy (last 5) | rounds to {target:.0%} | '
      'communication to target (MB) | computation to target (local steps) |',
      '|---|---|---|---|---|',
  ]
  for name, s in stats.items():
    display = algorithms.ALGORITHMS[name].display_name
    accuracy = ('–' if s['accuracy_mean'] is None else
                f'{s["accuracy_mean"]:.3f} ± {s["accuracy_std"]:.3f}')
    if s['diverged']:
      accuracy += f' [{s["diverged"]}/{s["runs"]} diverged]'
    lines.append(
        f'| {display} | {accuracy} | '
        f'{cell(name, "rounds")} | {cell(name, "bytes_up", 1e6, "{:.2f}")} | '
        f'{cell(name, "local_steps")} |')
  return '\n'.join(lines)


def plot_accuracy(curves: dict[str, list[list[dict]]], target: float,
                  path: str) -> None:
  """Seed-mean test accuracy against rounds, one line per method."""
  fig, ax = plt.subplots(figsize=(7, 4.2))
  for name, runs in curves.items():
    length = min(len(rows) for rows in runs)  # diverged runs stop early
    rounds = [r['round'] for r in runs[0][:length]]
    accuracy = np.mean([[r['test_accuracy'] for r in rows[:length]]
                        for rows in runs], axis=0)
    ax.plot(rounds, accuracy, label=algorithms.ALGORITHMS[name].display_name)
  if target:
    ax.axhline(target, color='gray', linestyle=':', linewidth=1)
  ax.set(xlabel='round', ylabel='test accuracy (mean over seeds)')
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def compare(argv: list[str]) -> str:
  """Runs (or reuses) every method × seed; returns the Markdown table."""
  methods, seeds, rest = split_args(argv)
  config, workdir = cli.resolve(rest)
  config.progress = False
  stats, curves = {}, {}
  for method in methods:
    summaries, curves[method] = [], []
    for seed in seeds:
      config.algorithm, config.seed = method, seed
      run_dir = os.path.join(workdir, method, f'seed{seed}')
      print(f'{method} seed {seed} -> {run_dir}', file=sys.stderr)
      summary, rows = run_one(config, run_dir)
      summaries.append(summary)
      curves[method].append(rows)
    stats[method] = method_stats(summaries)
  table = markdown_table(stats, config.target_accuracy)
  with open(os.path.join(workdir, 'comparison.md'), 'w') as f:
    f.write(table + '\n')
  with open(os.path.join(workdir, 'comparison.json'), 'w') as f:
    json.dump(stats, f, indent=2)
  plot_accuracy(curves, config.target_accuracy,
                os.path.join(workdir, 'comparison.png'))
  return table


def main(argv: list[str]) -> int:
  if any(a in ('-h', '--help') for a in argv):
    print(USAGE)
    return 0
  try:
    print(compare(argv))
  except ConfigError as e:
    print(f'compare: error: {e}', file=sys.stderr)
    return 2
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
