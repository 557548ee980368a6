"""What a round charges (bytes, examples, loss) and how the model is
evaluated between rounds."""
from typing import Any, Callable

import jax
import jax.numpy as jnp

from fedjax_het import evaluation
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState
from fedjax_het.data import augment

PyTree = Any


def payload_bytes(params: PyTree) -> jax.Array:
  """Bytes of the full model a client exchanges: Σ_leaves size · itemsize."""
  total = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params))
  return jnp.asarray(total, jnp.float32)


def payload_bytes_per_client(params: PyTree, masks: PyTree) -> jax.Array:
  """Bytes of each client's submodel: float [C], Σ_leaves |mask_c| · itemsize.

  Counts with one matrix-vector product per leaf ([C, size] @ 1 -> [C],
  exact in float32 below 2^24 entries per leaf); a vmapped per-client count
  lowered to a reduction several times slower on CPU.
  """
  def leaf_bytes(p, m):
    rows = (m != 0).reshape(m.shape[0], -1).astype(jnp.float32)
    return rows @ jnp.ones(rows.shape[1], jnp.float32) * p.dtype.itemsize

  return sum(jax.tree.leaves(jax.tree.map(leaf_bytes, params, masks)))


def mean_over_active(values: jax.Array, active: jax.Array) -> jax.Array:
  """Mean of per-slot `values` [K] over the active slots (0 if none)."""
  count = jnp.sum(active)
  return jnp.sum(jnp.where(active, values, 0.0)) / jnp.maximum(count, 1)


class Accounting:
  """`round_metrics` (what the round exchanged and ran), `summary_facts`,
  and the evaluators the trainer calls between rounds."""

  def client_payload_bytes(self, state: ServerState,
                           plans: ClientPlan) -> jax.Array:
    """float [K]: bytes of the (sub)model each planned client exchanges."""
    if plans.mask_table is not None:  # counted once per row of the table
      return payload_bytes_per_client(state.params,
                                      plans.mask_table)[plans.mask_row]
    if plans.mask is None:
      return jnp.full(plans.weight.shape, payload_bytes(state.params))
    return payload_bytes_per_client(state.params, plans.mask)

  def round_metrics(self, state: ServerState, plans: ClientPlan,
                    outputs: ClientOutput) -> dict[str, jax.Array]:
    """Scalars logged per round: loss, examples and bytes exchanged.

    Idle slots exchange nothing and are left out of the mean loss.
    """
    active = plans.is_active()
    per_client_bytes = jnp.where(active,
                                 self.client_payload_bytes(state, plans), 0.0)
    uploaded = plans.delivers()
    return {
        'train_loss': mean_over_active(outputs.loss, active),
        'examples': jnp.sum(outputs.num_examples),
        'bytes_down': jnp.sum(per_client_bytes),
        'bytes_up': jnp.sum(jnp.where(uploaded, per_client_bytes, 0.0)),
    }

  def summary_facts(self) -> dict:
    """Facts of the run's model of the world for summary.json: the parts'
    (on the clock its virtual time and RU, `parts.clock.schedule_facts`; in
    cells the edge channel and its noise model)."""
    return self.parts.facts()

  def evaluator(self, split) -> Callable[[PyTree], dict[str, jax.Array]]:
    """`evaluate(params) -> scalars` logged in metrics.jsonl.

    Must return `accuracy` and `loss` (the headline test metrics); methods add
    their own protocol's scalars (e.g. accuracy per capacity). Default: the
    full model on the global test set (`split` is a `FederatedSplit`), through
    the augmentation's test-time transform (e.g. a centre crop).
    """
    transform = augment.test_transform(self.config.augment)
    return evaluation.make_evaluator(
        lambda p, x: self.model.apply({'params': p}, transform(x)), split.test_x,
        split.test_y, self.config.eval_batch_size)

  def state_evaluator(self, split) -> Callable[[ServerState], dict]:
    """`evaluate(state) -> scalars` the trainer logs: by default the
    `evaluator` on the global params; a method whose clients evaluate their
    own (personalised) models reads `state.clients` too."""
    evaluate = self.evaluator(split)
    return lambda state: evaluate(state.params)
