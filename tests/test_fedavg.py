"""FedAvg on the engine equals a plain sequential reference written here."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_het.core.rounds import RoundRunner
from engine_utils import tiny_config, tiny_fedavg


def reference_fedavg(model, params, data, config, root_key, rounds):
  """FedAvg as a paper states it: a Python loop over rounds, clients, steps."""
  x, y, counts = (np.asarray(a) for a in (data.x, data.y, data.counts))
  num_clients, max_examples = y.shape
  params = jax.tree.map(np.asarray, params)

  def loss(p, xb, yb):
    logits = model.apply({'params': p}, xb, train=True)
    return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

  grad = jax.jit(jax.grad(loss))
  for r in range(rounds):
    sample_key, clients_key = jax.random.split(jax.random.fold_in(root_key, r))
    cohort = np.asarray(jax.random.choice(
        sample_key, num_clients, (config.clients_per_round,), replace=False))
    deltas, weights = [], []
    for c in cohort:
      key = jax.random.fold_in(jax.random.fold_in(clients_key, c), 0)
      n = counts[c]

      def permutation(epoch):
        u = np.asarray(jax.random.uniform(jax.random.fold_in(key, epoch),
                                          (max_examples,)))
        return np.argsort(np.where(np.arange(max_examples) < n, u, 2.0),
                          kind='stable')

      local = params
      for s in range(config.local_steps):
        rows = [permutation(p // n)[p % n]
                for p in range(s * config.batch_size,
                               (s + 1) * config.batch_size)]
        g = grad(local, x[c, rows], y[c, rows])
        local = jax.tree.map(lambda w, gw: w - config.client_lr * np.asarray(gw),
                             local, g)
      deltas.append(jax.tree.map(np.subtract, params, local))
      weights.append(float(n))
    weights = np.asarray(weights) / np.sum(weights)
    mean_delta = jax.tree.map(lambda *d: sum(w * di for w, di in zip(weights, d)),
                              *deltas)
    params = jax.tree.map(lambda p, d: p - config.server_lr * d, params,
                          mean_delta)
  return params


@pytest.mark.parametrize('backend', ['vmap', 'sequential'])
@pytest.mark.parametrize('server_lr', [1.0, 0.5])
def test_fedavg_equals_the_sequential_reference(backend, server_lr):
  config = tiny_config(server_lr=server_lr)
  algorithm, state, data = tiny_fedavg(config)
  expected = reference_fedavg(algorithm.model, state.params, data, config,
                              state.key, rounds=3)
  state, _ = RoundRunner(algorithm, backend).run(state, data, 3)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
               state.params, expected)


def test_proportional_sampling_draws_by_data_size_and_repeats_clients():
  config = tiny_config(client_sampling='proportional',
                       aggregation_weights='uniform', clients_per_round=6)
  algorithm, state, data = tiny_fedavg(config)
  counts = np.asarray(data.counts)
  draws = []
  for r in range(300):
    plans = algorithm.plan_round(state.replace(round=jnp.int32(r)), data)
    draws.append(np.asarray(plans.client_id))
    np.testing.assert_array_equal(plans.weight, 1.0)
  draws = np.concatenate(draws)
  np.testing.assert_allclose(np.bincount(draws, minlength=6) / draws.size,
                             counts / counts.sum(), atol=0.03)
  # A client drawn twice in one round trains twice, with different batches.
  plans = algorithm.plan_round(state, data)
  ids = np.asarray(plans.client_id)
  assert len(set(ids)) < len(ids)  # this seed draws a repeat in round 0
  assert len({tuple(k) for k in np.asarray(plans.key)}) == len(ids)
