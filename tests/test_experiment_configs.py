"""Every config of every experiment file under experiments/ resolves, none left out.

Files defining `get_config` or `get_configs` are configs (the rest are setup modules and
scripts); each config, at every cell of the file's GRID, passes `config.resolve`, which
refuses what a run refuses before it reads data. Catches a key renamed in the library but
not in a paper's table file, and a row that sets a key its method does not read.

FedACS's toy quadratic (experiments/fedacs/quadratic.py) has its own keys: its files'
configs resolve as it resolves them, each method's engine config
(`quadratic_toy.algorithm_config`). The scaled Co-S²P files fit every run's rounds to a
virtual-time budget by building it (`cos2p_setup.rounds_within`, ~30 s a run): that fit is
stubbed with a fixed number of rounds, the rest of their configs is built as written.
"""
import glob
import importlib
import os

import pytest

from fedjax_het import cli, compare
from fedjax_het import config as config_lib

REPO = os.path.join(os.path.dirname(__file__), '..')
QUADRATIC_TOY_CONFIGS = {'experiments/fedacs/fig4.py', 'experiments/fedacs/fig7.py'}
FITS_ROUNDS = {'experiments/cos2p/scaled_digits.py', 'experiments/cos2p/scaled_ablation.py',
               'experiments/cos2p/scaled_mu_tclk.py'}
FITTED_ROUNDS = 36   # the stubbed fit: 6 mask rounds, an evaluation every 2 rounds
PATHS = sorted(glob.glob(os.path.join(REPO, 'experiments', '**', '*.py'), recursive=True))


def _config_files():
  for path in PATHS:
    with open(path) as f:
      text = f.read()
    path = os.path.relpath(path, REPO)
    if 'def get_config' in text:
      yield path


def _module_beside(path: str, name: str, monkeypatch):
  """The helper module `name` that the experiment file `path` imports (same sys.modules
  entry, so a stub set on it is what the file's configs call)."""
  monkeypatch.syspath_prepend(os.path.dirname(os.path.join(REPO, path)))
  return importlib.import_module(name)


def _configs(path: str) -> dict:
  """label → config of the file, at every cell of its GRID."""
  module = cli.load_experiment(os.path.join(REPO, path))
  if hasattr(module, 'get_configs'):
    configs = cli.experiment_configs(module, path)
  else:
    configs = {path: cli.experiment_config(module, path)}
  grid = getattr(module, 'GRID', None)
  return compare.expand_grid(configs, grid) if grid else configs


def _resolve_toy(config, monkeypatch) -> None:
  """A toy quadratic config resolved as quadratic.py does: its methods checked, then each
  method's engine config validated."""
  quadratic = _module_beside('experiments/fedacs/quadratic.py', 'quadratic', monkeypatch)
  quadratic.check_methods(config.methods)
  for method in config.methods:
    quadratic.quadratic.algorithm_config(config, method)


@pytest.mark.parametrize('path', list(_config_files()))
def test_every_config_of_every_experiment_file_resolves(path, monkeypatch):
  if path in FITS_ROUNDS:
    setup = _module_beside(path, 'cos2p_setup', monkeypatch)
    monkeypatch.setattr(setup, 'rounds_within',
                        lambda config, seconds, bound=0: FITTED_ROUNDS)
  configs = _configs(path)
  assert configs
  refused = []
  for label, config in configs.items():
    try:
      if path in QUADRATIC_TOY_CONFIGS:
        _resolve_toy(config, monkeypatch)
      else:
        config_lib.resolve(config)
    except config_lib.ConfigError as e:
      refused.append(f'[{label}]: {e}')
  assert not refused, f'{path}: {len(refused)} of {len(configs)} refused: ' + ' '.join(refused)


def test_the_named_files_exist_and_define_configs():
  files = set(_config_files())
  assert QUADRATIC_TOY_CONFIGS | FITS_ROUNDS <= files
