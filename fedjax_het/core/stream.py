"""Cohort streaming: a federation kept on the host, each chunk's cohorts moved to the device.

A round reads only its cohort's rows of the federated data, and the cohort
is a function of the root key and the round number (`cohort_ids`), so the
data of a chunk of rounds is known before the chunk runs. `CohortStream`
keeps the whole `FederatedData` on the host (numpy arrays or `np.memmap`
files: memory per client is its bytes there, paged in when read) and, per
chunk of R rounds, gathers the R cohorts' rows into a `CohortData`
[R, K, ...] that `RoundRunner.run_cohorts` scans over with the rounds. The
next chunk's cohorts are gathered and put on the device right after the
current chunk is dispatched, so the copy overlaps its compute (double
buffering: at most two chunks' cohorts on the device), and the compiled
round stays one program: streamed rounds equal on-device ones bit for bit.

Each compiled round reports whether its plans read only prefetched clients;
a round that read others raises `CohortMismatch` (e.g. a method whose
`plan_round` does not draw its cohort from `cohort_ids`).
"""
from typing import Any

import jax
import numpy as np

from fedjax_het.core import sharding
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.core.state import ServerState
from fedjax_het.data.federated import CohortData, FederatedData

PyTree = Any


class CohortMismatch(RuntimeError):
  """A streamed round planned clients outside the cohort fetched for it."""


class CohortStream:
  """Runs rounds of `runner` on host-resident `data`, streaming the cohorts.

  Args:
    runner: the round runner (any backend; with a mesh the cohorts are
      replicated on it like on-device data).
    data: the clients' training data with host leaves (numpy or np.memmap).
    last_round: the run's last round, to size the prefetch of the final
      chunk (None: the next chunk is as long as the current one).
  """

  def __init__(self, runner: RoundRunner, data: FederatedData,
               last_round: int | None = None):
    self.runner = runner
    self.data = data
    self.last_round = last_round
    algorithm = runner.algorithm

    def ids(key, rounds):
      probe = lambda r: ServerState(params=None, opt_state=None, round=r,
                                    key=key)
      return jax.lax.map(lambda r: algorithm.cohort_ids(probe(r)), rounds)

    self._ids = jax.jit(ids)
    self._host = jax.devices('cpu')[0]
    self._next = None  # (key bytes, first round, count, device cohorts)

  def cohort_ids(self, key: np.ndarray, first: int, count: int) -> np.ndarray:
    """int32 [count, K]: the cohorts of rounds [first, first + count),
    computed on the host CPU from the root key alone."""
    rounds = np.arange(first, first + count, dtype=np.int32)
    try:
      with jax.default_device(self._host):
        return np.asarray(self._ids(key, rounds))
    except (AttributeError, TypeError) as e:
      raise ValueError(
          f'{self.runner.algorithm.name} draws its cohort from more of the '
          'server state than its key and round, so its cohorts cannot be '
          'fetched ahead; set stream_cohorts=False.') from e

  def _fetch(self, key: np.ndarray, first: int, count: int) -> CohortData:
    """The cohorts of rounds [first, first + count), gathered on the host and
    put on the device (asynchronously)."""
    cohorts = self.data.cohorts(self.cohort_ids(key, first, count))
    if self.runner.mesh is None:
      return jax.device_put(cohorts)
    return sharding.replicate(cohorts, self.runner.mesh)

  def run(self, state: ServerState, num_rounds: int,
          inputs: PyTree = None) -> tuple[ServerState, dict]:
    """`RoundRunner.run` on the streamed data: `num_rounds` rounds from
    `state` (donated), metrics with a leading round axis.

    Raises:
      CohortMismatch: a round planned a client outside its fetched cohort.
    """
    first = int(state.round)
    key = np.asarray(jax.device_get(state.key))  # read before donation
    if self._next is not None and self._next[:3] == (key.tobytes(), first,
                                                     num_rounds):
      cohorts = self._next[3]
    else:
      cohorts = self._fetch(key, first, num_rounds)
    self._next = None
    state, metrics, held = self.runner.run_cohorts(state, cohorts, inputs)
    del cohorts  # the running chunk keeps its buffers until it is done
    after = first + num_rounds
    count = num_rounds if self.last_round is None else min(
        num_rounds, self.last_round - after)
    if count > 0:  # the next chunk's copy overlaps this chunk's compute
      self._next = (key.tobytes(), after, count,
                    self._fetch(key, after, count))
    held = np.asarray(held)
    if not held.all():
      self._next = None
      raise CohortMismatch(
          f'round {first + int(np.argmin(held)) + 1} of '
          f'{self.runner.algorithm.name} planned clients outside the cohort '
          "streamed for it: its plans do not draw the cohort from "
          '`cohort_ids`; override cohort_ids to return the clients a round '
          'reads, or set stream_cohorts=False.')
    return state, metrics
