"""Minibatch sampling inside jit from padded per-client arrays.

A client's valid rows are `0 .. count-1` of its padded array. Local training
walks through them in epochs: each epoch is a fresh random permutation of the
valid rows, and step s takes positions `s·B .. s·B + B − 1` of the
concatenated epochs (like a shuffling DataLoader with `drop_last=False` whose
batches may straddle an epoch boundary, so every batch has exactly B rows).
Nothing runs on the host per client or per round.
"""
import math

import jax
import jax.numpy as jnp


def epochs_per_batch(batch_size: int, min_count: int) -> int:
  """Static bound on how many epochs one batch of `batch_size` rows touches."""
  if min_count < 1:
    raise ValueError('every client needs at least one example.')
  return math.ceil(batch_size / min_count) + 1


def _epoch_permutation(key: jax.Array, epoch: jax.Array, count: jax.Array,
                       max_examples: int) -> jax.Array:
  """Random order of rows `0..count-1` (padding rows sorted last). int32 [N]."""
  u = jax.random.uniform(jax.random.fold_in(key, epoch), (max_examples,))
  u = jnp.where(jnp.arange(max_examples) < count, u, 2.0)
  return jnp.argsort(u).astype(jnp.int32)


def batch_indices(key: jax.Array, step: jax.Array, count: jax.Array, *,
                  batch_size: int, max_examples: int,
                  max_epochs_per_batch: int) -> jax.Array:
  """Row indices of local step `step` for a client with `count` rows.

  Args:
    key: the client's PRNG key for this round (one permutation per epoch is
      derived from it, so the result does not depend on the cohort).
    step: int32 scalar step index.
    count: int32 scalar number of valid rows (≥ 1).
    batch_size: static B.
    max_examples: static padded length N.
    max_epochs_per_batch: static bound from `epochs_per_batch`.

  Returns:
    int32 [B] indices into the client's rows, all < count.
  """
  position = step * batch_size + jnp.arange(batch_size)
  epoch = position // count
  first_epoch = epoch[0]
  epochs = first_epoch + jnp.arange(max_epochs_per_batch)
  perms = jax.vmap(
      lambda e: _epoch_permutation(key, e, count, max_examples))(epochs)
  return perms[epoch - first_epoch, position % count]
