"""Client optimisers beyond optax's SGD family.

`adan(lr, weight_decay)` is Adan (Xie et al. 2022, Alg. 1) with its proximal
weight decay, the form Co-S²P trains with (timm's `Adan`, `no_prox=False`):

    m_k = (1−β1) m_{k−1} + β1 g_k
    v_k = (1−β2) v_{k−1} + β2 (g_k − g_{k−1})
    n_k = (1−β3) n_{k−1} + β3 [g_k + (1−β2)(g_k − g_{k−1})]²
    θ_{k+1} = (θ_k − η (m̂_k + (1−β2) v̂_k) / (√n̂_k + ε)) / (1 + λη)

(hats: bias-corrected; g_0 − g_{−1} := 0), with the paper's β1, β2, β3 =
0.02, 0.08, 0.01, i.e. optax's decay rates b = 1 − β = 0.98, 0.92, 0.99.
optax.adan's own weight decay is the decoupled θ ← θ − η(u + λθ) instead.
"""
import jax
import optax


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
  return optax.chain(optax.scale_by_adan(), optax.scale_by_learning_rate(lr),
                     proximal_weight_decay(lr, weight_decay))
