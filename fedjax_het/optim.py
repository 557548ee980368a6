"""Client optimisers beyond optax's SGD family.

`adan(lr, weight_decay)` is Adan (Xie et al. 2022, Alg. 1) with its proximal
weight decay, the form Co-S²P trains with (timm's `Adan`, `no_prox=False`):

    m_k = (1−β1) m_{k−1} + β1 g_k
    v_k = (1−β2) v_{k−1} + β2 (g_k − g_{k−1})
    n_k = (1−β3) n_{k−1} + β3 [g_k + (1−β2)(g_k − g_{k−1})]²
    θ_{k+1} = (θ_k − η (m̂_k + (1−β2) v̂_k) / (√n̂_k + ε)) / (1 + λη)

(hats: bias-corrected; g_0 − g_{−1} := 0), with the paper's β1, β2, β3 =
0.02, 0.08, 0.01, i.e. optax's decay rates b = 1 − β = 0.98, 0.92, 0.99.
optax.adan's own weight decay is the decoupled θ ← θ − η(u + λθ) instead,
and its `scale_by_adan` (≤ 0.2.8) weighs g_k − g_{k−1} by β2 where Alg. 1 and
timm use 1 − β2 (google-deepmind/optax#1715), so `scale_by_adan` here is ours.
"""
import jax
import jax.numpy as jnp
import optax


def scale_by_adan(b1: float = 0.98, b2: float = 0.92, b3: float = 0.99,
                  eps: float = 1e-8) -> optax.GradientTransformation:
  """Adan's direction (m̂_k + (1−β2) v̂_k) / (√n̂_k + ε), decay rates b = 1 − β.

  optax.scale_by_adan's state and interface, with Alg. 1's weight b2 = 1 − β2
  on the gradient difference and no ε inside the root (as timm).
  """

  def init(params):
    zeros = lambda: jax.tree.map(jnp.zeros_like, params)
    return optax.ScaleByAdanState(m=zeros(), v=zeros(), n=zeros(), g=zeros(),
                                  t=jnp.zeros([], jnp.int32))

  def update(updates, state, params=None):
    del params
    first = state.t == 0
    diff = jax.tree.map(lambda g, prev: jnp.where(first, jnp.zeros_like(g),
                                                  g - prev), updates, state.g)
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.m, updates)
    v = jax.tree.map(lambda v, d: b2 * v + (1 - b2) * d, state.v, diff)
    n = jax.tree.map(lambda n, g, d: b3 * n + (1 - b3) * jnp.square(g + b2 * d),
                     state.n, updates, diff)
    t = optax.safe_increment(state.t)
    c1, c2, c3 = (1 - b ** t for b in (b1, b2, b3))

    def direction(m, v, n):
      return ((m / c1.astype(m.dtype) + b2 * v / c2.astype(v.dtype)) /
              (jnp.sqrt(n / c3.astype(n.dtype)) + eps))

    return jax.tree.map(direction, m, v, n), optax.ScaleByAdanState(
        m=m, v=v, n=n, g=updates, t=t)

  return optax.GradientTransformation(init, update)


def proximal_weight_decay(lr, weight_decay: float
                          ) -> optax.GradientTransformation:
  """Turns a step −η·u (the incoming updates) into θ' = (θ − η·u)/(1 + λη)."""

  def update(updates, state, params):
    shrink = 1.0 / (1.0 + lr * weight_decay)
    return jax.tree.map(lambda u, p: (p + u) * shrink - p, updates,
                        params), state

  return optax.GradientTransformation(lambda params: optax.EmptyState(),
                                      update)


def adan(lr, weight_decay: float = 0.0) -> optax.GradientTransformation:
  """Adan with proximal weight decay (module docstring)."""
  return optax.chain(scale_by_adan(), optax.scale_by_learning_rate(lr),
                     proximal_weight_decay(lr, weight_decay))
