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


def with_replacement(key: jax.Array, probs: jax.Array,
                     cohort_size: int) -> jax.Array:
  """K i.i.d. draws from `probs` (float [num_clients], sums to 1).

  Returns int32 [cohort_size]; a client may appear several times (FedACS §1.5).
  """
  ids = jax.random.choice(key, probs.shape[0], (cohort_size,), replace=True,
                          p=probs)
  return ids.astype(jnp.int32)

