"""Evaluation of a model on a held-out set, compiled and batched.

The test set is split into fixed-size batches. The last batch is filled by
wrapping around to the first examples, and those repeats are masked out of the
metrics. Wrapping (rather than zero padding) keeps batch-statistics norms
(static BN) computed on real images.
"""
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

PyTree = Any


def _batch_totals(apply_fn, params, xs, ys, valid):
  """Correct predictions and summed loss over the valid rows of [nb, B] batches."""

  def one_batch(batch):
    xb, yb, vb = batch
    logits = apply_fn(params, xb)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, yb)
    correct = jnp.argmax(logits, -1) == yb
    return jnp.sum(jnp.where(vb, correct, 0)), jnp.sum(jnp.where(vb, loss, 0))

  correct, loss = jax.lax.map(one_batch, (xs, ys, valid))
  return correct.sum(), loss.sum()


def make_evaluator(apply_fn: Callable[..., jax.Array], x: np.ndarray,
                   y: np.ndarray, batch_size: int) -> Callable[[PyTree], dict]:
  """Builds `evaluate(params) -> {'accuracy', 'loss'}` for one dataset.

  Args:
    apply_fn: `apply_fn(params, x_batch) -> logits [B, num_classes]`.
    x: [n, ...] inputs; y: [n] int labels (kept on device).
    batch_size: evaluation batch size (clipped to n).
  """
  n = int(x.shape[0])
  if n == 0:
    raise ValueError('cannot evaluate on an empty dataset.')
  batch_size = min(batch_size, n)
  num_batches = -(-n // batch_size)
  order = np.arange(num_batches * batch_size)
  valid = jnp.asarray((order < n).reshape(num_batches, batch_size))
  xs = jnp.asarray(x)[order % n].reshape((num_batches, batch_size) + x.shape[1:])
  ys = jnp.asarray(y)[order % n].reshape(num_batches, batch_size)

  @jax.jit
  def evaluate_batches(params, xs, ys, valid):
    correct, loss = _batch_totals(apply_fn, params, xs, ys, valid)
    return {'accuracy': correct / n, 'loss': loss / n}

  # The arrays are arguments, not closures: jit must not bake them in.
  return lambda params: evaluate_batches(params, xs, ys, valid)


def concatenated_shards(data) -> tuple[np.ndarray, np.ndarray]:
  """(x [n, ...], y [n]): the clients' rows of `FederatedData` one client after
  another, in client order (FIARSE's code's global test set)."""
  counts = np.asarray(data.counts)
  x, y = np.asarray(data.x), np.asarray(data.y)
  return (np.concatenate([x[c, :n] for c, n in enumerate(counts)]),
          np.concatenate([y[c, :n] for c, n in enumerate(counts)]))


def make_client_evaluator(apply_fn: Callable[..., jax.Array], data,
                          batch_size: int) -> Callable[..., dict]:
  """Per-client evaluation on local test shards, each with its own model.

  Builds `evaluate(stacked_params, model_of_client) -> {'accuracy', 'loss'}`
  with float [M] per-client values: client c is evaluated with the models'
  entry `model_of_client[c]` of `stacked_params` (leaves [L, ...]), e.g. the
  submodel of its capacity. Each shard is cut into batches of `batch_size`
  that wrap around the client's own rows, as `make_evaluator` does.

  Args:
    apply_fn: `apply_fn(params, x_batch) -> logits`.
    data: `FederatedData` of the local test shards (x [M, N, ...], y, counts).
    batch_size: evaluation batch size (clipped to the longest shard).
  """
  counts = np.asarray(data.counts)
  if counts.min() < 1:
    raise ValueError('every client needs at least one local test example.')
  longest = int(data.x.shape[1])
  batch_size = min(batch_size, longest)
  num_batches = -(-longest // batch_size)
  positions = jnp.arange(num_batches * batch_size)
  x, y = jnp.asarray(data.x), jnp.asarray(data.y)
  counts = jnp.asarray(counts, jnp.int32)

  @jax.jit
  def evaluate_clients(stacked_params, model_of_client, x, y, counts):

    def one_client(c):
      params = jax.tree.map(lambda p: p[model_of_client[c]], stacked_params)
      rows = positions % counts[c]
      valid = (positions < counts[c]).reshape(num_batches, batch_size)
      xs = x[c, rows].reshape((num_batches, batch_size) + x.shape[2:])
      ys = y[c, rows].reshape(num_batches, batch_size)
      correct, loss = _batch_totals(apply_fn, params, xs, ys, valid)
      return correct / counts[c], loss / counts[c]

    accuracy, loss = jax.lax.map(one_client, jnp.arange(counts.shape[0]))
    return {'accuracy': accuracy, 'loss': loss}

  return lambda stacked_params, model_of_client: evaluate_clients(
      stacked_params, jnp.asarray(model_of_client, jnp.int32), x, y, counts)
