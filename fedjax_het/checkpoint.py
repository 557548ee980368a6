"""Checkpoints of a run: the `ServerState` plus host-side counters, via orbax.

Saved under `<workdir>/checkpoints/<round>/` with a `CheckpointManager`. The
state is a pytree (restored onto the same shapes and dtypes); the host part is
JSON (cumulative bytes, wall time). `restore_latest` resumes from the newest
readable checkpoint: a damaged newer one is moved to `<workdir>/damaged_checkpoints/`
with a note on stderr, and if none can be read it raises `CheckpointError`
instead of silently starting over. A failed save (e.g. a full disk) raises
`CheckpointError` and leaves the earlier checkpoints as they were.
"""
import os
import shutil
import sys
from typing import Any

import jax
import orbax.checkpoint as ocp


class CheckpointError(RuntimeError):
  """A checkpoint exists but cannot be restored."""


def _reason(e: Exception) -> str:
  """'Type: first line of the message', at most 200 characters."""
  lines = str(e).strip().splitlines()
  text = f'{type(e).__name__}: {lines[0] if lines else ""}'
  return text if len(text) <= 200 else text[:197] + '...'


class RunCheckpoints:
  """Saves and restores `(ServerState, host dict)` pairs keyed by round."""

  def __init__(self, workdir: str, max_to_keep: int):
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
    try:
      self._manager.save(
          round_index,
          args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                  host=ocp.args.JsonSave(host)),
          force=True)
      self._manager.wait_until_finished()
    except Exception as e:  # orbax raises many types; report them as one.
      previous = self.latest_round()
      raise CheckpointError(
          f'cannot save the checkpoint of round {round_index} in '
          f'{self.directory} ({_reason(e)}); the last saved checkpoint is '
          f'round {previous if previous is not None else "none"}. Fix this '
          'and run the same command again to resume.') from e

  def restore(self, round_index: int, like: Any) -> tuple[Any, dict]:
    """Restores round `round_index` onto the structure of `like`."""
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
    try:
      restored = self._manager.restore(
          round_index,
          args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                  host=ocp.args.JsonRestore()))
    except Exception as e:  # orbax raises many types; report them as one.
      raise CheckpointError(
          f'checkpoint of round {round_index} in {self.directory} cannot be '
          f'read ({_reason(e)})') from e
    return restored.state, dict(restored.host)

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
