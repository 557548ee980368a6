"""Assignment of capacity levels to clients.

FIARSE, HeteroFL and FedRolex fix each client's capacity γ for the whole run
and assign the levels in equal groups (FIARSE §7.15). Client m of M with L
levels is in group ⌊m·L/M⌋, so groups differ in size by at most one.
"""
import jax.numpy as jnp


def capacity_groups(num_clients: int, num_levels: int) -> jnp.ndarray:
  """Group index of every client. int32 [num_clients], values in [0, L)."""
  return (jnp.arange(num_clients) * num_levels // num_clients).astype(
      jnp.int32)
