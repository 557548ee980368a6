"""The availability part: the cohort is drawn among the clients online in the
round, an offline slot is idle, and each model gives the online
probabilities its docstring states."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine_utils import tiny_config, tiny_method
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.core.state import ServerState
from fedjax_het.options import ConfigError
from fedjax_het.parts.availability import Availability
from fedjax_het.parts.links_work import SystemsOptions

ROUNDS = 12


def build(name='fedavg', client_sampling='uniform', **systems):
  config = tiny_config(algorithm=name, client_sampling=client_sampling)
  if name == 'heterofl':
    config.capacities = (0.5, 1.0)
  config.systems.update(systems)
  return tiny_method(config)


def planned_rounds(algorithm, state):
  """(client ids [R, K], active [R, K], online [R, M]) of rounds 0..R-1, the
  plans and the availability of one compiled program."""

  def one(r):
    at_r = state.replace(round=r)
    plan = algorithm.plan_round(at_r)
    return plan.client_id, plan.is_active(), algorithm.parts.online(at_r)

  return jax.device_get(jax.jit(jax.vmap(one))(jnp.arange(ROUNDS)))


@pytest.mark.parametrize('name,sampling', [('fedavg', 'uniform'),
                                           ('fedavg', 'proportional'),
                                           ('heterofl', 'uniform')])
def test_the_cohort_is_drawn_among_the_online_clients(name, sampling):
  algorithm, state, _ = build(name, sampling, availability='bernoulli',
                              available_p=(0.6,))
  ids, active, online = planned_rounds(algorithm, state)
  was_online = np.take_along_axis(online, ids, axis=1)
  # A slot is active exactly when its client is online in that round ...
  np.testing.assert_array_equal(active, was_online)
  if sampling == 'uniform':
    # ... and K distinct clients are drawn, online ones first: a slot is
    # idle only when fewer than K clients are online.
    assert all(len(set(row)) == len(row) for row in ids)
    np.testing.assert_array_equal(active.sum(1),
                                  np.minimum(online.sum(1), ids.shape[1]))
  else:  # draws ∝ data among the online clients only
    assert active.all() or (online.sum(1) == 0).any()
  # The draws are Bernoulli(0.6): not everyone is online every round.
  assert 0 < online.mean() < 1


def test_a_client_never_online_never_trains_and_streaming_draws_the_same(
    tmp_path):
  trace = np.ones((5, 6), bool)
  trace[:, 3] = False          # client 3 is never online
  trace[2, :] = False          # nobody is online in round 2 (and 7)
  np.savez(tmp_path / 'online.npz', available=trace)
  algorithm, state, data = build(availability='trace',
                                 availability_trace=str(tmp_path / 'online.npz'))
  ids, active, online = planned_rounds(algorithm, state)
  np.testing.assert_array_equal(online, trace[np.arange(ROUNDS) % 5])
  assert not np.any(active & (ids == 3))
  assert not active[2].any() and not active[7].any()
  # The cohort streaming fetches ahead is a function of key and round only.
  bare = ServerState(params=None, opt_state=None, round=jnp.int32(4),
                     key=state.key)
  np.testing.assert_array_equal(jax.jit(algorithm.cohort_ids)(bare), ids[4])
  # Rounds with nobody online exchange nothing and leave the model as it was.
  state = state.replace(round=jnp.int32(2))
  before = jax.device_get(state.params)
  state, metrics = RoundRunner(algorithm, 'vmap').run(state, data, 1)
  assert float(metrics['bytes_up'][0]) == float(metrics['bytes_down'][0]) == 0
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(state.params),
               before)


def test_the_diurnal_wave_peaks_at_each_clients_phase():
  section = SystemsOptions(availability='diurnal', diurnal_period=10,
                           diurnal_low=0.2)
  model = Availability.from_section(section, num_clients=3, seed=0)
  peak = np.round(model.phase * 10).astype(int)
  probs = np.stack([jax.device_get(model.online_prob(jnp.int32(r)))
                    for r in range(10)])
  for m in range(3):
    wave = 0.2 + 0.8 * (1 + np.cos(2 * np.pi * (np.arange(10) / 10 -
                                                 model.phase[m]))) / 2
    np.testing.assert_allclose(probs[:, m], wave, rtol=1e-5)
    assert probs[peak[m] % 10, m] > 0.95
  assert probs.min() >= 0.2 - 1e-6


def test_always_is_the_run_without_the_part():
  algorithm, _, _ = build(availability='always')
  assert 'availability' not in algorithm.parts.names


def test_availability_alone_leaves_the_links_and_work_part_off():
  algorithm, _, _ = build(availability='bernoulli', available_p=(0.5,))
  assert algorithm.parts.names == ('availability',)


@pytest.mark.parametrize('systems, message', [
    ({'availability': 'bernoulli', 'available_p': (0.0,)},
     r'systems.available_p must be probabilities in \(0, 1\]'),
    ({'availability': 'bernoulli', 'available_p': (0.5, 0.5)},
     r'systems.available_p needs one value or one per client \(6\)'),
    ({'availability': 'trace', 'availability_trace': '/nonexistent.npz'},
     'systems.availability_trace must name an .npz file'),
    ({'availability': 'sometimes'}, 'systems.availability'),
])
def test_bad_availability_is_one_line(systems, message):
  with pytest.raises(ConfigError, match=message) as raised:
    build(**systems)
  assert '\n' not in str(raised.value)
