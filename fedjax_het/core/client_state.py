"""Per-client persistent state: the cohort's rows of `ServerState.clients`.

`ServerState.clients` holds leaves [num_clients, ...]. Before the local phase
the round gathers the cohort's rows ([K, ...], a client drawn twice gets its
row twice); after it, the rows the clients return are scattered back. A client
in several active slots keeps the row of its last one, so the result does not
depend on the order of a scatter; idle slots write nothing.
"""
from typing import Any

import jax
import jax.numpy as jnp

PyTree = Any


def gather_rows(table: PyTree, client_ids: jax.Array) -> PyTree:
  """Rows `client_ids` [K] of every [M, ...] leaf, or None for no table."""
  if table is None:
    return None
  return jax.tree.map(lambda t: t[client_ids], table)


def last_slot(client_ids: jax.Array, active: jax.Array,
              num_clients: int) -> jax.Array:
  """For each client, its last active cohort slot, or −1. int32 [M]."""
  slots = jnp.where(active, jnp.arange(client_ids.shape[0]), -1)
  return jnp.full((num_clients,), -1, jnp.int32).at[client_ids].max(
      slots.astype(jnp.int32))


def scatter_rows(table: PyTree, client_ids: jax.Array, rows: PyTree,
                 active: jax.Array) -> PyTree:
  """`table` with each client's row replaced by its last active slot's row.

  Args:
    table: leaves [M, ...], or None.
    client_ids: int32 [K] cohort.
    rows: leaves [K, ...] like the table's.
    active: bool [K]; slots that write.
  """
  if table is None:
    return None
  num_clients = jax.tree.leaves(table)[0].shape[0]
  slot = last_slot(client_ids, active, num_clients)
  written = slot >= 0

  def scatter(t, r):
    fresh = r[jnp.maximum(slot, 0)]
    keep = written.reshape((-1,) + (1,) * (t.ndim - 1))
    return jnp.where(keep, fresh, t)

  return jax.tree.map(scatter, table, rows)
