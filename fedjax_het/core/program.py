"""Client programs: what one client computes in a round, a loop of its own steps.

A `ClientProgram` is a pure step function with static structure:

    carry              = init(start: LocalModel, plan)
    carry, loss, out   = step(carry, batch: Batch, plan, ctx: StepContext)
    end: LocalModel    = final(carry, plan)

run for the client's own steps (`active_steps(plan)`, at most the static
`num_steps`; 0 for an idle slot) on minibatches of `batch_size` rows drawn
from the client's data (`core.batching`: shuffled epochs, a function of the
plan's key). The steps are a loop whose trip count is that number (a
`lax.while_loop`), so one compiled program serves every client and a client
computes only its own steps where clients run one at a time (`lax.map`);
vmapped clients run to the most steps among them, each ending where its own
steps end (the chunked driver groups clients of similar step counts:
`core.backends`). With `emit_every = h > 0` the program keeps the
step output `out` of steps h−1, 2h−1, … (`ClientOutput.emitted`, leaves
[num_steps // h, ...]): e.g. CSE-FSL's smashed data, uploaded every h batches.

`sequence(p1, p2, ...)` runs programs in turn on one `LocalModel` (e.g.
Co-S²P's mask phase, then its weight phase); phase i > 0 draws its
minibatches and step keys from `phase_key(plan.key, i)`.

`sgd_program` builds today's local solver: optax steps on the trainable part
of the `LocalModel` (the params and the client's persistent state), with the
plan's mask applied to gradients and updates. `run_program` executes any of
these for one client and returns its `ClientOutput`.
"""
import dataclasses
from typing import Any, Callable, Sequence

import flax
import jax
import jax.numpy as jnp
import optax

from fedjax_het.core import batching, key_streams
from fedjax_het.core.state import ClientOutput, ClientPlan, StepContext

PyTree = Any
# make_optimizer(lr) -> optax transformation; lr may be a traced scalar.
OptimizerFactory = Callable[[jax.Array], optax.GradientTransformation]


@flax.struct.dataclass
class LocalModel:
  """What a client trains: model parameters and its persistent state.

  Attributes:
    params: the model parameters (starting at the global model or the
      client's row of the start-model table).
    client_state: the client's row of `ServerState.clients`, or None.
  """
  params: PyTree
  client_state: PyTree = None


@flax.struct.dataclass
class Batch:
  """One minibatch: x [B, ...] features, y [B] labels."""
  x: jax.Array
  y: jax.Array


def _all_steps(plan: ClientPlan) -> jax.Array:
  return plan.num_steps


@dataclasses.dataclass(frozen=True)
class ClientProgram:
  """A client's local computation (see the module docstring).

  Attributes:
    init: `(start: LocalModel, plan) -> carry`.
    step: `(carry, batch, plan, ctx) -> (carry, loss scalar, output)`;
      `output` is None unless `emit_every > 0`.
    final: `(carry, plan) -> LocalModel`.
    num_steps: static bound on the steps any client runs (sizes the
      emitted buffer).
    batch_size: static minibatch size B.
    emit_every: keep the output of every h-th step (0: keep none).
    active_steps: `plan -> int32` steps this client runs (≤ num_steps;
      default `plan.num_steps`).
    scan_unroll: steps per trip of the step loop (`_StepLoop`).
  """
  init: Callable[[LocalModel, ClientPlan], PyTree]
  step: Callable[..., tuple[PyTree, jax.Array, PyTree]]
  final: Callable[[PyTree, ClientPlan], LocalModel]
  num_steps: int
  batch_size: int
  emit_every: int = 0
  active_steps: Callable[[ClientPlan], jax.Array] = _all_steps
  scan_unroll: int = 1

  def __post_init__(self):
    for name in ('num_steps', 'batch_size'):
      if getattr(self, name) < 1:
        raise ValueError(f'a client program needs {name} ≥ 1, got '
                         f'{getattr(self, name)}.')
    if self.emit_every < 0 or self.emit_every > self.num_steps:
      raise ValueError(f'emit_every must be in [0, num_steps={self.num_steps}]'
                       f', got {self.emit_every}.')


@dataclasses.dataclass(frozen=True)
class ProgramSequence:
  """Programs run one after another on the same `LocalModel`."""
  phases: tuple[ClientProgram, ...]


def sequence(*programs: ClientProgram) -> ProgramSequence:
  """`p1` then `p2` (then ...): each phase starts where the previous ended.

  The client's loss is the mean over all steps run, its examples the sum over
  phases; `ClientOutput.emitted` is a tuple with one entry per phase (None for
  a phase that emits nothing).
  """
  if not programs or not all(isinstance(p, ClientProgram) for p in programs):
    raise ValueError('sequence() takes one or more ClientPrograms.')
  return ProgramSequence(tuple(programs))


# ---- trainable sub-trees -------------------------------------------------------
Trainable = Callable[[tuple[str, ...]], bool] | Sequence[tuple[str, ...]] | None


def _path_names(path) -> tuple[str, ...]:
  """('params', 'Dense_0', 'kernel') from a jax key path."""
  names = []
  for entry in path:
    for attribute in ('key', 'name', 'idx'):
      if hasattr(entry, attribute):
        names.append(str(getattr(entry, attribute)))
        break
  return tuple(names)


def trainable_predicate(trainable: Trainable) -> Callable[[tuple], bool]:
  """A predicate on `LocalModel` paths from a `trainable` argument.

  None trains all of `params` (not the client state); a sequence of path
  prefixes trains the leaves under any of them (e.g. `(('params', 'client'),
  ('params', 'aux'))`, or `(('client_state', 'mask_logits'),)`); a callable
  is used as it is.
  """
  if trainable is None:
    return lambda path: path[:1] == ('params',)
  if callable(trainable):
    return trainable
  prefixes = tuple(tuple(p) for p in trainable)
  if not prefixes or not all(prefixes):
    raise ValueError(f'trainable must name non-empty path prefixes, got '
                     f'{trainable!r}.')
  return lambda path: any(path[:len(p)] == p for p in prefixes)


def partition(tree: PyTree, predicate) -> tuple[PyTree, PyTree]:
  """(selected, rest): `tree` with None in place of the other part's leaves."""
  picked = jax.tree_util.tree_map_with_path(
      lambda p, x: x if predicate(_path_names(p)) else None, tree)
  rest = jax.tree_util.tree_map_with_path(
      lambda p, x: None if predicate(_path_names(p)) else x, tree)
  return picked, rest


def combine(selected: PyTree, rest: PyTree) -> PyTree:
  """Inverse of `partition`."""
  return jax.tree.map(lambda a, b: a if b is None else b, selected, rest,
                      is_leaf=lambda x: x is None)


def apply_mask(tree: PyTree, mask: PyTree) -> PyTree:
  """`tree` times a 0/1 `mask` pytree leaf by leaf; None means no mask."""
  if mask is None:
    return tree
  return jax.tree.map(lambda t, m: t * m.astype(t.dtype), tree, mask)


def sgd_factory(momentum: float = 0.0, weight_decay: float = 0.0,
                lr_decay: float = 0.0) -> OptimizerFactory:
  """Client SGD with optional heavy-ball momentum, weight decay and a
  learning rate decayed within the round: the optimiser's t-th update
  (t = 0, 1, …, counted from `init`, i.e. from the round's start) uses
  lr·(1 − lr_decay)^t."""

  def make(lr):
    rate = (lambda t: lr * (1 - lr_decay)**t) if lr_decay else lr
    tx = optax.sgd(rate, momentum=momentum or None)
    if weight_decay:
      tx = optax.chain(optax.add_decayed_weights(weight_decay), tx)
    return tx

  return make


@flax.struct.dataclass
class _SgdCarry:
  trained: PyTree      # the trainable leaves (None elsewhere)
  frozen: PyTree       # the other leaves (None elsewhere)
  opt_state: PyTree    # optimiser state of `trained` only


# loss(local: LocalModel, x [B, ...], y [B], plan, ctx) -> scalar, or
# (scalar, step output) when the program emits.
ProgramLoss = Callable[[LocalModel, jax.Array, jax.Array, ClientPlan,
                        StepContext], Any]


def sgd_program(loss: ProgramLoss, make_optimizer: OptimizerFactory, *,
                num_steps: int, batch_size: int, trainable: Trainable = None,
                augment: Callable[[jax.Array, jax.Array], jax.Array]
                | None = None, emit_every: int = 0, scan_unroll: int = 1,
                active_steps: Callable[[ClientPlan], jax.Array] = _all_steps,
                step_mask: Callable[[LocalModel, ClientPlan], PyTree]
                | None = None) -> ClientProgram:
  """Optax steps on the trainable part of the `LocalModel`.

  Each step: x ← augment(x) (a key of its own), g = ∇ loss on the trainable
  leaves, masked by `plan.mask` (on the params), and one step of
  `make_optimizer(plan.lr)` whose update is masked again (so momentum or
  weight decay cannot move entries outside the submodel). With `step_mask`,
  `step_mask(local, plan)` (the `LocalModel` before the step) replaces
  `plan.mask` at every step, e.g. a submodel that changes within the round or
  one read from the client's state. Leaves outside
  `trainable` are forward-only: bit-identical after the program, with no
  optimiser state.

  Args:
    loss: `loss(local, x, y, plan, ctx)`; returns `(loss, output)` when
      `emit_every > 0`.
    make_optimizer: client optimiser factory taking the client's lr (any
      optax transformation: SGD, Adam, Adan, ...).
    num_steps, batch_size, emit_every, scan_unroll, active_steps: as in
      `ClientProgram`.
    trainable: which leaves of the `LocalModel` are trained
      (`trainable_predicate`; default all of `params`).
    augment: optional `augment(key, x_batch) -> x_batch`.
    step_mask: optional `step_mask(local, plan) -> mask pytree` (like the
      params) of a step.
  """
  is_trained = trainable_predicate(trainable)

  def trained_mask(carry, plan):
    local = combine(carry.trained, carry.frozen)
    mask = plan.mask if step_mask is None else step_mask(local, plan)
    if mask is None:
      return None
    # The client state is never masked: a mask of Nones shaped like it.
    unmasked = jax.tree.map(lambda _: None, local.client_state)
    mask, _ = partition(LocalModel(mask, unmasked), is_trained)
    return mask

  def init(start, plan):
    trained, frozen = partition(start, is_trained)
    opt_state = make_optimizer(plan.lr).init(trained)
    return _SgdCarry(trained, frozen, opt_state)

  def step(carry, batch, plan, ctx):
    x = batch.x
    if augment is not None:
      x = augment(key_streams.fold(ctx.key, key_streams.Stream.AUGMENT), x)

    def objective(trained):
      return loss(combine(trained, carry.frozen), x, batch.y, plan, ctx)

    value, grads = jax.value_and_grad(objective, has_aux=emit_every > 0)(
        carry.trained)
    loss_value, output = value if emit_every > 0 else (value, None)
    mask = trained_mask(carry, plan)
    grads = apply_mask(grads, mask)
    updates, opt_state = make_optimizer(plan.lr).update(
        grads, carry.opt_state, carry.trained)
    trained = optax.apply_updates(carry.trained, apply_mask(updates, mask))
    return carry.replace(trained=trained, opt_state=opt_state), loss_value, \
        output

  def final(carry, plan):
    del plan
    return combine(carry.trained, carry.frozen)

  return ClientProgram(init, step, final, num_steps=num_steps,
                       batch_size=batch_size, emit_every=emit_every,
                       active_steps=active_steps, scan_unroll=scan_unroll)


# ---- execution -----------------------------------------------------------------
@flax.struct.dataclass
class _PhaseResult:
  end: LocalModel
  loss_sum: jax.Array
  steps_run: jax.Array
  emitted: PyTree
  emitted_active: jax.Array | None


def _run_phase(program: ClientProgram, start: LocalModel, plan: ClientPlan,
               data, key: jax.Array, min_count: int) -> _PhaseResult:
  row = data.client_row(plan.client_id)  # the id; its cohort row if streamed
  # The client's rows [N, ...], taken once: the loop below reads only them,
  # never the whole federation (under vmap a closure over it would be
  # broadcast to the cohort axis: 0.6 GB per client on W-PFL).
  max_examples = data.max_examples
  x, y = data.examples(row, jnp.arange(max_examples))  # padded or ragged layout
  count = jnp.asarray(data.counts)[row]
  epochs_bound = batching.epochs_per_batch(program.batch_size, min_count)
  step_keys = key_streams.fold(key, key_streams.Stream.STEP_KEYS)
  steps = jnp.clip(jnp.where(plan.is_active(), program.active_steps(plan), 0),
                   0, program.num_steps)

  def one_step(carry, s):
    idx = batching.batch_indices(
        key, s, count, batch_size=program.batch_size,
        max_examples=max_examples, max_epochs_per_batch=epochs_bound)
    ctx = StepContext(global_params=start.params, step=s,
                      key=jax.random.fold_in(step_keys, s),
                      client_state=start.client_state)
    return program.step(carry, Batch(x[idx], y[idx]), plan, ctx)

  carry = program.init(start, plan)
  buffer, emitted_active = _emit_buffer(program, lambda: jax.eval_shape(
      one_step, carry, 0)[2], steps)
  loop = _StepLoop(program, one_step, steps)
  carry, loss_sum, emitted = loop.run(carry, buffer)
  return _PhaseResult(program.final(carry, plan), loss_sum, steps, emitted,
                      emitted_active)


def _emit_buffer(program: ClientProgram, output_shapes: Callable[[], PyTree],
                 steps: jax.Array) -> tuple[PyTree, jax.Array | None]:
  """(buffer, active) of `emit_every = h > 0`: zeros of `blocks = num_steps
  // h` step outputs (`output_shapes()`: one's shapes), row b for step
  b·h + h − 1, and bool [blocks]: whether the client runs that step; (None,
  None) when the program emits nothing. The buffer's size is static, only
  the rows of steps run are written."""
  h = program.emit_every
  if h == 0:
    return None, None
  blocks = program.num_steps // h
  buffer = jax.tree.map(lambda t: jnp.zeros((blocks,) + t.shape, t.dtype),
                        output_shapes())
  return buffer, jnp.arange(blocks) * h + h - 1 < steps


def _keep_output(buffer: PyTree, h: int, s: jax.Array, output: PyTree,
                 ran: jax.Array) -> PyTree:
  """`buffer` with step `s`'s `output` in row s // h where s is a block's
  last step (s + 1 ≡ 0 mod h) that ran (`ran`); None when nothing is kept."""
  if buffer is None:
    return None
  b = s // h
  kept = ran & ((s + 1) % h == 0)
  return jax.tree.map(
      lambda rows, o: jax.lax.dynamic_update_index_in_dim(
          rows, jnp.where(kept, o, jax.lax.dynamic_index_in_dim(
              rows, b, keepdims=False)), b, 0), buffer, output)


@dataclasses.dataclass(frozen=True)
class _StepLoop:
  """A client's local steps 0 .. steps − 1 as a loop whose trip count is
  its own step count (a `lax.while_loop`), not the program's static
  `num_steps`: under `lax.map` a client computes only its own steps; under
  vmap the loop runs to the most steps of the vmapped clients (JAX's
  batching rule keeps each client's carry while its own condition holds,
  so a client ends where its own steps end, bit for bit).

  With `scan_unroll = u > 1` a trip runs u steps, those past `steps` frozen
  with `jnp.where` (⌈steps / u⌉ trips).
  """
  program: ClientProgram
  one_step: Callable   # (carry, s) -> (carry, loss, output)
  steps: jax.Array

  def run(self, carry: PyTree, buffer: PyTree
          ) -> tuple[PyTree, jax.Array, PyTree]:
    """(carry, Σ losses of the steps run, `buffer` with their emitted
    outputs) after the client's steps."""
    u = self.program.scan_unroll
    trips = (self.steps + u - 1) // u
    state = (jnp.zeros((), jnp.int32), carry, jnp.zeros((), jnp.float32),
             buffer)
    _, carry, loss_sum, buffer = jax.lax.while_loop(
        lambda state: state[0] < trips, self.trip, state)
    return carry, loss_sum, buffer

  def trip(self, state):
    """Steps t·u .. t·u + u − 1 (t: the trip's index)."""
    t, carry, loss_sum, buffer = state
    u = self.program.scan_unroll
    for i in range(u):
      s = t * u + i
      ran = s < self.steps
      new_carry, loss, output = self.one_step(carry, s)
      carry = new_carry if u == 1 else jax.tree.map(
          lambda new, old: jnp.where(ran, new, old), new_carry, carry)
      loss_sum = loss_sum + jnp.where(ran, loss, 0.0)
      buffer = _keep_output(buffer, self.program.emit_every, s, output, ran)
    return t + 1, carry, loss_sum, buffer


def phase_key(key: jax.Array, phase: int) -> jax.Array:
  """The key phase `phase` of a sequence draws its minibatches and step keys
  from: the client's key `key` for the first, its `PHASES` stream with the
  phase folded in for the others (`core.key_streams`)."""
  if phase == 0:
    return key
  return jax.random.fold_in(
      key_streams.fold(key, key_streams.Stream.PHASES), phase)


def run_program(program: ClientProgram | ProgramSequence, start: LocalModel,
                plan: ClientPlan, data, *, min_count: int) -> ClientOutput:
  """Runs a client's program from `start` on its rows of `data`.

  Args:
    program: a `ClientProgram` or a `sequence` of them.
    start: the client's start model and persistent state.
    plan: the client's plan (unbatched).
    data: `FederatedData` (x [M, N, ...], y [M, N], counts [M]), `RaggedData`
      (rows back to back), or a streamed round's `CohortData` holding the client's
      rows (`data.client_row`); read through `data.examples`.
    min_count: static smallest client size (bounds the epochs a batch
      touches, `batching.epochs_per_batch`).

  Returns:
    `ClientOutput`: delta = start.params − end.params masked by `plan.mask`,
    the mean loss over the steps run, examples = Σ steps × B, the emitted
    step outputs and the client state after the program.
  """
  phases = program.phases if isinstance(program, ProgramSequence) else (
      program,)
  local, loss_sum, steps, examples, emitted, active = start, 0.0, 0, 0, [], []
  for i, phase in enumerate(phases):
    result = _run_phase(phase, local, plan, data, phase_key(plan.key, i),
                        min_count)
    local = result.end
    loss_sum = loss_sum + result.loss_sum
    steps = steps + result.steps_run
    examples = examples + result.steps_run * phase.batch_size
    emitted.append(result.emitted)
    active.append(result.emitted_active)
  if len(phases) == 1:
    emitted, active = emitted[0], active[0]
  else:
    emitted, active = tuple(emitted), tuple(active)
  delta = jax.tree.map(jnp.subtract, start.params, local.params)
  return ClientOutput(
      delta=apply_mask(delta, plan.mask),
      loss=loss_sum / jnp.maximum(steps, 1),
      num_examples=jnp.asarray(examples).astype(jnp.int32),
      emitted=emitted, emitted_active=active,
      client_state=local.client_state)
