"""Comparisons through the command line: tables, plots and per-capacity metrics."""
import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fedjax_het import cli, compare

COMPARISON = textwrap.dedent('''
    from fedjax_het.compare import capacity_columns
    from fedjax_het.config import base_config

    CAPACITIES = (0.25, 1.0)
    COLUMNS = capacity_columns(CAPACITIES)
    TITLE = 'tiny'

    def get_configs():
      configs = {}
      for method in ('fiarse', 'heterofl'):
        c = base_config()
        c.update(dict(algorithm=method, num_clients=10, clients_per_round=4,
                      partition='balanced_dirichlet', alpha=1.0,
                      local_test=True, capacities=CAPACITIES, rounds=4,
                      local_steps=2, batch_size=8, eval_every=2,
                      checkpoint_every=2, rounds_per_call=2, progress=False))
        c.model_options.hidden = (16,)
        c.submodel.eval_capacities = (0.1,)
        configs[method] = c
      return configs
''')


def test_a_comparison_runs_every_method_and_tabulates_capacities(tmp_path,
                                                                  capsys):
  path = tmp_path / 'tiny.py'
  path.write_text(COMPARISON)
  workdir = tmp_path / 'out'
  assert cli.main(['--config', str(path), f'--workdir={workdir}']) == 0
  table = (workdir / 'comparison.md').read_text()
  assert table in capsys.readouterr().out
  lines = table.strip().splitlines()
  assert lines[2].startswith('| method | Local | local γ=0.25 | local γ=1 | '
                             'Global | global γ=0.25 | global γ=1 |')
  assert [l.split('|')[1].strip() for l in lines[4:]] == ['fiarse',
                                                          'heterofl']
  assert '–' not in table  # every column was found in the summaries
  assert (workdir / 'comparison.png').exists()
  summaries = json.loads((workdir / 'comparison.json').read_text())
  final = summaries['fiarse']['final']
  # Global is the mean over capacities; Local the mean over capacity groups.
  assert abs(final['test_accuracy'] - (final['accuracy@0.25'] +
                                       final['accuracy@1']) / 2) < 1e-6
  assert abs(final['local_accuracy'] - (final['local_accuracy@0.25'] +
                                        final['local_accuracy@1']) / 2) < 1e-6
  assert 0 <= final['unparticipated_accuracy@0.1'] <= 1
  assert abs(final['params_fraction@0.25'] - 0.25) < 0.01
  # A second run resumes the finished runs and rebuilds the same table.
  assert cli.main(['--config', str(path), f'--workdir={workdir}']) == 0
  assert (workdir / 'comparison.md').read_text() == table
  assert os.path.isdir(workdir / 'heterofl' / 'checkpoints')


def test_table_cells_and_lookup():
  summary = {'final': {'accuracy@0.25': 0.5}, 'to_target': None, 'rounds': 7}
  assert compare.lookup(summary, 'final/accuracy@0.25') == 0.5
  assert compare.lookup(summary, 'to_target/round') is None
  table = compare.markdown_table(
      {'m': summary}, [('acc', 'final/accuracy@0.25'), ('r', 'rounds'),
                       ('t', 'to_target/round')])
  assert table.splitlines()[-1] == '| m | 50.00 | 7 | – |'


def read_json(path):
  return json.loads(path.read_text())


def test_seeds_flag_runs_every_config_per_seed_and_tabulates_mean_and_std(tmp_path):
  path = tmp_path / 'tiny.py'
  path.write_text(COMPARISON)
  workdir = tmp_path / 'out'
  assert cli.main(['--config', str(path), f'--workdir={workdir}', '--seeds', '2',
                   '--config.seed=3', '--config.rounds=2']) == 0
  results = read_json(workdir / 'comparison.json')
  table = (workdir / 'comparison.md').read_text()
  header = [h.strip() for h in table.splitlines()[2].split('|')]
  for method in ('fiarse', 'heterofl'):
    runs = [workdir / method / f'seed{seed}' for seed in (3, 4)]
    assert [read_json(r / 'config.json')['seed'] for r in runs] == [3, 4]
    summaries = [read_json(r / 'summary.json') for r in runs]
    assert results[method]['seeds'] == [3, 4] and results[method]['summaries'] == summaries
    values = [s['final']['test_accuracy'] for s in summaries]
    stats = results[method]['stats']['final/test_accuracy']
    assert stats['count'] == 2 and stats['mean'] == pytest.approx(sum(values) / 2)
    assert stats['std'] == pytest.approx(abs(values[0] - values[1]) / math.sqrt(2))  # ddof=1
    row = next(l for l in table.splitlines() if l.startswith(f'| {method} |'))
    cell = row.split('|')[header.index('Global')].strip()
    assert cell == f'{100 * stats["mean"]:.2f} ± {100 * stats["std"]:.2f}'
    for seed, value in zip((3, 4), values):
      row = next(l for l in table.splitlines() if l.startswith(f'| {method} (seed {seed}) |'))
      assert row.split('|')[header.index('Global')].strip() == f'{100 * value:.2f}'
  assert 'mean ± std over 2 seeds' in table and 'ddof = 1' in table
  assert (workdir / 'comparison.png').exists()


def test_a_single_config_runs_over_the_files_seeds(tmp_path, capsys):
  path = tmp_path / 'one.py'
  path.write_text(textwrap.dedent('''
      from fedjax_het.config import base_config
      SEEDS = 2

      def get_config():
        c = base_config()
        c.update(dict(num_clients=6, clients_per_round=3, rounds=2, local_steps=2,
                      batch_size=8, eval_every=1, checkpoint_every=2, progress=False))
        c.model_options.hidden = (8,)
        return c
  '''))
  workdir = tmp_path / 'out'
  assert cli.main(['--config', str(path), f'--workdir={workdir}']) == 0
  assert [read_json(workdir / 'one' / f'seed{s}' / 'config.json')['seed'] for s in (0, 1)] == [0, 1]
  rows = [l for l in (workdir / 'comparison.md').read_text().splitlines() if l.startswith('| one')]
  assert len(rows) == 3 and '±' in rows[0]  # the mean ± std row, then one row per seed
  assert cli.main(['--config', str(path), '--seeds', '0']) == 2
  assert '--seeds takes a positive integer' in capsys.readouterr().err


def test_the_comparison_runner_imports_no_method():
  """The generic runner reads per-capacity metrics by the generic naming
  (`evaluation.capacity_key`), not through one paper's method module."""
  loaded = subprocess.run(
      [sys.executable, '-c', 'import sys, fedjax_het.compare; print(sorted('
       'm for m in sys.modules if m.startswith("fedjax_het.methods")))'],
      capture_output=True, text=True, check=True,
      cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  assert loaded.stdout.strip() == '[]', loaded.stdout


def test_seed_stats_and_cells():
  stats = compare.seed_stats([0.5, 0.7, None])
  assert stats['count'] == 2 and stats['mean'] == pytest.approx(0.6)
  assert stats['std'] == pytest.approx(math.sqrt(0.02))  # sample std: Σ(x − x̄)² / (n − 1)
  assert compare.format_stats('final_test_accuracy', stats, 3) == '60.00 ± 14.14 [2/3]'
  assert compare.format_stats('rounds', compare.seed_stats([7]), 1) == '7'
  assert compare.format_stats('to_target/round', compare.seed_stats([None, None]), 2) == '–'


def test_grid_runs_every_cell_and_reports_each_methods_best_by_seed_mean(tmp_path):
  """FIARSE's best of lr × momentum over seeds: every (method, cell, seed) runs once and the best
  cell is the one with the highest *mean* over seeds, not the best single run."""
  from fedjax_het.config import base_config
  configs = {m: base_config() for m in ('a', 'b')}
  for m, c in configs.items():
    c.algorithm = m
  # accuracy(method, lr, momentum, seed): for 'a' lr=0.1,m=0 has the best single run (seed 0)
  # but lr=0.01,m=0.9 the best mean.
  table = {('a', 0.1, 0.0): (0.95, 0.05), ('a', 0.1, 0.9): (0.5, 0.5),
           ('a', 0.01, 0.0): (0.4, 0.4), ('a', 0.01, 0.9): (0.7, 0.7),
           ('b', 0.1, 0.0): (0.6, 0.6), ('b', 0.1, 0.9): (0.2, 0.2),
           ('b', 0.01, 0.0): (0.1, 0.1), ('b', 0.01, 0.9): (0.3, 0.3)}
  trained = []

  def train(config, workdir):
    trained.append((workdir, config.seed))
    acc = table[config.algorithm, config.client_lr, config.client_momentum][config.seed]
    return {'final_test_accuracy': acc}

  grid = {'client_lr': (0.1, 0.01), 'client_momentum': (0.0, 0.9)}
  text = compare.run_comparison(configs, str(tmp_path), train, seeds=2, grid=grid)
  assert len(trained) == 2 * 4 * 2 and len(set(trained)) == len(trained)
  assert os.path.join(str(tmp_path), 'a', 'client_lr=0.01,client_momentum=0.9', 'seed1') in {
      w for w, _ in trained}
  best = read_json(tmp_path / 'comparison.json')['best']
  assert best == {'a': 'a/client_lr=0.01,client_momentum=0.9',
                  'b': 'b/client_lr=0.1,client_momentum=0.0'}
  head = text.split('Every cell')[0]
  assert '| a/client_lr=0.01,client_momentum=0.9 | 70.00' in head
  assert 'a/client_lr=0.1,client_momentum=0.0 |' not in head
  with pytest.raises(compare.ConfigError, match="GRID key 'client_lrr'"):
    compare.expand_grid(configs, {'client_lrr': (0.1,)})
  dotted = compare.expand_grid({'x': base_config()}, {'submodel.partial_average': ('mask',)})
  assert dotted['x/submodel.partial_average=mask'].submodel.partial_average == 'mask'


def test_curves_plot_each_runs_accuracy_against_its_running_totals(tmp_path):
  """CURVES: one panel per running total, one line per (label, seed) run,
  drawn from the runs' own metrics.jsonl rows."""
  from fedjax_het import plots
  from fedjax_het.config import base_config
  configs = {m: base_config() for m in ('a', 'b')}

  def train(config, workdir):
    os.makedirs(workdir, exist_ok=True)
    rows = [{'round': r, 'test_accuracy': 0.1 * r + 0.01 * config.seed,
             'gb': 0.5 * r, 'comm_rounds': 7 * r} for r in (1, 2, 3)]
    with open(os.path.join(workdir, 'metrics.jsonl'), 'w') as f:
      f.writelines(json.dumps(row) + '\n' for row in rows)
    return {'final_test_accuracy': rows[-1]['test_accuracy']}

  compare.run_comparison(configs, str(tmp_path), train, seeds=2,
                         curves=('gb', 'comm_rounds'))
  assert (tmp_path / 'comparison_curves.png').stat().st_size > 0
  curves = {'a': [[{'test_accuracy': 0.2, 'gb': 1.0}, {'test_accuracy': 0.4, 'gb': 2.0}]] * 2}
  fig = plots.accuracy_against_figure(curves, ['gb', 'comm_rounds'])
  gb_axis, rounds_axis = fig.axes
  assert len(gb_axis.lines) == 2 and not rounds_axis.lines  # no comm_rounds in these rows
  np.testing.assert_array_equal(gb_axis.lines[0].get_xdata(), [1.0, 2.0])
