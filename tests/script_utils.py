"""Repository scripts (experiments/...) loaded as modules in tests, and child
processes whose report a test session shares."""
import fcntl
import importlib.util
import json
import os
import re
import socket
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Compiler flags of the test processes (set by conftest.py): LLVM's backend
# optimisation level 0 compiles about twice as fast.
TEST_XLA_FLAGS = '--xla_backend_optimization_level=0'


def free_port() -> int:
  """A TCP port on localhost that is free now (a coordinator's)."""
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def default_flags_env() -> dict:
  """This process's environment without `TEST_XLA_FLAGS`: for a child process
  that must compile as a user's run does."""
  flags = os.environ.get('XLA_FLAGS', '').replace(TEST_XLA_FLAGS, '')
  return {**os.environ, 'XLA_FLAGS': re.sub(r'\s+', ' ', flags).strip()}


def load_script(path, monkeypatch=None):
  """The script at `path` (absolute or relative to the repository) as a module
  named by its file stem. With `monkeypatch`, the script's directory is first
  on sys.path for the test, as `python path` has it, so that its imports of
  sibling scripts resolve."""
  path = os.path.join(REPO, path)
  if monkeypatch is not None:
    monkeypatch.syspath_prepend(os.path.dirname(path))
  name = os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def child_report(tmp_path_factory, worker_id, name, command, env, timeout=900):
  """The JSON object that the child process `command + [scratch directory]`
  prints on its last line of stdout, computed once per test session: xdist
  workers share it through the file `name`.json under the session's base temp
  directory (the first worker runs the child while holding a lock, the other
  reads its report). The child runs in tests/ with environment `env`."""
  base = tmp_path_factory.getbasetemp()
  shared = base if worker_id == 'master' else base.parent
  report = shared / f'{name}.json'
  with open(shared / f'{name}.lock', 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not report.exists():
      result = subprocess.run([*command, str(shared / name)], env=env, capture_output=True, text=True,
                              timeout=timeout, cwd=os.path.join(REPO, 'tests'))
      assert result.returncode == 0, result.stderr[-3000:]
      report.write_text(result.stdout.strip().splitlines()[-1])
  return json.loads(report.read_text())
