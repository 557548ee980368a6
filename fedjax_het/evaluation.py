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

from fedjax_het.data import text

PyTree = Any


def capacity_key(gamma: float) -> str:
  """Metric-name form of a submodel capacity γ, e.g. 0.015625 -> '0.015625',
  1.0 -> '1': a method evaluating each capacity logs 'accuracy@<key>' (and
  'local_accuracy@', 'unparticipated_accuracy@'), which comparisons read."""
  return f'{gamma:g}'


def cross_entropy(logits: jax.Array, y: jax.Array) -> jax.Array:
  """Mean softmax cross-entropy of a batch: labels y [B] with logits [B, C], or next-token
  targets y [B, L] with logits [B, L, C], whose PAD targets count zero in a mean over B·L
  (FedJAX's Shakespeare `train_loss`: per-token loss × (y ≠ PAD), mean over the sequence,
  then over the batch)."""
  loss = optax.softmax_cross_entropy_with_integer_labels(logits, y)
  if y.ndim > 1:
    loss = jnp.where(y != text.PAD, loss, 0.0)
  return loss.mean()


def _batch_totals(apply_fn, params, xs, ys, valid, extended: bool = False):
  """Sums over the valid rows of [nb, B] batches: correct predictions and
  loss; with `extended`, also top-5 hits and the per-class counts of true
  positives, predictions and labels (float [C] each) for the F1 score.

  Next-token targets ([nb, B, L] labels) are summed per token: the loss over
  targets other than PAD ('loss_tokens' of them), the accuracy over targets
  other than PAD and EOS ('tokens'), as `fedjax_het.data.text` defines them.
  """

  def one_batch(batch):
    xb, yb, vb = batch
    logits = apply_fn(params, xb)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, yb)
    predicted = jnp.argmax(logits, -1)
    if yb.ndim > 1:
      if extended:
        raise ValueError('top-5 and F1 are defined for class labels, not '
                         'next-token targets.')
      scored = vb[:, None] & (yb != text.PAD)
      counted = scored & (yb != text.EOS)
      return {'correct': jnp.sum(jnp.where(counted, predicted == yb, 0)),
              'tokens': jnp.sum(counted),
              'loss': jnp.sum(jnp.where(scored, loss, 0)),
              'loss_tokens': jnp.sum(scored)}
    sums = {'correct': jnp.sum(jnp.where(vb, predicted == yb, 0)),
            'loss': jnp.sum(jnp.where(vb, loss, 0))}
    if extended:
      k = min(5, logits.shape[-1])
      top = jax.lax.top_k(logits, k)[1]
      sums['top5'] = jnp.sum(jnp.where(vb, jnp.any(top == yb[:, None], -1), 0))
      classes = jnp.arange(logits.shape[-1])
      hit = (predicted == yb) & vb
      sums['tp'] = jnp.sum(jnp.where(hit[:, None], yb[:, None] == classes, 0),
                           0)
      sums['predicted'] = jnp.sum(
          jnp.where(vb[:, None], predicted[:, None] == classes, 0), 0)
      sums['actual'] = jnp.sum(
          jnp.where(vb[:, None], yb[:, None] == classes, 0), 0)
    return sums

  return jax.tree.map(lambda x: x.sum(0), jax.lax.map(one_batch,
                                                      (xs, ys, valid)))


def _metrics(totals: dict, n) -> dict:
  """accuracy and loss (and top5_accuracy, f1_weighted) from `_batch_totals`;
  per token for next-token targets.

  Weighted F1 = Σ_c (support_c / n) · 2·TP_c / (predicted_c + support_c),
  scikit-learn's 'weighted' average (a class never predicted nor present
  scores 0 and weighs 0).
  """
  if 'tokens' in totals:  # next-token targets: means over the scored tokens
    return {'accuracy': totals['correct'] / jnp.maximum(totals['tokens'], 1),
            'loss': totals['loss'] / jnp.maximum(totals['loss_tokens'], 1)}
  out = {'accuracy': totals['correct'] / n, 'loss': totals['loss'] / n}
  if 'tp' in totals:
    out['top5_accuracy'] = totals['top5'] / n
    denominator = totals['predicted'] + totals['actual']
    f1 = jnp.where(denominator > 0, 2.0 * totals['tp'] /
                   jnp.maximum(denominator, 1), 0.0)
    out['f1_weighted'] = jnp.sum(f1 * totals['actual']) / n
  return out


def make_evaluator(apply_fn: Callable[..., jax.Array], x: np.ndarray,
                   y: np.ndarray, batch_size: int, *,
                   extended: bool = False) -> Callable[[PyTree], dict]:
  """Builds `evaluate(params) -> {'accuracy', 'loss'}` for one dataset.

  Args:
    apply_fn: `apply_fn(params, x_batch) -> logits [B, num_classes]`.
    x: [n, ...] inputs; y: [n] int labels, or [n, L] next-token targets
      (accuracy and loss per token, `_batch_totals`) (kept on device).
    batch_size: evaluation batch size (clipped to n).
    extended: also 'top5_accuracy' and 'f1_weighted' (`_metrics`).
  """
  n = int(x.shape[0])
  if n == 0:
    raise ValueError('cannot evaluate on an empty dataset.')
  batch_size = min(batch_size, n)
  num_batches = -(-n // batch_size)
  order = np.arange(num_batches * batch_size)
  valid = jnp.asarray((order < n).reshape(num_batches, batch_size))
  xs = jnp.asarray(x)[order % n].reshape((num_batches, batch_size) + x.shape[1:])
  ys = jnp.asarray(y)[order % n].reshape((num_batches, batch_size) + y.shape[1:])

  @jax.jit
  def evaluate_batches(params, xs, ys, valid):
    return _metrics(_batch_totals(apply_fn, params, xs, ys, valid, extended),
                    n)

  # The arrays are arguments, not closures: jit must not bake them in.
  return lambda params: evaluate_batches(params, xs, ys, valid)


def concatenated_shards(data) -> tuple[np.ndarray, np.ndarray]:
  """(x [n, ...], y [n]): the clients' rows of `FederatedData` or `RaggedData`
  one client after another, in client order (FIARSE's code's global test set)."""
  ragged = data.ragged()
  return np.asarray(ragged.x), np.asarray(ragged.y)


def make_personal_evaluator(apply_fn: Callable[..., jax.Array], data,
                            batch_size: int, *, extended: bool = False
                            ) -> Callable[..., dict]:
  """Per-client evaluation on local test shards, each with a model of its own.

  Builds `evaluate(shared, rows) -> metrics` with float [M] values per
  client (`make_evaluator`'s names): client c's logits are
  `apply_fn(shared, row_c, x_batch)` where `row_c` is row c of `rows`
  (leaves [M, ...], e.g. personalised masks and heads) and `shared` is the
  same for all (e.g. the global params). Each shard is cut into batches of
  `batch_size` that wrap around the client's own rows, as `make_evaluator`
  does.

  Args:
    apply_fn: `apply_fn(shared, row, x_batch) -> logits`.
    data: `FederatedData` or `RaggedData` of the local test shards (counts
      [M], a client's rows read by `data.examples`).
    batch_size: evaluation batch size (clipped to the longest shard).
    extended: also 'top5_accuracy' and 'f1_weighted'.
  """
  if np.asarray(data.counts).min() < 1:
    raise ValueError('every client needs at least one local test example.')
  longest = int(data.max_examples)
  batch_size = min(batch_size, longest)
  num_batches = -(-longest // batch_size)
  positions = jnp.arange(num_batches * batch_size)
  data = jax.device_put(data)

  @jax.jit
  def evaluate_clients(shared, rows, data):
    counts = jnp.asarray(data.counts, jnp.int32)

    def one_client(c):
      row = jax.tree.map(lambda r: r[c], rows)
      rows_c = positions % counts[c]
      valid = (positions < counts[c]).reshape(num_batches, batch_size)
      xs, ys = data.examples(c, rows_c)
      xs = xs.reshape((num_batches, batch_size) + xs.shape[1:])
      ys = ys.reshape((num_batches, batch_size) + ys.shape[1:])
      totals = _batch_totals(lambda p, xb: apply_fn(shared, p, xb), row, xs,
                             ys, valid, extended)
      return _metrics(totals, counts[c])

    return jax.lax.map(one_client, jnp.arange(counts.shape[0]))

  return lambda shared, rows: evaluate_clients(shared, rows, data)


def make_client_evaluator(apply_fn: Callable[..., jax.Array], data,
                          batch_size: int) -> Callable[..., dict]:
  """Per-client evaluation on local test shards with one of several models.

  Builds `evaluate(stacked_params, model_of_client) -> {'accuracy', 'loss'}`
  with float [M] per-client values: client c is evaluated with the models'
  entry `model_of_client[c]` of `stacked_params` (leaves [L, ...]), e.g. the
  submodel of its capacity (`make_personal_evaluator` with the stack shared).

  Args:
    apply_fn: `apply_fn(params, x_batch) -> logits`.
    data: `FederatedData` or `RaggedData` of the local test shards.
    batch_size: evaluation batch size (clipped to the longest shard).
  """
  evaluate = make_personal_evaluator(
      lambda stacked, model, xb: apply_fn(
          jax.tree.map(lambda p: p[model], stacked), xb), data, batch_size)
  return lambda stacked_params, model_of_client: evaluate(
      stacked_params, jnp.asarray(model_of_client, jnp.int32))
