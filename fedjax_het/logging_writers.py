"""Experiment tracking: where a run's evaluated rows go besides metrics.jsonl.

`metrics.jsonl` is always written (resume reads it back). The config key
`metric_writers` adds writers by name, each behind the same two calls,
`write(round_index, scalars)` and `close()`:

  'tensorboard'  TensorBoard event files in <workdir>/tensorboard
                 (pip install -e ".[tensorboard]"; view with tensorboard --logdir)
  'wandb'        a Weights & Biases run kept in <workdir>/wandb, offline unless
                 WANDB_MODE says otherwise (pip install -e ".[wandb]"; upload an
                 offline run later with `wandb sync`)

A resumed run writes the rows after its checkpoint to the same TensorBoard
directory and to a new W&B run.
"""
import importlib.util
import os
from typing import Protocol

import ml_collections

from fedjax_het.config import ConfigError


class MetricWriter(Protocol):
  """Receives every evaluated row of a run."""

  def write(self, round_index: int, scalars: dict[str, float]) -> None:
    ...

  def close(self) -> None:
    ...


class TensorBoardWriter:
  """Scalars as TensorBoard event files (tensorboardX, no TensorFlow needed)."""

  package = 'tensorboardX'

  def __init__(self, workdir: str, config: ml_collections.ConfigDict):
    del config
    import tensorboardX  # pylint: disable=g-import-not-at-top
    self._writer = tensorboardX.SummaryWriter(
        os.path.join(workdir, 'tensorboard'))

  def write(self, round_index: int, scalars: dict[str, float]) -> None:
    for key, value in scalars.items():
      self._writer.add_scalar(key, value, round_index)
    self._writer.flush()

  def close(self) -> None:
    self._writer.close()


class WandbWriter:
  """Scalars logged to a Weights & Biases run (offline by default)."""

  package = 'wandb'

  def __init__(self, workdir: str, config: ml_collections.ConfigDict):
    import wandb  # pylint: disable=g-import-not-at-top
    self._run = wandb.init(
        project='fedjax_het', dir=workdir,
        name=os.path.basename(os.path.abspath(workdir)),
        config=config.to_dict(), mode=os.environ.get('WANDB_MODE', 'offline'))

  def write(self, round_index: int, scalars: dict[str, float]) -> None:
    self._run.log(scalars, step=round_index)

  def close(self) -> None:
    self._run.finish()


WRITERS = {'tensorboard': TensorBoardWriter, 'wandb': WandbWriter}


def check(names) -> None:
  """ConfigError unless `names` is a tuple of distinct, installed writers."""
  if (not isinstance(names, (tuple, list)) or
      any(name not in WRITERS for name in names) or
      len(set(names)) != len(names)):
    raise ConfigError(f'metric_writers must be a tuple of distinct names from '
                      f'{", ".join(WRITERS)}, got {names!r}.')
  for name in names:
    if importlib.util.find_spec(WRITERS[name].package) is None:
      raise ConfigError(
          f'metric_writers {name!r} needs the {WRITERS[name].package} '
          f'package: pip install -e ".[{name}]" in the checkout.')


def create(config: ml_collections.ConfigDict,
           workdir: str) -> list[MetricWriter]:
  """The writers named by `config.metric_writers` (checked first)."""
  check(config.metric_writers)
  return [WRITERS[name](workdir, config) for name in config.metric_writers]
