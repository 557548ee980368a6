"""Two processes on localhost (`jax.distributed`, gloo collectives on CPU) run
one federation with the cohort split across them: the same rounds as one
process, a shared workdir that only process 0 writes, and an exact resume
from the checkpoints both processes saved."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from fedjax_het import cli, run
from fedjax_het.core import sharding
from script_utils import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = os.path.join(ROOT, 'experiments', 'quickstart.py')
SHORT = ['--config.eval_every=2', '--config.rounds_per_call=2',
         '--config.checkpoint_every=2', '--config.progress=False']
FIARSE = ['--config.algorithm=fiarse', '--config.capacities=(0.25,0.5,1.0)']


def two_processes(workdir: str, rounds: int, extra=()) -> None:
  """`fedjax-het --distributed` in two processes of one CPU device each."""
  port = free_port()
  procs = []
  for i in range(2):
    env = {**os.environ, 'JAX_COORDINATOR_ADDRESS': f'localhost:{port}',
           'JAX_NUM_PROCESSES': '2', 'JAX_PROCESS_ID': str(i),
           'JAX_PLATFORMS': 'cpu'}
    sharding.set_cpu_device_count(1, env)
    procs.append(subprocess.Popen(
        [sys.executable, '-m', 'fedjax_het', '--distributed', '--config',
         QUICKSTART, '--workdir', workdir, f'--config.rounds={rounds}',
         *SHORT, *extra], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True))
  outputs = [p.communicate(timeout=600)[0] for p in procs]
  for i, (p, out) in enumerate(zip(procs, outputs)):
    assert p.returncode == 0, f'process {i}:\n{out[-3000:]}'


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
