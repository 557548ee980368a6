"""Test session setup: a persistent XLA compilation cache shared by the workers.

Many tests compile the same small rounds (the tiny federations of
`engine_utils`, one per backend); with the cache, a program compiled once is
loaded from disk by every later test and by the other xdist worker. The cache
lives in `.pytest_cache/` (git-ignored) and is keyed by the program and the
compiler's flags, so it never changes a result.
"""
import os

import jax

_CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      '.pytest_cache', 'jax_compilation')
jax.config.update('jax_compilation_cache_dir', _CACHE)
jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
jax.config.update('jax_persistent_cache_min_entry_size_bytes', 0)
