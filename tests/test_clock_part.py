"""The virtual clock as a part (`config.clock`): FedAvg and FedRolex on it.

The federation of three clients with round times 1, 1.5 and 2.5 s, μ = 1/3
and T_clk = 0 (fully asynchronous: every arrival closes a round) gives, by
hand (`systems.clock`'s rules: ties in client order, a finish at the window's
end accepted):

    round  start  dispatched (finish)   arrivals (dispatch round k, τ)
      0     0.0   0 (1.0) 1 (1.5) 2 (2.5)   0 (k=0, τ=0)            t = 1.0
      1     1.0   0 (2.0)                   1 (k=0, τ=1)            t = 1.5
      2     1.5   1 (3.0)                   0 (k=1, τ=1)            t = 2.0
      3     2.0   0 (3.0)                   2 (k=0, τ=3)            t = 2.5
      4     2.5   2 (5.0)                   0 (k=3, τ=1), 1 (k=2, τ=2)  t = 3.0
"""
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine_utils import checkpoint_round_trip, tiny_config, tiny_data
from fedjax_het import models
from fedjax_het.methods import ALGORITHMS
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.core.state import ClientPlan
from fedjax_het.options import ConfigError
from fedjax_het.parts import clock as clock_part
from fedjax_het.submodel import width

SECONDS = (1.0, 1.5, 2.5)
# ARRIVALS[q] = [(client, dispatch round)], the table above.
ARRIVALS = [[(0, 0)], [(1, 0)], [(0, 1)], [(2, 0)], [(0, 3), (1, 2)]]
ROUNDS = len(ARRIVALS)


def clock_config(name, **clock):
  config = tiny_config(algorithm=name, num_clients=3, clients_per_round=3,
                       rounds=ROUNDS)
  if name in ('fedrolex', 'fiarse'):
    config.capacities = (0.5, 1.0)      # levels of clients: 0, 0, 1
  config.clock.update(clock)
  return config


def asynchronous(name, **clock):
  return clock_config(name, mu=1 / 3, t_clk=0.0, client_seconds=SECONDS,
                      jitter=0.0, **clock)


def build(config):
  data = tiny_data(num_clients=3)
  model = models.create_model('mlp', 3, **config.model_options.to_dict())
  params = models.init_params(model, jax.random.PRNGKey(0), data.x.shape[2:])
  algorithm = ALGORITHMS[config.algorithm](config, model, data)
  return algorithm, algorithm.init(params, jax.random.PRNGKey(1)), data


def test_round_inputs_are_the_hand_written_schedule():
  algorithm, _, _ = build(asynchronous('fedavg'))
  inputs = algorithm.round_inputs(0, ROUNDS)['clock']
  arrives = np.zeros((ROUNDS, 3), bool)
  dispatch = np.zeros((ROUNDS, 3), np.int32)
  for q, arrivals in enumerate(ARRIVALS):
    for n, k in arrivals:
      arrives[q, n], dispatch[q, n] = True, k
  np.testing.assert_array_equal(inputs['arrives'], arrives)
  np.testing.assert_array_equal(inputs['dispatch_round'], dispatch)
  rounds = np.arange(ROUNDS)[:, None]
  np.testing.assert_array_equal(inputs['staleness'],
                                np.where(arrives, rounds - dispatch, 0))
  np.testing.assert_array_equal(inputs['window_seconds'][:, 0],
                                [1.0, 0.5, 0.5, 0.5, 0.5])
  facts = algorithm.summary_facts()
  assert facts['virtual_time_s'] == 3.0 and facts['max_staleness'] == 3


def test_the_clock_takes_a_round_time_model_and_follows_its_changes():
  """`duration` replaces the default model: SECONDS as a model is the
  hand-written schedule; a model changed after the clock was built (client
  2 now takes 0.5 s) is the schedule again only once `simulate` runs."""
  options = clock_part.ClockOptions(mu=1 / 3, jitter=0.0)
  seconds = list(SECONDS)
  part = clock_part.VirtualClock(
      options, num_clients=3, rounds=ROUNDS,
      duration=lambda client, dispatch_round, index: seconds[client])
  default, _, _ = build(asynchronous('fedavg'))
  for key, value in default.round_inputs(0, ROUNDS)['clock'].items():
    np.testing.assert_array_equal(part.round_inputs(0, ROUNDS)[key], value)
  seconds[2] = 0.5
  assert part.summary_facts()['virtual_time_s'] == 3.0
  # Round 0 closes at t = 0.5 on client 2's arrival, round 1 at 1.0 on
  # client 0's, which also takes client 2's (dispatched again at 0.5, it
  # finishes at the window's end, 1.0).
  schedule = part.simulate()
  assert part.schedule is schedule
  np.testing.assert_array_equal(schedule.end_time[:2], [0.5, 1.0])
  np.testing.assert_array_equal(schedule.arrivals[:2],
                                [[False, False, True], [True, False, True]])


def assert_start_rows(state, expected) -> None:
  """After the schedule's first 3 rounds, start-table row n is the model of
  client n's dispatch round: rounds 3, 2 and 0 of `expected` (models per
  round)."""
  table = jax.device_get(state.extras['start'])
  for n, k in enumerate((3, 2, 0)):
    chex.assert_trees_all_close(jax.tree.map(lambda t, n=n: t[n], table),
                                expected[k], rtol=1e-5, atol=1e-6)


def reference(algorithm, w0, seed_key, data, weighting='none', exponent=0.5,
              arrivals=ARRIVALS, normalisation='mean'):
  """[w_0, ..., w_Q]: the arrivals of each round (`arrivals[q]`, [(client,
  dispatch round)]) applied by hand: client n trains from w_k with round
  k's key (and FedRolex's round-k window), and the server takes the
  (masked) weighted mean of the deltas, w_{q+1} = w_q − mean (server lr 1):
  'polynomial' Σ w s(τ) Δ / Σ w with s(τ) = (1 + τ)^−a, or Σ w s Δ / Σ w s
  with `normalisation='sum'`; 'cos2p' Σ w γ Δ / Σ w γ."""
  config = algorithm.config
  counts = np.asarray(data.counts, np.float32)
  update = jax.jit(lambda p, plan: algorithm.client_update(p, plan, data))

  @jax.jit
  def key_of(k, n):   # plan_round's key of client n in round k
    clients_key = jax.random.split(jax.random.fold_in(seed_key, k))[1]
    return jax.random.fold_in(jax.random.fold_in(clients_key, n), 0)

  @jax.jit
  def rolling_mask(rate, k):
    return width.width_mask(algorithm.layout, rate, k)

  leaves = lambda tree: [np.asarray(x, np.float64)
                         for x in jax.tree.leaves(tree)]
  models_ = [w0]
  for q, arriving in enumerate(arrivals):
    num = den = 0
    for n, k in arriving:
      plan = ClientPlan(
          client_id=jnp.int32(n), key=key_of(k, n),
          num_steps=jnp.int32(config.local_steps),
          lr=jnp.float32(config.client_lr), weight=jnp.float32(counts[n]),
          group=jnp.int32(0))
      if config.algorithm == 'fedrolex':
        rate = algorithm.rates[int(algorithm.client_level[n])]
        plan = plan.replace(mask=rolling_mask(rate, k),
                            extras={'rate': rate})
      delta = leaves(jax.device_get(update(models_[k], plan).delta))
      mask = ([np.ones_like(d) for d in delta] if plan.mask is None else
              leaves(plan.mask))
      w = counts[n]
      if weighting == 'polynomial' and normalisation == 'sum':
        w *= np.float32(1 + q - k) ** -np.float32(exponent)
      elif weighting == 'polynomial':   # the delta scaled, not the weight
        delta = [d * (1 + q - k) ** -exponent for d in delta]
      if weighting == 'cos2p':
        drift = sum(np.abs(a - b).sum() for a, b in
                    zip(leaves(models_[q]), leaves(models_[k])))
        size = sum(d.size for d in delta)
        w *= sum(np.abs(d).sum() for d in delta) / (drift + size)
      num = [a + w * m * d for a, m, d in
             zip(num or [0] * len(delta), mask, delta)]
      den = [a + w * m for a, m in zip(den or [0] * len(delta), mask)]
    mean = [np.where(b > 0, a / np.where(b > 0, b, 1), 0)
            for a, b in zip(num, den)]
    models_.append(jax.tree.unflatten(
        jax.tree.structure(w0),
        [(p - m).astype(np.float32) for p, m in zip(leaves(models_[q]), mean)]))
  return models_


@pytest.mark.parametrize('name,weighting', [
    ('fedavg', 'none'), ('fedavg', 'cos2p'), ('fedrolex', 'polynomial')])
def test_the_run_applies_the_arrivals_one_by_one(name, weighting, tmp_path):
  """Params after each chunk equal the hand reference, and the start table
  holds each client's dispatch model: after 3 rounds clients 0, 1, 2 were
  last dispatched in rounds 3, 2 and 0; FedAvg's run goes on from a
  checkpoint of that state (the table is state: a resume is exact).
  (FedRolex with a = 1: its windows of the dispatch rounds and the weights
  (1 + τ)^−1 at once; 'none' is a = 0, `test_staleness_weighting_...`.)"""
  config = asynchronous(name, staleness_weight=weighting)
  if weighting == 'polynomial':
    config.clock.staleness_exponent = 1.0
  algorithm, state, data = build(config)
  w0 = jax.device_get(state.params)
  expected = reference(algorithm, w0, state.key, data, weighting,
                       config.clock.staleness_exponent)
  runner = RoundRunner(algorithm, 'map')
  state, _ = runner.run(state, data, 3)
  assert_start_rows(state, expected)
  if name == 'fedavg':
    state, _ = checkpoint_round_trip(str(tmp_path), 3, state, state)
  state, metrics = runner.run(state, data, 2)
  chex.assert_trees_all_close(jax.device_get(state.params), expected[ROUNDS],
                              rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(metrics['arrivals'], [1, 2])
  np.testing.assert_array_equal(metrics['staleness'], [3, 3])


@pytest.mark.parametrize('name', ['fedavg', 'fedrolex', 'fiarse'])
def test_a_neutral_clock_is_the_synchronous_run_bit_for_bit(name):
  """μ = 1, T_clk = 0, equal seconds: every client arrives every round with
  τ = 0, and the program is the one without the part (K = N).

  Bit for bit at the flags a run compiles with (the heterogeneity matrix's
  neutral child checks it for every method); under this process's cheap
  flags, XLA:CPU's elemental emitters fuse the two programs' step loops
  differently: FedRolex's parameters differ by a few ulp after 3 rounds
  (7.5e-9, 7.9e-7 relative, in 3 of 35 entries)."""
  plain, state, data = build(clock_config(name))
  assert 'clock' not in plain.parts.names
  plain_state, _ = RoundRunner(plain, 'map').run(state, data, 3)
  timed, state, data = build(clock_config(name, client_seconds=(2.0,),
                                          jitter=0.0))
  assert 'clock' in timed.parts.names
  state, metrics = RoundRunner(timed, 'map').run(state, data, 3)
  jax.tree.map(functools.partial(np.testing.assert_allclose, rtol=1e-6, atol=0),
               jax.device_get(state.params), jax.device_get(plain_state.params))
  np.testing.assert_array_equal(metrics['arrivals'], [3, 3, 3])
  np.testing.assert_array_equal(metrics['virtual_seconds'], [2, 2, 2])


def test_staleness_weighting_changes_the_result_and_none_is_unweighted():
  """(1 + τ)^0 weighs nothing: bit for bit 'none'; a = 1 and Eq. 4 move
  the params (a = 1 shrinks every stale delta; Eq. 4 weighs round 4's two
  arrivals unequally)."""
  final = {}
  for key, clock in (('none', {}),
                     ('a=0', dict(staleness_weight='polynomial',
                                  staleness_exponent=0.0)),
                     ('a=1', dict(staleness_weight='polynomial',
                                  staleness_exponent=1.0)),
                     ('cos2p', dict(staleness_weight='cos2p'))):
    algorithm, state, data = build(asynchronous('fedavg', **clock))
    state, _ = RoundRunner(algorithm, 'map').run(state, data, ROUNDS)
    final[key] = jax.device_get(state.params)
  chex.assert_trees_all_equal(final['a=0'], final['none'])
  for key in ('a=1', 'cos2p'):
    gap = max(np.abs(a - b).max() for a, b in zip(
        jax.tree.leaves(final[key]), jax.tree.leaves(final['none'])))
    assert gap > 1e-4, key


@pytest.mark.parametrize('config,message', [
    (clock_config('fedavg', mu=0.5, client_seconds=(1.0, 2.0, 3.0)).copy_and_resolve_references(),
     None),
    (asynchronous('fedavg', staleness_exponent=1.0),
     "clock.staleness_exponent = 1.0 is read only with clock.staleness_weight='polynomial'"),
    (clock_config('fedavg', mu=0.5, jitter=0.0),
     'clock.mu = 0.5 with equal client times'),
    (clock_config('fedavg', staleness_weight='polynomial'),
     r"clock.staleness_weight = 'polynomial' acts on stale updates, but at "
     r'clock.mu = 1'),
    (clock_config('fedavg', tau_max=2), 'clock.tau_max = 2 acts on stale'),
    (clock_config('fedavg', client_seconds=(1.0, 2.0)),
     r'clock.client_seconds must hold 1 or num_clients \(3\) values, got 2'),
])
def test_bad_clock_options_fail_in_one_line(config, message):
  if message is None:   # clients_per_round below N
    config.clients_per_round = 2
    message = r'needs clients_per_round = num_clients \(3\)'
  with pytest.raises(ConfigError, match=message) as raised:
    build(config)
  assert '\n' not in str(raised.value)


def test_the_systems_part_is_drawn_in_the_dispatch_round():
  """Lossy links and unequal work compose with the clock: an arriving
  update's steps T_m and link outcome Z_m are those the systems part draws
  for its dispatch round (round 4: clients 0 and 1 from rounds 3 and 2)."""
  config = asynchronous('fedavg')
  config.systems.update(model='dynamic', dynamic_q=((0.3, 0.7),),
                        dynamic_work=((1, 3),))
  algorithm, state, data = build(config)
  inputs = jax.tree.map(lambda x: x[0], algorithm.round_inputs(4, 1))

  @jax.jit
  def plans_and_draws(state):
    plans = algorithm.plan_round(state.replace(round=4), data, inputs)
    draws = [algorithm.parts.draws(state.replace(round=k))['links_work']
             for k in (3, 2, 4)]
    return plans, draws

  plans, (third, second, fourth) = jax.device_get(plans_and_draws(state))
  # The test can fail: round 4's own draws differ from the dispatch rounds'.
  assert (third.steps[0], third.link_up[0], second.steps[1],
          second.link_up[1]) != (fourth.steps[0], fourth.link_up[0],
                                 fourth.steps[1], fourth.link_up[1])
  slot = {int(n): j for j, n in enumerate(plans.client_id)}
  counts = np.asarray(data.counts, np.float32)
  for n, draw in ((0, third), (1, second)):
    assert plans.active[slot[n]]
    assert plans.num_steps[slot[n]] == draw.steps[n]
    assert plans.weight[slot[n]] == counts[n] * draw.link_up[n]
  assert not plans.active[slot[2]]


def test_fiarse_plans_a_stale_client_from_its_dispatch_model():
  """Round 1's arrival, client 1 (capacity ½), was dispatched with w_0: its
  thresholds θ are TopK of |w_0|, not of the current model w_1."""
  algorithm, state, data = build(asynchronous('fiarse'))
  w0 = jax.device_get(state.params)
  state, _ = RoundRunner(algorithm, 'map').run(state, data, 1)
  inputs = jax.tree.map(lambda x: x[0], algorithm.round_inputs(1, 1))
  level = algorithm.client_level[1:2]

  @jax.jit
  def thetas(state):
    plans = algorithm.plan_round(state, data, inputs)
    slot = jnp.argmax(plans.client_id == 1)
    return (jax.tree.map(lambda t: t[slot], plans.extras['theta']),
            plans.active[slot],
            algorithm.client_thresholds(w0, level),
            algorithm.client_thresholds(state.params, level))

  planned, active, dispatched, current = jax.device_get(thetas(state))
  assert active
  chex.assert_trees_all_equal(planned,
                              jax.tree.map(lambda t: t[0], dispatched))
  assert any((p != c[0]).any() for p, c in zip(jax.tree.leaves(planned),
                                               jax.tree.leaves(current)))


def with_availability(config, p):
  config.systems.availability = 'bernoulli'
  config.systems.available_p = (p,)
  return config


def test_the_clock_hosts_availability_and_dispatches_only_online_clients():
  """FedAvg on the clock with P(online) = 0.5: availability leaves the
  chain (the clock hosts it); the clock's online rows are the draws a
  synchronous round r makes from the run's key (PRNGKey(seed)); no client
  is dispatched in a round it is offline, and every arrival trained from a
  dispatch the schedule made."""
  config = with_availability(clock_config('fedavg', mu=1 / 3, jitter=0.3),
                             0.5)
  config.rounds = 8
  algorithm, _, data = build(config)
  assert algorithm.parts.names == ('clock',)
  online = algorithm.parts['clock'].clock.online
  synchronous = build(with_availability(
      tiny_config(algorithm='fedavg', num_clients=3, clients_per_round=3,
                  rounds=8), 0.5))[0]
  part = synchronous.parts['availability']
  state = synchronous.init(build(config)[1].params,
                           jax.random.PRNGKey(config.seed))
  for r in range(8):
    np.testing.assert_array_equal(
        online[r], part.online(state.replace(round=jnp.int32(r))))
  schedule = algorithm.parts['clock'].clock.schedule
  assert 0 < online.sum() < online.size
  assert not (schedule.dispatched & ~online).any()
  assert schedule.arrivals.any(axis=1).sum() < 8   # some round was empty


def test_every_client_online_on_the_clock_is_the_clock_alone_bit_for_bit():
  config = clock_config('fedavg', mu=1 / 3, jitter=0.3)
  alone, state, data = build(config)
  online, online_state, _ = build(with_availability(
      clock_config('fedavg', mu=1 / 3, jitter=0.3), 1.0))
  for key, value in alone.round_inputs(0, ROUNDS)['clock'].items():
    np.testing.assert_array_equal(online.round_inputs(0, ROUNDS)['clock'][key],
                                  value)
  a, _ = RoundRunner(alone, 'map').run(state, data, ROUNDS)
  b, _ = RoundRunner(online, 'map').run(online_state, data, ROUNDS)
  chex.assert_trees_all_equal(a.params, b.params)
