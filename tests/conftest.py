"""Test session setup: cheap compiles, and a compilation cache every process shares.

Compilation is most of the suite's time (over 80% of a compile-heavy file with a cold
cache), so the tests compile with cheaper XLA flags (`script_utils.test_xla_flags`:
LLVM's backend optimisation level 0 and XLA:CPU's elemental emitters): the
programs are the same XLA programs, lowered to less optimised machine code, and
compile about three times as fast. Their results can differ from default flags
in the last bits (fused multiply-adds, reduction orders), so a test never
compares against numbers recorded at default flags in this process: what is
pinned is computed in a child process at default flags, and what is compared
bit for bit across two programs in one with XLA's fusion emitters
(`script_utils.CHILDREN`: the pinned hashes, the mask-table identity). Under
xdist the controller starts those children as soon as the workers have
collected their tests, so they run beside the tests, and
the tests that read them run last (`pytest_collection_modifyitems`).

The persistent XLA compilation cache lives in `.pytest_cache/` (git-ignored;
`JAX_COMPILATION_CACHE_DIR` chooses another directory): a
program compiled once is loaded from disk by every later test, by the other
xdist worker and by the child processes the tests start (they inherit the
settings through the environment: `JAX_*` variables and `XLA_FLAGS`). The cache
is keyed by the program and the compiler's flags, so it never changes a result.
"""
import os

import script_utils

_CACHE = os.environ.get('JAX_COMPILATION_CACHE_DIR') or os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), '.pytest_cache',
    'jax_compilation')
_JAX_SETTINGS = {'jax_compilation_cache_dir': _CACHE,
                 'jax_persistent_cache_min_compile_time_secs': 0.0,
                 'jax_persistent_cache_min_entry_size_bytes': 0}


script_utils.add_test_flags()
for _name, _value in _JAX_SETTINGS.items():
  os.environ[_name.upper()] = str(_value)

import jax  # noqa: E402  (after the environment above: XLA reads it at start-up)

for _name, _value in _JAX_SETTINGS.items():
  jax.config.update(_name, _value)

import pytest  # noqa: E402

_children = None   # what `start_children` started, once per session


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
  """The xdist controller starts the child processes the collected tests read
  (`script_utils.CHILDREN`), so that they run beside the workers' tests."""
  global _children
  if _children is None:
    _children = script_utils.start_children(
        node.config._tmp_path_factory.getbasetemp(), ids)


def pytest_collection_modifyitems(items):
  """The tests that read a child's report run last, the others in their
  order. An xdist worker waiting on a child holds the tests it was sent
  after that one (the load scheduler sends them in chunks and takes none
  back), and would run them alone once the child is done, the other core
  idle; last, the workers wait on the children together, which then have
  both cores."""
  items.sort(key=lambda item: script_utils.reads_a_child(item.fixturenames))


def pytest_sessionfinish(session):
  script_utils.stop_children(_children or [])
