"""Checkpoints of a run: the `ServerState` plus host-side counters, via orbax.

Saved under `<workdir>/checkpoints/<round>/` with a `CheckpointManager`. The
state is a pytree (restored onto the same shapes and dtypes); the host part is
JSON (cumulative bytes, wall time). A checkpoint that exists but cannot be read
raises `CheckpointError` instead of silently starting over.
"""
import os
from typing import Any

import jax
import orbax.checkpoint as ocp


class CheckpointError(RuntimeError):
  """A checkpoint exists but cannot be restored."""


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
    self._manager.save(
        round_index,
        args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                host=ocp.args.JsonSave(host)),
        force=True)
    self._manager.wait_until_finished()

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
          f'read ({type(e).__name__}: {e}); move it away to start over or '
          'restore it from a backup.') from e
    return restored.state, dict(restored.host)

  def close(self) -> None:
    self._manager.close()
