"""The generic client update: K local optax steps on one client's data.

`make_client_update` builds a pure function

    client_update(global_params, plan: ClientPlan, data) -> ClientOutput

used unchanged by every client-axis backend (vmap, lax.map, sequential). The
per-client arrays in the plan carry what the papers vary: the number of local
steps (unequal work: the scan runs to the static maximum and freezes a finished
client with `jnp.where`), the learning rate, and a parameter mask selecting a
submodel (gradients and optimiser updates are zeroed outside it, so the
returned delta is zero there).
"""
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from fedjax_het.core import batching
from fedjax_het.core.state import ClientOutput, ClientPlan, StepContext

PyTree = Any
# loss_fn(params, x [B, ...], y [B], plan, ctx) -> scalar mean loss.
LossFn = Callable[[PyTree, jax.Array, jax.Array, ClientPlan, StepContext],
                  jax.Array]
# Stream of per-step keys, folded into the client's key apart from the epoch
# permutations of `batching` (epochs never reach this index).
_STEP_KEY_STREAM = 2**31 - 1
# make_optimizer(lr) -> optax transformation; lr may be a traced scalar.
OptimizerFactory = Callable[[jax.Array], optax.GradientTransformation]


def sgd_factory(momentum: float = 0.0,
                weight_decay: float = 0.0) -> OptimizerFactory:
  """Client SGD with optional heavy-ball momentum and weight decay."""

  def make(lr):
    tx = optax.sgd(lr, momentum=momentum or None)
    if weight_decay:
      tx = optax.chain(optax.add_decayed_weights(weight_decay), tx)
    return tx

  return make


def apply_mask(tree: PyTree, mask: PyTree) -> PyTree:
  """`tree` times a 0/1 `mask` pytree leaf by leaf; None means no mask."""
  if mask is None:
    return tree
  return jax.tree.map(lambda t, m: t * m.astype(t.dtype), tree, mask)


def make_client_update(loss_fn: LossFn, make_optimizer: OptimizerFactory,
                       data, *, max_steps: int, batch_size: int,
                       scan_unroll: int = 1,
                       augment: Callable[[jax.Array, jax.Array], jax.Array]
                       | None = None) -> Callable[..., ClientOutput]:
  """Builds `client_update(global_params, plan, data) -> ClientOutput`.

  The federated data is an argument of the returned function, not a closure,
  so jit never embeds the dataset in the compiled program as a constant.

  Args:
    loss_fn: loss of a batch under the client's forward pass, given the step's
      `StepContext`. Algorithms put their submodel semantics here (e.g.
      forward with masked params).
    make_optimizer: client optimiser factory taking the client's lr.
    data: `FederatedData` with x [M, N, ...], y [M, N], counts [M]; only its
      shapes and smallest count are read here (static sizes of the program).
    max_steps: static number of scan steps (the cohort's maximum work); a
      plan asking for more steps runs `max_steps`.
    batch_size: static local batch size B.
    scan_unroll: `lax.scan` unroll factor for the local steps.
    augment: optional `augment(key, x_batch) -> x_batch` applied to every
      minibatch with a key of its own (e.g. `fedjax_het.data.augment`).
  """
  max_examples = data.x.shape[1]
  epochs_bound = batching.epochs_per_batch(batch_size, int(data.counts.min()))

  def client_update(global_params: PyTree, plan: ClientPlan,
                    data) -> ClientOutput:
    x, y = jnp.asarray(data.x), jnp.asarray(data.y)
    count = jnp.asarray(data.counts)[plan.client_id]
    tx = make_optimizer(plan.lr)
    grad_fn = jax.value_and_grad(loss_fn)
    step_keys = jax.random.fold_in(plan.key, _STEP_KEY_STREAM)

    def step(carry, s):
      params, opt_state, loss_sum = carry
      idx = batching.batch_indices(
          plan.key, s, count, batch_size=batch_size,
          max_examples=max_examples, max_epochs_per_batch=epochs_bound)
      xb = x[plan.client_id, idx]
      yb = y[plan.client_id, idx]
      step_key = jax.random.fold_in(step_keys, s)
      if augment is not None:
        xb = augment(jax.random.fold_in(step_key, 1), xb)
      ctx = StepContext(global_params=global_params, step=s, key=step_key)
      loss, grads = grad_fn(params, xb, yb, plan, ctx)
      grads = apply_mask(grads, plan.mask)
      updates, new_opt_state = tx.update(grads, opt_state, params)
      updates = apply_mask(updates, plan.mask)
      new_params = optax.apply_updates(params, updates)
      active = s < plan.num_steps
      keep = lambda new, old: jnp.where(active, new, old)
      params = jax.tree.map(keep, new_params, params)
      opt_state = jax.tree.map(keep, new_opt_state, opt_state)
      loss_sum = loss_sum + jnp.where(active, loss, 0.0)
      return (params, opt_state, loss_sum), None

    init = (global_params, tx.init(global_params), jnp.zeros((), jnp.float32))
    (params, _, loss_sum), _ = jax.lax.scan(
        step, init, jnp.arange(max_steps), unroll=scan_unroll)
    delta = jax.tree.map(jnp.subtract, global_params, params)
    steps_run = jnp.clip(plan.num_steps, 0, max_steps)
    return ClientOutput(
        delta=apply_mask(delta, plan.mask),
        loss=loss_sum / jnp.maximum(steps_run, 1),
        num_examples=(steps_run * batch_size).astype(jnp.int32))

  return client_update
