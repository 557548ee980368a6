"""Cohort streaming: host-resident federations, cohorts streamed per chunk."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het import methods, models, run
from fedjax_het.methods import FedAvg
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.core.stream import CohortMismatch, CohortStream
from fedjax_het.data import FederatedData
from engine_utils import tiny_config, tiny_data
from test_run import quick_config, read_rows


def host_data(**kwargs):
  return jax.tree.map(np.asarray, tiny_data(**kwargs))


def build(name, data, **overrides):
  """(algorithm, state) of method `name` on `data`."""
  config = tiny_config(**overrides)
  if methods.ALGORITHMS[name].supports_capacities:
    config.capacities = (0.5, 1.0)
    config.submodel.scaler = False
  model = models.create_model('mlp', 3, **config.model_options.to_dict())
  params = models.init_params(model, jax.random.PRNGKey(0), data.feature_shape)
  algorithm = methods.create_algorithm(name, config, model, data)
  return algorithm, algorithm.init(params, jax.random.PRNGKey(1))


def on_device(name, backend, data, chunks, rounds_per_call):
  algorithm, state = build(name, data)
  runner = RoundRunner(algorithm, backend)
  device_data = data.to_device()
  history = []
  for _ in range(chunks):
    state, metrics = runner.run(state, device_data, rounds_per_call)
    history.append(metrics)
  return state, history


def streamed(name, backend, data, chunks, rounds_per_call):
  algorithm, state = build(name, data)
  stream = CohortStream(RoundRunner(algorithm, backend), data,
                        last_round=chunks * rounds_per_call)
  history = []
  for _ in range(chunks):
    state, metrics = stream.run(state, rounds_per_call)
    history.append(metrics)
  return state, history


def assert_identical(a, b):
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(a),
               jax.device_get(b))


@pytest.mark.parametrize('name', ['fedavg', 'heterofl'])
@pytest.mark.parametrize('backend', ['vmap', 'map', 'sequential'])
def test_streamed_rounds_equal_on_device_rounds_bit_for_bit(name, backend):
  data = host_data()
  expected = on_device(name, backend, data, chunks=3, rounds_per_call=2)
  got = streamed(name, backend, data, chunks=3, rounds_per_call=2)
  assert int(got[0].round) == 6
  assert_identical(got[0].params, expected[0].params)
  assert_identical(got[1], expected[1])


def test_a_memmapped_federation_streams(tmp_path):
  data = host_data()
  leaves = {}
  for field in ('x', 'y', 'counts'):
    array = getattr(data, field)
    leaves[field] = np.memmap(tmp_path / field, array.dtype, 'w+',
                              shape=array.shape)
    leaves[field][:] = array
    leaves[field].flush()
    leaves[field] = np.memmap(tmp_path / field, array.dtype, 'r',
                              shape=array.shape)
  mapped = FederatedData(**leaves)
  expected = on_device('fedavg', 'map', data, chunks=2, rounds_per_call=2)
  got = streamed('fedavg', 'map', mapped, chunks=2, rounds_per_call=2)
  assert_identical(got[0].params, expected[0].params)


def test_the_stream_prefetches_the_next_chunk():
  data = host_data()
  algorithm, state = build('fedavg', data)
  stream = CohortStream(RoundRunner(algorithm, 'map'), data, last_round=5)
  state, _ = stream.run(state, 2)
  key, first, count, cohorts = stream._next  # pylint: disable=protected-access
  assert (first, count) == (2, 2)
  assert isinstance(cohorts.x, jax.Array)
  np.testing.assert_array_equal(
      cohorts.client_ids, stream.cohort_ids(state.key, 2, 2))
  state, _ = stream.run(state, 2)
  assert stream._next[1:3] == (4, 1)  # the last chunk is one round
  # The cohort of a round is the one its plan draws.
  plan = algorithm.plan_round(state)
  np.testing.assert_array_equal(plan.client_id,
                                stream.cohort_ids(state.key, 4, 1)[0])


class PlansEveryClient(FedAvg):
  """Plans all clients, not the sampled cohort (`cohort_ids`)."""

  def plan_round(self, state, data=None, inputs=None):
    ids = jnp.arange(self.num_clients, dtype=jnp.int32)
    keys = jax.random.split(jax.random.PRNGKey(0), self.num_clients)
    return self.plan_clients(state, ids, keys)


def test_a_round_planned_outside_its_cohort_raises():
  data = host_data()
  config = tiny_config()
  model = models.create_model('mlp', 3, **config.model_options.to_dict())
  params = models.init_params(model, jax.random.PRNGKey(0), data.x.shape[2:])
  algorithm = PlansEveryClient(config, model, data)
  state = algorithm.init(params, jax.random.PRNGKey(1))
  stream = CohortStream(RoundRunner(algorithm, 'vmap'), data)
  with pytest.raises(CohortMismatch, match='round 1 .*cohort_ids'):
    stream.run(state, 2)


class SamplesFromParams(FedAvg):
  def sample_clients(self, state, key):
    del key
    return jnp.argsort(state.params['Dense_0']['bias'])[:4]


def test_a_cohort_drawn_from_the_params_cannot_stream():
  data = host_data()
  config = tiny_config()
  model = models.create_model('mlp', 3, **config.model_options.to_dict())
  algorithm = SamplesFromParams(config, model, data)
  stream = CohortStream(RoundRunner(algorithm, 'map'), data)
  with pytest.raises(ValueError, match='stream_cohorts=False'):
    stream.cohort_ids(np.zeros(2, np.uint32), 0, 1)


def test_a_streamed_run_resumes_bit_identical_to_on_device(tmp_path):
  whole, parts = str(tmp_path / 'whole'), str(tmp_path / 'parts')
  expected = run.train(quick_config(rounds=4, backend='map'), whole)
  run.train(quick_config(rounds=2, backend='map', stream_cohorts=True), parts)
  resumed = run.train(quick_config(rounds=4, backend='map',
                                   stream_cohorts=True), parts)
  assert read_rows(parts) == read_rows(whole)
  for key in ('final_test_accuracy', 'final_train_loss', 'totals'):
    assert resumed[key] == expected[key]
