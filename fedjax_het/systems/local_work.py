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


def accumulation_norm(steps: jax.Array, lr, *, momentum: float = 0.0,
                      prox_mu: float = 0.0) -> jax.Array:
  """‖a‖₁ of the local solver after `steps` steps; float32, shaped like steps.

  Args:
    steps: int array of local optimiser steps S (≥ 0).
    lr: client learning rate η (only the proximal form depends on it).
    momentum: heavy-ball momentum ρ in [0, 1).
    prox_mu: FedProx coefficient μ ≥ 0.

  Raises:
    ValueError: momentum and a proximal term together (FedNova gives no
      closed form for the combination).
  """
  s = jnp.asarray(steps, jnp.float32)
  if momentum and prox_mu:
    raise ValueError('momentum and a proximal term together have no closed-form '
                     '‖a‖₁; use one local solver at a time.')
  if momentum:
    rho = momentum
    return (s - rho * (1 - rho**s) / (1 - rho)) / (1 - rho)
  if prox_mu:
    decay = 1 - jnp.asarray(lr, jnp.float32) * prox_mu
    return (1 - decay**s) / (1 - decay)
  return s
