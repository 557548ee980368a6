"""What a newcomer meets first: `--show-config` refuses what a run refuses (the data checks
included), an unknown key names the nearest known one, and the shipped configs run without
warnings about themselves."""
import os

import pytest

from fedjax_het import cli, run
from fedjax_het.config import ConfigError, base_config, check_known_keys
import natural_writers as nw
from test_reliability import one_line_error
from test_run import QUICK

EXPERIMENTS = os.path.dirname(cli.DEFAULT_CONFIG)
FEMNIST = ['--config', os.path.join(EXPERIMENTS, 'natural', 'fedavg_femnist.py'),
           '--config.model=mlp', "--config.model_options={'hidden': (8,)}",
           '--config.clients_per_round=2']


def run_and_show_refuse(capsys, tmp_path, argv) -> str:
  """The one line that both a run and --show-config of `argv` stop with (the same)."""
  show = one_line_error(capsys, cli.main(argv + ['--show-config']), 2)
  ran = one_line_error(capsys, cli.main(argv + [f'--workdir={tmp_path / "run"}']), 2)
  assert show == ran
  return show


def test_a_natural_set_without_data_dir_is_refused_by_show_config(capsys, tmp_path):
  err = run_and_show_refuse(capsys, tmp_path, FEMNIST)
  assert "Dataset 'fed_emnist' is read from its files: data_dir=(empty) is not a directory" in err


def test_more_clients_than_the_files_writers_are_refused_by_show_config(capsys, tmp_path):
  data = tmp_path / 'data'
  data.mkdir()
  nw.write_emnist(data, 'tff_h5')   # 4 writers
  argv = FEMNIST + [f'--config.data_dir={data}']
  err = run_and_show_refuse(capsys, tmp_path, argv + ['--config.num_clients=5'])
  assert 'has 4 clients with >= 1 examples; num_clients=5 is too many' in err
  assert cli.main(argv + ['--config.num_clients=4', '--show-config']) == 0
  out = capsys.readouterr().out
  assert "data_dir = '" + str(data) + "'" in out and 'num_clients = 4' in out
  # What the files gave, as a run prints it (natural.format_summary).
  assert out.startswith('data: fed_emnist, ') and "  clients: 4 of the train file's 4" in out


def test_show_config_refuses_devices_the_run_cannot_use(capsys, tmp_path):
  err = run_and_show_refuse(capsys, tmp_path, QUICK + ['--config.client_devices=64'])
  assert 'client_devices=64 but' in err and 'device(s) are visible' in err


def test_show_config_prints_the_warnings_a_run_prints(capsys, tmp_path):
  assert cli.main(QUICK + ['--config.batch_size=500', '--show-config']) == 0
  err = capsys.readouterr().err
  assert err.startswith('fedjax-het: warning: batch_size=500 is larger than the data of 20 of '
                        '20 clients') and err.count('\n') == 1


@pytest.mark.parametrize('override,nearest', [
    ('round', 'rounds'),                       # a top-level key
    ('sytems.q', 'systems.q'),                 # a section's name
    ('submodel.widht_rule', 'submodel.width_rule'),
    ('upload_every', 'split.upload_every'),    # a section's key without its section
])
def test_an_unknown_key_names_the_nearest_known_key(capsys, override, nearest):
  err = one_line_error(capsys, cli.main(QUICK + [f'--config.{override}=5', '--show-config']), 2)
  assert err == f"fedjax-het: error: unknown config key '{override}'; did you mean '{nearest}'?\n"


def test_an_unknown_key_with_no_near_one_is_named_alone(capsys):
  err = one_line_error(capsys, cli.main(QUICK + ['--config.zzz=5', '--show-config']), 2)
  assert err == "fedjax-het: error: unknown config key 'zzz'.\n"


def test_a_key_misspelt_in_an_experiment_file_names_the_nearest_known_key():
  config = base_config()
  config.hierarchy.num_cell = 2
  with pytest.raises(ConfigError, match=r"^unknown config key 'hierarchy.num_cell'; did you "
                                        r"mean 'hierarchy.num_cells'\?$"):
    check_known_keys(config, base_config())


# The configs the README runs first, offline: their federation draws no warning (quickstart's
# batch was larger than most of its clients' data).
SHIPPED = ['quickstart.py', 'demo.py', 'clock_digits.py', os.path.join('hist', 'quickstart.py')]


@pytest.mark.parametrize('name', SHIPPED)
def test_the_shipped_configs_draw_no_warning_about_themselves(name):
  path = os.path.join(EXPERIMENTS, name)
  module = cli.load_experiment(path)
  configs = (cli.experiment_configs(module, path) if hasattr(module, 'get_configs') else
             {name: cli.experiment_config(module, path)})
  for label, config in configs.items():
    assert run.check(config)[1] == [], label
