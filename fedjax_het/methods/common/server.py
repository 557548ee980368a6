"""Round phase 3: the server's rule (segment means of the deltas as a
pseudo-gradient for the server optimiser; per-client state written back)."""
from typing import Any

import jax
import optax

from fedjax_het import optim
from fedjax_het.core import aggregation, client_state
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState

PyTree = Any


class ServerRule:
  """`aggregate`: the next server state from the round's outputs."""

  def server_optimizer(self) -> optax.GradientTransformation:
    """The `server_optimizer` of the config on the pseudo-gradient: SGD
    (momentum), FedAdam, FedYogi or FedAdagrad (`fedjax_het.optim`)."""
    return optim.server_optimizer(self.config)

  def init_extras(self, params: PyTree) -> PyTree:
    """Algorithm-specific server state (None by default)."""
    del params
    return None

  def server_step(self, state: ServerState,
                  pseudo_grad: PyTree) -> tuple[PyTree, PyTree]:
    """(params, opt_state) after the server optimiser's step on the
    pseudo-gradient g = x − x̄ (SGD: x ← x − η_s·g; FedAdam, FedYogi,
    FedAdagrad: x ← x − η_s·m/(√v + τ), Reddi et al.'s Algorithm 2 with
    Δ = −g, `fedjax_het.optim`)."""
    updates, opt_state = self.server_optimizer().update(
        pseudo_grad, state.opt_state, state.params)
    return optax.apply_updates(state.params, updates), opt_state

  def segment_pseudo_gradient(self, state: ServerState, plans: ClientPlan,
                              outputs: ClientOutput) -> PyTree:
    """g: the segments' masked weighted means of the deltas (the sums made
    in the map, `outputs.delta_sums`, or from `outputs.delta` [K, ...]) as
    the parts release them (`Parts.release_sums`: DP's noise), combined by
    `combine_segments`; leaves like `state.params`."""
    sums = outputs.delta_sums
    if sums is None:
      sums = aggregation.segment_sums(
          outputs.delta, plans.active_weight(), plans.group,
          self.segments,
          self.coverage_masks(plans.client_masks(), outputs.delta),
          values_masked=True)
    sums = self.parts.release_sums(state, plans.active_weight(), sums)
    means, coverage = aggregation.mean_of_sums(sums, state.params)
    return self.combine_segments(means, coverage)

  def combine_segments(self, means: PyTree, coverage: PyTree) -> PyTree:
    """The global pseudo-gradient from per-segment means ([S, ...] leaves).

    Default: one global segment, or a part's combination (cells: the cloud
    over the cells' edge models, HIST's Eq. (7)).
    """
    combiner = self.parts.owner('combine')
    if combiner is not None:
      return combiner.combine(means, coverage)
    return jax.tree.map(lambda m: m[0], means)

  def coverage_masks(self, mask: PyTree, delta: PyTree) -> PyTree:
    """The masks m of the mean Σ w m Δ / Σ w m: the plans' submodel masks
    (None: every coordinate), for one client or stacked [K, ...]."""
    del delta
    return mask

  def weigh_arrivals(self, state: ServerState, plans: ClientPlan,
                     outputs: ClientOutput) -> tuple[ClientPlan, ClientOutput]:
    """(plans, outputs) with every slot's weight and delta [K, ...] as the
    parts weigh them (the clock: by staleness), for a method that reads the
    stacked deltas (one that sums them in the map weighs there)."""
    table = self.start_models(state, plans)
    delta, weight = jax.vmap(
        lambda plan, d: self.parts.weigh(self, plan, d, plan.active_weight(),
                                         table, state.params))(plans,
                                                               outputs.delta)
    return plans.replace(weight=weight), outputs.replace(delta=delta)

  def next_clients(self, state: ServerState, plans: ClientPlan,
                   outputs: ClientOutput) -> PyTree:
    """`state.clients` with the rows the active clients returned written back."""
    if outputs.client_state is None:
      return state.clients
    return client_state.scatter_rows(state.clients, plans.client_id,
                                     outputs.client_state, plans.is_active())

  def aggregate(self, state: ServerState, plans: ClientPlan,
                outputs: ClientOutput) -> ServerState:
    """The server state after the round (the round counter is not advanced).

    The masked, weighted segment mean of the deltas (`plans.group` in
    [0, segments); idle slots weigh 0) is combined into a pseudo-gradient
    g for the server optimiser; the clients' state rows are written back.
    """
    params, opt_state = self.server_step(
        state, self.segment_pseudo_gradient(state, plans, outputs))
    return state.replace(params=params, opt_state=opt_state,
                         clients=self.next_clients(state, plans, outputs))
