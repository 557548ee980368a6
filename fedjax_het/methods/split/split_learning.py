"""CSE-FSL and FSL_AN: split learning with an auxiliary head (Mu & Shen, "Federated Split
Learning with Improved Communication and Storage Efficiency").

A split model (`models.split`) has a client part x_c, an aux head a_c and a
server part x_s. One round = one local epoch (Sec. V, E = 1) of M batches:
M = `local_steps` for every client, or M_k = ⌈n_k / B⌉ per client with
`split.round_steps='epoch'` (clients of unequal sizes):

1. Every client trains (x_c, a_c) on the aux loss only (Eq. 8: one joint SGD
   step per batch, no gradient from the server); x_s is forward-free on the
   client and has no optimiser state (`sgd_program(..., trainable=client,
   aux)`). Every h = `split.upload_every` batches it uploads ONE batch of
   smashed data (stop-gradient cut activations) and its labels
   (`ClientOutput.emitted`, leaves [M // h, B, ...]); the trailing M mod h
   batches still train the client and upload nothing.
2. The server takes one SGD step per uploaded batch (Eqs. 11-13) on ONE model,
   inside the round's jit as a `lax.scan` over the uploads in arrival order:
   block-major, client-minor (block 0 of clients 1..n, then block 1, ...), the
   clients within a block in `split.server_order`: 'natural', ascending client
   id (Eq. 11's order 1..n, Fig. 6's "ordered"), 'sampled', the cohort's
   sampled order (redrawn every round), or 'random', a fresh random
   permutation per block (Fig. 6's random order); uploads of idle slots and of steps a
   client did not run (`emitted_active`) are skipped. Since the clients never
   read x_s, this equals the interleaved protocol (client block, server
   step, ...) exactly.
3. FedAvg of x_c and a_c (Eq. 14, weights `aggregation_weights`); x_s is not
   averaged.

Which batch of a block is uploaded (`split.upload_batch`: 'last', the
authors' code, or 'first', Alg. 1's m mod h = 0) and with which client weights
(`split.activations`: 'pre', the forward pass of the training step, or
'post', recomputed after the step, the notation g_{x_c^{t,h}} of Eq. 11) are
flags (the paper leaves this open). The lr is
η_r = client_lr · lr_decay^⌊r / lr_decay_every⌋ for x_c, a_c and x_s (Sec. V:
0.15 decayed by 0.99 every 10 rounds on CIFAR-10).

FSL_AN (Han et al.) is the same client side with h = 1 and one server copy per
client, each trained on its own client's uploads and averaged every round
(`split.server_copies='per_client'`); CSE-FSL with that flag and h = 1 is
FSL_AN.

Under the systems part (CSE-FSL and FSL_AN read `config.systems`; see
`methods.base`): client m runs its T_m batches (its smashed uploads follow the
steps it ran), and when its uplink is down in the round (Z_m = 0) none of its
uploads arrive: the server takes no step on its smashed batches, its (x_c, a_c)
enter no average, and its uploaded bytes are not counted (our reading: one
link outcome per client and round, as FedACS draws it).

On the virtual clock (`config.clock`, `parts.clock`; CSE-FSL, FSL_AN and
FSL_MC read it, `methods.base` gives FedAvg's reading, Co-S²P's Alg. 1),
our reading: every idle client is dispatched at a round's start with that
round's client side (x_c, a_c) (its row of the start table, w_{k_n}) and
that round's key and lr η_{k_n}; a straggler arrives in a later round q with
staleness τ = q − k_n. When it arrives, the smashed batches of the steps it
ran enter round q's server scan (step 2, the arrivals in `server_order`
within a block) with the server model x_s of round q, which is never stale,
and round q's lr; FSL_AN's per-client copies likewise start from round q's
x_s. Its (x_c, a_c) enter round q's FedAvg (Eq. 14) weighed as
`parts.clock.weigh_arrival` weighs a FedAvg update ('polynomial': its delta
times (1 + τ)^−a; 'cos2p': its weight times Eq. 4's γ, read on the parts it
trains, `averaged_parts`; FSL_AN averages its server copies with the same
weights); idle slots upload nothing. FSL_MC (`fsl_baselines`) is FedAvg on
the composed model through the cut: a client's server copy is the server
model of its dispatch round (it talks to that copy while it trains), and
the arriving copy enters the round's FedAvg with its client part, weighed
alike. FSL_OC does not read the section: its one server serves the cohort
round-robin, batch by batch, which has no reading on an asynchronous clock.
Bytes, up and down, and comm rounds are counted in the arrival round, for
arrivals only.

In cells (`config.hierarchy`) only FSL_MC runs (`fsl_baselines`): CSE-FSL
and FSL_AN train their server part after the local phase on the round's
smashed uploads (one model in arrival order across the cohort, or FSL_AN's
per-client copies), which the cells part's E edge rounds, each averaging
the client parts per cell, do not carry; they refuse the section in one
line (`unread_sections`), as FSL_OC does.

Under DP (`config.dp`, `parts.dp`; CSE-FSL and FSL_AN): each client's
upload of (x_c, a_c), its delta (zero on x_s, which it does not train), is
clipped to S and the cohort sum noised before Eq. 14 divides it, as FedAvg's.
x_s is trained on the smashed activations, which are neither clipped nor
noised, so the ε reported covers the release of (x_c, a_c) only, not x_s nor
the smashed data the server sees (`dp_release`, in summary.json's dp facts).
Each client's (x_c, a_c) update depends on its own data alone (the aux loss
reads no server gradient), so one client moves the sum by at most w·S.

Accounting per round (`round_metrics`, summed by the trainer):
smashed_bytes_up, grad_bytes_down, model_bytes_up, model_bytes_down, bytes_up,
bytes_down, gb (all traffic in 2^30 B), comm_rounds (smashed uploads) and
server_storage_params (a per-round value, `per_round_metrics`: summary.json
has it under `last_round`); see `split_accounting`.
"""
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_het import models
from fedjax_het.methods.split import split_accounting as accounting
from fedjax_het.methods.base import FederatedAlgorithm
from fedjax_het.methods.common.accounting import mean_over_active
from fedjax_het.core import key_streams, program
from fedjax_het.core.key_streams import Stream
from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState, \
    round_key
from fedjax_het.data import augment as augment_lib
from fedjax_het.parts import clock as clock_part
from fedjax_het.parts import dp as dp_lib
from fedjax_het.parts import links_work
from fedjax_het.options import (ConfigError, OptionGroup, in_range,
                                non_negative, option, positive_int)

PyTree = Any
CLIENT_TRAINABLE = (('params', 'client'), ('params', 'aux'))
SERVER_ORDERS = ('natural', 'sampled', 'random')


@dataclasses.dataclass(frozen=True)
class SplitOptions(OptionGroup):
  """`config.split`: federated split learning (CSE-FSL, FSL_MC/OC/AN)."""
  key = 'split'
  upload_every: int = option(1, 'h: one smashed batch uploaded every h local batches (CSE-FSL; ≤ local_steps)', check=positive_int)
  upload_batch: str = option('last', 'batch of a block uploaded: last (authors\' code) | first (Alg. 1)', choices=('last', 'first'))
  activations: str = option('pre', 'uploaded activations: pre (the training forward) | post (after the step, Eq. 11)', choices=('pre', 'post'))
  server_order: str = option('natural', 'order of the server steps within a block: natural (ascending client id, Eq. 11 and Fig. 6\'s "ordered") | sampled (the cohort\'s sampled order) | random (a fresh permutation per block, Fig. 6)', choices=SERVER_ORDERS)
  server_copies: str = option('one', 'CSE-FSL: one shared server model | per_client copies averaged each round (FSL_AN)', choices=('one', 'per_client'))
  lr_decay: float = option(1.0, 'η_r = client_lr · lr_decay^⌊r / lr_decay_every⌋ for every part (CIFAR-10: 0.99)', check=in_range(0, 1))
  lr_decay_every: int = option(10, 'rounds between lr decays', check=positive_int)
  round_steps: str = option('local_steps', 'batches per client and round: local_steps (config.local_steps, every client) | epoch (⌈n_k / B⌉: one local epoch of each client, Sec. V)', choices=('local_steps', 'epoch'))
  clip_norm: float = option(0.0, 'FSL_OC: global-norm clip of client and server gradients (0: off)', check=non_negative)


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
  return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


class SplitLearning(FederatedAlgorithm):
  """What every split method shares: the split model, the lr schedule, the
  training inputs, FedAvg of the client side and the accounting."""

  option_groups = (SplitOptions,)
  per_round_metrics = ('server_storage_params',)
  supports_token_labels = False  # split models classify images
  own_server_rule = ('the client parts are averaged, the server part trained '
                     'on the smashed data')
  protocol: accounting.SplitProtocol = accounting.CSE_FSL
  # The parts of the model a client trains and the round's FedAvg averages.
  averaged_parts = ('client', 'aux')

  def __init__(self, config, model, data):
    if not models.is_split(model):
      raise ConfigError(
          f'{self.name} trains a split model; config.model must be one of '
          'split_cifar_cnn, split_emnist_cnn, split_lenet5, got '
          f'{config.model!r}.')
    self.split = SplitOptions.from_config(config)
    if self.split.round_steps == 'epoch' and 'systems' in config and (
        config.systems.local_work or config.systems.model in ('dynamic',
                                                              'trace')):
      raise ConfigError(
          "split.round_steps='epoch' gives every client one local epoch, so "
          'it cannot take systems local work; use '
          "systems.work_unit='epochs' with split.round_steps='local_steps'.")
    # ⌈n_k / B⌉: one local epoch of every client (`round_steps='epoch'`).
    self.epoch_steps = -(-np.asarray(data.counts) // config.batch_size)
    super().__init__(config, model, data)
    self.augment = augment_lib.get_augmentation(config.augment)
    params = jax.eval_shape(
        lambda: models.init_params(model, jax.random.PRNGKey(0),
                                   self.input_shape(data)))
    self.smashed_shape = jax.eval_shape(
        lambda p: models.split_apply(model, p, 'client', jnp.zeros(
            (1,) + self.input_shape(data))), params).shape[1:]
    self.sizes = accounting.SplitSizes.of(params, self.smashed_shape)

  def input_shape(self, data) -> tuple:
    """One training example's shape (after a cropping augmentation)."""
    return augment_lib.output_shape(self.config.augment, data.feature_shape)

  # ---- plans: local steps and the lr schedule -------------------------------
  def max_local_steps(self) -> int:
    if self.split.round_steps == 'epoch':
      return int(self.epoch_steps.max())
    return super().max_local_steps()

  def clock_default_steps(self) -> int | tuple:
    """M_k per client under `round_steps='epoch'` (the clock's default
    round times, one second per batch)."""
    if self.split.round_steps == 'epoch':
      return tuple(int(m) for m in self.epoch_steps)
    return super().clock_default_steps()

  def round_lr(self, round_index: jax.Array) -> jax.Array:
    """η_r = client_lr · lr_decay^⌊r / lr_decay_every⌋ (Sec. V)."""
    decays = (round_index // self.split.lr_decay_every).astype(jnp.float32)
    return self.config.client_lr * self.split.lr_decay**decays

  def plan_clients(self, state: ServerState, client_ids: jax.Array,
                   keys: jax.Array) -> ClientPlan:
    plans = super().plan_clients(state, client_ids, keys)
    if self.split.round_steps == 'epoch':
      plans = plans.replace(num_steps=jnp.asarray(
          self.epoch_steps, jnp.int32)[client_ids])
    return plans.replace(lr=jnp.full(plans.lr.shape,
                                     self.round_lr(state.round)))

  # ---- local steps ---------------------------------------------------------
  def train_inputs(self, x: jax.Array, key: jax.Array) -> jax.Array:
    """A batch as the model sees it in training: augmented with the step's
    key (the same for a recomputed forward)."""
    if self.augment is None:
      return x
    return self.augment(key_streams.fold(key, Stream.AUGMENT), x)

  def smashed(self, params: PyTree, x: jax.Array, key: jax.Array):
    """x_c(x) in training: [B, ...] smashed data, dropout from `key`."""
    return models.split_apply(self.model, params, 'client', x, train=True,
                              key=key_streams.fold(key, Stream.DROPOUT))

  def server_loss(self, server_params: PyTree, smashed: jax.Array,
                  labels: jax.Array, key: jax.Array) -> jax.Array:
    """F_s: cross-entropy of x_s on a smashed batch (Eq. 13)."""
    logits = models.split_apply(self.model, {'server': server_params},
                                'server', smashed, train=True, key=key)
    return cross_entropy(logits, labels)

  # ---- aggregation -----------------------------------------------------------
  def fedavg(self, state: ServerState, plans: ClientPlan,
             outputs: ClientOutput) -> PyTree:
    """x − g: the params moved to the weighted mean of the active clients'
    models (Eq. 14), g the segments' mean deltas as the engine combines
    them (`segment_pseudo_gradient`: one segment; in cells, FSL_MC's, the
    cloud over the cells' edge models). A part no client trains has zero
    deltas and keeps its value."""
    pseudo_grad = self.segment_pseudo_gradient(state, plans, outputs)
    return jax.tree.map(jnp.subtract, state.params, pseudo_grad)

  def uploads_per_client(self, plans: ClientPlan,
                         outputs: ClientOutput) -> jax.Array:
    """int [K]: smashed batches of each client that reached the server."""
    return jnp.where(plans.delivers(), plans.num_steps, 0)

  def round_metrics(self, state: ServerState, plans: ClientPlan,
                    outputs: ClientOutput) -> dict[str, jax.Array]:
    """Loss, examples and the split accounting (module docstring)."""
    active = plans.is_active()
    uploads = self.uploads_per_client(plans, outputs)
    per_client = accounting.client_bytes(self.protocol, self.sizes, uploads,
                                         self.config.batch_size)
    delivered = plans.delivers()
    metrics = {name: jnp.sum(jnp.where(
        delivered if name in accounting.UPLOADED else active, value,
        0.0)).astype(jnp.float32) for name, value in per_client.items()}
    metrics['bytes_up'] = metrics['smashed_bytes_up'] + metrics[
        'model_bytes_up']
    metrics['bytes_down'] = metrics['grad_bytes_down'] + metrics[
        'model_bytes_down']
    metrics['gb'] = (metrics['bytes_up'] + metrics['bytes_down']) / accounting.GB
    metrics['comm_rounds'] = jnp.sum(uploads).astype(jnp.float32)
    storage = accounting.server_storage(self.protocol, self.sizes,
                                        self.cohort_size)
    metrics['server_storage_params'] = jnp.asarray(float(storage),
                                                   jnp.float32)
    metrics['train_loss'] = mean_over_active(outputs.loss, active)
    metrics['examples'] = jnp.sum(outputs.num_examples)
    return metrics


class CseFsl(SplitLearning):
  """CSE-FSL (module docstring); `split.server_copies='per_client'` is FSL_AN."""

  name = 'cse_fsl'
  option_groups = (SplitOptions, links_work.SystemsOptions,
                   clock_part.ClockOptions, dp_lib.DPOptions)
  dp_release = ('the client part and aux head (x_c, a_c) only: the server '
                'part x_s is trained on smashed activations, which are '
                'neither clipped nor noised')
  unread_sections = {
      'hierarchy': 'its server part trains after the local phase on the '
                   "round's smashed uploads (one model in arrival order, or "
                   "FSL_AN's copies), which cells' edge rounds do not "
                   'carry; fsl_mc runs in cells'}

  def __init__(self, config, model, data):
    super().__init__(config, model, data)
    h = self.upload_every
    if h > self.max_local_steps():
      raise ConfigError(
          f'split.upload_every (h = {h}) exceeds the batches per round '
          f'({self.max_local_steps()}, split.round_steps = '
          f'{self.split.round_steps}).')
    self.protocol = (accounting.FSL_AN if self.per_client_servers
                     else accounting.CSE_FSL)

  @property
  def upload_every(self) -> int:
    return self.split.upload_every

  @property
  def per_client_servers(self) -> bool:
    return self.split.server_copies == 'per_client'

  # ---- clients ---------------------------------------------------------------
  def aux_loss(self, local: program.LocalModel, x: jax.Array, y: jax.Array,
               plan: ClientPlan, ctx) -> tuple[jax.Array, dict]:
    """F_c (Eq. 8): CE of a_c(x_c(x)); emits the smashed batch and labels."""
    del plan
    smashed = self.smashed(local.params, self.train_inputs(x, ctx.key),
                           ctx.key)
    logits = models.split_apply(self.model, local.params, 'aux', smashed)
    return cross_entropy(logits, y), {
        'smashed': jax.lax.stop_gradient(smashed), 'labels': y}

  def post_update_upload(self, local: program.LocalModel, batch, ctx) -> dict:
    """The batch's smashed data under the client weights after the step."""
    smashed = self.smashed(local.params, self.train_inputs(batch.x, ctx.key),
                           ctx.key)
    return {'smashed': smashed, 'labels': batch.y}

  def client_program(self) -> program.ClientProgram:
    base = program.sgd_program(
        self.aux_loss, self.client_optimizer(),
        num_steps=self.max_local_steps(), batch_size=self.config.batch_size,
        trainable=CLIENT_TRAINABLE, emit_every=self.upload_every,
        scan_unroll=self.config.scan_unroll)
    template = {
        'smashed': jax.ShapeDtypeStruct(
            (self.config.batch_size,) + tuple(self.smashed_shape),
            jnp.float32),
        'labels': jax.ShapeDtypeStruct((self.config.batch_size,), jnp.int32)}
    return upload_program(
        base, self.upload_every, first=self.split.upload_batch == 'first',
        recompute=(self.post_update_upload
                   if self.split.activations == 'post' else None),
        template=template)

  def uploads_per_client(self, plans, outputs):
    return jnp.sum(outputs.emitted_active, axis=1) * plans.delivers()

  # ---- server ----------------------------------------------------------------
  def server_sgd(self, server_params: PyTree, upload: dict, active, key,
                 lr) -> PyTree:
    """One server step on an uploaded batch (Eq. 11), skipped if inactive."""
    grads = jax.grad(self.server_loss)(server_params, upload['smashed'],
                                       upload['labels'], key)
    return jax.tree.map(lambda p, g: jnp.where(active, p - lr * g, p),
                        server_params, grads)

  def server_keys(self, state: ServerState, plans: ClientPlan,
                  blocks: int) -> jax.Array:
    """Dropout key of the server step on (client slot k, block b): [K, nb]."""
    base = round_key(state, Stream.SPLIT_SERVER)
    per_client = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(
        base, plans.client_id)
    return jax.vmap(lambda k: jax.vmap(jax.random.fold_in, in_axes=(None, 0))(
        k, jnp.arange(blocks)))(per_client)

  def arrival_order(self, state: ServerState, plans: ClientPlan,
                    blocks: int) -> jax.Array:
    """int [nb, K]: the client slots in arrival order within each block
    (`split.server_order`, module docstring)."""
    cohort = plans.client_id.shape[0]
    if self.split.server_order != 'random':
      return jnp.tile(slot_order(plans.client_id, self.split.server_order),
                      (blocks, 1))
    key = round_key(state, Stream.SPLIT_ORDER)
    return jax.vmap(lambda b: jax.random.permutation(
        jax.random.fold_in(key, b), cohort))(jnp.arange(blocks))

  def train_server(self, state: ServerState, plans: ClientPlan,
                   outputs: ClientOutput) -> PyTree:
    """x_s after the round's uploads: one model in arrival order, or the
    weighted mean of per-client copies."""
    uploads, active = outputs.emitted, outputs.emitted_active
    active = active & plans.delivers()[:, None]
    cohort, blocks = active.shape
    keys = self.server_keys(state, plans, blocks)
    lr = self.round_lr(state.round)
    start = state.params['server']

    def run(server, sequence):
      def one(p, item):
        upload, on, key = item
        return self.server_sgd(p, upload, on, key, lr), None
      return jax.lax.scan(one, server, sequence)[0]

    if self.per_client_servers:
      copies = jax.vmap(run, in_axes=(None, 0))(start, (uploads, active, keys))
      weights = plans.active_weight()
      total = jnp.maximum(jnp.sum(weights), 1e-30)
      return jax.tree.map(
          lambda c, p: jnp.where(jnp.sum(weights) > 0, jnp.tensordot(
              weights / total, c, axes=1), p), copies, start)
    order = self.arrival_order(state, plans, blocks)        # [nb, K]
    slot = order.reshape(-1)
    block = jnp.repeat(jnp.arange(blocks), cohort)
    sequence = jax.tree.map(lambda leaf: leaf[slot, block],
                            (uploads, active, keys))
    return run(start, sequence)

  def aggregate(self, state: ServerState, plans: ClientPlan,
                outputs: ClientOutput) -> ServerState:
    """FedAvg of (x_c, a_c) and the server's scan over the uploads."""
    params = self.fedavg(state, plans, outputs)
    params = {**params, 'server': self.train_server(state, plans, outputs)}
    return state.replace(params=params,
                         clients=self.next_clients(state, plans, outputs))


class FslAn(CseFsl):
  """FSL_AN: CSE-FSL's client side with h = 1 and per-client server copies
  averaged every round (Han et al. 2021; the averaging is our reading)."""

  name = 'fsl_an'

  @property
  def upload_every(self) -> int:
    return 1

  @property
  def per_client_servers(self) -> bool:
    return True


def slot_order(client_ids: jax.Array, order: str) -> jax.Array:
  """int [K]: the cohort's slots in serving order: ascending client id
  ('natural', Eq. 11's 1..n) or as sampled ('sampled')."""
  if order == 'natural':
    return jnp.argsort(client_ids, stable=True)
  return jnp.arange(client_ids.shape[0])


def upload_program(base: program.ClientProgram, h: int, *, first: bool,
                 recompute, template: dict) -> program.ClientProgram:
  """`base` (which emits the output of each block's last step) uploading
  the block's first batch and/or post-update activations instead.

  Args:
    base: a program with `emit_every = h`.
    first: emit the output of step b·h (held in the carry until b·h + h − 1).
    recompute: None (the training forward's output) or
      `recompute(local, batch, ctx) -> output` after the step.
    template: ShapeDtypeStructs of the output (the held value's zeros).
  """
  if not first and recompute is None:
    return base

  def init(start, plan):
    return base.init(start, plan), jax.tree.map(
        lambda t: jnp.zeros(t.shape, t.dtype), template)

  def step(carry, batch, plan, ctx):
    inner, held = carry
    inner, loss, output = base.step(inner, batch, plan, ctx)
    if recompute is not None:
      output = recompute(base.final(inner, plan), batch, ctx)
    if first:
      output = jax.tree.map(lambda o, k: jnp.where(ctx.step % h == 0, o, k),
                            output, held)
    return (inner, output), loss, output

  return dataclasses.replace(base, init=init, step=step,
                             final=lambda carry, plan: base.final(carry[0],
                                                                  plan))
