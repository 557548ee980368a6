"""FedVarp on unreliable links: failed uploads filled from the server's memory.

The server keeps y_m, the last update it received from each client m (the
vector as received, i.e. with that round's lr; 0 until m first delivers),
in `ServerState.clients['memory']` (leaves [M, ...]).

- `fedacs.fedvarp_form='paper'` (FedACS's description, Eq. (114)): a sampled
  client whose upload fails contributes its stale y_m,

      X ← X + (1/K) [ Σ_{k received} c_k U_k + Σ_{k failed} c_k y_{m_k} ],

  so in the long run every sampled client counts and Ω ∝ ω‖a‖₁: the
  statistical distortion is removed, the structural one is not.
- `'saga'` (the original FedVarp of Jhunjhunwala et al., SAGA-style):

      X ← X + (1/K) Σ_{k received} c_k (U_k − y_{m_k}) + Σ_m ω_m y_m.

  Same expectation; lower variance when the memory is fresh.

c_k is the importance weight ω/π (1 for IS). Calibrated lr η₄ = η₃, c-a-FedAvg's
(Eq. (115)). After aggregating, y_m ← the update of m's last received slot.

Under client availability ω is ω^A, restricted to the clients online and
renormalised (`systems_aware`), in c and in the SAGA term, which then sums
the memory of the clients online: either form targets Σ_{A_r} ω^A_m U_m, and
an offline client's memory waits for its next received update.

Not in cells (`hierarchy.*` is refused in one line): y_m is one update per
global round, from the global model, standing in for a failed one from the
global model; in cells a client sends E updates from E edge models, and
which one y_m keeps and what it stands in for in another cell's edge round
the method does not say.
"""
from typing import Any

import jax
import jax.numpy as jnp

from fedjax_het.methods.fedacs.reweighted import communication_aware_lr_scale
from fedjax_het.methods.fedacs.systems_aware import FLAT_OPTION_GROUPS, \
    OnlineRound, SystemsAwareAlgorithm
from fedjax_het.core import client_state
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState

PyTree = Any


class FedVarp(SystemsAwareAlgorithm):
  """FedVarp: a per-client memory of received updates stands in for failures."""

  name = 'fedvarp'
  display_name = 'FedVarp'
  # Not in cells (module docstring), nor under DP or secure aggregation.
  option_groups = tuple(g for g in FLAT_OPTION_GROUPS
                        if g.key not in ('dp', 'secagg'))
  unread_sections = {'dp': 'its memory of every client\'s last update enters '
                           'each aggregate un-noised',
                     'secagg': 'its memory of every client\'s last update '
                               'enters each aggregate outside the secure sum'}

  def init_clients(self, params: PyTree) -> PyTree:
    clients = dict(super().init_clients(params) or {})
    clients['memory'] = jax.tree.map(
        lambda p: jnp.zeros((self.num_clients,) + p.shape, p.dtype), params)
    return clients

  def lr_scale(self, rnd: OnlineRound, a_norm: jax.Array) -> jax.Array:
    return communication_aware_lr_scale(rnd, self.fedavg_norms(rnd), a_norm)

  def expected_weights(self, state: ServerState,
                       rnd: OnlineRound) -> jax.Array:
    """π_m c_m: in the long run a failed upload counts through its memory."""
    return self.inclusion(rnd) * self.client_coefficients(state, rnd)

  def memory_coefficients(self, rnd: OnlineRound,
                          plans: ClientPlan) -> jax.Array:
    """b [M] with the memory's share of the pseudo-gradient Σ_m b_m y_m
    (idle slots add nothing; the SAGA term Σ ω^A_m y_m is over the clients
    online)."""
    link_up, coefficient = plans.extras['link_up'], plans.extras['coefficient']
    coefficient = coefficient * plans.is_active()
    if self.options.fedvarp_form == 'paper':
      per_slot = (1 - link_up) * coefficient / self.num_draws
      return jnp.zeros((self.num_clients,)).at[plans.client_id].add(per_slot)
    per_slot = link_up * coefficient / self.num_draws
    return rnd.omega - jnp.zeros((self.num_clients,)).at[
        plans.client_id].add(per_slot)

  def pseudo_gradient(self, state: ServerState, plans: ClientPlan,
                      outputs: ClientOutput) -> PyTree:
    fresh = super().pseudo_gradient(state, plans, outputs)
    b = self.memory_coefficients(self.systems(state), plans)
    stale = jax.tree.map(lambda y: jnp.tensordot(b, y, axes=1).astype(y.dtype),
                         state.clients['memory'])
    return jax.tree.map(jnp.add, fresh, stale)

  def next_clients(self, state: ServerState, plans: ClientPlan,
                   outputs: ClientOutput) -> PyTree:
    """y_m ← the update of m's last received slot."""
    received = (plans.extras['link_up'] > 0) & plans.is_active()
    return {**super().next_clients(state, plans, outputs),
            'memory': client_state.scatter_rows(
                state.clients['memory'], plans.client_id, outputs.delta,
                received)}
