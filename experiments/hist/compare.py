"""HIST comparisons: cost to reach the target, HIST/HFedAvg ratios, curves.

Command:   python experiments/hist/compare.py [--config FILE]... [--workdir DIR]
               [--config.KEY=VALUE ...]

Each FILE is a comparison (it defines get_configs(); default: both scaled sweeps,
scaled_n_sweep.py and scaled_snr_sweep.py, about 9 minutes on 2 CPU cores). Its runs go
through the shared `fedjax_het.compare.run_comparison` into DIR/<file name>/<label> (DIR
defaults to runs/hist; finished runs are reused), and the script prints, per file, a Markdown
table of rounds, MB per client and simulated latency to the target accuracy, the HIST/HFedAvg
ratios of MB and latency (pairs of runs that differ only in the method), the final accuracy and
the mean AirComp MSE; it writes DIR/<file name>/hist_comparison.md and the plots
hist_curves.png (test accuracy against MB per client and against simulated latency) and, when
the SNR is swept, hist_snr.png (accuracy and latency to target against the SNR).
"""
import json
import os
import sys

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

from fedjax_het import cli, compare, run  # pylint: disable=g-import-not-at-top
from fedjax_het.config import ConfigError  # pylint: disable=g-import-not-at-top

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_FILES = [os.path.join(HERE, 'scaled_n_sweep.py'),
                 os.path.join(HERE, 'scaled_snr_sweep.py')]
PAPER = ('Paper, Table II (CIFAR-10, non-iid, 70%): HIST needs 1/1.88 (N = 2) and '
         '1/3.4 (N = 4) of HFedAvg\'s MB per client; Table I (LeNet-5, FMNIST, non-iid, '
         '80%): 1/1.79 (N = 2) and 1/3.24 (N = 4).')


def parse(argv: list[str]) -> tuple[list[str], str, list[tuple[str, str]]]:
  """(comparison files, workdir, overrides)."""
  files, workdir, overrides = [], 'runs/hist', []
  args = list(argv)
  while args:
    arg = args.pop(0)
    if arg in ('-h', '--help'):
      print(__doc__)
      sys.exit(0)
    name, eq, value = arg.partition('=')
    if not eq:
      if not args:
        raise ConfigError(f'{name} needs a value.')
      value = args.pop(0)
    if name == '--config':
      files.append(value)
    elif name == '--workdir':
      workdir = value
    elif name.startswith('--config.'):
      overrides.append((name[len('--config.'):], value))
    else:
      raise ConfigError(f'unknown option {name}; see --help.')
  return files or DEFAULT_FILES, workdir, overrides


def pair_key(config) -> str:
  """Everything but the method: HIST and HFedAvg runs with equal keys pair up."""
  fields = config.to_dict()
  fields.pop('algorithm')
  fields['hierarchy'].pop('partition_sizes')
  return json.dumps(fields, sort_keys=True, default=str)


def read_rows(workdir: str) -> list[dict]:
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f if line.strip()]


def train_or_diverged(config, workdir: str) -> dict:
  """`run.train`, or for a run whose loss turned non-finite (AirComp at a very
  low SNR can blow the model up) a summary of the rounds it logged."""
  try:
    return run.train(config, workdir)
  except run.TrainingDiverged as e:
    print(f'  {e}', file=sys.stderr)
    rows = read_rows(workdir)
    last = rows[-1] if rows else {'round': 0, 'test_accuracy': 0.0}
    return {
        'diverged': True, 'rounds': last['round'],
        'final_test_accuracy': last['test_accuracy'],
        'mean_test_accuracy_last5': float(np.mean(
            [r['test_accuracy'] for r in rows[-5:]] or [0.0])),
        'totals': {k: v for k, v in last.items()
                   if k not in ('round', 'test_accuracy', 'test_loss',
                                'train_loss', 'wall_time')},
        'to_target': run.reached_target(rows, config.target_accuracy),
    }


def ratio(hist, baseline) -> str:
  if hist is None or baseline is None or not hist:
    return '–'
  return f'1/{baseline / hist:.2f}'


def cost_table(configs: dict, summaries: dict, target: float) -> str:
  """Markdown: cost to the target, ratios to the paired HFedAvg run."""
  baselines = {pair_key(c): summaries[label] for label, c in configs.items()
               if c.algorithm == 'hfedavg'}
  pct = f'{100 * target:g}%'
  lines = [f'| method | rounds to {pct} | MB per client to {pct} | '
           f'latency to {pct} (s) | MB vs HFedAvg | latency vs HFedAvg | '
           'final acc | acc, last 5 | mean AirComp MSE |',
           '| --- |' + ' ---: |' * 8]
  for label, config in configs.items():
    summary = summaries[label]
    reached = summary.get('to_target') or {}
    baseline = baselines.get(pair_key(config), {}).get('to_target') or {}
    mse = summary['totals'].get('aircomp_mse')
    cells = [
        str(reached.get('round', '–')),
        compare.format_cell('', reached.get('mb_per_client')),
        compare.format_cell('', reached.get('latency_s')),
        ratio(reached.get('mb_per_client'), baseline.get('mb_per_client'))
        if config.algorithm != 'hfedavg' else '1',
        ratio(reached.get('latency_s'), baseline.get('latency_s'))
        if config.algorithm != 'hfedavg' else '1',
        f'{100 * summary["final_test_accuracy"]:.2f}',
        f'{100 * summary["mean_test_accuracy_last5"]:.2f}',
        '–' if mse is None else f'{mse / max(summary["rounds"], 1):.3g}',
    ]
    if summary.get('diverged'):
      label += f' (diverged after round {summary["rounds"]})'
    lines.append(f'| {label} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def plot_curves(curves: dict[str, list[dict]], path: str, title: str,
                target: float) -> None:
  """Test accuracy against MB per client and against simulated latency."""
  fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
  for label, rows in curves.items():
    accuracy = [r['test_accuracy'] for r in rows]
    axes[0].plot([r['mb_per_client'] for r in rows], accuracy, label=label)
    axes[1].plot([r['latency_s'] for r in rows], accuracy, label=label)
  for ax, xlabel in zip(axes, ('MB uploaded per client', 'simulated latency (s)')):
    ax.axhline(target, color='gray', linestyle=':', linewidth=1)
    ax.set(xlabel=xlabel, ylabel='test accuracy', xscale='log')
    ax.grid(alpha=0.3)
  axes[1].legend(fontsize=7, ncol=2)
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def plot_snr(configs: dict, summaries: dict, path: str, title: str,
             target: float) -> None:
  """Accuracy (last 5 evaluations) and latency to target against the SNR."""
  series = {}
  for label, config in configs.items():
    name = (f'{config.hierarchy.edge_channel.upper()}-'
            f'{"HIST" if config.algorithm == "hist" else "HFedAvg"}')
    reached = summaries[label].get('to_target') or {}
    series.setdefault(name, []).append(
        (config.hierarchy.snr_db_fast,
         summaries[label]['mean_test_accuracy_last5'],
         reached.get('latency_s', np.nan)))
  fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
  for name, points in series.items():
    snr, accuracy, latency = zip(*sorted(points))
    axes[0].plot(snr, accuracy, marker='o', label=name)
    axes[1].plot(snr, latency, marker='o', label=name)
  axes[0].set(xlabel='SNR (dB)', ylabel='test accuracy (last 5 evaluations)')
  axes[1].set(xlabel='SNR (dB)', ylabel=f'latency to {100 * target:g}% (s)',
              yscale='log')
  for ax in axes:
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def compare_file(path: str, workdir: str, overrides) -> str:
  module = cli.load_experiment(path)
  configs = cli.experiment_configs(module, path)
  for config in configs.values():
    for key, raw in overrides:
      cli.apply_override(config, key, cli.parse_value(raw))
  title = getattr(module, 'TITLE', os.path.basename(path))
  compare.run_comparison(configs, workdir, train_or_diverged,
                         getattr(module, 'COLUMNS', compare.DEFAULT_COLUMNS),
                         title)
  with open(os.path.join(workdir, 'comparison.json')) as f:
    summaries = json.load(f)
  target = next(iter(configs.values())).target_accuracy
  text = f'## {title}\n\n{cost_table(configs, summaries, target)}\n\n{PAPER}\n'
  with open(os.path.join(workdir, 'hist_comparison.md'), 'w') as f:
    f.write(text)
  curves = {label: read_rows(os.path.join(workdir, label))
            for label in configs}
  plot_curves(curves, os.path.join(workdir, 'hist_curves.png'), title, target)
  if len({c.hierarchy.snr_db_fast for c in configs.values()}) > 1:
    plot_snr(configs, summaries, os.path.join(workdir, 'hist_snr.png'), title,
             target)
  return text


def main(argv: list[str]) -> int:
  def run_and_print() -> int:
    files, workdir, overrides = parse(argv)
    texts = []
    for path in files:
      name = os.path.splitext(os.path.basename(path))[0]
      texts.append(compare_file(path, os.path.join(workdir, name), overrides))
    print('\n'.join(texts))
    print(f'outputs: {workdir}')
    return 0

  return cli.report_errors('compare.py', run_and_print)


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
