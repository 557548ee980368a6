"""Two processes on localhost (`jax.distributed`, gloo collectives on CPU) run
one federation with the cohort split across them: the same rounds as one
process, a shared workdir that only process 0 writes, and an exact resume
from the checkpoints both processes saved."""
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fedjax_het import cli, run
from script_utils import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = os.path.join(ROOT, 'experiments', 'quickstart.py')
SHORT = ['--config.eval_every=2', '--config.rounds_per_call=2',
         '--config.checkpoint_every=2', '--config.progress=False']
FIARSE = ['--config.algorithm=fiarse', '--config.capacities=(0.25,0.5,1.0)']


def documented_recipe() -> str:
  """The two-process recipe of tpu_scripts/README.md: its bash block that starts
  `fedjax-het --distributed` in a loop."""
  with open(os.path.join(ROOT, 'tpu_scripts', 'README.md')) as f:
    blocks = re.findall(r'```bash\n(.*?)```', f.read(), re.S)
  recipe, = [b for b in blocks if 'for i in 0 1' in b and '--distributed' in b]
  return textwrap.dedent(recipe)


def two_processes(workdir: str, rounds: int, extra=()) -> None:
  """The documented recipe run as written by bash at the repository root, with
  a free port for 12345, `workdir` for runs/two, and `rounds` and this test's
  short schedule appended to the command."""
  recipe = documented_recipe()
  overrides = [f'--config.rounds={rounds}', *SHORT, *extra]
  for old, new in (('localhost:12345', f'localhost:{free_port()}'),
                   ('--workdir runs/two',
                    shlex.join(['--workdir', workdir, *overrides]))):
    assert recipe.count(old) == 1, f'the recipe no longer has {old!r}'
    recipe = recipe.replace(old, new)
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu',
         'PATH': f'{os.path.dirname(sys.executable)}:{os.environ["PATH"]}'}
  result = subprocess.run(['bash', '-c', recipe], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
  # `wait` returns 0 whatever the processes did: their summary tells.
  summary = os.path.join(workdir, 'summary.json')
  finished = os.path.exists(summary) and json.load(open(summary))['rounds']
  assert finished == rounds, result.stdout[-2000:] + result.stderr[-3000:]


def one_process(rounds: int, extra=()) -> list[dict]:
  """The same config trained here, on this process's devices."""
  config = cli.load_config(QUICKSTART)
  for arg in [f'--config.rounds={rounds}', *SHORT, *extra]:
    key, value = arg[len('--config.'):].split('=', 1)
    cli.apply_override(config, key, cli.parse_value(value))
  return config


def metric_rows(workdir: str) -> list[dict]:
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]


def assert_same_rounds(rows: list[dict], expected: list[dict]) -> None:
  assert [r['round'] for r in rows] == [r['round'] for r in expected]
  for row, want in zip(rows, expected):
    for key in ('train_loss', 'test_loss', 'test_accuracy', 'bytes_up'):
      np.testing.assert_allclose(row[key], want[key], rtol=1e-5, err_msg=key)


@pytest.mark.parametrize('algorithm', ['fedavg', 'fiarse'])
def test_two_processes_train_as_one_and_resume(algorithm, tmp_path):
  """FedAvg: 2 rounds in two processes, then a resume to 4; FIARSE: 4
  rounds. Every evaluated round equals one process's (to float tolerance:
  the aggregation's partial sums meet across processes), metrics.jsonl has
  one row per evaluation, and summary.json and config.json exist."""
  extra = FIARSE if algorithm == 'fiarse' else []
  workdir = str(tmp_path / 'two')
  if algorithm == 'fedavg':
    two_processes(workdir, 2, extra)
    assert [r['round'] for r in metric_rows(workdir)] == [2]
  two_processes(workdir, 4, extra)
  reference = str(tmp_path / 'one')
  run.train(one_process(4, extra), reference)
  assert_same_rounds(metric_rows(workdir), metric_rows(reference))
  with open(os.path.join(workdir, 'summary.json')) as f:
    assert json.load(f)['rounds'] == 4
  with open(os.path.join(workdir, 'config.json')) as f:
    assert json.load(f)['algorithm'] == algorithm
