"""FedAU (Wang & Ji, "A lightweight method for tackling unknown participation statistics").

The server does not know the participation probabilities; it estimates each
client's inverse participation rate online, as the mean of the intervals (in
rounds) between the client's participations, and weights the client's update
by it (following IBM/fedau's `main.py`):

    X ← X + Σ_{m received (once per client)} ω_m ω̂_m U_m,
    ω̂_m = mean of m's recorded intervals (1 before any is recorded).

"Participates" means m's update is received (m ∈ S̃_r). Per client the server
keeps, in `ServerState.clients['fedau']`, the rounds since m last participated,
and the sum and count of the recorded intervals. When m participates the
interval (rounds since + 1) is recorded after weighting; after
`fedacs.fedau_cutoff` rounds without participation the cutoff is recorded and
the count restarts. The recorded intervals have mean (1 − (1 − P_m)^cut)/P_m
for a participation probability P_m, so in the long run the expected update
is Σ_m ω_m (1 − (1 − P_m)^cut) U_m: the statistical distortion is removed
(cut → ∞), the structural one is not. The lr is FedAvg's η₁ (App. I.2).

Under client availability (`systems_aware`) FedAU draws among the clients
online (p = ω^A) and an offline round is a round without participation, so
P_m and its intervals include P(m online): the weights keep ω, not ω^A, and
ω̂ removes the lean toward the clients online more often, as it removes the
lean toward reliable links.

Not in cells (`hierarchy.*` is refused in one line): the rule is a sum, not
rule (3)'s mean over the K draws, weighted by intervals between
participations in the global cohort; restricted to a cell it is the cell's
share of a step, and any scaling of it to an edge step would be ours, not
FedAU's.
"""
from typing import Any

import jax
import jax.numpy as jnp

from fedjax_het.methods.common.planning import occurrence_index
from fedjax_het.methods.fedacs.systems_aware import FLAT_OPTION_GROUPS, \
    OnlineRound, SystemsAwareAlgorithm
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState

PyTree = Any


def mean_interval(stats: dict) -> jax.Array:
  """ω̂ [M]: the mean recorded interval, 1 where none is recorded yet."""
  count = stats['interval_count']
  return jnp.where(count > 0,
                   stats['interval_sum'] / jnp.maximum(count, 1), 1.0)


class FedAU(SystemsAwareAlgorithm):
  """FedAU: received updates weighted by their online mean participation interval."""

  name = 'fedau'
  display_name = 'FedAU'
  option_groups = FLAT_OPTION_GROUPS   # not in cells (module docstring)

  def init_clients(self, params: PyTree) -> PyTree:
    clients = dict(super().init_clients(params) or {})
    # Distinct buffers: the round runner donates the state.
    clients['fedau'] = {key: jnp.zeros((self.num_clients,), jnp.float32)
                        for key in ('since', 'interval_sum', 'interval_count')}
    return clients

  def slot_coefficients(self, state: ServerState, rnd: OnlineRound,
                        client_ids: jax.Array) -> jax.Array:
    """ω_m ω̂_m on a client's first slot, 0 on repeats (one update per client)."""
    del rnd
    first = occurrence_index(client_ids) == 0
    weight = self.omega * mean_interval(state.clients['fedau'])
    return weight[client_ids] * first

  def update_scale(self) -> float:
    """1: FedAU sums the weighted received updates (no 1/K of rule (3))."""
    return 1.0

  def participation_probs(self, rnd: OnlineRound) -> jax.Array:
    """P_m = P(m ∈ S̃_r | A_r): sampled at least once (K π_m without
    replacement) and its upload arrives. [M]."""
    if self.options.participation == 'with_replacement':
      sampled = 1 - (1 - self.sampling_probs(rnd))**self.num_draws
    else:
      sampled = self.num_draws * self.inclusion(rnd)
    return sampled * (1 - rnd.failure_prob)

  def expected_weights(self, state: ServerState,
                       rnd: OnlineRound) -> jax.Array:
    """Long-run e_m = ω_m (1 − (1 − P_m)^cut) (ω̂ at its limit), for P_m the
    same every round: the round's P_m given who is online. (Under
    availability ω̂'s limit is that of the mean P_m over the rounds, which
    this round's A_r does not give.)"""
    del state
    cut = self.options.fedau_cutoff
    return self.omega * (1 - (1 - self.participation_probs(rnd))**cut)

  def next_clients(self, state: ServerState, plans: ClientPlan,
                   outputs: ClientOutput) -> PyTree:
    clients = dict(super().next_clients(state, plans, outputs))
    stats = state.clients['fedau']
    took_part = jnp.zeros((self.num_clients,)).at[plans.client_id].max(
        plans.extras['link_up'] * plans.is_active()) > 0
    waited = stats['since'] + 1
    cut = waited >= self.options.fedau_cutoff
    record = took_part | cut
    clients['fedau'] = {
        'since': jnp.where(record, 0.0, waited),
        'interval_sum': stats['interval_sum'] + jnp.where(
            record, jnp.where(took_part, waited,
                              float(self.options.fedau_cutoff)), 0.0),
        'interval_count': stats['interval_count'] + record,
    }
    return clients
