"""FedAvg under the cells part (`fedjax_het.parts.cells`): E edge rounds in N
cells, OMA or AirComp edge sums, the cloud over the cells; off at the
section's defaults."""
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het import config as config_lib
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.options import ConfigError
from engine_utils import tiny_config, tiny_data, tiny_fedavg, tiny_method

# The tiny federation: 6 clients in cells {0, 1, 2} and {3, 4, 5}, K = 4 of
# them sampled per round (a cell may have one client or none).
SOLVER = {'beamformer_sca_steps': 3, 'beamformer_inner_steps': 20}


@functools.lru_cache(maxsize=None)
def method_run(name='fedavg', rounds=2, **hierarchy):
  """(algorithm, first state, final state, metrics) of method `name` on the
  tiny federation (submodel methods: capacities 1/4 and 1) with
  `config.hierarchy` updated by `hierarchy`, run once."""
  config = tiny_config(algorithm=name)
  if name != 'fedavg':
    config.capacities = (0.25, 1.0)
  if name == 'scalefl':  # its submodels are depths: a deeper MLP with exits
    config.model_options.update(hidden=(8, 8, 8), exits=True)
  config.hierarchy.update(hierarchy)
  algorithm, state, data = tiny_method(config)
  first = jax.tree.map(jnp.copy, state)  # the runner donates its state
  final, metrics = RoundRunner(algorithm, 'vmap').run(state, data, rounds)
  return algorithm, first, final, jax.device_get(metrics)


fedavg_run = functools.partial(method_run, 'fedavg')


TWO_CELLS = {'num_cells': 2, 'cloud_weights': 'clients'}


def test_neutral_settings_leave_fedavg_as_it_is():
  """One cell, one edge round and OMA set explicitly: the part is off and
  the parameters are bit-identical to the run without the section."""
  *_, flat, flat_metrics = fedavg_run()
  algorithm, _, neutral, metrics = fedavg_run(num_cells=1, edge_rounds=1,
                                              edge_channel='oma')
  assert not algorithm.parts.names and algorithm.sums_in_map
  chex.assert_trees_all_equal(neutral.params, flat.params)
  np.testing.assert_array_equal(metrics['bytes_up'], flat_metrics['bytes_up'])


def test_two_cells_one_edge_round_is_flat_fedavg():
  """The cloud weighting cells by their clients' total weight W_j of edge
  means Σ_{i∈j} w_i Δ_i / W_j is the flat mean Σ w_i Δ_i / W: same cohort and
  keys, equal to float rounding (the two-level sum divides by W_j and
  multiplies back, so it is not bit-identical)."""
  *_, flat, flat_metrics = fedavg_run()
  algorithm, first, cells, metrics = fedavg_run(**TWO_CELLS)
  assert algorithm.parts.owner('local_phase').cell_sizes == (3, 3)
  assert algorithm.segments == 2
  plans = jax.device_get(algorithm.plan_round(first))
  np.testing.assert_array_equal(plans.group, plans.client_id // 3)
  chex.assert_trees_all_close(cells.params, flat.params, rtol=1e-5,
                              atol=1e-7)
  for key in ('bytes_up', 'bytes_down', 'train_loss'):
    np.testing.assert_allclose(metrics[key], flat_metrics[key], rtol=1e-6)


def test_noiseless_aircomp_equals_oma_and_noise_changes_the_model():
  *_, oma, _ = fedavg_run(**TWO_CELLS)
  algorithm, _, silent, metrics = fedavg_run(
      **TWO_CELLS, edge_channel='aircomp', aircomp_noise='none', **SOLVER)
  assert not algorithm.sums_in_map   # AirComp reads every delta
  assert algorithm.summary_facts()['aircomp_noise'] == 'none (noiseless)'
  chex.assert_trees_all_close(silent.params, oma.params, rtol=1e-4,
                              atol=1e-7)
  assert np.all(metrics['beamformer_gain'] >=
                metrics['beamformer_initial_gain'])
  *_, noisy, noisy_metrics = fedavg_run(
      **TWO_CELLS, edge_channel='aircomp', snr_db_slow=-10.0,
      snr_db_fast=0.0, **SOLVER)
  leaves = jax.tree.leaves(noisy.params)
  assert all(np.all(np.isfinite(leaf)) for leaf in leaves)
  assert not np.allclose(noisy.params['fc1']['kernel'],
                         oma.params['fc1']['kernel'], atol=1e-3)
  assert np.all(noisy_metrics['aircomp_mse'] > 0)


def reference_round(algorithm, first, edge_rounds):
  """The global params after one round, from `client_update` per client: the
  cells' edge models, E edge rounds (e > 0 folded into the clients' keys),
  each edge mean the partial average Σ w m Δ / Σ w m of its clients' deltas
  (m: their submodel masks, 1 without); the cloud averages each coordinate
  over the cells holding it (uniform); the server (η_s = 1) takes it."""
  data = tiny_data()
  plans = algorithm.plan_round(first)
  update = jax.jit(algorithm.client_update)
  segment, weight = np.asarray(plans.group), np.asarray(plans.weight)
  ones = jax.tree.map(jnp.ones_like, first.params)
  edge = {j: first.params for j in np.unique(segment)
          if weight[segment == j].sum() > 0}
  held = {}
  for e in range(edge_rounds):
    moved = {}
    for j, start in edge.items():
      num = jax.tree.map(jnp.zeros_like, start)
      den = jax.tree.map(jnp.zeros_like, start)
      for k in np.flatnonzero(segment == j):
        plan = jax.tree.map(lambda x, k=k: x[k], plans.replace(
            mask_table=None)).with_row_mask(plans.mask_table)
        if e:
          plan = plan.replace(key=jax.random.fold_in(plan.key, e))
        mask = ones if plan.mask is None else plan.mask
        w = float(weight[k])
        num = jax.tree.map(lambda n, d, w=w: n + w * d, num,
                           update(start, plan.replace(
                               mask_table=None), data).delta)
        den = jax.tree.map(lambda n, m, w=w: n + w * m.astype(jnp.float32),
                           den, mask)
      moved[j] = jax.tree.map(
          lambda p, n, d: p - jnp.where(d > 0, n / jnp.where(d > 0, d, 1), 0),
          start, num, den)
      held[j] = jax.tree.map(lambda d: (d > 0).astype(jnp.float32), den)
    edge = moved
  count = jax.tree.map(lambda *hs: sum(hs), *held.values())
  total = jax.tree.map(lambda *xs: sum(xs), *[
      jax.tree.map(lambda h, x, p: h * (p - x), held[j], edge[j],
                   first.params) for j in edge])
  return jax.tree.map(lambda p, t, c: p - jnp.where(c > 0, t / jnp.maximum(
      c, 1), 0), first.params, total, count)


def test_two_edge_rounds_equal_a_per_cell_reference_loop():
  algorithm, first, final, metrics = fedavg_run(rounds=1, num_cells=2,
                                                edge_rounds=2)
  *_, one_edge_round, one_metrics = fedavg_run(rounds=1, num_cells=2)
  assert not np.allclose(final.params['fc1']['kernel'],
                         one_edge_round.params['fc1']['kernel'])
  np.testing.assert_allclose(metrics['bytes_up'],
                             2 * one_metrics['bytes_up'])
  chex.assert_trees_all_close(final.params,
                              reference_round(algorithm, first, 2),
                              rtol=1e-5, atol=1e-6)


def test_heterofl_in_cells_equals_the_per_cell_partial_averages():
  """The submodel methods are FedAvg on submodels: in 2 cells with E = 2,
  clients of capacity 1/4 and 1 train their width slice from the cell's edge
  model, the edge means and the cloud average each coordinate over its
  holders (a cell holds the union of its clients' slices)."""
  algorithm, first, final, metrics = method_run(
      'heterofl', rounds=1, num_cells=2, cell_sizes=(2, 4), edge_rounds=2)
  # Levels are blocks of 3 clients: cell 1 holds clients of both levels.
  np.testing.assert_array_equal(algorithm.client_level, [0, 0, 0, 1, 1, 1])
  chex.assert_trees_all_close(final.params,
                              reference_round(algorithm, first, 2),
                              rtol=1e-5, atol=1e-6)
  *_, flat, flat_metrics = method_run('heterofl', rounds=1)
  np.testing.assert_allclose(metrics['bytes_up'],
                             2 * flat_metrics['bytes_up'])


@pytest.mark.parametrize('name', ['fiarse', 'fedrolex', 'scalefl'])
def test_other_submodel_methods_run_in_cells_over_the_air(name):
  algorithm, first, final, metrics = method_run(
      name, rounds=1, num_cells=2, edge_channel='aircomp', **SOLVER)
  assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree.leaves(
      final.params))
  assert np.all(metrics['aircomp_mse'] > 0)


def test_cells_compose_with_lossy_links_and_unequal_work():
  """The systems part's plans run in cells: client m trains T_m steps in
  every edge round, a dropped update weighs 0 in every edge mean, and cell 1,
  all of whose links fail, is left out of the cloud."""
  config = tiny_config()
  config.hierarchy.update(num_cells=2, edge_rounds=2)
  config.systems.update(q=(0.0, 0.0, 0.0, 1.0, 1.0, 1.0),
                        local_work=(1, 2, 3, 1, 2, 3))
  config_lib.validate(config)
  algorithm, state, data = tiny_fedavg(config)
  first = jax.tree.map(jnp.copy, state)
  plans = jax.device_get(algorithm.plan_round(first))
  np.testing.assert_array_equal(plans.weight > 0, plans.group == 0)
  final, _ = RoundRunner(algorithm, 'vmap').run(state, data, 1)
  chex.assert_trees_all_close(final.params,
                              reference_round(algorithm, first, 2),
                              rtol=1e-5, atol=1e-6)


def assert_cells_key_refused(config, key: str, value, says: str) -> str:
  """`config` in 2 cells with `hierarchy.<key> = value` is refused in one
  line naming the key and `config.algorithm`, saying `says`; returns the
  line."""
  config.hierarchy.update({'num_cells': 2, key: value})
  with pytest.raises(ConfigError) as raised:
    config_lib.validate(config)
  message = str(raised.value)
  assert message.startswith(
      f'hierarchy.{key} = {value!r} is set, but {config.algorithm}')
  assert says in message and '\n' not in message
  return message


@pytest.mark.parametrize('key,value,says', [
    ('partition_sizes', 'optimized', "latency model are HIST's (read by hist, hfedavg)"),
    ('edge_weights', 'examples', "latency model are HIST's"),
    ('cpu_ghz_slow', (1.0, 1.5), "latency model are HIST's"),
    ('aircomp_power', 2.0, "reads it only with hierarchy.edge_channel='aircomp'"),
])
def test_fedavg_refuses_the_keys_it_does_not_read_in_one_line(key, value,
                                                              says):
  config = tiny_config()
  assert_cells_key_refused(config, key, value, says)
  config.algorithm = 'hfedavg'
  config.clients_per_round = config.num_clients
  if key == 'aircomp_power':  # the channel's own keys: with AirComp only
    with pytest.raises(ConfigError, match='is set, but hfedavg reads it only'):
      config_lib.validate(config)
  else:
    config_lib.validate(config)      # HIST's methods read HIST's keys


def test_a_key_set_while_the_part_is_off_is_refused():
  config = tiny_config()
  config.hierarchy.cloud_weights = 'clients'
  with pytest.raises(ConfigError, match='runs without cells at one cell'):
    config_lib.validate(config)
  config.hierarchy.edge_rounds = 2
  config_lib.validate(config)
