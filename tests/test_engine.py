"""The round engine: batching, sampling, client update, backends, rounds."""
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fedjax_het import models
from fedjax_het.methods import ALGORITHMS
from fedjax_het.core import backends, batching, sampling
from fedjax_het.core.rounds import RoundRunner
from engine_utils import stacked_masks, tiny_config, tiny_data, tiny_fedavg
from script_utils import child_report

BACKEND_SETUPS = [('vmap', None), ('map', None), ('map', 3), ('sequential', None)]


# ---- minibatches -------------------------------------------------------------
@settings(max_examples=20, deadline=None)
@given(st.integers(1, 12), st.integers(1, 7), st.integers(0, 30))
def test_batches_walk_through_shuffled_epochs(count, batch_size, seed):
  max_examples = 12
  bound = batching.epochs_per_batch(batch_size, count)
  key = jax.random.PRNGKey(seed)
  steps = 2 * (count // batch_size + 2)
  idx = np.concatenate([np.asarray(batching.batch_indices(
      key, jnp.int32(s), jnp.int32(count), batch_size=batch_size,
      max_examples=max_examples, max_epochs_per_batch=bound))
                        for s in range(steps)])
  assert idx.min() >= 0 and idx.max() < count  # never a padding row
  full_epochs = len(idx) // count
  for e in range(full_epochs):  # every epoch is a permutation of the rows
    np.testing.assert_array_equal(np.sort(idx[e * count:(e + 1) * count]),
                                  np.arange(count))


def test_batches_are_a_function_of_the_key():
  kwargs = dict(batch_size=4, max_examples=40, max_epochs_per_batch=2)
  order = lambda seed: np.concatenate([np.asarray(batching.batch_indices(
      jax.random.PRNGKey(seed), s, 37, **kwargs)) for s in range(9)])
  np.testing.assert_array_equal(order(1), order(1))
  assert not np.array_equal(order(1), order(2))


# ---- sampling ----------------------------------------------------------------
def test_uniform_sampling_is_without_replacement_and_uniform():
  keys = jax.random.split(jax.random.PRNGKey(0), 4000)
  ids = jax.vmap(lambda k: sampling.uniform_without_replacement(k, 10, 3))(keys)
  ids = np.asarray(ids)
  assert all(len(set(row)) == 3 for row in ids)
  freq = np.bincount(ids.ravel(), minlength=10) / ids.size
  np.testing.assert_allclose(freq, 0.1, atol=0.01)


def test_sampling_with_replacement_follows_the_probabilities():
  probs = jnp.array([0.5, 0.3, 0.2, 0.0])
  ids = np.asarray(sampling.with_replacement(jax.random.PRNGKey(0), probs, 20000))
  np.testing.assert_allclose(np.bincount(ids, minlength=4) / ids.size, probs,
                             atol=0.01)


def test_too_large_cohort_is_rejected():
  with pytest.raises(ValueError, match='distinct clients'):
    sampling.uniform_without_replacement(jax.random.PRNGKey(0), 3, 4)


# ---- client update -----------------------------------------------------------
def _one_plan(algorithm, state, data, **changes):
  plans = algorithm.plan_round(state, data)
  plan = jax.tree.map(lambda x: x[0], plans)
  return plan.replace(**changes)


def test_zero_steps_give_a_zero_delta():
  algorithm, state, data = tiny_fedavg()
  plan = _one_plan(algorithm, state, data, num_steps=jnp.int32(0))
  out = algorithm.client_update(state.params, plan, data)
  jax.tree.map(lambda d: np.testing.assert_array_equal(d, 0), out.delta)


def test_frozen_steps_equal_a_shorter_run():
  """A client asked for 2 of 5 scan steps ends where a 2-step scan ends."""
  algorithm5, state, data = tiny_fedavg(tiny_config(local_steps=5))
  algorithm2, _, _ = tiny_fedavg(tiny_config(local_steps=2))
  plan = _one_plan(algorithm5, state, data, num_steps=jnp.int32(2))
  short = algorithm2.client_update(state.params, plan, data)
  frozen = algorithm5.client_update(state.params, plan, data)
  chex.assert_trees_all_close(frozen.delta, short.delta, atol=1e-7)
  np.testing.assert_allclose(frozen.loss, short.loss, rtol=1e-6)
  # Asking for more than the static maximum runs the maximum, and says so.
  capped = algorithm2.client_update(
      state.params, plan.replace(num_steps=jnp.int32(9)), data)
  chex.assert_trees_all_close(capped.delta, short.delta, atol=1e-7)
  assert int(capped.num_examples) == 2 * algorithm2.config.batch_size


def test_mask_confines_the_update_to_the_submodel():
  algorithm, state, data = tiny_fedavg(tiny_config(client_momentum=0.9,
                                                   client_weight_decay=0.1))
  mask = jax.tree.map(
      lambda p: (jax.random.uniform(jax.random.PRNGKey(p.size), p.shape) < 0.5
                 ).astype(jnp.float32), state.params)
  plan = _one_plan(algorithm, state, data, mask=mask)
  out = algorithm.client_update(state.params, plan, data)
  jax.tree.map(lambda d, m: np.testing.assert_array_equal(
      np.asarray(d)[np.asarray(m) == 0], 0), out.delta, mask)
  assert any(np.any(np.asarray(d) != 0) for d in jax.tree.leaves(out.delta))


# ---- backends and rounds -----------------------------------------------------
def _run(backend, chunk, rounds=3, config=None):
  algorithm, state, data = tiny_fedavg(config)
  runner = RoundRunner(algorithm, backend, chunk)
  state, metrics = runner.run(state, data, rounds)
  return state, metrics


@pytest.mark.parametrize('backend,chunk', BACKEND_SETUPS)
def test_every_backend_gives_the_same_result(backend, chunk):
  reference_state, reference_metrics = _run('vmap', None)
  state, metrics = _run(backend, chunk)
  chex.assert_trees_all_close(state.params, reference_state.params,
                              rtol=1e-5, atol=1e-6)
  chex.assert_trees_all_close(metrics, reference_metrics, rtol=1e-5)
  assert int(state.round) == 3


def test_unequal_local_work_agrees_across_backends():
  """Per-client step counts (unequal work) are data, on every backend."""
  results = []
  for backend, chunk in BACKEND_SETUPS:
    algorithm, state, data = tiny_fedavg(tiny_config(local_steps=4))
    plan_clients = algorithm.plan_clients
    algorithm.plan_clients = lambda s, ids, keys, f=plan_clients: f(
        s, ids, keys).replace(num_steps=(ids % 4 + 1).astype(jnp.int32))
    state, _ = RoundRunner(algorithm, backend, chunk).run(state, data, 2)
    results.append(state.params)
  for params in results[1:]:
    chex.assert_trees_all_close(params, results[0], rtol=1e-5, atol=1e-6)


def _drivers():
  return [backends.VmapClients(), backends.MapClients(None),
          backends.MapClients(3), backends.SequentialClients()]


def test_map_sum_adds_in_cohort_order_on_every_backend():
  """Σ summands is the left fold in cohort order (7 clients: MapClients(3) has
  a partial last chunk); the outputs are map's. vmap adds stored products, bit
  for bit the fold; map and sequential compute each product beside its add, so
  XLA:CPU may fuse them into one multiply-add (one rounding less): those two
  agree bit for bit and are within 1 ulp of the fold."""
  rng = np.random.default_rng(0)
  # Magnitudes 1e-4 … 1e4: float32 addition order changes the result.
  per_client = jnp.asarray(rng.normal(size=(7, 5)) *
                           10.0**rng.integers(-4, 5, size=(7, 5)), jnp.float32)
  scale = jnp.float32(1.7)

  def fn(shared, one):
    return one.sum(), {'x': one * shared, 'n': jnp.ones((), jnp.int32)}

  expected = np.zeros(5, np.float32)
  for row in np.asarray(per_client * scale):
    expected = expected + row
  totals = []
  for clients in _drivers():
    map_fn = jax.jit(clients.map_sum, static_argnums=0) if not isinstance(
        clients, backends.SequentialClients) else clients.map_sum
    outs, total = map_fn(fn, scale, per_client)
    np.testing.assert_allclose(total['x'], expected, rtol=1.2e-7, atol=0)
    assert int(total['n']) == 7
    np.testing.assert_allclose(outs, per_client.sum(1), rtol=1e-6)
    totals.append(np.asarray(total['x']))
  np.testing.assert_array_equal(totals[0], expected)
  for total in totals[2:]:
    np.testing.assert_array_equal(total, totals[1])
  reversed_fold = np.zeros(5, np.float32)
  for row in np.asarray(per_client * scale)[::-1]:
    reversed_fold = reversed_fold + row
  assert not np.array_equal(expected, reversed_fold)  # the order is visible


def test_deltas_summed_in_the_map_equal_stacked_aggregation():
  """FedAvg and FIARSE ('nonzero' coverage): sums in the client map (no
  stacked deltas) give the stacked segment-sum aggregation's parameters."""
  for name in ('fedavg', 'fiarse'):
    results = []
    for in_map in (True, False):
      config = tiny_config(algorithm=name)
      if name == 'fiarse':
        config.capacities = (0.25, 1.0)
      data = tiny_data()
      model = models.create_model('mlp', 3, **config.model_options.to_dict())
      params = models.init_params(model, jax.random.PRNGKey(0), data.x.shape[2:])
      algorithm = ALGORITHMS[name](config, model, data)
      state = algorithm.init(params, jax.random.PRNGKey(1))
      algorithm.sums_deltas_in_map = in_map
      state, _ = RoundRunner(algorithm, 'map').run(state, data, 3)
      results.append(state.params)
    chex.assert_trees_all_close(results[0], results[1], rtol=1e-6, atol=1e-7)


def mask_table_differences() -> dict:
  """{method: {backend: entries that differ}} between 2 rounds whose masks are
  a table each client indexes in the map (`ClientPlan.mask_table`) and the
  same rounds with the cohort's masks gathered into the plans: the final
  parameters' entries and the rounds' uploaded bytes."""
  differences = {}
  for name in ('heterofl', 'fiarse'):
    for backend in ('vmap', 'map', 'sequential'):
      results = []
      for gathered in (False, True):
        config = tiny_config(algorithm=name, capacities=(0.25, 0.5, 1.0))
        data = tiny_data()
        model = models.create_model('mlp', 3,
                                    **config.model_options.to_dict())
        params = models.init_params(model, jax.random.PRNGKey(0),
                                    data.x.shape[2:])
        algorithm = ALGORITHMS[name](config, model, data)
        if gathered:
          plan_clients = algorithm.plan_clients
          algorithm.plan_clients = lambda *a, f=plan_clients: stacked_masks(
              f(*a))
        state = algorithm.init(params, jax.random.PRNGKey(1))
        state, metrics = RoundRunner(algorithm, backend).run(state, data, 2)
        results.append(jax.device_get((state.params, metrics['bytes_up'])))
      differences.setdefault(name, {})[backend] = sum(
          int(np.sum(a != b)) for a, b in zip(*map(jax.tree.leaves, results)))
  return differences


@pytest.fixture(scope='session')
def mask_table_report(tmp_path_factory, worker_id):
  """`mask_table_differences()` compiled with XLA:CPU's fusion emitters (a
  user's default): a child process (`python test_engine.py`), once per
  session."""
  return child_report(tmp_path_factory, worker_id, 'mask_table_report')


@pytest.mark.parametrize('name', ['heterofl', 'fiarse'])
def test_a_mask_table_trains_as_the_gathered_masks(mask_table_report, name):
  """Masks as a table each client indexes in the map give the same rounds,
  bit for bit, and the same bytes as the cohort's masks gathered into the
  plans, on every driver. With XLA:CPU's fusion emitters, a user's default
  (the child also compiles at LLVM level 0, as the suite does; at default
  flags the report is the same): under the suite's older elemental emitters
  (`script_utils.test_xla_flags`) the two programs fuse differently, and on
  'map' 2 of HeteroFL's 21 head entries move by 1 ulp."""
  assert mask_table_report[name] == {'vmap': 0, 'map': 0, 'sequential': 0}


def test_client_update_vmaps_over_plans_that_share_a_mask_table():
  """A round by hand (notebooks/quickstart.ipynb): `plans.cohort_axes()`
  vmaps `client_update` over a cohort of 4 whose plans share a table of 3
  masks, and gives the updates of the masks gathered per client."""
  config = tiny_config(algorithm='heterofl', capacities=(0.25, 0.5, 1.0))
  data = tiny_data()
  model = models.create_model('mlp', 3, **config.model_options.to_dict())
  params = models.init_params(model, jax.random.PRNGKey(0), data.x.shape[2:])
  algorithm = ALGORITHMS['heterofl'](config, model, data)
  plans = algorithm.plan_round(algorithm.init(params, jax.random.PRNGKey(1)),
                               data)
  assert jax.tree.leaves(plans.mask_table)[0].shape[0] == 3
  update = lambda plans, axes: jax.vmap(
      algorithm.client_update, in_axes=(None, axes, None))(params, plans, data)
  chex.assert_trees_all_equal(update(plans, plans.cohort_axes()),
                              update(stacked_masks(plans), 0))


def test_jitted_round_equals_eager_round():
  algorithm, state, data = tiny_fedavg()
  runner = RoundRunner(algorithm, 'vmap')
  jitted_state, jitted_metrics = jax.jit(runner.round)(state, data)
  with jax.disable_jit():
    eager_state, eager_metrics = runner.round(state, data)
  chex.assert_trees_all_close(jitted_state.params, eager_state.params,
                              rtol=1e-5, atol=1e-6)
  chex.assert_trees_all_close(jitted_metrics, eager_metrics, rtol=1e-5)


def test_scanned_chunk_equals_single_rounds():
  chunked, _ = _run('vmap', None, rounds=4)
  algorithm, state, data = tiny_fedavg()
  runner = RoundRunner(algorithm, 'vmap')
  for _ in range(4):
    state, _ = runner.run(state, data, 1)
  chex.assert_trees_all_close(state.params, chunked.params, rtol=1e-6,
                              atol=1e-7)


def test_same_seed_same_result_different_seed_different_result():
  a, _ = _run('vmap', None)
  b, _ = _run('vmap', None)
  chex.assert_trees_all_equal(a.params, b.params)
  algorithm, state, data = tiny_fedavg(seed=5)
  c, _ = RoundRunner(algorithm, 'vmap').run(state, data, 3)
  assert not np.allclose(jax.tree.leaves(c.params)[0],
                         jax.tree.leaves(a.params)[0])


def test_sequential_backend_names_the_diverging_client():
  algorithm, state, data = tiny_fedavg(tiny_config(client_lr=1e30,
                                                   local_steps=5))
  runner = RoundRunner(algorithm, 'sequential')
  with pytest.raises(backends.ClientError, match=r'client \d+ \(cohort slot 0\) in round 0'):
    runner.run(state, data, 1)


def test_bytes_are_counted_per_exchanged_model():
  config = tiny_config()
  algorithm, state, data = tiny_fedavg(config)
  _, metrics = RoundRunner(algorithm, 'vmap').run(state, data, 2)
  model_bytes = sum(p.size * 4 for p in jax.tree.leaves(state.params))
  np.testing.assert_allclose(metrics['bytes_down'],
                             [config.clients_per_round * model_bytes] * 2)
  np.testing.assert_allclose(metrics['bytes_up'], metrics['bytes_down'])


def test_segments_of_disjoint_pieces_reassemble_to_the_single_segment_mean():
  """Cells training disjoint halves, summed by the cloud (HIST Eq. 7), equal
  one global partial average with the same masks."""
  from fedjax_het.methods import FedAvg  # pylint: disable=g-import-not-at-top

  class HalvesBySlot(FedAvg):
    def plan_clients(self, state, ids, keys):
      plans = super().plan_clients(state, ids, keys)
      parity = jnp.arange(ids.shape[0], dtype=jnp.int32) % 2
      halves = jax.tree.map(
          lambda p: jnp.stack([jnp.arange(p.size).reshape(p.shape) % 2 == s
                               for s in (0, 1)]).astype(jnp.float32),
          state.params)
      return plans.replace(group=parity * (self.num_segments - 1),
                           mask=jax.tree.map(lambda h: h[parity], halves))

  class TwoCells(HalvesBySlot):
    num_segments = 2

    def combine_segments(self, means, coverage):
      return jax.tree.map(lambda m: m.sum(0), means)

  results = []
  for cls in (HalvesBySlot, TwoCells):
    base, state, data = tiny_fedavg()
    algorithm = cls(base.config, base.model, data)
    state, _ = RoundRunner(algorithm, 'vmap').run(state, data, 2)
    results.append(state.params)
  chex.assert_trees_all_close(results[0], results[1], rtol=1e-6, atol=1e-7)


if __name__ == '__main__':
  print(json.dumps(mask_table_differences()))
