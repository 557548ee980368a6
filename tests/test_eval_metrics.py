"""Evaluation metrics (accuracy, loss, top-5, F1) against numpy and sklearn."""
import jax
import numpy as np
import pytest
from sklearn.metrics import f1_score

from fedjax_het import evaluation
from fedjax_het.data.federated import FederatedData

C, F = 10, 6


def linear(w, x):
  return x @ w


def reference(logits, y):
  """{'accuracy', 'loss', 'top5_accuracy', 'f1_weighted'} in numpy."""
  logits = np.asarray(logits, np.float64)
  z = logits - logits.max(-1, keepdims=True)
  log_p = z - np.log(np.exp(z).sum(-1, keepdims=True))
  top5 = np.argsort(-logits, -1)[:, :5]
  predicted = logits.argmax(-1)
  return {'accuracy': np.mean(predicted == y),
          'loss': -np.mean(log_p[np.arange(len(y)), y]),
          'top5_accuracy': np.mean((top5 == y[:, None]).any(-1)),
          'f1_weighted': f1_score(y, predicted, average='weighted',
                                  zero_division=0)}


def _data(n, seed):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((n, F)).astype(np.float32)
  y = rng.integers(0, C, n).astype(np.int32)
  w = rng.standard_normal((F, C)).astype(np.float32)
  return x, y, w


@pytest.mark.parametrize('n,batch_size', [(37, 8), (37, 37), (5, 64),
                                          (23, 4)])
def test_extended_metrics_match_numpy_and_sklearn(n, batch_size):
  x, y, w = _data(n, seed=n + batch_size)
  got = evaluation.make_evaluator(linear, x, y, batch_size, extended=True)(w)
  assert set(got) == {'accuracy', 'loss', 'top5_accuracy', 'f1_weighted'}
  want = reference(x @ w, y)
  for k, v in want.items():
    np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-6, err_msg=k)
  if n > 20:    # not degenerate: top-5 counts more than top-1
    assert 0 < want['accuracy'] < want['top5_accuracy'] < 1
  plain = evaluation.make_evaluator(linear, x, y, batch_size)(w)
  assert set(plain) == {'accuracy', 'loss'}
  np.testing.assert_allclose(plain['accuracy'], got['accuracy'], rtol=1e-6)


def test_wrapped_rows_are_not_counted_twice():
  # 9 examples in batches of 4: the last batch repeats examples 0..2. Make
  # exactly the repeated ones correct; double counting would give 6/9.
  x, y, w = _data(9, seed=0)
  predicted = np.asarray((x @ w).argmax(-1))
  y = np.where(np.arange(9) < 3, predicted, (predicted + 1) % C)
  got = evaluation.make_evaluator(linear, x, y, 4, extended=True)(w)
  np.testing.assert_allclose(got['accuracy'], 3 / 9, rtol=1e-6)
  np.testing.assert_allclose(got['f1_weighted'],
                             reference(x @ w, y)['f1_weighted'], rtol=1e-5)


def test_f1_with_absent_and_never_predicted_classes():
  # Classes 0..2 only in the labels, predictions spread over 10 classes.
  x, _, w = _data(30, seed=3)
  y = np.random.default_rng(4).integers(0, 3, 30).astype(np.int32)
  got = evaluation.make_evaluator(linear, x, y, 7, extended=True)(w)
  np.testing.assert_allclose(got['f1_weighted'],
                             reference(x @ w, y)['f1_weighted'], rtol=1e-5,
                             atol=1e-7)
  # All correct: F1 1, whatever the classes present.
  got = evaluation.make_evaluator(linear, x, np.asarray((x @ w).argmax(-1)),
                                  7, extended=True)(w)
  np.testing.assert_allclose(got['f1_weighted'], 1.0, rtol=1e-6)


def _federated(counts, max_rows, seed):
  """FederatedData whose padding rows hold garbage (they must be ignored)."""
  rng = np.random.default_rng(seed)
  m = len(counts)
  return FederatedData(
      x=rng.standard_normal((m, max_rows, F)).astype(np.float32),
      y=rng.integers(0, C, (m, max_rows)).astype(np.int32),
      counts=np.asarray(counts, np.int32))


def test_personal_evaluator_uses_each_clients_rows_and_model():
  data = _federated([9, 4, 1, 6], 9, seed=5)
  rng = np.random.default_rng(6)
  shared = rng.standard_normal((F, C)).astype(np.float32)
  rows = {'w': rng.standard_normal((4, F, C)).astype(np.float32),
          'scale': np.asarray([1.0, -2.0, 0.5, 3.0], np.float32)}
  apply_fn = lambda s, r, xb: xb @ (s + r['w']) * r['scale']
  got = evaluation.make_personal_evaluator(apply_fn, data, 4,
                                           extended=True)(shared, rows)
  assert set(got) == {'accuracy', 'loss', 'top5_accuracy', 'f1_weighted'}
  for k, v in got.items():
    assert v.shape == (4,), k
  for c, n in enumerate(data.counts):
    x, y = data.x[c, :n], data.y[c, :n]
    want = reference(x @ (shared + rows['w'][c]) * rows['scale'][c], y)
    for k, v in want.items():
      np.testing.assert_allclose(got[k][c], v, rtol=1e-5, atol=1e-6,
                                 err_msg=f'client {c} {k}')
  # Another client's model gives other numbers (the rows are really used).
  swapped = jax.tree.map(lambda r: r[::-1], rows)
  other = evaluation.make_personal_evaluator(apply_fn, data, 4)(shared,
                                                                swapped)
  assert not np.allclose(other['loss'], got['loss'])


def test_personal_evaluator_rejects_empty_clients():
  data = _federated([3, 0], 3, seed=0)
  with pytest.raises(ValueError, match='at least one local test example'):
    evaluation.make_personal_evaluator(linear, data, 2)


def test_client_evaluator_picks_each_clients_model():
  data = _federated([5, 2, 7], 7, seed=7)
  rng = np.random.default_rng(8)
  stacked = {'w': rng.standard_normal((2, F, C)).astype(np.float32)}
  apply_fn = lambda p, xb: xb @ p['w']
  which = np.asarray([1, 0, 1])
  got = evaluation.make_client_evaluator(apply_fn, data, 3)(stacked, which)
  assert set(got) == {'accuracy', 'loss'}
  for c, n in enumerate(data.counts):
    x, y = data.x[c, :n], data.y[c, :n]
    want = reference(x @ stacked['w'][which[c]], y)
    for k in ('accuracy', 'loss'):
      np.testing.assert_allclose(got[k][c], want[k], rtol=1e-5, atol=1e-6,
                                 err_msg=f'client {c} {k}')
