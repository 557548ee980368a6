"""A run's workdir: user paths, one run at a time, files written whole and
read back through one checked reader (`read_json`).

`lock(workdir)` makes a run own its workdir: it holds an exclusive `flock` on
`<workdir>/.lock` (which records the holder's pid, host and start time) until
the run ends. The kernel releases the lock when the holder exits, however it
exits, so a lock left by a crashed or killed run is never in the way. A second
run on the same workdir stops with a `WorkdirError` naming the holder.
"""
import contextlib
import datetime
import fcntl
import json
import os
import socket

LOCK_FILE = '.lock'


class WorkdirError(RuntimeError):
  """The workdir cannot be used: busy, not a directory, unwritable, or full."""


def expand(path: str) -> str:
  """`path` with `~` and environment variables ($HOME, ${DATA}) expanded."""
  return os.path.expanduser(os.path.expandvars(path))


def describe_os_error(e: OSError) -> str:
  """'No space left on device: <file>' for an OSError, without its errno."""
  reason = e.strerror or str(e)
  return f'{reason}: {e.filename}' if e.filename else reason


def create(workdir: str) -> None:
  """Creates `workdir` (and its parents); one-line WorkdirError if it can't."""
  try:
    os.makedirs(workdir, exist_ok=True)
  except OSError as e:
    raise WorkdirError(f'cannot use workdir {workdir} ({describe_os_error(e)}).'
                       ) from e


def _holder(fd: int) -> str:
  os.lseek(fd, 0, os.SEEK_SET)
  text = os.read(fd, 1024).decode(errors='replace').strip()
  return text or 'another process'


@contextlib.contextmanager
def lock(workdir: str):
  """Holds `<workdir>/.lock` exclusively for the duration of the block."""
  path = os.path.join(workdir, LOCK_FILE)
  try:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  except OSError as e:
    raise WorkdirError(f'cannot use workdir {workdir} ({describe_os_error(e)}).'
                       ) from e
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as e:
      raise WorkdirError(
          f'workdir {workdir} is in use by {_holder(fd)}; wait for that run '
          'to finish or use another --workdir.') from e
    started = datetime.datetime.now().isoformat(timespec='seconds')
    os.ftruncate(fd, 0)
    os.pwrite(fd, f'pid {os.getpid()} on {socket.gethostname()} since '
              f'{started}\n'.encode(), 0)
    yield
  finally:
    os.close(fd)  # releases the lock


def write_text(path: str, text: str) -> None:
  """Writes `path` whole or not at all (a temporary file, then a rename)."""
  tmp = f'{path}.tmp'
  try:
    with open(tmp, 'w') as f:
      f.write(text)
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def read_json(path: str, advice: str, lines: bool = False,
              torn_tail: bool = False):
  """The JSON value in `path`, or with `lines` (JSON Lines) the list of the
  values of its non-empty lines.

  With `torn_tail`, a last line without its newline that is not JSON (torn
  by a crash while it was written) is left out. Anything else that is not
  UTF-8 JSON is a one-line WorkdirError naming the file (and line) and ending
  in `advice`, what to do about it.
  """
  with open(path, 'rb') as f:
    raw = f.read()
  chunks = raw.splitlines(keepends=True) if lines else [raw]
  values = []
  for number, chunk in enumerate(chunks, 1):
    if lines and not chunk.strip():
      continue
    try:
      values.append(json.loads(chunk.decode('utf-8')))
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
      if torn_tail and number == len(chunks) and not chunk.endswith(b'\n'):
        break
      where = f'{path} line {number}' if lines else path
      reason = ('empty' if not chunk.strip() else getattr(e, 'msg', None) or
                'not UTF-8 text')
      raise WorkdirError(f'{where} is not JSON ({reason}); {advice}') from e
  return values if lines else values[0]


def read_metrics(path: str, torn_tail: bool = True) -> list[dict]:
  """The rows of a metrics.jsonl ([] if absent), without a torn last line
  (unless `torn_tail` is False: the rows of a finished run).

  Any other unreadable line is a WorkdirError naming the file and line.
  """
  if not os.path.exists(path):
    return []
  return read_json(
      path, 'repair or remove the line, then run the same command again.',
      lines=True, torn_tail=torn_tail)
