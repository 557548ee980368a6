"""Self-distillation across the exits of a multi-exit model (ScaleFL, Co-S²P).

`exit_terms` gives every exit's cross-entropy and its distillation term
against one teacher exit; each method weighs them its own way:

- ScaleFL: Σ_j j·ℓ_j / Σ_j j with ℓ_s = CE at the teacher s and
  ℓ_j = (1 − g)·CE_j + g·KD_j below it (`algorithms.scalefl`);
- Co-S²P Eq. 3: Σ_{i ∈ exits} (1 − λ2)·CE_i + λ2·KD_i (`algorithms.cos2p`).

KD_j = T²·KL between the tempered softmaxes, summed over classes and
averaged over the batch, with the teacher held constant (stop-gradient).
'standard' is KL(teacher ‖ student) (BYOT, both papers' code); 'paper' is
Co-S²P's Eq. 3 as written, Σ σ(ŷ_j/t) ln(σ(ŷ_j/t) / σ(ŷ_c/t)) =
KL(student ‖ teacher).
"""
import jax
import jax.numpy as jnp
import optax

KD_DIRECTIONS = ('standard', 'paper')


def exit_terms(logits: jax.Array, labels: jax.Array, teacher: jax.Array,
               temperature: float, direction: str = 'standard'
               ) -> tuple[jax.Array, jax.Array]:
  """(CE [E], KD [E]) of every exit of one batch.

  Args:
    logits: [E, B, classes], one row per exit.
    labels: int [B].
    teacher: int scalar, the teacher exit's row (its KD term is 0).
    temperature: T.
    direction: 'standard' or 'paper' (module docstring).
  """
  if direction not in KD_DIRECTIONS:
    raise ValueError(f'direction must be one of {KD_DIRECTIONS}, got '
                     f'{direction!r}.')
  ce = optax.softmax_cross_entropy_with_integer_labels(
      logits, labels[None]).mean(axis=-1)
  student = jax.nn.log_softmax(logits / temperature)
  target = jnp.broadcast_to(jax.nn.log_softmax(jax.lax.stop_gradient(
      logits[teacher]) / temperature), student.shape)
  if direction == 'paper':
    student, target = target, student
  kd = optax.losses.kl_divergence_with_log_targets(student, target)
  return ce, temperature**2 * kd.mean(axis=-1)
