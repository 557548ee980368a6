"""Repository scripts (experiments/...) loaded as modules in tests, and child
processes whose report a test session shares."""
import contextlib
import dataclasses
import fcntl
import functools
import glob
import importlib.util
import json
import mmap
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(REPO, 'tests')
# Compiler flags of the test processes (set by conftest.py), each with the
# reason it is there:
#   LLVM's backend optimisation level 0: compiles about twice as fast;
#   XLA:CPU's older elemental emitters instead of its fusion emitters:
#     compiles ~40% faster again (a Co-S²P round: 7.0 s -> 4.3 s; the cold
#     suite 878 s -> 641 s), where this jaxlib still has them.
_CHEAP_COMPILE_FLAGS = (('xla_backend_optimization_level', '0'),
                        ('xla_cpu_use_fusion_emitters', 'false'))


def _jaxlib_knows_flag(name: str) -> bool:
  """Whether the installed jaxlib's libraries define the XLA flag `name`.

  XLA aborts at start-up on a flag it does not know, and debug flags come and
  go between jaxlib releases; a flag is registered under its name, so its
  name is in the library's bytes (found without starting XLA)."""
  spec = importlib.util.find_spec('jaxlib')
  for library in glob.glob(os.path.join(spec.submodule_search_locations[0],
                                        '*.so')):
    if not os.path.getsize(library):
      continue
    with open(library, 'rb') as file, mmap.mmap(
        file.fileno(), 0, access=mmap.ACCESS_READ) as contents:
      if contents.find(name.encode()) >= 0:
        return True
  return False


@functools.lru_cache(maxsize=None)
def test_xla_flags() -> str:
  """The test processes' XLA flags: `_CHEAP_COMPILE_FLAGS` that this jaxlib
  knows. A result may differ from default flags in the last bits (fused
  multiply-adds, reduction orders), so whatever is pinned bit for bit is
  computed in a child at default flags (`default_flags_env`)."""
  return ' '.join(f'--{name}={value}' for name, value in _CHEAP_COMPILE_FLAGS
                  if _jaxlib_knows_flag(name))


def add_test_flags(environ=os.environ) -> None:
  """Adds `test_xla_flags()` to `environ`'s XLA_FLAGS (once): a test
  session's compile flags (conftest.py), also those of a child run outside
  one (`run_child`)."""
  flags = test_xla_flags()
  if flags not in environ.get('XLA_FLAGS', ''):
    environ['XLA_FLAGS'] = f"{environ.get('XLA_FLAGS', '')} {flags}".strip()


def free_port() -> int:
  """A TCP port on localhost that is free now (a coordinator's)."""
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def default_flags_env(names=None) -> dict:
  """This process's environment without the tests' compile flags (or without
  those of them named in `names`): for a child process that must compile as
  a user's run does."""
  flags = os.environ.get('XLA_FLAGS', '')
  for name, _ in _CHEAP_COMPILE_FLAGS:
    if names is None or name in names:
      flags = re.sub(rf'--{name}=\S*', '', flags)
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


@dataclasses.dataclass(frozen=True)
class Child:
  """A child process whose JSON report the tests of `test_file` assert on:
  `python tests/SCRIPT *ARGS SCRATCH_DIR` prints it as its last line of
  stdout.

  fixture: the session fixture (`child_report`) through which the tests
    read the report: a test session runs the tests using it last
    (conftest.py).

  without_flags: the suite's cheap compile flags (`_CHEAP_COMPILE_FLAGS`)
    the child compiles without (`default_flags_env`): none (), or all of them
    (None) for results pinned at a user's flags.
  cpu_devices: split the CPU into this many XLA devices (0: one).
  args: the script's arguments before the scratch directory (a shard of its
    work: children run side by side under xdist).
  """
  script: str
  test_file: str
  fixture: str
  without_flags: tuple[str, ...] | None = ()
  cpu_devices: int = 0
  args: tuple[str, ...] = ()

  def env(self) -> dict:
    """The child's environment: `default_flags_env`, this repository first
    on the import path (a script's own directory, tests/, is; the installed
    `fedjax_het` may be another checkout's, e.g. an editable install of a
    sibling worktree), and the CPU's devices."""
    env = default_flags_env(self.without_flags)
    env['PYTHONPATH'] = os.pathsep.join(
        filter(None, (REPO, os.environ.get('PYTHONPATH'))))
    if self.cpu_devices:
      from fedjax_het.core import sharding
      env['JAX_PLATFORMS'] = 'cpu'
      sharding.set_cpu_device_count(self.cpu_devices, env)
    return env


CHILDREN = {
    'pinned_hashes': Child('test_pinned.py', 'test_pinned.py',
                           'default_flags_runs', without_flags=None),
    'mask_table_report': Child('test_engine.py', 'test_engine.py',
                               'mask_table_report',
                               without_flags=('xla_cpu_use_fusion_emitters',)),
    'vit_systems_report': Child('test_vit_systems.py', 'test_vit_systems.py',
                                'vit_systems_report',
                                without_flags=('xla_cpu_use_fusion_emitters',)),
    'vit_buffered_report': Child('test_vit_buffered.py',
                                 'test_vit_buffered.py', 'vit_buffered_report',
                                 without_flags=('xla_cpu_use_fusion_emitters',)),
    'four_device_report': Child('multidevice_rounds.py', 'test_sharding.py',
                                'four_device_report', cpu_devices=4),
}
# The heterogeneity matrix's runs, in children side by side: one at XLA's
# fusion emitters for the runs compared bit for bit (group 'exact'), two at
# the suite's flags for the cells ON and the pins ('pinned', about twice the
# runs at half the compile time); each takes the next method no child of its
# group has taken yet (`python test_heterogeneity_matrix.py --queue GROUP
# SCRATCH`, the queue in SCRATCH's parent, the session's shared directory),
# so that they finish together whatever each method costs.
MATRIX_GROUPS = {'exact': (1, ('xla_cpu_use_fusion_emitters',)),
                 'pinned': (2, ())}
MATRIX_CHILDREN = tuple(f'heterogeneity_matrix_{group}_{i}'
                        for group, (count, _) in MATRIX_GROUPS.items()
                        for i in range(count))
CHILDREN.update({
    f'heterogeneity_matrix_{group}_{i}': Child(
        'test_heterogeneity_matrix.py', 'test_heterogeneity_matrix.py',
        'matrix', without_flags=without, args=('--queue', group))
    for group, (count, without) in MATRIX_GROUPS.items()
    for i in range(count)})


def reads_a_child(fixturenames) -> bool:
  """Whether a test using `fixturenames` reads a child's report (one of
  the `Child.fixture`s)."""
  return any(child.fixture in fixturenames for child in CHILDREN.values())


def _shared_report(shared: pathlib.Path, name: str, timeout=1800) -> dict:
  """`CHILDREN[name]`'s report, computed once per test session: the first
  process to take the lock `shared/name.lock` runs the child and writes
  `shared/name.json`, the others read it."""
  report = shared / f'{name}.json'
  with open(shared / f'{name}.lock', 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not report.exists():
      report.write_text(run_child(name, shared / name, timeout))
  return json.loads(report.read_text())


def run_child(name: str, scratch: pathlib.Path, timeout=1800) -> str:
  """The last line of stdout of `CHILDREN[name]` (its JSON report), run
  from this process's environment (a test session's, or one given its flags
  by `add_test_flags`) less the flags the child compiles without."""
  child = CHILDREN[name]
  result = subprocess.run(
      [sys.executable, os.path.join(TESTS, child.script), *child.args,
       str(scratch)],
      env=child.env(), capture_output=True, text=True, timeout=timeout,
      cwd=TESTS)
  assert result.returncode == 0, result.stderr[-3000:]
  return result.stdout.strip().splitlines()[-1]


def child_report(tmp_path_factory, worker_id, name: str) -> dict:
  """`CHILDREN[name]`'s report for a session fixture. Under xdist the
  controller started computing it when the workers collected its tests
  (`start_children`); a worker that asks first computes it itself."""
  base = tmp_path_factory.getbasetemp()
  return _shared_report(base if worker_id == 'master' else base.parent, name)


def start_children(shared: pathlib.Path, test_ids) -> list:
  """Starts, in the background, the children whose tests are among
  `test_ids`, so that no xdist worker sits waiting on one: each computes its
  report as `_shared_report` does (this file run as a script). They run at
  the lowest CPU priority, on the cycles the workers leave (a worker's
  single-threaded Python, its waits, the session's tail), each in its own
  process group but in the session's (with Linux's autogroups a session of
  its own would be scheduled as an equal of all the workers together).
  Returns the processes (`stop_children` ends those still running)."""
  files = {test_id.split('::')[0].rsplit('/', 1)[-1] for test_id in test_ids}
  return [subprocess.Popen([sys.executable, __file__, name, str(shared)],
                           cwd=TESTS, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
          for name, child in CHILDREN.items() if child.test_file in files]


def stop_children(processes) -> None:
  """Ends the process groups of `start_children`'s processes still running
  (a session stopped early, or whose tests were not run)."""
  for process in processes:
    if process.poll() is None:
      with contextlib.suppress(ProcessLookupError):  # not yet its own group
        os.killpg(process.pid, signal.SIGTERM)
      process.terminate()


if __name__ == '__main__':  # started by `start_children`
  os.setpgrp()
  os.nice(19)
  _shared_report(pathlib.Path(sys.argv[2]), sys.argv[1])
