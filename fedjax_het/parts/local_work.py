"""Local work of a client: steps it runs and the accumulation norm ‖a_m‖₁.

A client that runs a local solver for S steps from the global model X sends

    U_m = −η Δ_m,   Δ_m = Σ_t a_{m,t} ∇F_m(X^{t−1} | ξ^t)   (Eq. (2) of FedACS),

where the vector a_m of per-gradient weights depends on the solver. Its
1-norm ‖a_m‖₁ is the "structural" factor by which a client's local work
scales its update, and what FedACS's sampling (Eq. (15)), FedNova's
normalisation and the step-length calibration (App. I.2) divide by. The
closed forms are those of FedNova (Wang et al., 2020, §4 and App.):

- SGD: a = (1, …, 1), ‖a‖₁ = S.
- heavy-ball momentum ρ (optax.sgd's trace v ← ρv + g):
  a_t = (1 − ρ^{S−t+1})/(1 − ρ), ‖a‖₁ = [S − ρ(1 − ρ^S)/(1 − ρ)]/(1 − ρ).
- proximal SGD, FedProx's local solver with ½μ‖x − X‖²:
  a_t = (1 − ημ)^{S−t}, ‖a‖₁ = [1 − (1 − ημ)^S]/(ημ).
- SGD with a decayed learning rate: FedNova's a_t = η_t/η, the step's rate
  over the round's base rate. FedACS's toy (Fig. 4) gives only "decay rate
  0.005"; the reading here is a geometric decay per local step that restarts
  every round, η_t = η(1 − d)^t for steps t = 0, …, S − 1, so
  a_t = (1 − d)^t and ‖a‖₁ = Σ_{t<S} (1 − d)^t = [1 − (1 − d)^S]/d.
"""
import jax
import jax.numpy as jnp
import numpy as np

WORK_UNITS = ('steps', 'epochs')


def steps_per_unit(unit: str, client_counts: np.ndarray,
                   batch_size: int) -> np.ndarray:
  """Optimiser steps in one unit of local work, per client. int64 [M].

  'steps': 1; 'epochs': ⌈n_m / B⌉ (one pass over the client's n_m examples
  in batches of B, the last batch topped up by the next epoch's shuffle).
  """
  if unit not in WORK_UNITS:
    raise ValueError(f'systems.work_unit must be one of '
                     f'{", ".join(WORK_UNITS)}, got {unit!r}.')
  counts = np.asarray(client_counts, np.int64)
  if unit == 'steps':
    return np.ones_like(counts)
  return -(-counts // batch_size)


def _geometric_sum(ratio, s: jax.Array) -> jax.Array:
  """Σ_{t<S} r^t = (1 − r^S)/(1 − r) for a ratio r ≠ 1; shaped like s."""
  return (1 - ratio**s) / (1 - ratio)


def accumulation_norm(steps: jax.Array, lr, *, momentum: float = 0.0,
                      prox_mu: float = 0.0, lr_decay: float = 0.0) -> jax.Array:
  """‖a‖₁ of the local solver after `steps` steps; float32, shaped like steps.

  Args:
    steps: int array of local optimiser steps S (≥ 0).
    lr: client learning rate η (only the proximal form depends on it).
    momentum: heavy-ball momentum ρ in [0, 1).
    prox_mu: FedProx coefficient μ ≥ 0.
    lr_decay: per-step decay d in [0, 1) of the learning rate within a round.

  Raises:
    ValueError: more than one of momentum, a proximal term and a decayed lr
      (FedNova gives no closed form for a combination).
  """
  s = jnp.asarray(steps, jnp.float32)
  if sum(bool(v) for v in (momentum, prox_mu, lr_decay)) > 1:
    raise ValueError('momentum, a proximal term and a decayed lr have no '
                     'closed-form ‖a‖₁ in combination; use one local solver at '
                     'a time.')
  if momentum:
    rho = momentum
    return (s - rho * (1 - rho**s) / (1 - rho)) / (1 - rho)
  if prox_mu:
    return _geometric_sum(1 - jnp.asarray(lr, jnp.float32) * prox_mu, s)
  if lr_decay:
    return _geometric_sum(jnp.float32(1 - lr_decay), s)
  return s
