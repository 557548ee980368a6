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

    def one_batch(batch):
      xb, yb, vb = batch
      logits = apply_fn(params, xb)
      loss = optax.softmax_cross_entropy_with_integer_labels(logits, yb)
      correct = jnp.argmax(logits, -1) == yb
      return jnp.sum(jnp.where(vb, correct, 0)), jnp.sum(jnp.where(vb, loss, 0))

    correct, loss = jax.lax.map(one_batch, (xs, ys, valid))
    return {'accuracy': correct.sum() / n, 'loss': loss.sum() / n}

  # The arrays are arguments, not closures: jit must not bake them in.
  return lambda params: evaluate_batches(params, xs, ys, valid)
