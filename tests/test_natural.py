"""Natural federated sets (fedjax_het.data.natural*): readers of every format on files written
here (tests/natural_writers.py), the natural partition, text tokens, LEAF's Sent140 and CelebA,
the memmap cache, streaming and one CLI run per dataset."""
import json
import lzma
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het import cli, evaluation, models, run
from fedjax_het.data import natural, natural_files, text
from fedjax_het.data.natural import NaturalOptions, load_natural
from fedjax_het.models import text as text_models
from fedjax_het.options import ConfigError
import natural_writers as nw

FORMATS = natural.FORMATS


def options(**kw):
  return NaturalOptions(**{**dict(format='auto', min_examples=1, max_examples=0, sequence_length=0,
                                  vocab_size=10000, cache_dir=''), **kw})


def file_order(fmt, ids):
  """The clients' order in a format's files: LEAF's shard by shard (nw.write_leaf deals the
  users round-robin to 2 shards), TFF's SQLite and HDF5 by sorted id, FedJAX's by row."""
  ids = list(ids)
  return ids[0::2] + ids[1::2] if fmt == 'leaf_json' else \
      sorted(ids) if fmt in ('tff_sqlite', 'tff_h5') else ids


def stacked(clients, ids, feature):
  return np.concatenate([clients[c][feature] for c in ids])


def rows(data, client):
  """(x, y) of `client` of a ragged federation: its counts[client] rows from offsets[client]."""
  start = int(data.offsets[client])
  stop = start + int(data.counts[client])
  return data.x[start:stop], data.y[start:stop]


@pytest.mark.parametrize('fmt', FORMATS)
def test_emnist_writers_read_back_in_every_format(tmp_path, fmt):
  train, test = nw.write_emnist(tmp_path, fmt)
  split = load_natural('fed_emnist', str(tmp_path), num_clients=4, seed=0,
                       options=options(format=fmt), local_test=True)
  ids = file_order(fmt, nw.EMNIST_TRAIN_SIZES)
  assert split.client_ids == tuple(ids)
  np.testing.assert_array_equal(split.train.counts, [nw.EMNIST_TRAIN_SIZES[c] for c in ids])
  # Stored back to back: 3 + 1 + 5 + 2 rows, drawn as the padded layout's 5.
  assert split.num_classes == 62 and split.train.x.shape == (11, 28, 28, 1)
  assert split.train.max_examples == 5 and split.local_test.max_examples == 2
  for i, cid in enumerate(ids):
    x, y = rows(split.train, i)
    np.testing.assert_array_equal(x[..., 0], 1 - train[cid]['pixels'])
    np.testing.assert_array_equal(y, train[cid]['label'])
    np.testing.assert_array_equal(rows(split.local_test, i)[1], test[cid]['label'])
  np.testing.assert_array_equal(split.test_y, stacked(test, ids, 'label'))
  np.testing.assert_array_equal(split.test_x[..., 0], 1 - stacked(test, ids, 'pixels'))


def test_natural_selection_keeps_eligible_clients_seeded(tmp_path):
  nw.write_emnist(tmp_path, 'fedjax_sqlite')
  opts = options(min_examples=2)
  split = load_natural('fed_emnist', str(tmp_path), num_clients=3, seed=0, options=opts)
  np.testing.assert_array_equal(split.train.counts, [3, 5, 2])
  assert split.client_ids == ('f0000_14', 'f0002_02', 'f0003_33')  # f0001_41: 1 example
  draws = {tuple(load_natural('fed_emnist', str(tmp_path), num_clients=2, seed=s,
                              options=opts).train.counts) for s in range(6)}
  assert draws <= {(3, 5), (3, 2), (5, 2)} and len(draws) > 1  # subsets in file order
  again = load_natural('fed_emnist', str(tmp_path), num_clients=2, seed=3, options=opts)
  first = load_natural('fed_emnist', str(tmp_path), num_clients=2, seed=3, options=opts)
  np.testing.assert_array_equal(again.train.x, first.train.x)
  capped = load_natural('fed_emnist', str(tmp_path), num_clients=3, seed=0,
                        options=options(min_examples=2, max_examples=2))
  np.testing.assert_array_equal(capped.train.counts, [2, 2, 2])
  for i in range(3):
    np.testing.assert_array_equal(rows(capped.train, i)[0], rows(split.train, i)[0][:2])
  with pytest.raises(ValueError, match=r'has 3 clients with >= 2 examples; num_clients=4'):
    load_natural('fed_emnist', str(tmp_path), num_clients=4, seed=0, options=opts)


def test_shakespeare_follows_fedjax_rule():
  x, y = text.shakespeare_sequences([b'ABCD', b'E'], 3)
  a, b, c, d, e = text.shakespeare_labels(b'ABCDE')
  np.testing.assert_array_equal(x, [[1, a, b], [c, d, 2], [1, e, 0]])
  np.testing.assert_array_equal(y, [[a, b, c], [d, 2, 1], [e, 2, 0]])
  assert text.SHAKESPEARE_VOCAB == 90 and text.shakespeare_labels(b'{')[0] == 89  # OOV
  assert set(text.shakespeare_labels(text.SHAKESPEARE_CHARS)) == set(range(3, 89))


@pytest.mark.parametrize('fmt', FORMATS)
def test_shakespeare_characters_round_trip(tmp_path, fmt):
  nw.write_shakespeare(tmp_path, fmt)
  split = load_natural('shakespeare', str(tmp_path), num_clients=3, seed=0, options=options())
  inverse = {int(label): bytes([c]) for c, label in enumerate(text._CHAR_TABLE)
             if label < 89}
  first = split.train.x[0]  # the first client in the file's order
  decoded = b''.join(inverse.get(int(t), b'?') for t in first if t >= 3)
  if fmt == 'leaf_json':
    assert split.train.x.shape[1:] == (80,) and split.train.max_examples == 2
    np.testing.assert_array_equal(split.train.y[:, :-1], split.train.x[:, 1:])
  else:
    ids = file_order(fmt, nw.SHAKESPEARE_TRAIN)
    assert first[0] == text.BOS
    assert decoded.startswith(nw.SHAKESPEARE_TRAIN[ids[0]][0])
    expected = [text.shakespeare_sequences(nw.SHAKESPEARE_TRAIN[c], 80)[0].shape[0]
                for c in ids]
    np.testing.assert_array_equal(split.train.counts, expected)
  assert split.num_classes == 90 and split.train.x.dtype == np.int32
  # The summary counts the files' examples (snippets; LEAF's 80-character windows) and the rows.
  assert split.summary['format'] == fmt and split.summary['clients']['kind'] == 'speaking role'
  assert split.summary['examples'] == {
      'train_stored': 6 if fmt == 'leaf_json' else 4,
      'train_rows': int(split.train.counts.sum()), 'test_rows': len(split.test_y)}


def test_stackoverflow_words_pad_truncate_and_oov(tmp_path):
  nw.write_stackoverflow(tmp_path)
  split = load_natural('stackoverflow', str(tmp_path), num_clients=2, seed=0,
                       options=options(vocab_size=5, sequence_length=4))
  assert split.num_classes == 3 + 5 + 1
  the, to, i, a, is_ = range(3, 8)
  oov = 8
  x, y = rows(split.train, 0)
  np.testing.assert_array_equal(x[:2], [[1, i, oov, to], [1, the, is_, 0]])
  np.testing.assert_array_equal(y[:2], [[i, oov, to, oov], [the, is_, 2, 0]])
  np.testing.assert_array_equal(split.test_y, [[a, oov, 2, 0], [the, 2, 0, 0]])
  with pytest.raises(ValueError, match='lists 5 words, fewer than the vocabulary of 6'):
    load_natural('stackoverflow', str(tmp_path), num_clients=2, seed=0,
                 options=options(vocab_size=6))


def test_example_parser_reads_every_value_kind():
  blob = nw.example({'pixels': np.array([[0.5, -1.0], [2.0, 3.0]], np.float32),
                     'label': np.array([-3, 7, 300]), 'snippets': b'To be'})
  parsed = natural_files.parse_example(blob)
  np.testing.assert_array_equal(parsed['pixels'], [0.5, -1.0, 2.0, 3.0])
  np.testing.assert_array_equal(parsed['label'], [-3, 7, 300])
  assert parsed['snippets'] == [b'To be']
  unpacked = nw.field(1, nw.field(1, nw.field(1, b'v') + nw.field(
      2, nw.field(2, nw.float_field(1, 1.5) + nw.float_field(1, 2.5)))))
  np.testing.assert_array_equal(natural_files.parse_example(unpacked)['v'], [1.5, 2.5])
  with pytest.raises(natural_files.ProtoError):
    natural_files.parse_example(blob[:-3])


def one_line_error(match, call):
  with pytest.raises(ValueError, match=match) as info:
    call()
  assert '\n' not in str(info.value)
  return str(info.value)


def test_missing_truncated_and_inconsistent_files_stop_in_one_line(tmp_path):
  load = lambda fmt='auto', n=4: load_natural('fed_emnist', str(tmp_path), num_clients=n,
                                              seed=0, options=options(format=fmt))
  message = one_line_error('no file of it in data_dir', load)
  for name in ('federated_emnist_train.sqlite', 'emnist_all.sqlite[.lzma]',
               'fed_emnist_train.h5', 'train/*.json'):
    assert name in message
  nw.write_emnist(tmp_path, 'tff_h5')
  nw.truncate(tmp_path / 'fed_emnist_train.h5')
  one_line_error('fed_emnist_train.h5 is not a readable HDF5 file', load)
  train = nw.emnist_clients(nw.EMNIST_TRAIN_SIZES, 0)
  nw.write_fedjax_sqlite(tmp_path / 'federated_emnist_train.sqlite', train,
                         num_examples={'f0002_02': 4})
  nw.write_fedjax_sqlite(tmp_path / 'federated_emnist_test.sqlite', train)
  one_line_error('client f0002_02 has num_examples=4 but features of lengths',
                 lambda: load('fedjax_sqlite'))
  nw.write_tff_sqlite(tmp_path / 'emnist_all.sqlite', {'all_train': train, 'all_test': train})
  nw.truncate(tmp_path / 'emnist_all.sqlite', 0.3)
  one_line_error('emnist_all.sqlite', lambda: load('tff_sqlite'))
  for split in ('train', 'test'):
    os.makedirs(tmp_path / split)
    (tmp_path / split / 'a.json').write_text(json.dumps(
        {'users': ['u'], 'num_samples': [2], 'user_data': {'u': {'x': [[0.0] * 784], 'y': [1]}}}))
  one_line_error('user u has num_samples=2 but user_data', lambda: load('leaf_json', 1))


def test_another_sets_file_or_other_shapes_are_named_by_file_and_writer(tmp_path):
  """Valid files that are not F-EMNIST's: Shakespeare's under F-EMNIST's names, 32x32 pixels,
  LEAF rows of 1,024 pixels: one line naming the file and the writer."""
  load = lambda n: lambda: load_natural('fed_emnist', str(tmp_path), num_clients=n, seed=0,
                                       options=options())
  nw.write_shakespeare(tmp_path, 'tff_h5')
  for split in ('train', 'test'):
    os.replace(tmp_path / f'shakespeare_{split}.h5', tmp_path / f'fed_emnist_{split}.h5')
  one_line_error(r"fed_emnist_train.h5: writer HAMLET_HORATIO has the features \['snippets'\], "
                 r"not \['label', 'pixels'\]: is it another set's file", load(3))
  large = {c: {'pixels': np.zeros((n, 32, 32), np.float32), 'label': np.zeros(n, np.int32)}
           for c, n in nw.EMNIST_TRAIN_SIZES.items()}
  nw.write_fedjax_sqlite(tmp_path / 'federated_emnist_train.sqlite', large)
  nw.write_fedjax_sqlite(tmp_path / 'federated_emnist_test.sqlite', large)
  one_line_error(r"federated_emnist_train.sqlite: writer f0000_14: feature 'pixels' has "
                 r"examples of shape \(32, 32\), not \(28, 28\)", load(4))
  for split in ('train', 'test'):
    nw.write_leaf(tmp_path / split, {'u7': {'x': np.zeros((2, 1024)), 'y': [0, 1]}})
  one_line_error(r'/train: writer u7: its examples do not convert \(cannot reshape array of '
                 r'size 2048', lambda: load_natural('fed_emnist', str(tmp_path), num_clients=1,
                                                    seed=0, options=options(format='leaf_json')))


def test_a_corrupt_block_that_still_decodes_is_named_without_a_warning(tmp_path):
  """HDF5 keeps no checksum: bytes overwritten in a pixel block decode to a float64 of 1e300,
  which overflows float32; a FedJAX SQLite label beyond the 62 classes. Each stops in one line
  naming the file, the writer and the example, and numpy warns of nothing."""
  train = nw.emnist_clients(nw.EMNIST_TRAIN_SIZES, 0)
  as_float64 = {c: {**f, 'pixels': f['pixels'].astype(np.float64)} for c, f in train.items()}
  for split in ('train', 'test'):
    nw.write_tff_h5(tmp_path / f'fed_emnist_{split}.h5', as_float64)
  import h5py  # pylint: disable=import-outside-toplevel
  with h5py.File(tmp_path / 'fed_emnist_train.h5', 'r') as f:
    offset = f['examples/f0002_02/pixels'].id.get_offset()
  with open(tmp_path / 'fed_emnist_train.h5', 'r+b') as f:
    f.seek(offset + (2 * 28 * 28 + 100) * 8)  # example 2, pixel 100
    f.write(np.float64(1e300).tobytes())
  load = lambda fmt: load_natural('fed_emnist', str(tmp_path), num_clients=4, seed=0,
                                  options=options(format=fmt))
  with warnings.catch_warnings():
    warnings.simplefilter('error')
    one_line_error(r'fed_emnist_train.h5: writer f0002_02, example 2: its features are not '
                   r'finite \(NaN or inf as float32\): the file is corrupt there', lambda: load('tff_h5'))
  train['f0003_33']['label'][1] = 70
  nw.write_fedjax_sqlite(tmp_path / 'federated_emnist_train.sqlite', train)
  nw.write_fedjax_sqlite(tmp_path / 'federated_emnist_test.sqlite', train)
  one_line_error(r'federated_emnist_train.sqlite: writer f0003_33, example 1: label 70 lies '
                 r'outside \[0, 62\)', lambda: load('fedjax_sqlite'))


def test_evaluation_reads_the_kept_writers_and_refuses_files_that_share_none(tmp_path):
  """The global test set is the kept writers' own test examples (the test file's other writers
  are not read); train and test files that share no writer, or a selection of which none has
  test examples, stop in one line saying so."""
  train = nw.emnist_clients(nw.EMNIST_TRAIN_SIZES, 0)
  test = nw.emnist_clients({'zz_only_test': 2, 'f0001_41': 3}, 1)
  nw.write_fedjax_sqlite(tmp_path / 'federated_emnist_train.sqlite', train)
  nw.write_fedjax_sqlite(tmp_path / 'federated_emnist_test.sqlite', test)
  load = lambda n, local_test=False, **kw: load_natural(
      'fed_emnist', str(tmp_path), num_clients=n, seed=0, options=options(**kw),
      local_test=local_test)
  split = load(4)
  np.testing.assert_array_equal(split.test_y, test['f0001_41']['label'])
  assert split.summary['clients'] == {
      'kind': 'writer', 'in_train_file': 4, 'kept': 4, 'dropped': {}, 'in_test_file': 2,
      'test_file_only': 1, 'kept_without_test': 3, 'test_set': "each kept writer's own"}
  assert '(test file: 2 clients, 1 of them not in the train file; kept without test ' \
         'examples: 3)' in natural.format_summary(split.summary)
  one_line_error(r'no writer kept of .*federated_emnist_train.sqlite \(num_clients=3, seed=0\) '
                 r'has test examples in .*federated_emnist_test.sqlite; set local_test=True',
                 lambda: load(3, min_examples=2))  # f0001_41 has 1 train example
  local = load(1, local_test=True)
  assert local.client_ids == ('f0001_41',)
  assert local.summary['clients']['dropped'] == {'no test examples (local_test)': 3}
  one_line_error(r'has 1 clients with >= 1 examples and a test split; num_clients=2 is too '
                 r'many \(set num_clients <= 1\)', lambda: load(2, local_test=True))
  os.remove(tmp_path / 'federated_emnist_test.sqlite')
  nw.write_fedjax_sqlite(tmp_path / 'federated_emnist_test.sqlite',
                         nw.emnist_clients({'zz_only_test': 2}, 1))
  for local_test in (False, True):
    one_line_error(r"federated_emnist_train.sqlite and .*federated_emnist_test.sqlite share no "
                   r"writer: none of the train file's 4 \('f0000_14', ...\) is among the test "
                   r"file's 1 \('zz_only_test', ...\)", lambda: load(3, local_test))


def test_memmap_cache_is_reused_and_rebuilt_when_a_source_changes(tmp_path):
  data = tmp_path / 'data'
  data.mkdir()
  nw.write_emnist(data, 'fedjax_sqlite')
  opts = options(cache_dir=str(tmp_path / 'cache'))
  plain = load_natural('fed_emnist', str(data), num_clients=4, seed=0, options=options())
  cached = load_natural('fed_emnist', str(data), num_clients=4, seed=0, options=opts)
  assert isinstance(cached.train.x, np.memmap)
  for field in ('x', 'y', 'counts'):
    np.testing.assert_array_equal(getattr(cached.train, field), getattr(plain.train, field))
  np.testing.assert_array_equal(cached.test_x, plain.test_x)
  # Read back from the cache: the source's examples are not decoded again.
  reused = load_natural('fed_emnist', str(data), num_clients=4, seed=0, options=opts)
  assert reused.train.x.filename == cached.train.x.filename
  assert reused.client_ids == plain.client_ids == tuple(nw.EMNIST_TRAIN_SIZES)
  # A changed source file: the cache is rebuilt from it.
  sizes = {**nw.EMNIST_TRAIN_SIZES, 'f0002_02': 6}
  nw.write_fedjax_sqlite(data / 'federated_emnist_train.sqlite.new',
                         nw.emnist_clients(sizes, 0))
  os.replace(data / 'federated_emnist_train.sqlite.new', data / 'federated_emnist_train.sqlite')
  rebuilt = load_natural('fed_emnist', str(data), num_clients=4, seed=0, options=opts)
  np.testing.assert_array_equal(rebuilt.train.counts, [3, 1, 6, 2])


def test_token_loss_and_accuracy_leave_out_padding():
  y = jnp.array([[5, 2, 0], [6, 7, 0]])  # targets: word, EOS, PAD
  logits = jax.nn.one_hot(jnp.array([[5, 2, 9], [1, 7, 4]]), 10) * 50.0
  ce = evaluation.cross_entropy(logits, y)
  per_token = jax.vmap(jax.vmap(lambda l, t: -jax.nn.log_softmax(l)[t]))(logits, y)
  np.testing.assert_allclose(ce, (per_token[0, :2].sum() + per_token[1, :2].sum()) / 6,
                             rtol=1e-6)
  evaluate = evaluation.make_evaluator(lambda p, x: logits[x[:, 0]], np.array([[0], [1]]),
                                       np.asarray(y), batch_size=2)
  metrics = evaluate(None)
  assert float(metrics['accuracy']) == pytest.approx(2 / 3)  # 5 right, 6 wrong, 7 right; EOS out
  np.testing.assert_allclose(metrics['loss'], (per_token[0, :2].sum() + per_token[1, :2].sum())
                             / 4, rtol=1e-6)


NATURAL_CONFIGS = os.path.join(os.path.dirname(cli.DEFAULT_CONFIG), 'natural')
TINY = ['--config.rounds=2', '--config.rounds_per_call=1', '--config.local_steps=2', '--config.batch_size=2',
        '--config.clients_per_round=2', '--config.eval_every=2', '--config.checkpoint_every=2',
        '--config.progress=False']


def cli_run(tmp_path, config, data, workdir, *overrides):
  assert cli.main(['--config', os.path.join(NATURAL_CONFIGS, config), '--workdir',
                   str(tmp_path / workdir), f'--config.data_dir={data}', *TINY,
                   *overrides]) == 0
  with open(tmp_path / workdir / 'summary.json') as f:
    return json.load(f)


# 'dataset/format' -> (writer, config, its tiny model): every format and every dataset beside
# fed_cifar100 (whose reader is F-EMNIST's HDF5 one) once; FedJAX's SQLite F-EMNIST runs in the
# streaming test below.
FEMNIST_MLP = {'model': 'mlp', 'hidden': (8,)}
CLI_RUNS = {
    'fed_emnist/tff_h5': (lambda d: nw.write_emnist(d, 'tff_h5'), 'fedavg_femnist.py',
                          FEMNIST_MLP),
    'fed_emnist/tff_sqlite': (lambda d: nw.write_emnist(d, 'tff_sqlite'), 'fedavg_femnist.py',
                              FEMNIST_MLP),
    'shakespeare/fedjax_sqlite': (lambda d: nw.write_shakespeare(d, 'fedjax_sqlite'),
                                  'fedavg_shakespeare.py', {'embed': 4, 'hidden': (8,)}),
    'sent140/leaf_json': (nw.write_sent140, 'fedavg_sent140.py',
                          {'embed': 4, 'hidden': (4,), 'dense': 4}),
    'celeba/leaf_json': (nw.write_celeba, 'fedavg_celeba.py', {'blocks': 1, 'channels': 2}),
}


@pytest.mark.parametrize('case', CLI_RUNS)
def test_a_run_per_format_and_dataset_trains_through_the_cli(tmp_path, case):
  """One tiny CLI run per format and per dataset (Sent140 on GloVe's vectors); the readers of
  every format are checked above."""
  write, config, model_options = CLI_RUNS[case]
  model_options = dict(model_options)
  model = [f"--config.model='{model_options.pop('model')}'"] if 'model' in model_options else []
  data = tmp_path / 'data'
  data.mkdir()
  write(data)
  summary = cli_run(tmp_path, config, data, 'run', '--config.num_clients=3', *model,
                    f'--config.model_options={model_options}')
  assert summary['rounds'] == 2 and 0 <= summary['final_test_accuracy'] <= 1


def test_streamed_natural_run_equals_the_on_device_run(tmp_path, capsys):
  data = tmp_path / 'data'
  data.mkdir()
  nw.write_emnist(data, 'fedjax_sqlite')
  common = ['--config.num_clients=4', "--config.model='mlp'",
            "--config.model_options={'hidden': (8,)}"]
  on_device = cli_run(tmp_path, 'fedavg_femnist.py', data, 'device', *common)
  streamed = cli_run(tmp_path, 'fedavg_femnist.py', data, 'stream', *common,
                     '--config.stream_cohorts=True')
  assert os.listdir(data / 'fedjax_het_cache')  # streamed from the memmapped cache
  assert streamed['final_test_accuracy'] == on_device['final_test_accuracy']
  assert streamed['final_test_loss'] == on_device['final_test_loss']
  printed = capsys.readouterr().out
  assert printed.count(f'data: fed_emnist, fedjax_sqlite files: train '
                       f'{data}/federated_emnist_train.sqlite') == 2
  assert "  clients: 4 of the train file's 4, one per writer; dropped: none\n" in printed
  summaries = {}
  for run_dir in ('device', 'stream'):
    with open(tmp_path / run_dir / natural.SUMMARY_FILE) as f:
      summaries[run_dir] = json.load(f)
  cache = summaries['stream'].pop('cache')
  assert cache.startswith(str(data / 'fedjax_het_cache')) and not summaries['stream'].pop(
      'from_cache')  # written by this run, the summary kept in its manifest
  assert summaries['stream'] == summaries['device'] == {
      'dataset': 'fed_emnist', 'format': 'fedjax_sqlite',
      'files': {'train': f'{data}/federated_emnist_train.sqlite',
                'test': f'{data}/federated_emnist_test.sqlite', 'other': [], 'decompressed': {}},
      'clients': {'kind': 'writer', 'in_train_file': 4, 'kept': 4, 'dropped': {},
                  'in_test_file': 4, 'test_file_only': 0, 'kept_without_test': 0,
                  'test_set': "each kept writer's own"},
      'examples': {'train_stored': 11, 'train_rows': 11, 'test_rows': 5},  # 3+1+5+2, 1+1+2+1
      'train_rows_per_client': {'q0': 1.0, 'q25': 1.75, 'q50': 2.5, 'q75': 3.5, 'q100': 5.0}}
  reread = load_natural('fed_emnist', str(data), num_clients=4, seed=0,
                        options=options(cache_dir=str(data / 'fedjax_het_cache')))
  assert reread.summary == {**summaries['device'], 'cache': cache, 'from_cache': True}


def test_cifar100_test_clients_are_others_so_the_whole_test_file_is_the_test_set(tmp_path):
  rng = np.random.default_rng(0)
  clients = lambda ids: {c: {'image': rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8),
                             'label': rng.integers(0, 100, 2), 'coarse_label': np.zeros(2)}
                         for c in ids}
  train, test = clients(['0', '1', '2']), clients(['t0', 't1'])
  nw.write_tff_h5(tmp_path / 'fed_cifar100_train.h5', train)
  nw.write_tff_h5(tmp_path / 'fed_cifar100_test.h5', test)
  split = load_natural('fed_cifar100', str(tmp_path), num_clients=3, seed=0, options=options())
  np.testing.assert_array_equal(np.rint(rows(split.train, 1)[0] * 255), train['1']['image'])
  np.testing.assert_array_equal(split.test_y, stacked(test, ['t0', 't1'], 'label'))
  one_line_error('fed_cifar100_test.h5 holds other clients than .*fed_cifar100_train.h5 .* '
                 'set local_test=False',
                 lambda: load_natural('fed_cifar100', str(tmp_path), num_clients=3, seed=0,
                                      options=options(), local_test=True))


def test_shakespeare_lstm_is_fedjax_size_and_predicts_every_position():
  model = models.create_model('shakespeare_lstm', text.SHAKESPEARE_VOCAB)
  shapes = jax.eval_shape(lambda k: models.init_params(model, k, (80,)), jax.random.PRNGKey(0))
  assert sum(p.size for p in jax.tree.leaves(shapes)) == 820_522  # models/text.py
  tiny = models.create_model('lstm', 90, embed=4, hidden=(8,))
  params = jax.jit(lambda k: models.init_params(tiny, k, (5,)))(jax.random.PRNGKey(0))
  apply = jax.jit(lambda t: tiny.apply({'params': params}, t))
  tokens = np.arange(2 * 5).reshape(2, 5) % 90
  logits = apply(tokens)
  assert logits.shape == (2, 5, 90)
  # Causal: the first position's logits do not read later tokens.
  changed = apply(np.concatenate([tokens[:, :1], tokens[:, 1:] + 1], 1))
  np.testing.assert_allclose(changed[:, 0], logits[:, 0], rtol=1e-6)
  assert not np.allclose(changed[:, 1:], logits[:, 1:])


def test_an_lzma_download_is_decompressed_once_beside_it(tmp_path, capsys):
  train, _ = nw.write_emnist(tmp_path, 'tff_sqlite')
  source = tmp_path / 'emnist_all.sqlite'
  size = source.stat().st_size
  (tmp_path / 'emnist_all.sqlite.lzma').write_bytes(lzma.compress(source.read_bytes()))
  source.unlink()
  split = load_natural('fed_emnist', str(tmp_path), num_clients=4, seed=0, options=options())
  copy = tmp_path / 'decompressed' / 'emnist_all.sqlite'
  assert copy.is_file() and copy.stat().st_size == size
  np.testing.assert_array_equal(rows(split.train, 0)[1], train['f0000_14']['label'])
  said = capsys.readouterr().err.splitlines()  # where and how much, once
  lzma_size = (tmp_path / 'emnist_all.sqlite.lzma').stat().st_size
  assert said == [f'fedjax-het: decompressing {tmp_path}/emnist_all.sqlite.lzma ({lzma_size:,} '
                  f'bytes) into {copy}, once: later runs read that copy (several times the '
                  "download's size; delete it to free the space)."]
  assert split.summary['files']['decompressed'] == {
      f'{tmp_path}/emnist_all.sqlite.lzma': {'into': str(copy), 'bytes': size}}
  assert f'decompressed: {tmp_path}/emnist_all.sqlite.lzma into {copy} ({size:,} bytes)' in \
      natural.format_summary(split.summary)
  again = load_natural('fed_emnist', str(tmp_path), num_clients=4, seed=0, options=options())
  assert capsys.readouterr().err == '' and again.summary == split.summary
  (tmp_path / 'decompressed' / 'emnist_all.sqlite').unlink()
  nw.truncate(tmp_path / 'emnist_all.sqlite.lzma')
  one_line_error('emnist_all.sqlite.lzma does not decompress', lambda: load_natural(
      'fed_emnist', str(tmp_path), num_clients=4, seed=0, options=options()))


def test_sent140_reads_leaf_rows_with_glove_or_train_vocabulary(tmp_path):
  glove = nw.write_sent140(tmp_path)
  assert text.sent140_words("I can't wait,really!!") == ['I', "can't", 'wait', ',', 'really', '!',
                                                         '!']
  split = load_natural('sent140', str(tmp_path), num_clients=3, seed=0,
                       options=options(sequence_length=4), local_test=True)
  ids = file_order('leaf_json', nw.SENT140_TRAIN)
  assert split.client_ids == tuple(ids) and split.num_classes == 2
  np.testing.assert_array_equal(split.train.counts, [len(nw.SENT140_TRAIN[c]) for c in ids])
  unk = len(nw.GLOVE_WORDS)
  love, sad, the, is_, it, i, comma, bang, cant = range(unk)
  alice = ids.index('alice_bob')
  x, y = rows(split.train, alice)
  np.testing.assert_array_equal(x[:3], [[i, love, it, comma], [unk, sad, unk, unk],
                                        [love, love, love, unk]])
  np.testing.assert_array_equal(y[:3], [1, 0, 1])
  assert split.input_vocab == unk + 1 and split.embeddings.shape == (unk + 1, 4)
  np.testing.assert_array_equal(split.embeddings[sad], [1, 1.5, 2, 2.5])
  assert not split.embeddings[unk].any()  # LEAF's zero row for the unknown word
  assert split.local_test.x.shape[1:] == (4,) and split.local_test.max_examples == 1
  config = cli.load_config(os.path.join(NATURAL_CONFIGS, 'fedavg_sent140.py'))
  config.update(data_dir=str(tmp_path), num_clients=3, model_options=CLI_RUNS['sent140/leaf_json'][2])
  _, model, params, _ = run.build_experiment(config)  # the vocabulary sizes the embedding,
  assert model.vocab_size == unk + 1                   # GloVe's vectors fill it
  np.testing.assert_array_equal(params['embed']['embedding'][sad], [1, 1.5, 2, 2.5])
  assert text_models.load_embeddings(params, split.embeddings[:, :2]) is params  # other size:
                                                                                  # random init
  trained = load_natural('sent140', str(tmp_path), num_clients=3, seed=0,
                         options=options(vocabulary='train', vocab_size=2))
  assert trained.input_vocab == 3 and trained.embeddings is None  # 'love' 0, 'I' 1, unknown 2
  np.testing.assert_array_equal(rows(trained.train, alice)[0][2, :4], [0, 0, 0, 2])
  os.remove(glove)
  message = one_line_error('glove.6B.300d.txt does not exist', lambda: load_natural(
      'sent140', str(tmp_path), num_clients=3, seed=0, options=options()))
  assert 'nlp.stanford.edu/projects/glove' in message and 'vocabulary=train' in message
  with open(glove, 'w') as f:
    f.write('love 0 0.5\nsad 1 1.5\nthe 2')  # truncated
  one_line_error('glove.6B.300d.txt has lines of different lengths', lambda: load_natural(
      'sent140', str(tmp_path), num_clients=3, seed=0, options=options()))
  with pytest.raises(ConfigError, match='natural.vocabulary is read by sent140 only'):
    load_natural('fed_emnist', str(tmp_path), num_clients=3, seed=0,
                 options=options(vocabulary='train'))


def test_celeba_decodes_resized_images_once_into_the_cache(tmp_path):
  nw.write_celeba(tmp_path)
  split = load_natural('celeba', str(tmp_path), num_clients=3, seed=0, options=options())
  ids = file_order('leaf_json', nw.CELEBA_TRAIN)
  assert split.client_ids == tuple(ids) and split.num_classes == 2
  np.testing.assert_array_equal(split.train.counts, [nw.CELEBA_TRAIN[c] for c in ids])
  assert split.train.x.shape == (6, 84, 84, 3) and isinstance(split.train.x, np.memmap)
  numbers = {'12': [1, 2, 3], '7': [4], '301': [5, 6]}  # written in train's dict order
  for row, cid in enumerate(ids):
    for k, number in enumerate(numbers[cid]):
      x, y = rows(split.train, row)
      np.testing.assert_allclose(x[k], np.broadcast_to(
          np.float32(nw.celeba_colour(number)) / 255, (84, 84, 3)), atol=3 / 255)
      assert y[k] == k % 2
  np.testing.assert_array_equal(split.test_y, [0, 0, 0])
  # Decoded once: the cached run reads no image.
  for name in os.listdir(tmp_path / 'img_align_celeba'):
    os.remove(tmp_path / 'img_align_celeba' / name)
  again = load_natural('celeba', str(tmp_path), num_clients=3, seed=0, options=options())
  np.testing.assert_array_equal(again.train.x, split.train.x)
  one_line_error(r'img_align_celeba/0000\d\d.jpg is not a readable image', lambda: load_natural(
      'celeba', str(tmp_path), num_clients=2, seed=0, options=options()))
  nw.write_celeba(tmp_path)
  nw.truncate(tmp_path / 'img_align_celeba' / '000004.jpg', 0.4)
  one_line_error(r'000004.jpg is not a readable image', lambda: load_natural(
      'celeba', str(tmp_path), num_clients=3, seed=1, options=options()))
  one_line_error('reads its images from .*nowhere, which is not a folder.*img_align_celeba.zip',
                 lambda: load_natural('celeba', str(tmp_path), num_clients=3, seed=0,
                                      options=options(images_dir=str(tmp_path / 'nowhere'))))
