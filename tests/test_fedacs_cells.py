"""The FedACS family in cells (`fedjax_het.parts.cells`, the 'draws' edge
rule): each cell runs rule (3) on its draws for E edge rounds, the cloud
weighs the cells by their draws K_j/K; off at the section's defaults;
FedVarp, FedAU and OS refuse the section in one line."""
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het.core.rounds import RoundRunner
from engine_utils import tiny_config, tiny_data, tiny_method
from test_cells_part import assert_cells_key_refused

# The tiny federation (6 clients, cells {0, 1, 2} and {3, 4, 5}, K = 4
# draws) under lossy links and unequal work: with q up to 0.7 some draws'
# uploads fail, so rule (3)'s 1/K and a weighted mean's 1/Σ Z differ.
SYSTEMS = {'q': (0.1, 0.7, 0.3, 0.0, 0.6, 0.2),
           'local_work': (1, 2, 3, 1, 2, 3)}
SOLVER = {'beamformer_sca_steps': 3, 'beamformer_inner_steps': 20}


@functools.lru_cache(maxsize=None)
def family_run(name='fedacs', rounds=2, **hierarchy):
  """(algorithm, first state, final state, metrics) of FedACS-family method
  `name` on the tiny federation under `SYSTEMS`, `config.hierarchy` updated
  by `hierarchy`, run once."""
  config = tiny_config(algorithm=name)
  config.systems.update(SYSTEMS)
  config.hierarchy.update(hierarchy)
  algorithm, state, data = tiny_method(config)
  first = jax.tree.map(jnp.copy, state)  # the runner donates its state
  final, metrics = RoundRunner(algorithm, 'vmap').run(state, data, rounds)
  return algorithm, first, final, jax.device_get(metrics)


def test_neutral_settings_leave_fedacs_as_it_is():
  """One cell, one edge round and OMA set explicitly: the part is off and
  the run is bit-identical to the one without the section."""
  *_, flat, flat_metrics = family_run()
  algorithm, _, neutral, metrics = family_run(num_cells=1, edge_rounds=1,
                                              edge_channel='oma')
  assert 'cells' not in algorithm.parts.names and not algorithm.sums_in_map
  chex.assert_trees_all_equal(neutral.params, flat.params)
  for key, value in flat_metrics.items():
    np.testing.assert_array_equal(metrics[key], value)


@pytest.mark.parametrize('name', ['fedacs', 'fedavg_het', 'fednova'])
def test_two_cells_one_edge_round_is_flat_rule_3(name):
  """Σ_j (K_j/K) · (1/K_j) Σ_{k∈j} Z_k c_k Δ_k = (1/K) Σ_k Z_k c_k Δ_k: same
  draws, keys, links, coefficients and lr; equal to float rounding. Some
  uploads fail, so a weighted mean per cell would not be rule (3)."""
  *_, flat, flat_metrics = family_run(name)
  algorithm, first, cells, metrics = family_run(name, num_cells=2)
  assert algorithm.parts.owner('combine').edge_rule == 'draws'
  assert algorithm.segments == 2
  assert np.any(flat_metrics['uploads'] < algorithm.num_draws)
  plans = jax.device_get(algorithm.plan_round(first))
  np.testing.assert_array_equal(plans.group, plans.client_id // 3)
  chex.assert_trees_all_close(cells.params, flat.params, rtol=1e-5,
                              atol=1e-7)
  for key in ('uploads', 'bytes_up', 'local_steps', 'train_loss'):
    np.testing.assert_allclose(metrics[key], flat_metrics[key], rtol=1e-6)


def reference_round(algorithm, first, edge_rounds):
  """The global params after one round, from `client_update` per draw: cell
  j's edge model moves by (1/K_j) Σ_{k∈j} w_k Δ_k in each of E edge rounds
  (e > 0 folded into the draws' keys), then X − Σ_j (K_j/K)(X − x̄_j^E)
  (η_s = 1)."""
  data = tiny_data()
  plans = algorithm.plan_round(first)
  update = jax.jit(algorithm.client_update)
  segment, weight = np.asarray(plans.group), np.asarray(plans.weight)
  moved = jax.tree.map(jnp.zeros_like, first.params)
  for j in np.unique(segment):
    draws = np.flatnonzero(segment == j)
    edge = first.params
    for e in range(edge_rounds):
      step = jax.tree.map(jnp.zeros_like, edge)
      for k in draws:
        plan = jax.tree.map(lambda x, k=k: x[k], plans)
        if e:
          plan = plan.replace(key=jax.random.fold_in(plan.key, e))
        delta = update(edge, plan, data).delta
        step = jax.tree.map(lambda s, d, k=k: s + weight[k] * d / len(draws),
                            step, delta)
      edge = jax.tree.map(jnp.subtract, edge, step)
    moved = jax.tree.map(
        lambda m, x, y, n=len(draws): m + n / len(segment) * (x - y), moved,
        first.params, edge)
  return jax.tree.map(jnp.subtract, first.params, moved)


def test_two_edge_rounds_equal_a_per_cell_reference_loop():
  algorithm, first, final, metrics = family_run(rounds=1, num_cells=2,
                                                edge_rounds=2)
  *_, one_edge_round, one_metrics = family_run(rounds=1, num_cells=2)
  assert not np.allclose(final.params['fc1']['kernel'],
                         one_edge_round.params['fc1']['kernel'])
  for key in ('uploads', 'bytes_up', 'bytes_down', 'local_steps'):
    np.testing.assert_allclose(metrics[key], 2 * one_metrics[key])
  chex.assert_trees_all_close(final.params,
                              reference_round(algorithm, first, 2),
                              rtol=1e-5, atol=1e-6)


def test_noiseless_aircomp_edge_sums_are_rule_3():
  """Over the air, each cell's noiseless weighted mean scaled by
  Σ_{k∈j} w_k / K_j is its rule-(3) step: OMA's result."""
  *_, oma, _ = family_run(rounds=1, num_cells=2)
  algorithm, _, silent, metrics = family_run(
      rounds=1, num_cells=2, edge_channel='aircomp', aircomp_noise='none',
      **SOLVER)
  assert not algorithm.sums_deltas_in_map
  chex.assert_trees_all_close(silent.params, oma.params, rtol=1e-4,
                              atol=1e-7)
  assert np.all(metrics['beamformer_gain'] > 0)


@pytest.mark.parametrize('name', ['fedvarp', 'fedau', 'os'])
def test_methods_with_cell_less_rules_refuse_cells_in_one_line(name):
  message = assert_cells_key_refused(tiny_config(algorithm=name), 'num_cells',
                                     2, 'fedacs')
  assert message.startswith(f'hierarchy.num_cells = 2 is set, but {name} '
                            'does not read the hierarchy section')


@pytest.mark.parametrize('key,value,says', [
    ('cloud_weights', 'clients', 'weighs the cells by their draws K_j/K'),
    ('partition_sizes', 'optimized', "latency model are HIST's"),
])
def test_fedacs_refuses_the_keys_it_does_not_read_in_one_line(key, value,
                                                              says):
  assert_cells_key_refused(tiny_config(algorithm='fedacs'), key, value, says)
