"""Client sampling inside the compiled round.

All samplers are pure functions of a PRNG key returning int32 client ids of a
static cohort size, so they trace into the round's jit.
"""
import jax
import jax.numpy as jnp


def uniform_without_replacement(key: jax.Array, num_clients: int,
                                cohort_size: int) -> jax.Array:
  """K distinct clients, uniformly at random. Returns int32 [cohort_size]."""
  if cohort_size > num_clients:
    raise ValueError(
        f'cannot sample {cohort_size} distinct clients out of {num_clients}.')
  ids = jax.random.choice(key, num_clients, (cohort_size,), replace=False)
  return ids.astype(jnp.int32)


def uniform_among(key: jax.Array, eligible: jax.Array,
                  cohort_size: int) -> jax.Array:
  """K distinct clients uniformly at random among the `eligible` ones (bool
  [num_clients]). Where fewer than K are eligible, all of them come first and
  the remaining slots hold ineligible clients, for the caller to leave idle.
  Returns int32 [cohort_size]."""
  if cohort_size > eligible.shape[0]:
    raise ValueError(f'cannot sample {cohort_size} distinct clients out of '
                     f'{eligible.shape[0]}.')
  # A uniform random order of the clients (`uniform_without_replacement`'s:
  # with every client eligible, the same cohort in the same slots, so that
  # availability at P(online) = 1 is the run without it bit for bit), then
  # the eligible ones first, each group in that order (a stable sort).
  order = jax.random.permutation(key, eligible.shape[0])
  order = order[jnp.argsort(jnp.where(eligible[order], 0, 1), stable=True)]
  return order[:cohort_size].astype(jnp.int32)


def with_replacement(key: jax.Array, probs: jax.Array,
                     cohort_size: int) -> jax.Array:
  """K i.i.d. draws from `probs` (float [num_clients], sums to 1).

  Returns int32 [cohort_size]; a client may appear several times (FedACS §1.5).
  """
  ids = jax.random.choice(key, probs.shape[0], (cohort_size,), replace=True,
                          p=probs)
  return ids.astype(jnp.int32)

