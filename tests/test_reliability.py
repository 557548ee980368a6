"""Everyday reliability: one run per workdir, damaged files, one-line errors,
honest progress and wall time, metric writers."""
import errno
import json
import os
import struct
import subprocess
import sys
import time

from matplotlib.backends.backend_agg import FigureCanvasAgg
import orbax.checkpoint as ocp
import pytest

from fedjax_het import cli, plots, run, workdir as workdir_lib
from fedjax_het import config as config_lib
from fedjax_het.checkpoint import CheckpointError
from fedjax_het.config import ConfigError
from fedjax_het.workdir import WorkdirError
from script_utils import REPO, free_port, load_script
from test_run import QUICK, QUICKSTART, quick_config, read_rows


def one_line_error(capsys, code, expected_code=None):
  """The stderr of a failed cli.main call, checked to be one line."""
  err = capsys.readouterr().err
  assert code != 0 and (expected_code is None or code == expected_code), err
  assert err.count('\n') == 1 and 'Traceback' not in err, err
  return err


def test_a_second_run_stops_naming_the_holder_and_a_killed_holder_frees_it(
    tmp_path, capsys):
  workdir = str(tmp_path)
  holder = subprocess.Popen(
      [sys.executable, '-m', 'fedjax_het', *QUICK, '--config.rounds=2000',
       '--config.checkpoint_every=1000', f'--workdir={workdir}'],
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  metrics = os.path.join(workdir, 'metrics.jsonl')
  try:
    deadline = time.time() + 120
    while not (os.path.exists(metrics) and os.path.getsize(metrics)):
      assert time.time() < deadline and holder.poll() is None, holder.stderr.read()
      time.sleep(0.2)
    code = cli.main(QUICK + ['--config.client_lr=0.2', f'--workdir={workdir}'])
    err = one_line_error(capsys, code, 1)
    assert f'in use by pid {holder.pid} ' in err
  finally:
    holder.kill()  # a crash: the kernel frees the lock
    holder.wait()
  with open(os.path.join(workdir, 'config.json')) as f:
    assert json.load(f)['client_lr'] == 0.05  # the holder's config survives
  with workdir_lib.lock(workdir):
    pass


def test_config_files_get_their_own_default_workdirs():
  hist = os.path.join(REPO, 'experiments', 'hist', 'quickstart.py')
  assert cli.default_workdir(QUICKSTART) == os.path.join('runs', 'quickstart')
  assert cli.default_workdir(hist) == os.path.join('runs', 'hist', 'quickstart')
  assert cli.default_workdir('/elsewhere/mine.py') == os.path.join('runs', 'mine')


def test_home_and_variables_are_expanded_in_path_keys(tmp_path, monkeypatch):
  monkeypatch.setenv('HOME', str(tmp_path))
  monkeypatch.setenv('TRACES', '/traces')
  config = quick_config(data_dir='~/tfds')
  config.systems.trace = '${TRACES}/t.npz'
  expanded = run.expand_paths(config)
  assert expanded.data_dir == str(tmp_path / 'tfds')
  assert expanded.systems.trace == '/traces/t.npz'
  assert config.data_dir == '~/tfds'  # the caller's config is left alone
  assert cli.main(QUICK + ['--config.rounds=2', '--workdir=~/run']) == 0
  assert (tmp_path / 'run' / 'summary.json').exists()


def garble(directory):
  for root, _, files in os.walk(directory):
    for name in files:
      with open(os.path.join(root, name), 'wb') as f:
        f.write(b'garbage')


def test_resume_skips_a_damaged_checkpoint_and_a_torn_metrics_line(tmp_path,
                                                                   capsys):
  workdir = str(tmp_path)
  run.train(quick_config(rounds=6), workdir)
  expected = read_rows(workdir)
  garble(tmp_path / 'checkpoints' / '6' / 'state')
  with open(tmp_path / 'metrics.jsonl', 'a') as f:
    f.write('{"round": 8, "train_lo')  # torn by a crash
  run.train(quick_config(rounds=6), workdir)
  err = capsys.readouterr().err
  assert 'round 6' in err and 'resuming from round 4' in err
  assert 'Traceback' not in err and err.count('\n') == 1
  assert read_rows(workdir) == expected
  assert (tmp_path / 'damaged_checkpoints' / '6').is_dir()
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['4', '6']


def test_a_garbled_metrics_line_before_the_last_is_named(tmp_path):
  path = tmp_path / 'metrics.jsonl'
  path.write_text('{"round": 2}\nnot json\n{"round": 4}\n')
  with pytest.raises(workdir_lib.WorkdirError, match='metrics.jsonl line 2'):
    workdir_lib.read_metrics(str(path))


@pytest.mark.parametrize('text', [b'', b'{"rounds": 4', b'[1, 2]',
                                  b'\xff\xfe garbage'])
def test_an_unusable_config_json_is_named_in_one_line(tmp_path, capsys, text):
  (tmp_path / 'config.json').write_bytes(text)
  code = cli.main(QUICK + [f'--workdir={tmp_path}'])
  assert 'config.json' in one_line_error(capsys, code, 1)


def _enospc(*args, **kwargs):
  raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize('write', ['checkpoint', 'metrics'])
def test_a_full_disk_stops_in_one_line_and_keeps_the_checkpoint(
    tmp_path, capsys, monkeypatch, write):
  workdir = str(tmp_path)
  run.train(quick_config(rounds=2), workdir)
  if write == 'checkpoint':
    monkeypatch.setattr(ocp.CheckpointManager, 'save', _enospc)
  else:
    real_open = open
    monkeypatch.setattr(run, 'open', lambda path, mode='r', *a, **k: (
        _enospc() if mode == 'a' else real_open(path, mode, *a, **k)),
                        raising=False)
  code = cli.main(QUICK + ['--config.rounds=4', f'--workdir={workdir}'])
  assert 'No space left on device' in one_line_error(capsys, code, 1)
  monkeypatch.undo()
  assert run.train(quick_config(rounds=4), workdir)['rounds'] == 4
  assert [r['round'] for r in read_rows(workdir)] == [2, 4]


@pytest.mark.parametrize('case', [
    'workdir_is_a_file', 'workdir_under_a_file', 'get_config_returns_a_dict',
    'bench_unknown_algorithm', 'bench_empty_cohort', 'config_syntax_error',
    'config_import_error', 'dataset_option_of_another_type',
    'model_option_of_another_type', 'show_config_of_an_unknown_algorithm'])
def test_former_tracebacks_exit_with_one_line(tmp_path, capsys, case):
  (tmp_path / 'file').write_text('x')
  (tmp_path / 'plain.py').write_text('def get_config():\n  return {}\n')
  (tmp_path / 'syntax.py').write_text('def get_config(:\n  pass\n')
  (tmp_path / 'imports.py').write_text('"""A config."""\nimport no_such_module\n')
  workdir = f'--workdir={tmp_path / "run"}'
  argv = {
      'workdir_is_a_file': QUICK + [f'--workdir={tmp_path / "file"}'],
      'workdir_under_a_file': QUICK + [f'--workdir={tmp_path / "file" / "w"}'],
      'get_config_returns_a_dict': ['--config', str(tmp_path / 'plain.py')],
      'bench_unknown_algorithm': ['bench', '--algorithm', 'fiarce'],
      'bench_empty_cohort': ['bench', '--cohort', '0'],
      'config_syntax_error': ['--config', str(tmp_path / 'syntax.py')],
      'config_import_error': ['--config', str(tmp_path / 'imports.py')],
      'dataset_option_of_another_type': QUICK + [
          "--config.dataset_options={'test_fraction': 'a'}", workdir],
      'model_option_of_another_type': QUICK + [
          "--config.model_options.exits='yes'", workdir],
      'show_config_of_an_unknown_algorithm': QUICK + [
          '--show-config', '--config.algorithm=fiarce'],
  }[case]
  err = one_line_error(capsys, cli.main(argv))
  assert {'workdir_is_a_file': 'cannot use workdir',
          'workdir_under_a_file': 'cannot use workdir',
          'get_config_returns_a_dict': 'returned a dict',
          'bench_unknown_algorithm': "unknown algorithm 'fiarce'",
          'bench_empty_cohort': '--cohort must be at least 1',
          'config_syntax_error': f"config file '{tmp_path / 'syntax.py'}' line 1: ",
          'config_import_error': f"config file '{tmp_path / 'imports.py'}' line 2: "
                                 "ModuleNotFoundError: No module named 'no_such_module'",
          'dataset_option_of_another_type':
              "dataset_options.test_fraction must be a number, got 'a'.",
          'model_option_of_another_type':
              "model_options.exits must be True or False, got 'yes'.",
          'show_config_of_an_unknown_algorithm': "unknown algorithm 'fiarce'; choose one of",
          }[case] in err
  assert not (tmp_path / 'run').exists()  # refused before anything was written


@pytest.mark.parametrize('case', ['no_cluster', 'process_1_missing'])
def test_distributed_start_up_fails_in_one_line(tmp_path, case):
  """`--distributed` with no cluster environment names what to set (it was a
  ValueError traceback); with JAX_NUM_PROCESSES=2 and only process 0 started
  it stops after --distributed-timeout naming process 1 (it waited with no
  output). A subprocess each: JAX joins a cluster before its first use of a
  device, which this test process is past. Nothing is written."""
  env = {k: v for k, v in os.environ.items() if k not in (
      'JAX_COORDINATOR_ADDRESS', 'JAX_NUM_PROCESSES', 'JAX_PROCESS_ID')}
  if case == 'process_1_missing':
    env.update(JAX_COORDINATOR_ADDRESS=f'localhost:{free_port()}',
               JAX_NUM_PROCESSES='2', JAX_PROCESS_ID='0')
  tic = time.perf_counter()
  result = subprocess.run(
      [sys.executable, '-m', 'fedjax_het', '--distributed',
       '--distributed-timeout', '2', *QUICK, f'--workdir={tmp_path / "run"}'],
      env=env, capture_output=True, text=True, timeout=120)
  assert time.perf_counter() - tic < 60
  assert result.stderr.count('\n') == 1, result.stderr
  if case == 'no_cluster':
    assert result.returncode == 2
    assert result.stderr.startswith('fedjax-het: error: --distributed found no cluster')
    assert ('set JAX_COORDINATOR_ADDRESS=host:port, JAX_NUM_PROCESSES and '
            'JAX_PROCESS_ID') in result.stderr
  else:
    assert result.returncode == 1
    assert result.stderr.startswith(
        'fedjax-het: --distributed: process 0 of 2 waited 2 s at localhost:')
    assert 'for process 1, which never joined' in result.stderr
    assert 'JAX_PROCESS_ID=1' in result.stderr
  assert not (tmp_path / 'run').exists()


def test_the_quadratic_names_the_methods_it_takes(capsys, monkeypatch):
  script = load_script(os.path.join(REPO, 'experiments', 'fedacs',
                                     'quadratic.py'), monkeypatch)
  err = one_line_error(capsys, script.main(["--config.methods=('fedavg',)"]), 2)
  assert "got ('fedavg',)" in err and 'fedacs, fedavg_het' in err


def scalefl_args(rounds):
  return QUICK + ['--config.algorithm=scalefl', '--config.capacities=(0.5, 1.0)',
                  '--config.model_options.exits=True',
                  '--config.model_options.hidden=(16, 16)',
                  f'--config.rounds={rounds}']


def test_scalefl_refuses_a_resume_that_changes_rounds(tmp_path, capsys):
  config, _ = cli.resolve(scalefl_args(2))
  # What the trainer writes: the config resolved by its method.
  (tmp_path / 'config.json').write_text(config_lib.resolve(config).to_json())
  code = cli.main(scalefl_args(4) + [f'--workdir={tmp_path}'])
  err = one_line_error(capsys, code, 2)
  assert 'scalefl' in err and 'rounds=4' in err


def test_progress_shows_phases_and_wall_time_is_the_whole_run(tmp_path, capsys):
  tic = time.perf_counter()
  summary = run.train(quick_config(rounds=4, progress=True), str(tmp_path))
  elapsed = time.perf_counter() - tic
  err = capsys.readouterr().err
  assert 'compiling…' in err and 'evaluating…' in err
  assert f'{tmp_path.name} (fedavg on digits)' in err
  # Everything train() did is in the wall time: setup, compiling, evaluation,
  # checkpoints and plots (before, only the compiled chunks were counted).
  assert 0.95 * elapsed <= summary['wall_time_s'] <= elapsed


def read_tensorboard_scalars(directory) -> dict[str, list[tuple[int, float]]]:
  """tag → [(step, value)] from the TFRecord event files in `directory`."""
  from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top
  scalars = {}
  for name in sorted(os.listdir(directory)):
    with open(os.path.join(directory, name), 'rb') as f:
      data = f.read()
    offset = 0
    while offset < len(data):  # length, its crc, the record, its crc
      (length,) = struct.unpack('<Q', data[offset:offset + 8])
      event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
      offset += 16 + length
      for value in event.summary.value:
        scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
  return scalars


def test_tensorboard_event_files_hold_every_logged_row(tmp_path):
  pytest.importorskip('tensorboardX', reason='pip install -e ".[tensorboard]"')
  run.train(quick_config(rounds=4, metric_writers=('tensorboard',)),
            str(tmp_path))
  scalars = read_tensorboard_scalars(tmp_path / 'tensorboard')
  rows = read_rows(tmp_path)
  assert [step for step, _ in scalars['test_accuracy']] == [2, 4]
  assert [v for _, v in scalars['test_accuracy']] == pytest.approx(
      [r['test_accuracy'] for r in rows])


def test_wandb_offline_run_holds_the_logged_rows(tmp_path, monkeypatch):
  pytest.importorskip('wandb', reason='pip install -e ".[wandb]"')
  monkeypatch.delenv('WANDB_MODE', raising=False)
  run.train(quick_config(rounds=2, metric_writers=('wandb',)), str(tmp_path))
  [run_dir] = [d for d in os.listdir(tmp_path / 'wandb')
               if d.startswith('offline-run-')]
  [records] = [f for f in os.listdir(tmp_path / 'wandb' / run_dir)
               if f.endswith('.wandb')]
  with open(tmp_path / 'wandb' / run_dir / records, 'rb') as f:
    data = f.read()  # protobuf records; history values are JSON text
  row = read_rows(tmp_path)[-1]
  assert b'test_accuracy' in data
  assert json.dumps(row['test_accuracy']).encode() in data


def test_comparison_legend_covers_no_bar():
  bars = {m: [0.95, 0.9, 0.97] for m in ('fiarse', 'heterofl', 'fedrolex')}
  sweeps = {m: {0.1: 0.5, 1.0: 0.9} for m in bars}
  fig = plots.comparison_figure(bars, ['a', 'b', 'c'], sweeps, 'title')
  renderer = FigureCanvasAgg(fig).get_renderer()
  fig.draw(renderer)
  [legend] = fig.legends
  box = legend.get_window_extent(renderer)
  for ax in fig.axes:
    assert not box.overlaps(ax.get_window_extent(renderer))


@pytest.mark.parametrize('error, code', [
    (lambda: ConfigError('rounds must be a positive integer, got 0.'), 2),
    (lambda: WorkdirError('workdir W is in use by pid 1 on h since t.'), 1),
    (lambda: CheckpointError('checkpoint of round 2 cannot be read.'), 1),
])
def test_every_entry_point_reports_user_errors_in_one_line(capsys, error,
                                                           code):
  """`cli.report_errors` serves fedjax-het and the FedACS/HIST compare scripts."""

  def fail():
    raise error()

  assert cli.report_errors('compare.py', fail) == code
  err = capsys.readouterr().err
  assert err.startswith('compare.py: ') and err.count('\n') == 1
  assert 'Traceback' not in err
