"""Adan with proximal weight decay against a numpy transcription of Alg. 1."""
import jax
import numpy as np
import optax
import pytest

from fedjax_het import optim

BETA1, BETA2, BETA3, EPS = 0.02, 0.08, 0.01, 1e-8


def _gradients(steps=4, seed=0, scale=1.0):
  rng = np.random.default_rng(seed)
  return [scale * rng.standard_normal(5) for _ in range(steps)]


def numpy_adan(theta, grads, lr, weight_decay, diff_weight=1 - BETA2):
  """Xie et al. 2022, Alg. 1 with bias correction; returns every iterate.

  `diff_weight` is the weight of g_k − g_{k−1} in n_k and in the step, 1 − β2
  in Alg. 1 (β2 reproduces optax.scale_by_adan <= 0.2.8).
  """
  theta = np.asarray(theta, np.float64)
  m = v = n = np.zeros_like(theta)
  previous = None
  out = []
  for k, g in enumerate(grads, start=1):
    diff = np.zeros_like(g) if previous is None else g - previous
    m = (1 - BETA1) * m + BETA1 * g
    v = (1 - BETA2) * v + BETA2 * diff
    n = (1 - BETA3) * n + BETA3 * (g + diff_weight * diff) ** 2
    m_hat = m / (1 - (1 - BETA1) ** k)
    v_hat = v / (1 - (1 - BETA2) ** k)
    n_hat = n / (1 - (1 - BETA3) ** k)
    step = (m_hat + diff_weight * v_hat) / (np.sqrt(n_hat) + EPS)
    theta = (theta - lr * step) / (1 + weight_decay * lr)
    previous = g
    out.append(theta)
  return out


def run_optax(tx, theta, grads):
  """Iterates of `tx` fed the fixed gradient sequence `grads`."""
  params = {'w': np.asarray(theta, np.float32)}
  state = tx.init(params)
  update = jax.jit(tx.update)
  out = []
  for g in grads:
    updates, state = update({'w': np.asarray(g, np.float32)}, state, params)
    params = optax.apply_updates(params, updates)
    out.append(np.asarray(params['w']))
  return out


THETA = np.array([0.5, -1.0, 2.0, 0.0, 3.0])


@pytest.mark.parametrize('lr,weight_decay', [(0.1, 0.0), (0.05, 0.3),
                                             (0.3, 0.02)])
def test_adan_matches_algorithm_1(lr, weight_decay):
  grads = _gradients()
  got = run_optax(optim.adan(lr, weight_decay), THETA, grads)
  want = numpy_adan(THETA, grads, lr, weight_decay)
  for k, (a, b) in enumerate(zip(got, want)):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6, err_msg=f'step {k}')
  # The steps are not trivial, and the gradient difference's weight shows.
  assert np.abs(got[-1] - THETA).max() > lr
  wrong = numpy_adan(THETA, grads, lr, weight_decay, diff_weight=BETA2)
  assert np.abs(got[1] - wrong[1]).max() > 1e-3


def test_adan_direction_versus_optax():
  lr = 0.1
  grads = _gradients(seed=1)
  ours = run_optax(optim.adan(lr), THETA, grads)
  theirs = run_optax(optax.adan(lr, eps_root=0.0), THETA, grads)
  # Same first step (g_1 − g_0 := 0), then optax weighs the gradient
  # difference by β2 instead of 1 − β2 (google-deepmind/optax#1715).
  np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6, atol=1e-7)
  assert np.abs(ours[1] - theirs[1]).max() > 1e-3
  for a, b in zip(theirs, numpy_adan(THETA, grads, lr, 0.0,
                                     diff_weight=BETA2)):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
  # A drop-in replacement: optax's state type and structure.
  params = {'w': np.zeros(3, np.float32), 'b': np.zeros((2, 2), np.float32)}
  state = optim.scale_by_adan().init(params)
  assert isinstance(state, optax.ScaleByAdanState)
  assert jax.tree.structure(state) == jax.tree.structure(
      optax.scale_by_adan().init(params))


def test_adan_has_no_eps_inside_the_root():
  # optax.adan's default eps_root=1e-8 is a different optimiser (visible with
  # tiny gradients); Alg. 1 and timm have no eps inside the root.
  lr = 0.1
  tiny = _gradients(seed=1, scale=1e-6)
  got = run_optax(optim.adan(lr), THETA, tiny)
  np.testing.assert_allclose(got[-1], numpy_adan(THETA, tiny, lr, 0.0)[-1],
                             rtol=1e-5)
  default = run_optax(optax.adan(lr), THETA, tiny)
  assert np.abs(default[0] - got[0]).max() > 0.1 * lr


def test_proximal_decay_differs_from_decoupled_by_lr_squared():
  weight_decay = 0.5
  grads = _gradients(seed=2)
  gaps = []
  for lr in (0.02, 0.01, 0.005):
    ours = run_optax(optim.adan(lr, weight_decay), THETA, grads)
    # optax.adan's decoupled decay θ − η(u + λθ), on the same direction u.
    decoupled = run_optax(optax.chain(
        optim.scale_by_adan(), optax.add_decayed_weights(weight_decay),
        optax.scale_by_learning_rate(lr)), THETA, grads)
    first = run_optax(optax.adan(lr, eps_root=0.0, weight_decay=weight_decay),
                      THETA, grads[:1])
    np.testing.assert_allclose(decoupled[0], first[0], rtol=1e-6, atol=1e-7)
    # One step from the same point: the gap is exactly
    # (λη²u + λ²η²θ) / (1 + λη), u the Adan direction.
    u = (THETA - numpy_adan(THETA, grads[:1], lr, 0.0)[0]) / lr
    want = (weight_decay * lr**2 * u + weight_decay**2 * lr**2 * THETA) / (
        1 + weight_decay * lr)
    np.testing.assert_allclose(ours[0] - decoupled[0], want, rtol=1e-2,
                               atol=1e-6)
    gap = np.abs(ours[-1] - decoupled[-1]).max()
    assert gap > 0
    gaps.append(gap / (lr**2 * weight_decay))
  # O(η²λ): the scaled gap stays bounded (and roughly constant) as η shrinks.
  assert max(gaps) < 50
  assert max(gaps) / min(gaps) < 1.5
