"""FedACS's Table-1-style comparison over seeds: Markdown with ratios to FedACS, plus curves.

Command:   python experiments/fedacs/compare.py [--config FILE] [--methods fedacs,fedavg_het,...]
               [--seeds 0,1,2] [--workdir DIR] [--config.KEY=VALUE ...]

FILE is a comparison file (it defines get_configs(), one config per method; default
experiments/fedacs/digits_table1.py). For each seed the methods run through the shared
`fedjax_het.compare.run_comparison` into DIR/seed<s>/<method> (DIR defaults to runs/<file name>;
re-running reuses finished runs, and each seed directory gets the shared single-seed table).
Then DIR/comparison.md, DIR/comparison.json and DIR/comparison.png hold, per method over seeds:

- accuracy: test accuracy averaged over the last 5 logged rounds (paper App. I.3.4), mean ± std;
- rounds: first round reaching `target_accuracy`, mean over the seeds that reach it ([n/N] when
  not all do; – when none), with the ratio to FedACS as in Table 1;
- communication: successful uploads × model bytes until then (MB);
- computation: Σ local SGD steps of the sampled clients until then (the hardware-free stand-in
  for the paper's summed training time);

and the seed-mean test accuracy against rounds. A run whose loss turns non-finite counts as
never reaching the target after its last logged round and is left out of the accuracy.
"""
import json
import os
import sys

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

from fedjax_het import cli, compare, run  # pylint: disable=g-import-not-at-top
from fedjax_het.methods import ALGORITHMS  # pylint: disable=g-import-not-at-top
from fedjax_het.config import ConfigError  # pylint: disable=g-import-not-at-top

USAGE = __doc__.split('\n\n')[1]
DEFAULT_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            'digits_table1.py')


def split_args(argv: list[str]) -> tuple[list[str] | None, list[int], list[str]]:
  """(methods or None for all, seeds, the remaining trainer arguments)."""
  methods, seeds, rest = None, [0, 1, 2], []
  args = list(argv)
  while args:
    arg = args.pop(0)
    name, eq, value = arg.partition('=')
    if name not in ('--methods', '--seeds'):
      rest.append(arg)
      continue
    if not eq:
      if not args:
        raise ConfigError(f'{name} needs a value.')
      value = args.pop(0)
    items = [v for v in value.split(',') if v]
    if name == '--methods':
      methods = items
    else:
      try:
        seeds = [int(v) for v in items]
      except ValueError as e:
        raise ConfigError(f'--seeds takes integers, got {value!r}.') from e
  return methods, seeds, rest


def train_or_diverged(config, workdir: str) -> dict:
  """`run.train`, or for a diverged run a summary of the rows it logged."""
  try:
    return run.train(config, workdir)
  except run.TrainingDiverged as e:
    print(f'  {e}', file=sys.stderr)
    rows = read_rows(workdir)
    target = config.target_accuracy
    return {'diverged': True, 'mean_test_accuracy_last5': None,
            'to_target': run.reached_target(rows, target) if target else None}


def read_rows(workdir: str) -> list[dict]:
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f if line.strip()]


def method_stats(summaries: list[dict]) -> dict:
  """Accuracy and cost-to-target of one method over its seeds."""
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
    accuracy = ('–' if s['accuracy_mean'] is None else
                f'{s["accuracy_mean"]:.3f} ± {s["accuracy_std"]:.3f}')
    if s['diverged']:
      accuracy += f' [{s["diverged"]}/{s["runs"]} diverged]'
    lines.append(
        f'| {ALGORITHMS[name].display_name} | {accuracy} | '
        f'{cell(name, "rounds")} | {cell(name, "bytes_up", 1e6, "{:.2f}")} | '
        f'{cell(name, "local_steps")} |')
  return '\n'.join(lines)


def plot_accuracy(curves: dict[str, list[list[dict]]], target: float,
                  path: str, title: str) -> None:
  """Seed-mean test accuracy against rounds, one line per method."""
  fig, ax = plt.subplots(figsize=(7, 4.2))
  for name, runs in curves.items():
    length = min(len(rows) for rows in runs)  # diverged runs stop early
    rounds = [r['round'] for r in runs[0][:length]]
    accuracy = np.mean([[r['test_accuracy'] for r in rows[:length]]
                        for rows in runs], axis=0)
    ax.plot(rounds, accuracy, label=ALGORITHMS[name].display_name)
  if target:
    ax.axhline(target, color='gray', linestyle=':', linewidth=1)
  ax.set(xlabel='round', ylabel='test accuracy (mean over seeds)', title=title)
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def load_configs(config_path: str, overrides, methods):
  """The comparison file's label → config, restricted to `methods`."""
  module = cli.load_experiment(config_path)
  if not hasattr(module, 'get_configs'):
    raise ConfigError(f'{config_path} defines no get_configs(); give a '
                      'comparison file such as experiments/fedacs/digits_table1.py.')
  configs = cli.experiment_configs(module, config_path)
  unknown = sorted(set(methods or ()) - set(configs))
  if unknown:
    raise ConfigError(f'unknown method(s) {unknown}; {config_path} compares '
                      f'{", ".join(configs)}.')
  configs = {m: configs[m] for m in (methods or configs)}
  for config in configs.values():
    for key, raw in overrides:
      cli.apply_override(config, key, cli.parse_value(raw))
  return module, configs


def compare_seeds(argv: list[str]) -> str:
  """Runs (or reuses) every method × seed; returns the Markdown table."""
  methods, seeds, rest = split_args(argv)
  config_path, workdir, overrides = cli.parse_args(rest)
  if not any(a == '--config' or a.startswith('--config=') for a in rest):
    config_path = DEFAULT_FILE
  workdir = workdir or os.path.join(
      'runs', os.path.splitext(os.path.basename(config_path))[0])
  summaries, curves = {}, {}
  for seed in seeds:
    module, configs = load_configs(config_path, overrides, methods)
    for config in configs.values():
      config.seed = seed
    seed_dir = os.path.join(workdir, f'seed{seed}')
    print(f'=== seed {seed}: {seed_dir} ===', file=sys.stderr)
    compare.run_comparison(configs, seed_dir, train_or_diverged,
                           getattr(module, 'COLUMNS', compare.DEFAULT_COLUMNS),
                           f'{getattr(module, "TITLE", "")} (seed {seed})')
    with open(os.path.join(seed_dir, 'comparison.json')) as f:
      for label, summary in json.load(f).items():
        summaries.setdefault(label, []).append(summary)
        curves.setdefault(label, []).append(
            read_rows(os.path.join(seed_dir, label)))
  stats = {label: method_stats(s) for label, s in summaries.items()}
  target = next(iter(configs.values())).target_accuracy
  table = markdown_table(stats, target)
  with open(os.path.join(workdir, 'comparison.md'), 'w') as f:
    f.write(table + '\n')
  with open(os.path.join(workdir, 'comparison.json'), 'w') as f:
    json.dump(stats, f, indent=2)
  plot_accuracy(curves, target, os.path.join(workdir, 'comparison.png'),
                getattr(module, 'TITLE', ''))
  return table


def main(argv: list[str]) -> int:
  if any(a in ('-h', '--help') for a in argv):
    print(USAGE)
    return 0
  def run_and_print() -> int:
    print(compare_seeds(argv))
    return 0

  return cli.report_errors('compare', run_and_print)


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
