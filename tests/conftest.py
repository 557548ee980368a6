"""Test session setup: cheap compiles, and a compilation cache every process shares.

Compilation is most of the suite's time (over 80% of a compile-heavy file with a cold
cache), so the tests compile with LLVM's backend optimisation level 0
(`TEST_XLA_FLAGS`): the programs are the same XLA programs, lowered with less
machine-code optimisation, and compile about twice as fast. Their results can
differ from default flags in the last bits (fused multiply-adds, vectorised
reduction orders), so a test never compares against numbers recorded at default
flags in this process: `tests/test_pinned.py` computes its pinned hashes in a
child process at default flags (`script_utils.default_flags_env`).

The persistent XLA compilation cache lives in `.pytest_cache/` (git-ignored;
`JAX_COMPILATION_CACHE_DIR` chooses another directory): a
program compiled once is loaded from disk by every later test, by the other
xdist worker and by the child processes the tests start (they inherit the
settings through the environment: `JAX_*` variables and `XLA_FLAGS`). The cache
is keyed by the program and the compiler's flags, so it never changes a result.
"""
import os

from script_utils import TEST_XLA_FLAGS

_CACHE = os.environ.get('JAX_COMPILATION_CACHE_DIR') or os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), '.pytest_cache',
    'jax_compilation')
_JAX_SETTINGS = {'jax_compilation_cache_dir': _CACHE,
                 'jax_persistent_cache_min_compile_time_secs': 0.0,
                 'jax_persistent_cache_min_entry_size_bytes': 0}


if TEST_XLA_FLAGS not in os.environ.get('XLA_FLAGS', ''):
  os.environ['XLA_FLAGS'] = f"{os.environ.get('XLA_FLAGS', '')} {TEST_XLA_FLAGS}".strip()
for _name, _value in _JAX_SETTINGS.items():
  os.environ[_name.upper()] = str(_value)

import jax  # noqa: E402  (after the environment above: XLA reads it at start-up)

for _name, _value in _JAX_SETTINGS.items():
  jax.config.update(_name, _value)
