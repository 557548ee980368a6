"""Reliability II (issue 26): federations validated where they meet a model,
checkpoints and run files checked when read back, warnings for runs that are
valid but almost certainly not meant."""
import errno
import json
import os

from absl import logging as absl_logging
import numpy as np
import orbax.checkpoint as ocp
import pytest

from fedjax_het import methods, cli, compare, models, run, sanity
from fedjax_het import config as config_lib
from fedjax_het.core import key_streams
from fedjax_het.data import FederatedData, FederatedSplit
from engine_utils import tiny_config
from test_reliability import one_line_error
from test_run import QUICK, quick_config, read_rows


def memmapped(tmp_path, **changes) -> FederatedData:
  """A 4-client, 3-row federation of 5 classes in np.memmap files, with the
  leaves in `changes` (name → array) replacing the good ones."""
  leaves = {'x': np.ones((4, 3, 2), np.float32),
            'y': np.tile(np.arange(3, dtype=np.int32), (4, 1)),
            'counts': np.array([3, 2, 3, 1], np.int32)}
  leaves.update(changes)
  for name, array in leaves.items():
    mapped = np.lib.format.open_memmap(tmp_path / f'{name}.npy', 'w+',
                                       array.dtype, array.shape)
    mapped[:] = array
    mapped.flush()
  return FederatedData(**{name: np.load(tmp_path / f'{name}.npy', mmap_mode='r')
                          for name in leaves})


def bad_labels(value):
  y = np.tile(np.arange(3, dtype=np.int32), (4, 1))
  y[2, 1] = value
  return y


@pytest.mark.parametrize('changes, message', [
    ({'y': bad_labels(5)}, 'client 2, row 1: label 5 lies outside [0, 5)'),
    ({'y': bad_labels(-1)}, 'client 2, row 1: label -1 lies outside [0, 5)'),
    ({'counts': np.array([3, 2, 4, 1], np.int32)},
     'client 2 has counts 4, outside [1, 3] (its padded rows)'),
    ({'x': np.where(np.arange(3)[:, None] == 2, np.nan, 1).astype(
        np.float32)[None].repeat(4, 0)},
     'client 0, row 2: its features are not finite'),
    ({'y': np.zeros((4, 3), np.float32)},
     'y are float32; they must be integers'),
])
def test_a_memmapped_federation_is_checked_where_it_meets_the_model(
    tmp_path, changes, message):
  data = memmapped(tmp_path, **changes)
  model = models.create_model('mlp', 5, hidden=(4,))
  with pytest.raises(ValueError, match='federated data: ') as raised:
    methods.create_algorithm('fedavg', tiny_config(), model, data)
  assert message in str(raised.value) and '\n' not in str(raised.value)


def test_padding_rows_are_not_checked_and_blocks_keep_client_numbers(tmp_path):
  y = bad_labels(1)
  y[3, 2] = 7  # client 3 holds 1 row: row 2 is padding
  memmapped(tmp_path, y=y).validate(5, chunk_bytes=1)  # one client a block
  y[3, 0] = 12
  with pytest.raises(ValueError, match='client 3, row 0: label 12'):
    memmapped(tmp_path, y=y).validate(5, chunk_bytes=1)


def test_token_labels_are_checked_against_the_vocabulary():
  y = np.zeros((2, 2, 4), np.int32)  # next tokens, PAD = 0
  y[1, 0, 3] = 90
  data = FederatedData(x=np.zeros((2, 2, 4), np.int32), y=y,
                       counts=np.array([2, 2], np.int32))
  data.validate(91)
  with pytest.raises(ValueError, match="token 90 lies outside .0, 90., the "
                     "model's vocabulary"):
    data.validate(90)


def flip_bits(path, count, seed=0):
  """Flips `count` random bits of the file at `path`."""
  data = bytearray(path.read_bytes())
  for bit in np.random.default_rng(seed).choice(8 * len(data), count,
                                                replace=False):
    data[bit // 8] ^= 1 << (bit % 8)
  path.write_bytes(bytes(data))


def test_a_checkpoint_with_flipped_bits_is_moved_aside(tmp_path, capsys):
  workdir = str(tmp_path)
  run.train(quick_config(rounds=4), workdir)
  expected = read_rows(workdir)
  arrays = max((tmp_path / 'checkpoints' / '4' / 'state').rglob('d/*'),
               key=lambda p: p.stat().st_size)
  flip_bits(arrays, 16)
  run.train(quick_config(rounds=4), workdir)
  err = capsys.readouterr().err
  assert err.count('\n') == 1 and 'Traceback' not in err, err
  assert 'checkpoint of round 4' in err and 'resuming from round 2' in err
  assert 'damaged' in err, err  # the checksum, not a read error, found it
  assert read_rows(workdir) == expected
  assert (tmp_path / 'damaged_checkpoints' / '4').is_dir()


def test_a_lost_config_json_resumes_only_with_the_checkpoints_config(
    tmp_path, capsys):
  workdir = str(tmp_path)
  run.train(quick_config(rounds=2), workdir)
  (tmp_path / 'config.json').unlink()
  code = cli.main(QUICK + ['--config.client_lr=0.2', '--config.rounds=4',
                           f'--workdir={workdir}'])
  err = one_line_error(capsys, code, 2)
  assert '(client_lr, read from its checkpoints as config.json is missing)' \
      in err
  assert run.train(quick_config(rounds=4), workdir)['rounds'] == 4
  assert json.loads((tmp_path / 'config.json').read_text())['rounds'] == 4


def test_a_run_of_older_key_streams_resumes_only_where_its_draws_are_unchanged(
    tmp_path):
  """config.json records the key-stream revision; FedAvg's draws did not
  change in revision 2, so its older run resumes; a method whose draws did
  (FjORD's width draw) is refused in one line, whatever else matches."""
  workdir = str(tmp_path)
  run.train(quick_config(rounds=2), workdir)
  path = tmp_path / 'config.json'
  record = json.loads(path.read_text())
  assert record['key_streams_revision'] == key_streams.REVISION
  record['key_streams_revision'] = 1
  path.write_text(json.dumps(record))
  assert run.train(quick_config(rounds=3), workdir)['rounds'] == 3
  record = json.loads(path.read_text())
  record.update(key_streams_revision=1, algorithm='fjord')
  path.write_text(json.dumps(record))
  with pytest.raises(config_lib.ConfigError) as raised:
    run.train(quick_config(rounds=4, algorithm='fjord', capacities=(0.5, 1.0)),
              workdir)
  assert ('cannot resume bit-identically: it was trained with key streams '
          'revision 1, and fjord draws differently since revision 2') in str(
              raised.value)
  assert '\n' not in str(raised.value)


def method_config(algorithm: str, **systems):
  """The base config of `algorithm`, with `systems` keys set."""
  config = config_lib.base_config()
  config.algorithm = algorithm
  config.systems.update(systems)
  return config


def test_a_run_with_availability_before_revision_5_is_refused():
  """Revision 5 orders the online clients by the permutation of sampling
  without replacement: a run with availability draws other cohorts, one
  without it the same."""
  assert key_streams.resume_refusal(4, method_config(
      'fedavg', availability='diurnal')) == (
          'it was trained with key streams revision 4, and '
          'systems.availability=diurnal draws its cohort among the online '
          'clients differently since revision 5 (core/key_streams.py)')
  assert key_streams.resume_refusal(4, method_config('fedavg')) is None
  assert key_streams.resume_refusal(5, method_config(
      'fedavg', availability='bernoulli')) is None


def test_a_vit_baseline_run_before_its_smaller_client_state_is_refused():
  """Revision 3 dropped Co-S²P's client rows from the synchronous ViT
  baselines: their revision-2 checkpoints are refused, Co-S²P's resume."""
  assert key_streams.resume_refusal(2, method_config('vit_fedrolex')) == (
      'it was trained with key streams revision 2, and vit_fedrolex keeps a '
      'smaller client state since revision 3 (core/key_streams.py)')
  assert key_streams.resume_refusal(3, method_config('cos2p')) == (
      'it was trained with key streams revision 3, and cos2p reads its clock '
      'from the clock section since revision 4 (core/key_streams.py)')
  assert key_streams.resume_refusal(3, method_config('fedavg')) is None
  assert key_streams.resume_refusal(4, method_config('vit_fedrolex')) is None


VIT_METHODS = ('cos2p', 'vit_fedavg', 'vit_fedrolex', 'ram_fed', 'fedpm',
               'prunefl', 'vit_fedavg_platon', 'vit_fedavg_qvit',
               'vit_fedavg_adavit')


def test_a_vit_run_with_its_clock_in_the_cos2p_section_is_refused(tmp_path):
  """Revision 4 moved the ViT methods' clock from cos2p.mu, ... to the
  shared clock section: a run whose config.json holds cos2p.mu is refused
  in one line (first, before its config is compared), never resumed with
  other values; every ViT method, and only those, changed."""
  assert set(key_streams.CHANGED[4][0]) == set(VIT_METHODS) == {
      name for name, cls in methods.ALGORITHMS.items()
      if 'cos2p' in {g.key for g in cls.option_groups}}
  for name in VIT_METHODS:
    assert key_streams.resume_refusal(3, method_config(name)).endswith(
        f'and {name} reads its clock from the clock section since revision 4 '
        '(core/key_streams.py)')
  config = config_lib.base_config()
  config.update(algorithm='cos2p', dataset='digits', model='vit')
  record = {**run.run_record(config), 'key_streams_revision': 3}
  record['cos2p'].update(mu=0.5, t_clk=60.0, tau_max=-1, client_seconds=[],
                         jitter=0.05)
  del record['clock']
  (tmp_path / 'config.json').write_text(json.dumps(record))
  with pytest.raises(config_lib.ConfigError) as raised:
    run._check_same_run(str(tmp_path), config, None)  # pylint: disable=protected-access
  assert 'cannot resume bit-identically: it was trained with key streams ' \
      'revision 3, and cos2p reads its clock from the clock section since ' \
      'revision 4' in str(raised.value)
  assert '\n' not in str(raised.value)


def test_a_run_recording_keys_removed_since_resumes(tmp_path):
  """A FedAvg run of revision 3 recorded the cos2p section with the clock
  keys it never read (cos2p.mu, ...): it resumes, the removed keys left out."""
  workdir = str(tmp_path)
  run.train(quick_config(rounds=2), workdir)
  path = tmp_path / 'config.json'
  record = json.loads(path.read_text())
  record['key_streams_revision'] = 3
  record['cos2p'] = {**config_lib.base_config().cos2p.to_dict(), 'mu': 1.0,
                     't_clk': 0.0, 'tau_max': -1, 'client_seconds': [],
                     'jitter': 0.05}
  path.write_text(json.dumps(record))
  assert run.train(quick_config(rounds=3), workdir)['rounds'] == 3
  assert 'cos2p' not in json.loads(path.read_text())   # FedAvg's sections only


def test_an_emptied_summary_json_is_named_then_rewritten(tmp_path, capsys):
  workdir = str(tmp_path)
  summary = run.train(quick_config(rounds=2), workdir)
  (tmp_path / 'summary.json').write_text('')
  code = cli.main(QUICK + ['--config.rounds=2', f'--workdir={workdir}'])
  err = one_line_error(capsys, code, 1)
  assert 'summary.json is not JSON (empty); delete it' in err
  (tmp_path / 'summary.json').unlink()  # as the line says
  again = run.train(quick_config(rounds=2), workdir)
  assert again['final'] == summary['final']


def orbax_out_of_space(*args, **kwargs):
  """A save failing as orbax's does on a full disk: its thread logs the
  traceback (absl), then the save raises."""
  del args, kwargs
  try:
    raise ValueError('RESOURCE_EXHAUSTED: Error writing local file '
                     '"_sharding": No space left on device')
  except ValueError as e:
    absl_logging.exception('_SignalingThread.run() raised an exception: %s', e)
    raise


def test_orbax_out_of_space_is_one_line_and_loses_nothing(tmp_path, capsys,
                                                          monkeypatch):
  workdir = str(tmp_path)
  run.train(quick_config(rounds=2), workdir)
  monkeypatch.setattr(ocp.CheckpointManager, 'save', orbax_out_of_space)
  code = cli.main(QUICK + ['--config.rounds=4', f'--workdir={workdir}'])
  err = one_line_error(capsys, code, 1)
  assert 'cannot save the checkpoint of round 4' in err
  assert 'RESOURCE_EXHAUSTED' in err and 'last saved checkpoint is round 2' in err
  monkeypatch.undo()
  assert run.train(quick_config(rounds=4), workdir)['rounds'] == 4
  assert [r['round'] for r in read_rows(workdir)] == [2, 4]


@pytest.mark.parametrize('case', ['seeds_workdir_is_a_file',
                                  'comparison_under_a_read_only_directory'])
def test_comparison_workdirs_that_cannot_be_made_are_one_line(
    tmp_path, capsys, monkeypatch, case):
  workdir = tmp_path / 'runs'
  if case == 'seeds_workdir_is_a_file':
    workdir.write_text('x')
  else:  # root writes anywhere, so the refusal is the kernel's answer, faked
    def read_only(path, *args, **kwargs):
      raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
    monkeypatch.setattr(os, 'makedirs', read_only)
  code = cli.main(QUICK + ['--seeds', '2', f'--workdir={workdir}'])
  assert f'cannot use workdir {workdir}' in one_line_error(capsys, code, 1)


def test_a_torn_metrics_line_of_a_finished_comparison_run_is_named(
    tmp_path, capsys):
  (tmp_path / 'a').mkdir()
  (tmp_path / 'a' / 'metrics.jsonl').write_text(
      '{"round": 2, "test_accuracy": 0.5}\n{"round": 4, "test_acc')
  summary = {'final_test_accuracy': 0.5, 'final': {}}
  code = cli.report_errors('fedjax-het', lambda: compare.run_comparison(
      {'a': quick_config()}, str(tmp_path), lambda config, workdir: summary,
      curves=('round',)))
  err = one_line_error(capsys, code, 1)
  assert 'metrics.jsonl line 2 is not JSON' in err
  assert 'repair or remove the line' in err


def test_runs_valid_but_not_meant_are_warned_once_and_in_the_summary(
    tmp_path, capsys):
  code = cli.main(QUICK + [
      '--config.partition=one_class', '--config.num_clients=5',
      '--config.clients_per_round=5', '--config.batch_size=5000',
      '--config.client_lr=1e6', '--config.rounds=2', f'--workdir={tmp_path}'])
  assert code == 0
  warned = [line for line in capsys.readouterr().err.splitlines()
            if line.startswith('fedjax-het: warning: ')]
  summary = json.loads((tmp_path / 'summary.json').read_text())
  assert [w[len('fedjax-het: warning: '):] for w in warned] == \
      summary['warnings']
  batch, classes, chance = summary['warnings']
  assert batch.startswith('batch_size=5000 is larger than the data of 5 of '
                          '5 clients')
  assert classes.startswith('5 of 10 classes are held by no client '
                            '(classes 5, 6, 7, 8, 9)')
  assert chance.startswith('the final test accuracy 0.100 is at chance level')


def test_a_sensible_federation_and_a_short_run_are_not_warned():
  data = FederatedData(x=np.zeros((3, 4, 1), np.float32),
                       y=np.array([[0, 1, 2, 0]] * 3, np.int32),
                       counts=np.array([4, 3, 4], np.int32))
  split = FederatedSplit(train=data, test_x=np.zeros((6, 1)),
                         test_y=np.arange(6) % 3, local_test=None,
                         num_classes=3)
  assert sanity.data_warnings(split, batch_size=4) == []
  untrained = {'final_test_accuracy': 1 / 3, 'final_test_loss': np.log(3)}
  assert sanity.chance_warnings(untrained, split.test_y) == []
