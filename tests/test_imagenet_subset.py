"""Tests of the imagenet2012 class-subset source (TFDS mock data) and the Co-S²P E1–E3 configs."""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np
import pytest

import fedjax_het.data as fd
from fedjax_het import cli
from fedjax_het import config as config_lib
from fedjax_het import run
from fedjax_het.methods.cos2p.vit_engine import Cos2pOptions
from fedjax_het.data import sources
from script_utils import load_script

paper_settings = load_script('experiments/cos2p/paper_settings.py')

tf = pytest.importorskip('tensorflow')
tfds = pytest.importorskip('tensorflow_datasets')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPERIMENTS = {'E1': 'e1_vit_tiny_imagenet200.py', 'E2': 'e2_vit_base_imagenet300.py',
               'E3': 'e3_vit_base_ext_imagenet300.py'}


def wnids():
  return tfds.builder('imagenet2012').info.features['label'].names


# Examples of the fake splits: (label, RGB value of a constant image, height, width).
FAKE = {
    'train': [(5, (10, 20, 30), 21, 13), (900, (0, 0, 0), 9, 9), (7, (255, 0, 128), 40, 17),
              (5, (1, 2, 3), 8, 30), (3, (9, 9, 9), 12, 12), (7, (200, 100, 50), 5, 7)],
    'validation': [(7, (60, 70, 80), 33, 44), (5, (0, 255, 0), 16, 16), (1, (4, 4, 4), 8, 8)],
}


def fake_as_dataset(self, split, decoders=None, read_config=None, **kwargs):
  """`_as_dataset` of the mocked builder: PNG-encoded constant images (lossless), in order."""
  del self, decoders, read_config, kwargs
  rows = FAKE[str(split)]
  images = [tf.io.encode_png(np.broadcast_to(np.array(rgb, np.uint8), (h, w, 3))).numpy()
            for _, rgb, h, w in rows]
  return tf.data.Dataset.from_tensor_slices({
      'image': images, 'label': np.array([r[0] for r in rows], np.int64),
      'file_name': [f'{i}.JPEG' for i in range(len(rows))]})


def normalised(rgb):
  return ((np.asarray(rgb) / 255 - sources.IMAGENET_MEAN) / sources.IMAGENET_STD)


def test_subset_labels_resize_and_normalisation(tmp_path):
  """classes [7, 5] -> labels 5 -> 0, 7 -> 1 in file order; every image S × S with the exact
  ImageNet-normalised value of its constant colour; validation becomes the test set."""
  with tfds.testing.mock_data(as_dataset_fn=fake_as_dataset):
    ds = fd.load_dataset('imagenet2012', data_dir=str(tmp_path), classes=[7, wnids()[5]],
                         image_size=6)
  assert ds.num_classes == 2 and ds.x_train.dtype == np.float32
  assert ds.x_train.shape == (4, 6, 6, 3) and ds.x_test.shape == (2, 6, 6, 3)
  assert ds.y_train.tolist() == [0, 1, 0, 1] and ds.y_test.tolist() == [1, 0]
  kept = [r for r in FAKE['train'] if r[0] in (5, 7)]
  for image, (_, rgb, _, _) in zip(ds.x_train, kept):
    np.testing.assert_allclose(image, np.broadcast_to(normalised(rgb), (6, 6, 3)), atol=1e-5)
  np.testing.assert_allclose(ds.x_test[0, 3, 2], normalised((60, 70, 80)), atol=1e-5)


def test_random_mock_data_all_classes_by_default(tmp_path):
  with tfds.testing.mock_data(num_examples=10):
    ds = fd.load_dataset('imagenet2012', data_dir=str(tmp_path), image_size=8)
  assert ds.num_classes == 1000
  assert ds.x_train.shape == (10, 8, 8, 3) and ds.y_train.dtype == np.int32
  lowest, highest = normalised((0, 0, 0)), normalised((255, 255, 255))
  assert np.all(ds.x_train >= lowest.min() - 1e-5) and np.all(ds.x_train <= highest.max() + 1e-5)


def test_class_ids():
  names = wnids()
  drawn = sources.imagenet_class_ids(names, num_classes=300, class_seed=0)
  assert drawn.size == 300 and np.all(np.diff(drawn) > 0) and 0 <= drawn[0] and drawn[-1] < 1000
  assert np.array_equal(drawn, sources.imagenet_class_ids(names, num_classes=300, class_seed=0))
  assert not np.array_equal(drawn, sources.imagenet_class_ids(names, num_classes=300,
                                                              class_seed=1))
  assert np.array_equal(sources.imagenet_class_ids(names), np.arange(1000))
  assert sources.imagenet_class_ids(names, classes=[names[9], 2]).tolist() == [2, 9]
  tiny = sources.imagenet_class_ids(names, classes='tiny_imagenet')
  assert tiny.size == 200 and names[tiny[0]] == 'n01443537'    # goldfish, Tiny ImageNet's first


@pytest.mark.parametrize('options, match', [
    ({'num_classes': 10, 'classes': [1]}, 'not both'),
    ({'num_classes': 0}, r'\[1, 1000\]'),
    ({'num_classes': 1001}, r'\[1, 1000\]'),
    ({'classes': 'tiny'}, 'Unknown class subset'),
    ({'classes': ['n00000000']}, 'wnids'),
    ({'classes': [1000]}, 'wnids'),
    ({'classes': [3, 3]}, 'without repeats'),
])
def test_class_id_errors(options, match):
  with pytest.raises(ValueError, match=match):
    sources.imagenet_class_ids(wnids(), **options)


def test_not_prepared_is_one_line_and_never_downloads(tmp_path, monkeypatch):
  downloads = []
  monkeypatch.setattr(tfds.core.DatasetBuilder, 'download_and_prepare',
                      lambda self, *a, **k: downloads.append(self.name))
  for data_dir, match in ((tmp_path, 'is not prepared'), (tmp_path / 'nope', 'does not exist')):
    with pytest.raises(ValueError, match=match) as info:
      fd.load_dataset('imagenet2012', data_dir=str(data_dir), num_classes=5)
    message = str(info.value)
    assert 'downloads/manual' in message and '--config.data_dir' in message
    assert '\n' not in message
  assert downloads == []
  with pytest.raises(ValueError, match='image_size'):
    fd.load_dataset('imagenet2012', data_dir=str(tmp_path), image_size=0)
  with pytest.raises(ValueError, match='class_seed'):
    fd.load_dataset('imagenet2012', data_dir=str(tmp_path), seed_of_classes=1)


@pytest.mark.parametrize('name', EXPERIMENTS)
def test_experiment_configs_load_and_validate(name, capsys):
  """Each E1–E3 file gives a valid config whose per-client settings are Tab. 7's."""
  path = os.path.join(ROOT, 'experiments', 'cos2p', EXPERIMENTS[name])
  config = cli.load_config(path)
  config_lib.validate(config)
  options = Cos2pOptions.from_config(config)
  clients = paper_settings.paper_clients(name)
  paper = paper_settings.paper_experiment(name)
  assert config.num_clients == config.clients_per_round == len(clients)
  assert list(config.client_sizes) == [c.dataset_size for c in clients]
  assert list(options.budgets) == [c.budget for c in clients]
  assert list(options.device_types) == [c.device for c in clients]
  assert (config.clock.mu, config.clock.t_clk, options.epochs, options.mask_rounds,
          options.mask_epochs) == (paper.mu, paper.t_clk, paper.epochs, paper.mask_rounds,
                                   paper.mask_epochs)
  assert config.model == paper.model and config.dataset == 'imagenet2012'
  assert config.partition == 'sized_dirichlet' and config.alpha == 1.5
  assert config.local_test and config.local_test_fraction == 0.2
  assert config.client_weight_decay == 0.05 and config.algorithm == 'cos2p'
  assert (name == 'E1') == (config.init_params_file == '')
  # --show-config checks the data (and E2/E3's checkpoint) as a run does: absent here.
  assert cli.main(['--config', path, '--show-config']) == 2
  err = capsys.readouterr().err
  assert err.count('\n') == 1 and '--config.' in err
  # The comparison: every row of the paper's table on the same setting.
  rows = cli.experiment_configs(cli.load_experiment(path), path)
  assert {label: row.algorithm for label, row in rows.items()} == {
      'fedavg_full': 'vit_fedavg', 'fedavg_platon': 'vit_fedavg_platon',
      'fedavg_adavit': 'vit_fedavg_adavit', 'fedavg_qvit': 'vit_fedavg_qvit',
      'fedpm': 'fedpm', 'prunefl': 'prunefl', 'ram_fed': 'ram_fed',
      'fedrolex': 'vit_fedrolex', 'cos2p': 'cos2p', 'cos2p_async': 'cos2p'}
  for label, row in rows.items():
    config_lib.validate(row)
    assert row.model_options.get('decisions', False) == (label == 'fedavg_adavit')
    assert list(row.client_sizes) == list(config.client_sizes)
  assert rows['cos2p'].to_json() == config.to_json()
  assert rows['cos2p_async'].clock.mu == 1 / len(clients)
  # The paper's baselines are synchronous: their rows set μ = 1, T_clk = 0
  # (the clock's defaults, which a ViT baseline does not fix).
  for row in rows.values():
    if row.algorithm != 'cos2p':
      assert (row.clock.mu, row.clock.t_clk) == (1.0, 0.0), row.algorithm


@pytest.mark.parametrize('name', ['E2', 'E3'])
def test_pretrained_experiments_need_their_checkpoint(name, monkeypatch):
  """E2/E3 stop with one line naming the missing checkpoint, before any data is read."""
  monkeypatch.setattr(run.data_lib, 'load_dataset', lambda *a, **k: pytest.fail('data read'))
  config = cli.load_config(os.path.join(ROOT, 'experiments', 'cos2p', EXPERIMENTS[name]))
  with pytest.raises(config_lib.ConfigError, match='--config.init_params_file=PATH') as info:
    run.build_experiment(config)
  assert '\n' not in str(info.value)
