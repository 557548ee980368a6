"""Comparisons through the command line: tables, plots and per-capacity metrics."""
import json
import os
import textwrap

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
