"""The systems part (lossy uplinks, unequal local work) under FedAvg and the
submodel family: a dropped update is left out exactly, a client does its own
number of steps, and the neutral setting is the run without the part."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine_utils import tiny_config, tiny_data
from fedjax_het import models
from fedjax_het.methods import ALGORITHMS
from fedjax_het.core.key_streams import Stream
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.core.state import round_key
from fedjax_het.options import ConfigError

CAPACITIES = {'fedavg': (1.0,), 'fiarse': (0.25, 1.0), 'heterofl': (0.25, 1.0)}
DROPPED = 2   # the client whose uploads never arrive


def build(name, cls=None, **systems):
  """(algorithm, state, data) with `config.systems` updated by `systems`:
  every client of `tiny_data` in each round."""
  config = tiny_config(algorithm=name, capacities=CAPACITIES[name],
                       clients_per_round=6)
  config.systems.update(systems)
  data = tiny_data()
  model = models.create_model('mlp', 3, **config.model_options.to_dict())
  params = models.init_params(model, jax.random.PRNGKey(0), data.x.shape[2:])
  algorithm = (cls or ALGORITHMS[name])(config, model, data)
  return algorithm, algorithm.init(params, jax.random.PRNGKey(1)), data


def without_client(name):
  """The method with client DROPPED's aggregation weight set to 0 by hand."""
  base = ALGORITHMS[name]

  class Without(base):
    def client_weights(self, client_ids):
      return jnp.where(client_ids == DROPPED, 0.0,
                       super().client_weights(client_ids))

  return Without


@pytest.mark.parametrize('name', ['fiarse', 'heterofl', 'fedavg'])
def test_a_client_whose_uploads_always_fail_is_left_out_exactly(name):
  """q = 1 for one client: the same parameters as the run that gives that
  client weight 0 (its update enters no sum, numerator or denominator), and
  its uploads are not counted, while the others' are."""
  q = tuple(1.0 if m == DROPPED else 0.0 for m in range(6))
  dropped, state, data = build(name, q=q)
  dropped_state, metrics = RoundRunner(dropped, 'vmap').run(state, data, 2)
  reference, state, _ = build(name, cls=without_client(name))
  reference_state, reference_metrics = RoundRunner(reference, 'vmap').run(
      state, data, 2)
  chex.assert_trees_all_close(dropped_state.params, reference_state.params,
                              rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(metrics['bytes_up'],
                             reference_metrics['bytes_up'], rtol=1e-6)
  assert np.all(metrics['bytes_up'] < metrics['bytes_down'])


@pytest.mark.parametrize('name', ['fiarse', 'fedavg'])
def test_unequal_work_freezes_each_client_after_its_steps(name):
  """systems.local_work T_m: client m's update is the update of a run whose
  clients all take T_m steps (same batches), though the scan runs max T."""
  work = (1, 3, 2, 3, 1, 2)
  algorithm, state, data = build(name, local_work=work)
  assert algorithm.max_local_steps() == 3
  plans = jax.jit(algorithm.plan_round)(state, data)
  np.testing.assert_array_equal(plans.num_steps,
                                np.asarray(work)[np.asarray(plans.client_id)])
  update = jax.jit(algorithm.client_update)
  for steps in (1, 2):
    equal, equal_state, _ = build(name, local_work=(steps,) * 6)
    assert equal.max_local_steps() == steps
    equal_plans = jax.jit(equal.plan_round)(equal_state, data)
    equal_update = jax.jit(equal.client_update)
    for k in np.flatnonzero(np.asarray(plans.num_steps) == steps):
      one = lambda p, k=k: jax.tree.map(lambda x: x[k], p)
      chex.assert_trees_all_close(
          update(state.params, one(plans), data).delta,
          equal_update(equal_state.params, one(equal_plans), data).delta,
          rtol=1e-6, atol=1e-7)


def test_the_neutral_setting_is_the_run_without_the_part():
  """q = 0 and every client local_steps, set explicitly (the part on), give
  the parameters of the run without it, bit for bit."""
  on, state, data = build('fiarse', q=(0.0,) * 6, local_work=(3,) * 6)
  assert on.parts.names == ('links_work',)
  on_state, _ = RoundRunner(on, 'vmap').run(state, data, 2)
  off, state, _ = build('fiarse')
  assert not off.parts.names
  off_state, _ = RoundRunner(off, 'vmap').run(state, data, 2)
  chex.assert_trees_all_equal(on_state.params, off_state.params)


def test_markov_links_carry_their_state_under_a_method_that_keeps_none():
  """Gilbert links under FedAvg: the part keeps the link states, so each
  round's outcomes are the chain's transition from the previous round's
  (all on before round 0), the slots whose link is off upload nothing, and
  a link goes both off and on again within the run."""
  algorithm, state, data = build('fedavg', model='markov',
                                 markov_fail=(0.5,), markov_recover=(0.4,))
  model = algorithm.parts.parts[0].model
  runner = RoundRunner(algorithm, 'vmap')
  links, history = np.ones(6, np.int32), []
  for _ in range(4):
    expected = model.draw(round_key(state, Stream.SYSTEMS), state.round,
                          jnp.asarray(links)).link_up
    state, metrics = runner.run(state, data, 1)
    np.testing.assert_array_equal(state.extras['links'], expected)
    per_client = metrics['bytes_down'][0] / 6   # every client, same model
    np.testing.assert_allclose(metrics['bytes_up'][0],
                               per_client * np.sum(expected), rtol=1e-6)
    links = np.asarray(expected, np.int32)
    history.append(links)
  history = np.stack(history)
  assert np.any(np.diff(history, axis=0) < 0)   # on → off
  assert np.any(np.diff(history, axis=0) > 0)   # off → on
