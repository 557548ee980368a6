"""HIST and HFedAvg under lossy links and unequal work (the links-and-work
part in cells): each client runs its own steps in every edge round, a lost
upload leaves its cell's edge mean in every edge round, a cell whose every
upload is lost keeps its edge model, the latency charges each client's own
steps and the bytes count delivered uploads; the neutral setting is the run
without the part, and availability is refused in one line."""
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het import config as config_lib
from fedjax_het.methods import ALGORITHMS
from fedjax_het.options import ConfigError
from engine_utils import tiny_config, tiny_data
from test_hist import hierarchical, reference_hierarchical_rounds, run, \
    two_rounds

WORK = (1, 2, 3, 1, 2, 3)
DROPPED = 3   # a client of cell 1 (cells of 2 and 4 clients)
LOSSY = tuple(1.0 if m == DROPPED else 0.0 for m in range(6))


@functools.lru_cache(maxsize=None)
def systems_run(name='hist', rounds=2, systems=(), cls=None, **hierarchy):
  """(algorithm, first state, final state, metrics) of `rounds` rounds with
  `config.systems` set by the pairs `systems`, run once."""
  algorithm, state, data = hierarchical(name, cls=cls, systems=systems,
                                        **hierarchy)
  first = jax.tree.map(jnp.copy, state)   # the run donates `state`
  final, metrics = run(algorithm, state, data, rounds=rounds)
  return algorithm, first, final, jax.device_get(metrics)


def without_client(name):
  """The method with client DROPPED's edge weight set to 0 by hand."""

  class Without(ALGORITHMS[name]):
    def client_weights(self, client_ids):
      return jnp.where(client_ids == DROPPED, 0.0,
                       super().client_weights(client_ids))

  return Without


def test_own_steps_and_lost_uploads_in_every_edge_round_equal_a_per_cell_loop():
  """T_m steps in each of the E edge rounds, client DROPPED's upload lost in
  all of them: Algorithm 1 looped by hand with those steps and weights, and
  another model than the run without the part."""
  algorithm, first, final, _ = systems_run(
      systems=(('q', LOSSY), ('local_work', WORK)))
  assert algorithm.parts.names == ('links_work', 'cells')
  assert algorithm.max_local_steps() == 3
  plans = jax.device_get(algorithm.plan_round(first, tiny_data()))
  np.testing.assert_array_equal(plans.num_steps, WORK)
  np.testing.assert_array_equal(plans.weight == 0, np.arange(6) == DROPPED)
  expected = reference_hierarchical_rounds(algorithm, first, tiny_data(),
                                           rounds=2)
  chex.assert_trees_all_close(final.params, expected, atol=2e-5)
  *_, without, _ = two_rounds('hist')
  assert max(float(np.max(np.abs(a - b))) for a, b in zip(
      jax.tree.leaves(final.params), jax.tree.leaves(without.params))) > 1e-3


def test_a_cell_whose_every_upload_fails_keeps_its_edge_model():
  """Cell 0's two clients lose every upload: the neurons of cell 0's
  partition keep their values exactly, the rest of the model moves as the
  per-cell loop says (cell 1 alone feeds the cloud)."""
  algorithm, first, final, _ = systems_run(
      rounds=1, systems=(('q', (1.0, 1.0, 0.0, 0.0, 0.0, 0.0)),))
  plans = jax.device_get(algorithm.plan_round(first, tiny_data()))
  only_cell_0 = jax.tree.map(lambda t: t[0] & ~t[1], plans.mask_table)
  assert sum(int(np.sum(m)) for m in jax.tree.leaves(only_cell_0)) > 0
  moved_elsewhere = 0.0
  for before, after, mine in zip(*(jax.tree.leaves(t) for t in (
      first.params, final.params, only_cell_0))):
    change = np.abs(np.asarray(after) - np.asarray(before))
    np.testing.assert_array_equal(change[mine], 0.0)
    moved_elsewhere = max(moved_elsewhere, float(np.max(change[~mine])))
  assert moved_elsewhere > 1e-3
  expected = reference_hierarchical_rounds(algorithm, first, tiny_data(),
                                           rounds=1)
  chex.assert_trees_all_close(final.params, expected, atol=2e-5)


@pytest.mark.parametrize('name,channel', [('hist', 'oma'),
                                          ('hfedavg', 'aircomp')])
def test_a_client_whose_uploads_always_fail_is_left_out_exactly(name, channel):
  """q = 1 for one client: the run that gives that client weight 0 by hand
  (under AirComp it does not transmit), the same bytes (its uploads are not
  counted) and the same latency (its TDMA slot stays reserved)."""
  *_, lost, metrics = systems_run(name, systems=(('q', LOSSY),),
                                  edge_channel=channel)
  *_, by_hand, by_hand_metrics = systems_run(
      name, cls=without_client(name), edge_channel=channel)
  chex.assert_trees_all_close(lost.params, by_hand.params, rtol=1e-6,
                              atol=1e-7)   # two programs: the last bits
  for key in ('bytes_up', 'bytes_down', 'mb_per_client', 'latency_s'):
    np.testing.assert_allclose(metrics[key], by_hand_metrics[key], rtol=1e-6)
  assert np.all(metrics['bytes_up'] < metrics['bytes_down'])
  if channel == 'aircomp':   # both cells receive: finite statistics
    assert np.all(np.isfinite(metrics['beamformer_gain']))


def test_the_aircomp_statistics_average_the_cells_that_receive():
  """Cell 0 loses every upload under AirComp: it designs no beamformer
  (gain +inf over no client), and the round's statistics are cell 1's."""
  algorithm, _, final, metrics = systems_run(
      'hfedavg', rounds=1, systems=(('q', (1.0, 1.0, 0.0, 0.0, 0.0, 0.0)),),
      edge_channel='aircomp')
  assert algorithm.parts.names == ('links_work', 'cells')
  np.testing.assert_allclose(metrics['bytes_up'],
                             metrics['bytes_down'] * 4 / 6, rtol=1e-6)
  assert np.all(np.isfinite(metrics['beamformer_gain']))
  assert np.all(metrics['aircomp_mse'] > 0)
  assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(final.params))


def test_latency_charges_each_clients_own_steps_and_bytes_the_delivered():
  """Eqs. (17)-(18) by hand with H_i = T_m: E = 2 edge rounds of T_m steps
  on cell j's d_j parameters, then n_j TDMA uploads (every client's slot,
  the lost one's too); bytes up: the 5 delivered uploads per edge round."""
  algorithm, first, _, metrics = systems_run(
      systems=(('q', LOSSY), ('local_work', WORK)))
  plan = jax.device_get(algorithm.plan_round(first, tiny_data()))
  d = algorithm.total_params
  owned = np.where(plan.group == 0, 3, 4) * 9 + 3   # test_hist's partition
  n_j = np.where(plan.group == 0, 2, 4)
  per_client = (np.asarray(WORK) * 1e6 * owned / d / plan.extras['cpu_hz'] +
                n_j * 32 * owned / plan.extras['rate_bps'])
  np.testing.assert_allclose(metrics['latency_s'][0], 2 * per_client.max(),
                             rtol=1e-5)
  delivered = np.arange(6) != DROPPED
  np.testing.assert_allclose(metrics['bytes_up'],
                             2 * 4 * owned[delivered].sum())
  np.testing.assert_allclose(metrics['mb_per_client'],
                             2 * 4 * owned[delivered].sum() / 6 / 2**20)


@pytest.mark.parametrize('name', ['hist', 'hfedavg'])
def test_the_neutral_setting_is_the_run_without_the_part(name):
  """q = 0 and every client local_steps, set explicitly (the part on): the
  parameters and metrics of the run without it, bit for bit."""
  algorithm, _, neutral, metrics = systems_run(
      name, systems=(('q', (0.0,) * 6), ('local_work', (2,) * 6)))
  assert algorithm.parts.names == ('links_work', 'cells')
  off, _, without, without_metrics = two_rounds(name)
  assert off.parts.names == ('cells',)
  chex.assert_trees_all_equal(neutral.params, without.params)
  for key in ('bytes_up', 'latency_s', 'train_loss'):
    np.testing.assert_array_equal(metrics[key], without_metrics[key])


@pytest.mark.parametrize('name', ['hist', 'hfedavg'])
def test_availability_is_refused_in_one_line_saying_why(name):
  """Algorithm 1 trains every client of every cell: systems.availability is
  refused when the config is validated, in one line."""
  config = tiny_config(algorithm=name, clients_per_round=6)
  config.systems.availability = 'bernoulli'
  with pytest.raises(ConfigError) as raised:
    config_lib.validate(config)
  message = str(raised.value)
  assert message.startswith("systems.availability = 'bernoulli' is set, but "
                            f'{name} samples among all clients by its own '
                            'rule')
  assert '\n' not in message
  config.systems.availability = 'always'
  config.systems.q = (0.5,)
  config_lib.validate(config)
