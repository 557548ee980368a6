"""Evaluation of one global structured submodel of a ViT (FedPM, PruneFL).

The server model is the global params with unit masks {kind: [L, U]} (1
keeps; `models.vit`) read from the server state; it is evaluated on the
test set (Top-1/Top-5/weighted F1 of the deepest exit) and, with
`local_test`, on every client's local test split (the same model for all,
averaged weighted by the split sizes, as `client_*` like Co-S²P's
personalised metrics).
"""
from typing import Any, Callable

import jax.numpy as jnp
import numpy as np

from fedjax_het import evaluation
from fedjax_het.core.state import ServerState

PyTree = Any


def global_mask_evaluator(model, split, batch_size: int,
                          units_of: Callable[[ServerState], dict]
                          ) -> Callable[[ServerState], dict]:
  """`evaluate(state) -> metrics` of the params under `units_of(state)`."""
  apply = lambda pu, x: model.apply({'params': pu[0]}, x, units=pu[1])
  server = evaluation.make_evaluator(apply, split.test_x, split.test_y,
                                     batch_size, extended=True)
  if split.local_test is None:
    return lambda state: server((state.params, units_of(state)))
  clients = evaluation.make_personal_evaluator(
      lambda shared, row, x: apply(shared, x), split.local_test, batch_size,
      extended=True)
  weights = np.asarray(split.local_test.counts, np.float64)
  weights = weights / weights.sum()
  rows = jnp.zeros((len(weights),))

  def evaluate(state):
    shared = (state.params, units_of(state))
    out = dict(server(shared))
    for name, values in clients(shared, rows).items():
      out[f'client_{name}'] = float(np.dot(weights, np.asarray(values)))
    return out

  return evaluate
