"""The trainer and its command line: outputs, resume, bad input, Ctrl-C."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from fedjax_het import cli, run
from fedjax_het import config as config_lib
from fedjax_het.config import base_config

QUICKSTART = os.path.join(os.path.dirname(cli.DEFAULT_CONFIG), 'quickstart.py')
QUICK = ['--config', QUICKSTART, '--config.num_clients=20', '--config.clients_per_round=5',
         '--config.local_steps=2', '--config.batch_size=8',
         '--config.model_options.hidden=(16,)', '--config.eval_every=2',
         '--config.checkpoint_every=2', '--config.rounds_per_call=2',
         '--config.progress=False']


def quick_config(**overrides):
  config, _ = cli.resolve(QUICK)
  config.update(overrides)
  return config


def read_rows(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    rows = [json.loads(line) for line in f]
  for row in rows:
    row.pop('wall_time')
  return rows


def test_a_run_writes_every_output(tmp_path):
  summary = run.train(quick_config(rounds=6, target_accuracy=1e-6),
                      str(tmp_path))
  assert [r['round'] for r in read_rows(tmp_path)] == [2, 4, 6]
  for name in ('config.json', 'summary.json', 'curves.png'):
    assert (tmp_path / name).exists()
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['4', '6']  # keeps 2
  assert summary['rounds'] == 6 and 0 <= summary['final_test_accuracy'] <= 1
  row = read_rows(tmp_path)[-1]
  model_bytes = summary['num_params'] * 4
  assert row['bytes_down'] == 6 * 5 * model_bytes == row['bytes_up']
  assert row['examples'] == 6 * 5 * 2 * 8  # rounds × cohort × steps × batch
  # The cost to reach the target is the running total at the first row.
  assert summary['to_target']['round'] == 2
  assert summary['to_target']['bytes_up'] == 2 * 5 * model_bytes


@pytest.mark.parametrize('backend', ['vmap', 'sequential'])
def test_resumed_run_is_bit_identical_to_an_uninterrupted_one(tmp_path, backend):
  whole, parts = str(tmp_path / 'whole'), str(tmp_path / 'parts')
  expected = run.train(quick_config(rounds=6, backend=backend), whole)
  run.train(quick_config(rounds=4, backend=backend), parts)
  # A row logged after the last checkpoint (a crash) is dropped on resume.
  with open(os.path.join(parts, 'metrics.jsonl'), 'a') as f:
    f.write(json.dumps({'round': 5, 'train_loss': 0.0}) + '\n')
  resumed = run.train(quick_config(rounds=6, backend=backend), parts)
  assert read_rows(parts) == read_rows(whole)
  for key in ('final_test_accuracy', 'final_test_loss', 'final_train_loss',
              'totals'):
    assert resumed[key] == expected[key]


def test_resuming_with_another_config_is_refused(tmp_path, capsys):
  run.train(quick_config(rounds=2), str(tmp_path))
  code = cli.main(QUICK + ['--config.rounds=4', '--config.client_lr=0.2',
                           f'--workdir={tmp_path}'])
  assert code == 2
  assert 'different config (client_lr)' in capsys.readouterr().err


def test_a_run_resumes_after_the_library_gains_options(tmp_path):
  """A workdir written before a section its method reads (or an option of
  a section) existed resumes; the new keys count as their defaults, and a
  finished run's summary stands."""
  run.train(quick_config(rounds=2), str(tmp_path))
  path = os.path.join(str(tmp_path), 'config.json')
  with open(path) as f:
    stored = json.load(f)
  del stored['clock']
  del stored['systems']['availability']
  with open(path, 'w') as f:
    json.dump(stored, f)
  summary = run.train(quick_config(rounds=3), str(tmp_path))
  assert summary['rounds'] == 3
  assert run.train(quick_config(rounds=3), str(tmp_path)) == summary


def test_asking_fewer_rounds_than_done_is_refused(tmp_path, capsys):
  run.train(quick_config(rounds=4), str(tmp_path))
  assert cli.main(QUICK + ['--config.rounds=2', f'--workdir={tmp_path}']) == 2
  assert 'already holds round 4' in capsys.readouterr().err


def test_a_nan_loss_stops_the_run_naming_the_round(tmp_path, capsys):
  code = cli.main(QUICK + ['--config.rounds=4', '--config.client_lr=1e30',
                           f'--workdir={tmp_path}'])
  err = capsys.readouterr().err
  assert code == 1
  assert 'not finite in round 1' in err and 'Traceback' not in err
  assert not (tmp_path / 'checkpoints' / '2').exists()


@pytest.mark.parametrize('override,message', [
    ('--config.not_a_key=1', "unknown config key 'not_a_key'"),
    ('--config.model_options.hidden=oops', 'hidden'),
    ('--config.model_options.hidden=(0,)', 'hidden must hold positive layer widths'),
    ("--config.metric_writers=('mlflow',)", 'metric_writers must be a tuple'),
    ('--config.algorithm=fedsomething', "unknown algorithm 'fedsomething'"),
    ('--config.dataset=imagenet', 'imagenet'),
    ('--config.partition=zigzag', 'zigzag'),
    ('--config.model=transformer9000', 'transformer9000'),
    ('--config.clients_per_round=50', 'clients_per_round (50) exceeds'),
    ('--config.rounds=0', 'rounds must be a positive integer'),
    ('--config.batch_size=-3', 'batch_size must be a positive integer'),
    ('--config.num_clients=0', 'num_clients must be a positive integer'),
    ('--config.local_steps=2.5', 'local_steps'),
    ('--config.capacities=(0.0, 1.0)', 'capacities must be'),
    ('--config.capacities=(0.5, 1.5)', 'capacities must be'),
    ('--config.capacities=(0.25, 1.0)', 'fedavg trains the full model'),
    ('--config.client_lr=-1.0', 'client_lr must be positive'),
    ('--config.backend=gpu_magic', 'backend must be one of'),
    ('--config.eval_every=3', 'multiple of rounds_per_call'),
    ('--config.dataset_options.bogus=1', "Unknown option(s) ['bogus']"),
    ('--config=does/not/exist.py', 'does not exist'),
    ('--frobnicate=1', 'unknown option --frobnicate'),
])
def test_bad_input_exits_with_one_clear_line(tmp_path, capsys, override,
                                             message):
  code = cli.main(QUICK + [override, f'--workdir={tmp_path}'])
  err = capsys.readouterr().err
  assert code == 2, err
  assert message in err
  assert err.startswith('fedjax-het: error: ') and err.count('\n') == 1


def test_an_unreadable_checkpoint_is_reported_not_skipped(tmp_path, capsys):
  run.train(quick_config(rounds=2), str(tmp_path))
  state_dir = tmp_path / 'checkpoints' / '2' / 'state'
  for root, _, files in os.walk(state_dir):
    for name in files:
      with open(os.path.join(root, name), 'wb') as f:
        f.write(b'garbage')
  code = cli.main(QUICK + ['--config.rounds=4', f'--workdir={tmp_path}'])
  assert code == 1
  assert 'cannot be read' in capsys.readouterr().err


def test_overrides_are_python_literals():
  config, workdir = cli.resolve(['--config', QUICKSTART,
                                 '--config.capacities=(0.25, 1.0)',
                                 '--config.dataset=synthetic',
                                 '--config.client_lr=1', '--config.rounds', '7'])
  assert config.capacities == (0.25, 1.0)
  assert config.dataset == 'synthetic' and config.rounds == 7
  assert config.client_lr == 1.0 and isinstance(config.client_lr, float)
  assert workdir == os.path.join('runs', 'quickstart')
  assert set(config.keys()) == set(base_config().keys())


def test_dataset_and_model_options_reach_their_components(tmp_path):
  config, _ = cli.resolve(QUICK + [
      '--config.dataset=synthetic', '--config.dataset_options.noise=3.0',
      '--config.dataset_options.shape=(4, 4, 2)',
      '--config.model_options.hidden=(5, 6)'])
  split, model, params, _ = run.build_experiment(config)
  assert split.test_x.shape[1:] == (4, 4, 2)
  assert params['fc1']['kernel'].shape == (32, 5)
  assert params['fc2']['kernel'].shape == (5, 6)


def test_ctrl_c_checkpoints_the_last_finished_round_then_resumes(tmp_path):
  workdir = str(tmp_path)
  cmd = [sys.executable, '-m', 'fedjax_het', *QUICK, '--config.rounds=2000',
         '--config.checkpoint_every=1000', f'--workdir={workdir}']
  proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
  metrics = os.path.join(workdir, 'metrics.jsonl')
  deadline = time.time() + 120
  while not (os.path.exists(metrics) and os.path.getsize(metrics)):
    assert time.time() < deadline and proc.poll() is None, proc.stderr.read()
    time.sleep(0.2)
  proc.send_signal(signal.SIGINT)
  _, err = proc.communicate(timeout=120)
  assert proc.returncode == 130, err
  assert 'is checkpointed' in err
  saved = [int(s) for s in os.listdir(os.path.join(workdir, 'checkpoints'))]
  assert len(saved) == 1 and saved[0] % 2 == 0 and 0 < saved[0] < 2000
  # Resuming with the interrupted round as the target logs that round.
  at_interrupt = run.train(quick_config(rounds=saved[0]), workdir)
  assert at_interrupt['rounds'] == saved[0]
  finished = run.train(quick_config(rounds=saved[0] + 2), workdir)
  assert finished['rounds'] == saved[0] + 2
  assert np.isfinite(finished['final_train_loss'])


def test_a_tfds_dataset_runs_end_to_end_from_data_dir(tmp_path):
  """The trainer reads TFDS sets from data_dir (TFDS mock data, offline)."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  (tmp_path / 'tfds').mkdir()  # a missing data_dir is refused before TFDS
  config = quick_config(dataset='mnist', data_dir=str(tmp_path / 'tfds'),
                        partition='iid', num_clients=6, clients_per_round=3,
                        model='lenet5', rounds=2)
  config.model_options = {}
  with tfds.testing.mock_data(num_examples=60):
    summary = run.train(config, str(tmp_path / 'run'))
  assert summary['dataset'] == 'mnist' and summary['model'] == 'lenet5'
  assert summary['num_params'] == 61_706  # LeNet-5 on 28×28×1, 10 classes


@pytest.mark.parametrize('backend', ['vmap', 'sequential'])
def test_a_map_chunk_size_outside_the_map_backend_is_refused(backend):
  """map_chunk_size is read by the map backend alone; under another it was
  accepted and ignored."""
  config = quick_config(backend=backend, map_chunk_size=4)
  split, _, params, algorithm = run.build_experiment(config)
  del split, params
  with pytest.raises(config_lib.ConfigError) as raised:
    run.make_runner(config, algorithm)
  assert str(raised.value) == (
      'map_chunk_size=4 is read by backends map and auto only, got backend '
      f"'{backend}'; set backend=map or leave it 0.")
  for read_by in ('map', 'auto'):
    assert run.make_runner(quick_config(backend=read_by, map_chunk_size=4),
                           algorithm).map_chunk_size == 4
