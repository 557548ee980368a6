"""FSL_MC and FSL_OC: federated split learning with per-batch gradient return (SplitFed; CSE-FSL
paper's baselines, Sec. V).

Per batch (Fig. 1): client forward → smashed data and labels up → server
forward/backward and SGD step → ∂L/∂smashed down → client backward and SGD
step (`sl_step`). No aux head (a_c is carried untouched). One round = one
local epoch of `local_steps` batches, then FedAvg of the client models.

* FSL_MC ("multiple copies"): each client has its own server copy, so the
  step above runs inside the client's program (its carry holds x_c and its
  x_s copy); the copies are FedAvg'd with the client models each round
  (SplitFed-V1; the paper does not say). This is FedAvg on the
  composed model, computed through the cut; on the virtual clock a
  client's server copy starts from the server model of its dispatch round
  (`split_learning`'s module docstring). In cells (`config.hierarchy`,
  `parts.cells`) it is FedAvg on the composed model in cells: each edge
  round averages its clients' composed models (client part and server copy)
  per cell, the cloud combines the cells' edge models (HIST's Eqs. (6),
  (7)); the copies live at the edge servers, and every smashed batch,
  gradient and model exchange is charged once per edge round. Under AirComp
  the payload is the update over the base lr γ = `client_lr` (Eq. (21)), so
  with `split.lr_decay` < 1 the receiver noise is γ's, not the decayed lr's.
* FSL_OC ("one copy"): one server model serves every client in round-robin
  order (batch b of clients 1..K in ascending client id, then batch b + 1,
  ...; `split_learning.slot_order`), so the cohort is
  serialised: `local_phase` is one `lax.scan` over (batch, client) pairs
  carrying the K client models and the server model; it does not use the
  client driver, and every backend runs the same scan. `split.clip_norm` > 0
  clips the client's and the server's gradients to that global norm: the
  paper adds "gradient clipping [56]" (Pascanu et al. 2013) without a
  threshold, and the authors' code has no FSL_OC; the experiment configs set
  it by Pascanu et al.'s heuristic (experiments/csefsl/csefsl_setup.py).
  It does not read `config.clock` (refused in one line): a serial
  round-robin server has no reading on an asynchronous clock; nor
  `config.hierarchy`: its one server serialises the whole cohort, batch by
  batch, across any cells; nor `config.dp`: a client's gradients come
  through the one server model, which every earlier client's data moved,
  so one client's data changes every later client's update and no
  per-client term of the sum has sensitivity S.

Under DP (`config.dp`, `parts.dp`), FSL_MC's upload is its composed delta
(x_c and its server copy), clipped to S as a whole, and the sum of Eq. 14
over both noised: DP-FedAvg on the composed model. The ε covers the
released model (client part and averaged server copies); the server that
trains the copies sees every smashed activation and label, neither clipped
nor noised, which the ε does not cover (`dp_release`).
"""
from typing import Any

import jax
import jax.numpy as jnp
import optax

from fedjax_het.methods.split import split_accounting as accounting
from fedjax_het.methods.split.split_learning import (SplitLearning,
                                                     SplitOptions, slot_order)
from fedjax_het.core import batching, key_streams, program
from fedjax_het.core.key_streams import Stream
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState
from fedjax_het.parts import cells as cells_lib
from fedjax_het.parts import clock as clock_part
from fedjax_het.parts import dp as dp_lib

PyTree = Any


def clip_global_norm(grads: PyTree, max_norm: float) -> PyTree:
  """g · min(1, max_norm / ‖g‖₂) over all leaves (0: no clipping)."""
  if not max_norm:
    return grads
  norm = optax.global_norm(grads)
  scale = jnp.minimum(1.0, max_norm / jnp.maximum(norm, 1e-30))
  return jax.tree.map(lambda g: g * scale, grads)


class GradientReturn(SplitLearning):
  """The per-batch split step shared by FSL_MC and FSL_OC."""

  clip_norm = 0.0

  def sl_step(self, client: PyTree, server: PyTree, x: jax.Array,
              y: jax.Array, lr: jax.Array, key: jax.Array):
    """One batch through the cut: (client', server', loss).

    The client's gradient is the pullback of the server's ∂L/∂smashed
    through x_c (what the downlink carries); plain SGD on both sides.
    """
    x = self.train_inputs(x, key)
    smashed, pullback = jax.vjp(lambda c: self.smashed({'client': c}, x, key),
                                client)
    loss, (g_server, g_smashed) = jax.value_and_grad(
        self.server_loss, argnums=(0, 1))(
            server, smashed, y, key_streams.fold(key, Stream.SERVER_DROPOUT))
    (g_client,) = pullback(g_smashed)
    sgd = lambda p, g: jax.tree.map(lambda a, b: a - lr * b, p,
                                    clip_global_norm(g, self.clip_norm))
    return sgd(client, g_client), sgd(server, g_server), loss


class FslMc(GradientReturn):
  """FSL_MC: a server copy per client, trained inside the client's program."""

  name = 'fsl_mc'
  option_groups = (SplitOptions, clock_part.ClockOptions,
                   cells_lib.HierarchyOptions, dp_lib.DPOptions)
  protocol = accounting.FSL_MC
  averaged_parts = ('client', 'server')
  dp_release = ('the composed model (x_c and the averaged server copies, '
                'clipped together), not the smashed activations and labels '
                'the server sees, which are neither clipped nor noised')

  def client_program(self) -> program.ClientProgram:

    def init(start, plan):
      del plan
      return start.params

    def step(params, batch, plan, ctx):
      client, server, loss = self.sl_step(params['client'], params['server'],
                                          batch.x, batch.y, plan.lr, ctx.key)
      return {**params, 'client': client, 'server': server}, loss, None

    return program.ClientProgram(
        init, step, lambda params, plan: program.LocalModel(params),
        num_steps=self.max_local_steps(), batch_size=self.config.batch_size,
        scan_unroll=self.config.scan_unroll)

  def aggregate(self, state: ServerState, plans: ClientPlan,
                outputs: ClientOutput) -> ServerState:
    """FedAvg of the client models and of the server copies."""
    return state.replace(params=self.fedavg(state, plans, outputs))


class FslOc(GradientReturn):
  """FSL_OC: one server model, the cohort in round-robin order per batch."""

  name = 'fsl_oc'
  protocol = accounting.FSL_OC
  unread_sections = {
      'hierarchy': 'its one server serves the whole cohort round-robin, '
                   'batch by batch, which cells\' edge rounds would split; '
                   'fsl_mc runs in cells',
      'dp': 'its one server model carries every earlier client\'s data into '
            'the next client\'s gradients, so no per-client update has '
            'sensitivity S'}

  def __init__(self, config, model, data):
    super().__init__(config, model, data)
    self.clip_norm = self.split.clip_norm
    self._round_robin = jax.jit(self.round_robin)

  def local_phase(self, state: ServerState, plans: ClientPlan, data,
                  clients) -> ClientOutput:
    del clients  # one server model serialises the cohort
    return self._round_robin(state.params, plans, data)

  def round_robin(self, params: PyTree, plans: ClientPlan,
                  data) -> ClientOutput:
    """Batches b = 0..M−1, clients in ascending id within each, one scan.

    Client k's minibatches are those its program would draw
    (`batching.batch_indices` with its plan's key). Returns the client
    deltas, leaves [K, ...] like the params' (zero on the parts the round
    robin leaves to the server, as a client program's), and the server
    model (extras['server'], unbatched).
    """
    cohort = plans.client_id.shape[0]
    steps, batch_size = self.max_local_steps(), self.config.batch_size
    counts = jnp.asarray(data.counts)
    bound = batching.epochs_per_batch(batch_size, self.min_client_count)
    active = plans.is_active()
    order = slot_order(plans.client_id, 'natural')

    def one(carry, t):
      clients_params, server, loss_sum = carry
      s, k = t // cohort, order[t % cohort]
      plan = jax.tree.map(lambda a: a[k], plans)
      row = data.client_row(plan.client_id)
      idx = batching.batch_indices(
          plan.key, s, counts[row], batch_size=batch_size,
          max_examples=data.max_examples, max_epochs_per_batch=bound)
      key = jax.random.fold_in(
          key_streams.fold(plan.key, Stream.ROUND_ROBIN), s)
      mine = jax.tree.map(lambda a: a[k], clients_params)
      client, new_server, loss = self.sl_step(
          mine, server, *data.examples(row, idx), plan.lr, key)
      on = active[k] & (s < plan.num_steps)
      keep = lambda new, old: jnp.where(on, new, old)
      clients_params = jax.tree.map(
          lambda a, new, old: a.at[k].set(keep(new, old)), clients_params,
          client, mine)
      return (clients_params, jax.tree.map(keep, new_server, server),
              loss_sum.at[k].add(jnp.where(on, loss, 0.0))), None

    start = jax.tree.map(lambda p: jnp.broadcast_to(p, (cohort,) + p.shape),
                         params['client'])
    (ends, server, loss_sum), _ = jax.lax.scan(
        one, (start, params['server'], jnp.zeros((cohort,), jnp.float32)),
        jnp.arange(steps * cohort))
    ran = jnp.where(active, jnp.clip(plans.num_steps, 0, steps), 0)
    untouched = jax.tree.map(
        lambda p: jnp.zeros((cohort,) + p.shape, p.dtype), params)
    return ClientOutput(
        delta={**untouched,
               'client': jax.tree.map(jnp.subtract, start, ends)},
        loss=loss_sum / jnp.maximum(ran, 1),
        num_examples=(ran * batch_size).astype(jnp.int32),
        extras={'server': server})

  def aggregate(self, state: ServerState, plans: ClientPlan,
                outputs: ClientOutput) -> ServerState:
    """FedAvg of the client models; the server model as trained."""
    params = self.fedavg(state, plans, outputs)
    return state.replace(params={**params,
                                 'server': outputs.extras['server']})
