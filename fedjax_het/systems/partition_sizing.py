"""Latency-optimal submodel sizes, HIST Eq. (19) (OMA) and Eq. (36) (AirComp).

Both latency models are linear in a cell's submodel size: one edge round in
cell j takes c_j·d_j seconds, where the per-parameter cost c_j is the cell's
latency for a one-parameter submodel (`latency.edge_round_latency` with
d_j = 1). With cell j holding k_j of the K neurons of the partitioned layer
(each with u parameters) plus the s shared parameters, the cloud solves, once
per global round,

    min_k  max_j  E·c_j·(s + k_j·u)
    s.t.   Σ_j k_j = K                                  (19b)
           k_min ≤ k_j,  s + k_j·u ≤ ρ·d/N,             (19c)

where (19c), 6·N·d_j/d·δ1² ≤ ε_th, reads d_j ≤ ρ·d/N with ρ = ε_th/(6δ1²)
(ρ = 1.5 for the paper's ε_th = 9δ1², so δ1 never has to be estimated), on
d_j = s + k_j·u the parameters cell j holds, shared ones included, and
d = s + K·u the model's. k_min = 1 keeps every cell busy.

The paper hands the MILP to Gurobi. Its objective is a maximum of increasing
functions of separate variables under one sum constraint, for which the
greedy rule "give the next neuron to the cell whose latency after taking it is
smallest" is exact (the min-max resource allocation of Ibaraki & Katoh,
"Resource Allocation Problems", 1988, §4.1); tests check it against brute
force. It runs in `lax.fori_loop` inside the compiled round.
"""
import math

import jax
import jax.numpy as jnp


def size_cap(num_units: int, num_cells: int, max_size_ratio: float, *,
             unit_params: int = 1, shared_params: int = 0) -> int:
  """⌊(ρ·d/N − s)/u⌋, the largest k_j (19c) allows on d_j = s + k_j·u
  parameters (d = s + K·u); raises if no partition fits."""
  total = shared_params + num_units * unit_params
  cap = min(num_units, math.floor(
      (max_size_ratio * total / num_cells - shared_params) / unit_params))
  if cap < 1 or cap * num_cells < num_units:
    raise ValueError(
        f'no partition of {num_units} neurons into {num_cells} cells meets '
        f'(19c), d_j ≤ {max_size_ratio}·d/N with the {shared_params} shared '
        'parameters counted; raise hierarchy.max_size_ratio.')
  return cap


def optimal_unit_counts(cost_per_param: jax.Array, *, num_units: int,
                        unit_params: int, shared_params: int, max_units: int,
                        min_units: int = 1) -> jax.Array:
  """Neurons per cell minimising the slowest cell's latency, Eqs. (19)/(36).

  Args:
    cost_per_param: float [N] c_j > 0, seconds per parameter of cell j's
      edge round.
    num_units: K neurons to hand out (static).
    unit_params: u, parameters per neuron.
    shared_params: s, parameters every cell holds.
    max_units: the cap of (19c).
    min_units: the least a cell gets.

  Returns:
    int32 [N] k_j summing to K.
  """
  num_cells = cost_per_param.shape[0]
  if not num_cells * min_units <= num_units <= num_cells * max_units:
    raise ValueError(f'{num_units} neurons cannot be split into {num_cells} '
                     f'cells of {min_units} to {max_units} neurons each.')

  def give_one(_, counts):
    latency_after = cost_per_param * (shared_params +
                                      (counts + 1) * unit_params)
    latency_after = jnp.where(counts < max_units, latency_after, jnp.inf)
    return counts.at[jnp.argmin(latency_after)].add(1)

  start = jnp.full((num_cells,), min_units, jnp.int32)
  return jax.lax.fori_loop(0, num_units - num_cells * min_units, give_one,
                           start)
