"""Checkpoints of a run: the `ServerState` plus host-side counters, via orbax.

Saved under `<workdir>/checkpoints/<round>/` with a `CheckpointManager`. The
state is a pytree (restored onto the same shapes and dtypes); the host part is
JSON (cumulative bytes, wall time); the `meta` part (JSON) holds the SHA-256
of the state's arrays, checked on restore, and the run's config (read back by
`stored_config` when a workdir lost its config.json). `restore_latest`
resumes from the newest readable, intact checkpoint: an unreadable or damaged
newer one is moved to `<workdir>/damaged_checkpoints/` with a note on stderr,
and if none can be read it raises `CheckpointError` instead of silently
starting over. A failed save (e.g. a full disk) raises `CheckpointError` and
leaves the earlier checkpoints as they were.
"""
import contextlib
import hashlib
import logging
import os
import shutil
import sys
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp


class CheckpointError(RuntimeError):
  """A checkpoint exists but cannot be restored."""


def _reason(e: Exception) -> str:
  """'Type: first line of the message', at most 200 characters."""
  lines = str(e).strip().splitlines()
  text = f'{type(e).__name__}: {lines[0] if lines else ""}'
  return text if len(text) <= 200 else text[:197] + '...'


def state_digest(state: Any) -> str:
  """SHA-256 over the dtype, shape and bytes of every array of `state`, in
  tree order (a replicated array's local copy in a multi-process run)."""
  digest = hashlib.sha256()
  for leaf in jax.tree.leaves(state):
    if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
      leaf = leaf.addressable_data(0)
    array = np.ascontiguousarray(leaf)
    digest.update(f'{array.dtype}{array.shape}'.encode())
    digest.update(array.view(np.uint8).reshape(-1) if array.size else b'')
  return digest.hexdigest()


class _Quiet(logging.Filter):
  """Silences the echoes of a failed orbax save, which `RunCheckpoints.save`
  reports in one line: its threads log the failure's traceback (absl), their
  callbacks meet the closed event loop (unraisable RuntimeErrors), and asyncio
  logs the futures' errors when they are collected (as late as the process's
  exit). Installed for each save; after a failed one, which stops the run,
  it stays for the rest of the process."""

  loggers = ('absl', 'asyncio')

  def filter(self, record: logging.LogRecord) -> bool:
    return record.levelno < logging.ERROR

  def _unraisable(self, unraisable) -> None:
    if not isinstance(unraisable.exc_value, RuntimeError):
      self._hook(unraisable)

  def install(self) -> None:
    for name in self.loggers:
      logging.getLogger(name).addFilter(self)
    self._hook, sys.unraisablehook = sys.unraisablehook, self._unraisable

  def remove(self) -> None:
    sys.unraisablehook = self._hook
    for name in self.loggers:
      logging.getLogger(name).removeFilter(self)


class RunCheckpoints:
  """Saves and restores `(ServerState, host dict)` pairs keyed by round, with
  `config` (the run's config as a JSON dict) stored alongside each."""

  def __init__(self, workdir: str, max_to_keep: int, config: dict):
    self.config = config
    self._quiet = _Quiet()
    self.directory = os.path.abspath(os.path.join(workdir, 'checkpoints'))
    self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, enable_async_checkpointing=False,
            create=True))

  def latest_round(self) -> int | None:
    return self._manager.latest_step()

  def save(self, round_index: int, state: Any, host: dict) -> None:
    if round_index in self._manager.all_steps():
      return
    meta = {'state_sha256': state_digest(state), 'config': self.config}
    self._quiet.install()
    try:
      self._manager.save(
          round_index,
          args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                  host=ocp.args.JsonSave(host),
                                  meta=ocp.args.JsonSave(meta)),
          force=True)
      self._manager.wait_until_finished()
      self._quiet.remove()
    except Exception as e:  # orbax raises many types; report them as one.
      # Its threads may fail on: `self._quiet` stays.
      previous = self.latest_round()
      raise CheckpointError(
          f'cannot save the checkpoint of round {round_index} in '
          f'{self.directory} ({_reason(e)}); the last saved checkpoint is '
          f'round {previous if previous is not None else "none"}. Fix this '
          'and run the same command again to resume.') from e

  def _read(self, round_index: int, **items: ocp.args.CheckpointArgs):
    """The `items` of round `round_index`; CheckpointError if unreadable."""
    try:
      return self._manager.restore(round_index,
                                   args=ocp.args.Composite(**items))
    except Exception as e:  # orbax raises many types; report them as one.
      raise CheckpointError(
          f'checkpoint of round {round_index} in {self.directory} cannot be '
          f'read ({_reason(e)})') from e

  def _meta(self, round_index: int) -> dict:
    """The meta part of round `round_index` ({} for a checkpoint saved
    before checkpoints had one)."""
    if not os.path.isdir(os.path.join(self.directory, str(round_index),
                                      'meta')):
      return {}
    return dict(self._read(round_index, meta=ocp.args.JsonRestore()).meta)

  def restore(self, round_index: int, like: Any) -> tuple[Any, dict]:
    """Restores round `round_index` onto the structure of `like`; a state
    whose arrays differ from their saved checksum is a CheckpointError."""
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
    restored = self._read(round_index,
                          state=ocp.args.StandardRestore(abstract),
                          host=ocp.args.JsonRestore())
    saved = self._meta(round_index).get('state_sha256')
    if saved is not None and saved != state_digest(restored.state):
      raise CheckpointError(
          f'checkpoint of round {round_index} in {self.directory} is damaged '
          '(its arrays differ from the checksum saved with them)')
    return restored.state, dict(restored.host)

  def stored_config(self) -> dict | None:
    """The config saved with the newest checkpoint that holds one, or None
    if there is no checkpoint; CheckpointError if none holds a config."""
    steps = sorted(self._manager.all_steps(), reverse=True)
    for round_index in steps:
      with contextlib.suppress(CheckpointError):
        config = self._meta(round_index).get('config')
        if config is not None:
          return config
    if steps:
      raise CheckpointError(
          f'no checkpoint in {self.directory} holds the config it was saved '
          'with; restore the run\'s config.json to resume it.')
    return None

  def restore_latest(self, like: Any) -> tuple[int, Any, dict | None]:
    """(round, state, host) of the newest readable checkpoint, or (0, like, None).

    A checkpoint that cannot be read is moved aside, so that the resumed run
    saves that round afresh, and the next older one is tried.
    """
    steps = sorted(self._manager.all_steps(), reverse=True)
    for i, round_index in enumerate(steps):
      try:
        return (round_index, *self.restore(round_index, like))
      except CheckpointError as e:
        if i + 1 == len(steps):
          raise CheckpointError(
              f'{e}; no older checkpoint is readable: move it away to start '
              'over or restore it from a backup.') from e.__cause__
        moved = self._move_aside(round_index)
        print(f'fedjax-het: {e}; moved it to {moved} and resuming from round '
              f'{steps[i + 1]}.', file=sys.stderr)
    return 0, like, None

  def _move_aside(self, round_index: int) -> str:
    target = os.path.join(os.path.dirname(self.directory),
                          'damaged_checkpoints', str(round_index))
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.move(os.path.join(self.directory, str(round_index)), target)
    self._manager.reload()
    return target

  def close(self) -> None:
    self._manager.close()
