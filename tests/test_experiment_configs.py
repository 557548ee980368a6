"""Every config file under experiments/ loads and passes `config.validate`.

Files defining `get_config` or `get_configs` are configs; the rest (setup modules, scripts with
`main`) are skipped. Catches a key renamed in the library but not in a paper's table file.
Not here: configs of experiments/fedacs/quadratic.py (its own keys), and the scaled Co-S²P files,
whose get_configs builds every run to fit its rounds to a clock budget (~30 s each).
"""
import glob
import os

import pytest

from fedjax_het import cli
from fedjax_het import config as config_lib

REPO = os.path.join(os.path.dirname(__file__), '..')
NOT_LIBRARY_CONFIGS = {'experiments/fedacs/fig4.py', 'experiments/fedacs/fig7.py'}
BUILDS_RUNS = {'experiments/cos2p/scaled_digits.py', 'experiments/cos2p/scaled_ablation.py',
               'experiments/cos2p/scaled_mu_tclk.py'}
PATHS = sorted(glob.glob(os.path.join(REPO, 'experiments', '**', '*.py'), recursive=True))


def _config_files():
  for path in PATHS:
    with open(path) as f:
      text = f.read()
    path = os.path.relpath(path, REPO)
    if 'def get_config' in text and path not in NOT_LIBRARY_CONFIGS | BUILDS_RUNS:
      yield path


@pytest.mark.parametrize('path', list(_config_files()))
def test_experiment_configs_validate(path):
  module = cli.load_experiment(os.path.join(REPO, path))
  if hasattr(module, 'get_configs'):
    configs = cli.experiment_configs(module, path)
  else:
    configs = {path: cli.experiment_config(module, path)}
  assert configs
  for label, config in configs.items():
    try:
      config_lib.validate(config)
    except config_lib.ConfigError as e:
      raise AssertionError(f'{path} [{label}]: {e}') from e


def test_exempt_files_exist():
  for path in NOT_LIBRARY_CONFIGS | BUILDS_RUNS:
    assert os.path.exists(os.path.join(REPO, path)), path
