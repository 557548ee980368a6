"""Command line: `fedjax-het [--config PATH] [--workdir DIR] [--config.KEY=VALUE ...]`.

`fedjax-het bench --workload W-MLP|W-PFL|W-FIARSE ...` runs a benchmark
instead (`fedjax_het.tools.bench`); `fedjax-het traces ...` converts FedScale's
device traces (`fedjax_het.systems.traces`).

With no arguments it runs `experiments/demo.py`, the heterogeneous demo (a
comparison: a file defining `get_configs()`, see `fedjax_het.compare`). Overrides are Python
literals (`--config.capacities='(0.25, 1.0)'`, `--config.rounds=50`); a value
that is not a literal is taken as a string (`--config.dataset=mnist`).
Bad input ends with one line on stderr and a non-zero exit, no traceback.
"""
import ast
import importlib.util
import os
import sys
import traceback
from typing import Callable

import ml_collections

from fedjax_het import config as config_lib
from fedjax_het.config import OPEN_DICTS, ConfigError
from fedjax_het.core import sharding
from fedjax_het.workdir import WorkdirError

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CONFIG = os.path.join(_REPO_ROOT, 'experiments', 'demo.py')

USAGE = """usage: fedjax-het [--config PATH] [--workdir DIR] [--seeds N] [--distributed [--distributed-timeout S]] [--config.KEY=VALUE ...]

  --config PATH        experiment file defining get_config(), or get_configs()
                       for a comparison (default: experiments/demo.py)
  --workdir DIR        where outputs and checkpoints go (default: runs/ followed by the
                       config's path under experiments/, e.g. runs/hist/quickstart);
                       re-running on the same workdir resumes; one run at a time
  --seeds N            train every config with seeds seed, seed+1, ..., seed+N-1 (each in
                       <workdir>/<label>/seed<s>) and tabulate mean ± std (ddof=1);
                       default: the file's SEEDS, else 1
  --distributed        multi-host: jax.distributed.initialize() first, which finds
                       its peers on Cloud TPU slices, SLURM, Open MPI and Kubernetes,
                       or from JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and
                       JAX_PROCESS_ID; run the same command (same --workdir) in
                       every process
  --distributed-timeout S
                       with --distributed: stop (one line, exit 1) when not every
                       process has joined after S seconds (default 300)
  --config.KEY=VALUE   override one key; VALUE is a Python literal or a string
  --show-config        print the resolved config (the core keys and the sections the
                       run reads: each key, its value and what it means) and exit
                       without training

       fedjax-het bench --workload W-MLP|W-PFL|W-FIARSE [--backend B] [--rounds R]
                        (fedjax-het bench --help for all options)
       fedjax-het traces [--capacity FILE] [--behaviour FILE] --out FILE.npz
                        (FedScale's device traces to one .npz: fedjax_het.systems.traces)
"""


def load_experiment(path: str):
  """Imports an experiment file (it defines get_config() or get_configs())."""
  if not os.path.isfile(path):
    raise ConfigError(f'config file {path!r} does not exist.')
  spec = importlib.util.spec_from_file_location('fedjax_het_experiment', path)
  module = importlib.util.module_from_spec(spec)
  # Experiment files may import helpers that sit beside them.
  sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
  try:
    spec.loader.exec_module(module)
  except SyntaxError as e:  # in the file itself, or in a helper it imports
    raise ConfigError(f'config file {e.filename or path!r} line {e.lineno}: '
                      f'{e.msg}.') from e
  except Exception as e:  # pylint: disable=broad-exception-caught
    raise ConfigError(f'config file {path!r} line {_failing_line(e, path)}: '
                      f'{type(e).__name__}: {e}.') from e
  finally:
    sys.path.pop(0)
  if not hasattr(module, 'get_config') and not hasattr(module, 'get_configs'):
    raise ConfigError(
        f'config file {path!r} defines neither get_config() nor get_configs().')
  return module


def _failing_line(error: Exception, path: str) -> int | None:
  """The line of the file `path` that the traceback of `error` last passed
  through (the import or call that failed), or None."""
  lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__)
           if os.path.abspath(frame.filename) == os.path.abspath(path)]
  return lines[-1] if lines else None


def _checked(config, path: str, function: str) -> ml_collections.ConfigDict:
  """`config` if it is a ConfigDict, else a ConfigError naming the file."""
  if not isinstance(config, ml_collections.ConfigDict):
    raise ConfigError(
        f'{function} in {path!r} returned a {type(config).__name__}; it must '
        'return an ml_collections.ConfigDict built on '
        'fedjax_het.config.base_config().')
  return config


def experiment_config(module, path: str) -> ml_collections.ConfigDict:
  """The module's `get_config()`, checked."""
  return _checked(module.get_config(), path, 'get_config()')


def experiment_configs(module, path: str) -> dict[str, ml_collections.ConfigDict]:
  """The module's `get_configs()` (label → config), checked."""
  configs = module.get_configs()
  if not isinstance(configs, dict):
    raise ConfigError(f'get_configs() in {path!r} returned a '
                      f'{type(configs).__name__}; it must return a dict '
                      'label → ConfigDict.')
  return {label: _checked(c, path, f'get_configs()[{label!r}]')
          for label, c in configs.items()}


def load_config(path: str) -> ml_collections.ConfigDict:
  """Imports an experiment file and returns its `get_config()`."""
  module = load_experiment(path)
  if not hasattr(module, 'get_config'):
    raise ConfigError(f'config file {path!r} is a comparison (get_configs()); '
                      'run it with fedjax-het --config.')
  return experiment_config(module, path)


def parse_value(text: str):
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def apply_override(config: ml_collections.ConfigDict, dotted_key: str,
                   value) -> None:
  """Sets `config.<dotted_key> = value`, with clear errors."""
  *parents, leaf = dotted_key.split('.')
  node = config
  for part in parents:
    if part not in node or not isinstance(node[part],
                                          ml_collections.ConfigDict):
      raise config_lib.unknown_key(dotted_key, config)
    node = node[part]
  if leaf not in node:
    if node is config or parents[-1] not in OPEN_DICTS:
      raise config_lib.unknown_key(dotted_key, config)
  elif isinstance(node[leaf], tuple) and isinstance(value, list):
    value = tuple(value)
  elif isinstance(node[leaf], float) and isinstance(value, int) and not \
      isinstance(value, bool):
    value = float(value)
  try:
    node[leaf] = value
  except TypeError as e:
    raise ConfigError(f'--config.{dotted_key}: {e}.') from e


def parse_args(argv: list[str]) -> tuple[str, str | None, list[tuple[str, str]]]:
  """Returns (config path, workdir or None, [(dotted key, raw value)])."""
  config_path, workdir, overrides = DEFAULT_CONFIG, None, []
  args = list(argv)
  while args:
    arg = args.pop(0)
    if arg in ('-h', '--help'):
      print(USAGE)
      sys.exit(0)
    if not arg.startswith('--'):
      raise ConfigError(f'unexpected argument {arg!r}; see --help.')
    name, eq, value = arg[2:].partition('=')
    if not eq:
      if not args:
        raise ConfigError(f'--{name} needs a value.')
      value = args.pop(0)
    if name == 'config':
      config_path = value
    elif name == 'workdir':
      workdir = value
    elif name.startswith('config.'):
      overrides.append((name[len('config.'):], value))
    else:
      raise ConfigError(f'unknown option --{name}; see --help.')
  return config_path, workdir, overrides


def pop_option(argv: list[str], name: str) -> tuple[str | None, list[str]]:
  """(VALUE of `name VALUE` / `name=VALUE` in argv, or None; argv without it)."""
  rest, value, args = [], None, list(argv)
  while args:
    arg = args.pop(0)
    key, eq, text = arg.partition('=')
    if key != name:
      rest.append(arg)
      continue
    value = text if eq else (args.pop(0) if args else '')
  return value, rest


def pop_seeds(argv: list[str]) -> tuple[int | None, list[str]]:
  """(N of `--seeds N` / `--seeds=N`, or None; argv without it)."""
  value, rest = pop_option(argv, '--seeds')
  if value is not None and (not value.isdigit() or int(value) < 1):
    raise ConfigError(f'--seeds takes a positive integer, got {value!r}.')
  return value and int(value), rest


def pop_distributed(argv: list[str]) -> tuple[float | None, list[str]]:
  """(seconds to wait for the other processes with `--distributed`, or None
  without it; argv without `--distributed` and `--distributed-timeout S`)."""
  value, rest = pop_option(argv, '--distributed-timeout')
  distributed = '--distributed' in rest
  rest = [arg for arg in rest if arg != '--distributed']
  if value is None:
    return (sharding.DISTRIBUTED_TIMEOUT_S if distributed else None), rest
  try:
    timeout = float(value)
  except ValueError:
    timeout = 0.0
  if not 0 < timeout < float('inf'):
    raise ConfigError('--distributed-timeout takes a positive number of '
                      f'seconds, got {value!r}.')
  if not distributed:
    raise ConfigError('--distributed-timeout needs --distributed.')
  return timeout, rest


def default_workdir(config_path: str) -> str:
  """runs/<the config's path under experiments/, without .py>, else runs/<name>.

  experiments/quickstart.py → runs/quickstart; experiments/hist/quickstart.py
  → runs/hist/quickstart, so two config files never share a default workdir.
  """
  parts = os.path.splitext(os.path.abspath(config_path))[0].split(os.sep)
  if 'experiments' in parts[:-1]:
    last = len(parts) - 1 - parts[::-1].index('experiments')
    return os.path.join('runs', *parts[last + 1:])
  return os.path.join('runs', parts[-1])


def _overridden(config, overrides):
  for key, raw in overrides:
    apply_override(config, key, parse_value(raw))
  return config


def resolve(argv: list[str]) -> tuple[ml_collections.ConfigDict, str]:
  """The config (with overrides applied) and workdir named by `argv`."""
  config_path, workdir, overrides = parse_args(argv)
  config = _overridden(load_config(config_path), overrides)
  return config, workdir or default_workdir(config_path)


def _print_summary(summary: dict, workdir: str) -> None:
  print(f'\n{summary["algorithm"]} on {summary["dataset"]} '
        f'({summary["model"]}, {summary["num_params"]:,} parameters)')
  print(f'  rounds               {summary["rounds"]}')
  print(f'  final test accuracy  {summary["final_test_accuracy"]:.4f}')
  print(f'  best test accuracy   {summary["best_test_accuracy"]:.4f}')
  if summary['s_per_round_median'] is not None:
    print(f'  seconds per round    {summary["s_per_round_median"]:.4f}')
  print(f'  wall time            {summary["wall_time_s"]:.1f} s')
  print(f'  outputs              {workdir}')


def _show_configs(configs: dict[str, ml_collections.ConfigDict]) -> int:
  """--show-config: checks every config as a run does before it trains
  (`run.check`: data loaded, federation built, devices), prints the warnings
  a run would print and what a natural set's files gave, then each config as
  the run trains with it (`config.resolve`: the core keys and the sections
  the run reads), every key with its description."""
  from fedjax_het import run, sanity  # pylint: disable=g-import-not-at-top
  from fedjax_het.data import natural  # pylint: disable=g-import-not-at-top
  checked = {label: run.check(config) for label, config in configs.items()}
  for label, (config, warnings, data_summary) in checked.items():
    sanity.report(warnings)
    if label:
      print(f'# {label}')
    if data_summary is not None:
      print(natural.format_summary(data_summary))
    print(config_lib.format_config(config))
  return 0


def report_errors(prog: str, fn: Callable[[], int]) -> int:
  """`fn()`, with every failure a user can cause or meet ending in one line on
  stderr and an exit code: 2 for a bad config, 1 for a diverged run, a busy or
  unusable workdir, an unreadable checkpoint or a failing client, 130 after
  Ctrl-C (the last finished round is checkpointed)."""
  from fedjax_het import checkpoint, run  # pylint: disable=g-import-not-at-top
  from fedjax_het.core.backends import ClientError  # pylint: disable=g-import-not-at-top
  try:
    return fn()
  except ConfigError as e:
    print(f'{prog}: error: {e}', file=sys.stderr)
    return 2
  except (run.TrainingDiverged, checkpoint.CheckpointError, ClientError,
          WorkdirError) as e:
    print(f'{prog}: {e}', file=sys.stderr)
    return 1
  except run.RunInterrupted as e:
    print(f'\n{prog}: {e}', file=sys.stderr)
    return 130


def _train_command(argv: list[str]) -> int:
  """The trainer command: one config, a comparison, or --show-config."""
  from fedjax_het import compare, run  # pylint: disable=g-import-not-at-top
  seeds, argv = pop_seeds(argv)
  show = '--show-config' in argv
  argv = [arg for arg in argv if arg != '--show-config']
  config_path, workdir, overrides = parse_args(argv)
  workdir = workdir or default_workdir(config_path)
  module = load_experiment(config_path)
  seeds = seeds or getattr(module, 'SEEDS', 1)
  grid = getattr(module, 'GRID', None)
  # One config over seeds or a grid: a comparison of one label.
  if hasattr(module, 'get_configs') or seeds != 1 or grid:
    configs = (experiment_configs(module, config_path)
               if hasattr(module, 'get_configs') else
               {os.path.splitext(os.path.basename(config_path))[0]:
                experiment_config(module, config_path)})
    configs = {label: _overridden(c, overrides) for label, c in configs.items()}
    if show:
      return _show_configs(configs)
    print(compare.run_comparison(
        configs, workdir, run.train,
        getattr(module, 'COLUMNS', compare.DEFAULT_COLUMNS),
        getattr(module, 'TITLE', ''), seeds=seeds, grid=grid,
        select=getattr(module, 'SELECT', None),
        curves=getattr(module, 'CURVES', ())))
    print(f'outputs: {workdir}')
    return 0
  config = _overridden(experiment_config(module, config_path), overrides)
  if show:
    return _show_configs({'': config})
  _print_summary(run.train(config, workdir), workdir)
  return 0


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if argv[:1] == ['bench']:
    from fedjax_het.tools import bench  # pylint: disable=g-import-not-at-top
    return bench.main(argv[1:])
  if argv[:1] == ['traces']:
    from fedjax_het.systems import traces  # pylint: disable=g-import-not-at-top
    return traces.traces_command(argv[1:])
  return report_errors('fedjax-het', lambda: _distributed_train_command(argv))


def _distributed_train_command(argv: list[str]) -> int:
  """The trainer command, with `--distributed` first joining the other
  processes (`sharding.initialize_distributed`)."""
  timeout, argv = pop_distributed(argv)
  if timeout is not None:
    sharding.initialize_distributed(timeout, 'fedjax-het')
  return _train_command(argv)


# At most this many XLA devices are made of the CPU's cores (each holds a copy of the data).
MAX_CPU_DEVICES = 8


def split_cpu_into_devices() -> None:
  """One XLA CPU device per core (at most MAX_CPU_DEVICES), unless XLA_FLAGS says otherwise.

  The default `client_devices=0` then shards the cohort over the cores: on the
  2-core benchmark machine W-MLP fell from 0.064 to 0.028 s/round (README
  "Speed"). It only affects the CPU platform, and only if JAX has not started
  yet, so the installed `fedjax-het` command calls it first thing; a library
  user sets `XLA_FLAGS=--xla_force_host_platform_device_count=N` instead.
  """
  if 'xla_force_host_platform_device_count' in os.environ.get('XLA_FLAGS', ''):
    return
  cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
  sharding.set_cpu_device_count(max(1, min(cores or 1, MAX_CPU_DEVICES)))


def console_main() -> None:
  split_cpu_into_devices()
  sys.exit(main())
