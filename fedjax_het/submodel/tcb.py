"""TCB-GD: FIARSE's threshold-controlled biased gradient, as a `jax.custom_vjp`.

FIARSE (Wu et al., NeurIPS 2024) trains the submodel x ⊙ M(x) with
M(x) = 1{|x| ≥ θ} (Eq. 2) and differentiates the hard mask with a
straight-through estimator (Eqs. 6–11 of its appendix), which gives Eq. (3):

    ∇_x F(x ⊙ M(x)) = ∇F(x ⊙ M(x)) ⊙ M(x) ⊙ (1 + 2|x|θ / (|x| + θ)²).

Parameters below the threshold get exactly zero gradient; kept ones get the
plain gradient scaled by s = 1 + 2|x|θ/(|x|+θ)² ∈ (1, 1.5] (1.5 at |x| = θ,
→ 1 as |x| → ∞). The threshold receives no gradient. θ = 0 keeps every entry
and its factor is exactly 1 (full-model SGD).

`plain_mask` is the same forward with the plain masked gradient g ⊙ M(x), no
bias factor: what FIARSE's official code computes. Its `Bern.forward`
(`model_utils.py`) returns a bool tensor, PyTorch does not differentiate
through bool outputs of a custom autograd function, so `Bern.backward` (the
Eq. (3) factor) never runs and the mask acts as a constant.
"""
import jax
import jax.numpy as jnp


def tcb_scale(w: jax.Array, theta: jax.Array) -> jax.Array:
  """The gradient factor M(w)·(1 + 2|w|θ/(|w|+θ)²) of Eq. (3), same shape as w."""
  theta = jnp.asarray(theta, w.dtype)
  a = jnp.abs(w)
  total = a + theta
  safe = jnp.where(total > 0, total, 1)
  # 2|w|θ/(|w|+θ)² as a product of two ratios in [0, 1]: no overflow or
  # underflow of the squares for tiny or huge magnitudes.
  bias = jnp.where(total > 0, 2 * (a / safe) * (theta / safe), 0)
  return jnp.where(a >= theta, 1 + bias, 0).astype(w.dtype)


def plain_mask(w: jax.Array, theta: jax.Array) -> jax.Array:
  """w · 1{|w| ≥ θ} differentiated as is: gradient g ⊙ M(w) (FIARSE's code)."""
  return jnp.where(jnp.abs(w) >= jnp.asarray(theta, w.dtype), w,
                   jnp.zeros((), w.dtype))


@jax.custom_vjp
def tcb_mask(w: jax.Array, theta: jax.Array) -> jax.Array:
  """w · 1{|w| ≥ θ} with the TCB-GD gradient of Eq. (3) of FIARSE.

  Args:
    w: parameters, any shape and floating dtype.
    theta: threshold, a scalar or broadcastable to `w` (e.g. one per layer
      group); θ = 0 keeps the whole tensor.

  Returns:
    The masked parameters, shape and dtype of `w`. The VJP is
    g ⊙ M(w) ⊙ (1 + 2|w|θ/(|w|+θ)²) for w and zero for θ.
  """
  return plain_mask(w, theta)


def _tcb_mask_fwd(w, theta):
  return tcb_mask(w, theta), (w, theta)


def _tcb_mask_bwd(residuals, g):
  w, theta = residuals
  return g * tcb_scale(w, theta), jnp.zeros_like(theta)


tcb_mask.defvjp(_tcb_mask_fwd, _tcb_mask_bwd)
