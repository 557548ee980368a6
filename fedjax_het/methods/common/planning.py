"""Round phase 1: who takes part and how (per-client plans)."""
import jax
import jax.numpy as jnp

from fedjax_het.core import sampling
from fedjax_het.core.state import ClientPlan, ServerState, round_key


def occurrence_index(client_ids: jax.Array) -> jax.Array:
  """For each slot, how many earlier slots drew the same client. int32 [K]."""
  same = client_ids[:, None] == client_ids[None, :]
  earlier = jnp.tril(same, k=-1)
  return earlier.sum(axis=1).astype(jnp.int32)


class Planning:
  """The cohort (`cohort_ids`, `sample_clients`) and its plans
  (`plan_clients`, built by `new_plans`), with the parts' adjustments."""

  def sample_clients(self, state: ServerState, key: jax.Array) -> jax.Array:
    online = self.parts.online(state)
    if self.config.client_sampling == 'proportional':
      counts = self.client_counts
      if online is not None:  # nobody online: all-zero probabilities, whose
        counts = jnp.where(online, counts, 0)  # draws are offline (idle)
      probs = counts / jnp.maximum(jnp.sum(counts), 1)
      return sampling.with_replacement(key, probs, self.cohort_size)
    if online is not None:
      return sampling.uniform_among(key, online, self.cohort_size)
    return sampling.uniform_without_replacement(key, self.num_clients,
                                                self.cohort_size)

  def client_weights(self, client_ids: jax.Array) -> jax.Array:
    """Aggregation weights: examples held, or 1 per client."""
    if self.config.aggregation_weights == 'examples':
      return self.client_counts[client_ids].astype(jnp.float32)
    return jnp.ones(client_ids.shape, jnp.float32)

  def new_plans(self, client_ids: jax.Array, keys: jax.Array,
                **fields) -> ClientPlan:
    """The plans [K] of `client_ids`, each client placed in its group before
    any method reads the plans: its cell as segment and start-model row in
    cells (`parts.cells.Cells.place`), else group 0. Every `plan_clients`
    builds its plans here, so none can read an unassigned group (HIST sizes
    its partitions from the cells' costs)."""
    return self.parts.place(ClientPlan(
        client_id=client_ids, key=keys,
        group=jnp.zeros(client_ids.shape, jnp.int32), **fields))

  def plan_clients(self, state: ServerState, client_ids: jax.Array,
                   keys: jax.Array) -> ClientPlan:
    k = client_ids.shape[0]
    plan = self.new_plans(
        client_ids, keys,
        num_steps=jnp.full((k,), self.config.local_steps, jnp.int32),
        lr=jnp.full((k,), self.config.client_lr, jnp.float32),
        weight=self.client_weights(client_ids))
    return self.parts.adjust(state, plan)

  def cohort_ids(self, state: ServerState) -> jax.Array:
    """The round's cohort, int32 [K]: `sample_clients` on the first half of
    the round key.

    Streaming (`core.stream`) calls it ahead of the rounds on a state that
    holds only `key` and `round` (the rest None), to fetch the cohorts' data;
    a method whose cohort depends on more of the state cannot be streamed.
    """
    sample_key, _ = jax.random.split(round_key(state))
    return self.sample_clients(state, sample_key)
