"""The secagg part: fixed-point sums modulo 2^b within the quantisation bound,
the wrap-arounds and clips they cause counted exactly, the dropout threshold
under lossy links, the composition with dp and the one-line refusals."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine_utils import tiny_config, tiny_method
from fedjax_het import config as config_lib
from fedjax_het.core import aggregation
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.core.state import ClientOutput, ClientPlan
from fedjax_het.options import ConfigError


def build(name='fedavg', weights='uniform', dp=None, systems=None, **secagg):
  config = tiny_config(algorithm=name, aggregation_weights=weights)
  if name in ('heterofl', 'fiarse'):
    config.capacities = (0.5, 1.0)
  config.secagg.update(secagg)
  config.dp.update(dp or {})
  config.systems.update(systems or {})
  return tiny_method(config)


def flat(tree):
  return np.concatenate([np.ravel(x) for x in
                         jax.tree.leaves(jax.device_get(tree))])


def one_round(algorithm, state, data):
  state, metrics = RoundRunner(algorithm, 'vmap').run(state, data, 1)
  return flat(state.params), jax.device_get(metrics)


@pytest.mark.parametrize('name,weights', [
    ('fedavg', 'uniform'), ('fedavg', 'examples'), ('heterofl', 'uniform')])
def test_enough_bits_give_the_exact_mean_within_the_quantisation_bound(
    name, weights):
  """Every delivering client's term is off by at most s/2 per coordinate, so
  the mean is within K·s/2 / Σ w m of the exact one (s/2 with uniform
  weights), the server step (SGD, η_s = 1) moves the params by it."""
  exact, _ = one_round(*build(name, weights))
  algorithm, state, data = build(name, weights, bits=12, clip_range=2**6)
  step = algorithm.parts['secagg'].step
  assert step == 2**6 / 2**11
  plans = jax.jit(algorithm.plan_round)(state)
  weight = np.asarray(plans.active_weight())
  bound = weight.size * step / 2 / weight.sum()   # K·s/2 / Σw (full model)
  if weights == 'uniform':
    bound = step / 2                             # k_j·s/2 / k_j per coordinate
  quantised, metrics = one_round(algorithm, state, data)
  error = np.abs(quantised - exact)
  assert error.max() <= bound * (1 + 1e-5)
  # The quantisation acts (12 bits over ±64 is a coarse grid) and nothing
  # was clipped or wrapped.
  assert error.max() > 0.1 * bound
  assert metrics['secagg_clipped'][0] == 0
  assert metrics['secagg_wraps'][0] == 0


def constructed_round(bits, values):
  """A cohort of K = len(values) clients whose update is one [6] vector each
  (all delivered, weight 1), encoded by the part of `bits` bits at step 2^−4
  (range 2^(bits−1−4)); (part, plans, encoded outputs)."""
  algorithm, _, _ = build(bits=bits, clip_range=2.0**(bits - 5))
  part = algorithm.parts['secagg']
  k = len(values)
  plans = ClientPlan(client_id=jnp.arange(k), key=None,
                     num_steps=jnp.ones(k, jnp.int32), lr=jnp.ones(k),
                     weight=jnp.ones(k), group=jnp.zeros(k, jnp.int32))
  outputs = ClientOutput(delta={'w': jnp.asarray(values, jnp.float32)},
                         loss=jnp.zeros(k), num_examples=jnp.ones(k))
  uploaded = jax.vmap(lambda p, o: part.upload(None, p, o))(plans, outputs)
  return part, plans, uploaded


def test_too_few_bits_wrap_the_sum_around_and_every_wrap_is_counted():
  """Four clients' values on the 2^−4 grid within ±0.875: their sums reach
  ±3.5. With 8 bits (range ±8) the decoded sum is exact; with 5 bits (range
  [−1, 1)) a sum outside the range wraps modulo 2 and is counted, by both
  ways the part reads the sums (made in the map, or stacked uploads)."""
  rng = np.random.default_rng(0)
  values = rng.integers(-14, 15, size=(4, 6)) / 16
  values[:, 0] = 0.875   # sum 3.5: wraps at 5 bits
  values[:, 1] = [0.5, 0.5, -0.5, -0.4375]   # sum 0.0625: does not
  true = values.sum(axis=0)
  for bits, expected_wraps in ((8, 0), (5, np.sum((true < -1) | (true >= 1)))):
    part, plans, uploaded = constructed_round(bits, values)
    sums = aggregation.segment_sums(uploaded.delta, plans.active_weight(),
                                    plans.group, 1)
    decoded, _ = part.release_sums(None, plans.active_weight(), sums)
    wrapped = (true + 1) % 2 - 1 if bits == 5 else true
    np.testing.assert_array_equal(decoded['w'][0], wrapped.astype(np.float32))
    in_map = part.metrics({}, plans, uploaded.replace(delta_sums=sums))
    stacked = part.metrics({}, plans, uploaded)
    assert in_map['secagg_wraps'] == stacked['secagg_wraps'] == expected_wraps
    assert in_map['secagg_clipped'] == 0
  assert 0 < expected_wraps < 6


def test_values_outside_the_range_are_clipped_and_counted():
  values = np.zeros((3, 6))
  values[0, :2] = [1.5, -2.0]   # outside [−1, 1 − 2^−4] at 5 bits
  values[1, 0] = 0.9375         # the top of the range: kept
  values[2, 3] = -1.0           # the bottom: kept
  part, plans, uploaded = constructed_round(5, values)
  np.testing.assert_array_equal(uploaded.parts['secagg'], [2, 0, 0])
  np.testing.assert_array_equal(uploaded.delta['w'][0, :2], [0.9375, -1.0])
  assert part.metrics({}, plans, uploaded)['secagg_clipped'] == 2


def test_fewer_deliverers_than_the_threshold_leave_the_model_unchanged():
  """Lossy links (q = 0.5) drop uploads; t = 3 of K = 4: a round in which
  fewer than three uploads arrive leaves the params and the server momentum
  as they were and is counted; a round with three or four aggregates."""
  config = tiny_config(algorithm='fedavg', server_momentum=0.9)
  config.systems.q = (0.5,)
  config.secagg.update(bits=16, clip_range=4.0, dropout_threshold=3)
  algorithm, state, data = tiny_method(config)
  runner = RoundRunner(algorithm, 'vmap')
  seen = set()
  for _ in range(8):
    delivered = int(jnp.sum(jax.jit(algorithm.plan_round)(state).delivers()))
    before = jax.device_get((state.params, state.opt_state))  # run donates it
    after, metrics = runner.run(state, data, 1)
    aborted = delivered < 3
    assert metrics['secagg_aborted'][0] == float(aborted)
    same = np.array_equal(flat(after.params), flat(before[0]))
    assert same == aborted
    if aborted:
      jax.tree.map(np.testing.assert_array_equal,
                   jax.device_get(after.opt_state), before[1])
    seen.add(aborted)
    state = after
  assert seen == {True, False}


def test_neutral_setting_is_the_run_without_the_part_within_the_bound():
  """The most bits K = 4 allow (23) over ±16: step 2^−18; two rounds of
  HeteroFL stay within a few steps of the run without the part."""
  runs = []
  for secagg in ({}, {'bits': 23, 'clip_range': 16.0}):
    algorithm, state, data = build('heterofl', **secagg)
    state, _ = RoundRunner(algorithm, 'vmap').run(state, data, 2)
    runs.append(flat(state.params))
  assert algorithm.parts.names == ('secagg',)
  np.testing.assert_allclose(runs[1], runs[0], rtol=0, atol=4 * 2.0**-18)


def test_composes_with_dp_clip_then_encode_noise_then_decode():
  clip, bits, c = 0.05, 16, 1.0
  algorithm, state, data = build(dp={'clip_norm': clip,
                                     'noise_multiplier': 0.5},
                                 bits=bits, clip_range=c)
  assert algorithm.parts.names == ('dp', 'secagg')
  part = algorithm.parts['secagg']
  plans = jax.jit(algorithm.plan_round)(state)
  outputs = jax.vmap(algorithm.client_update, in_axes=(None, 0, None))(
      state.params, plans, data)
  norms = jax.vmap(lambda d: jnp.sqrt(sum(
      jnp.sum(jnp.square(x)) for x in jax.tree.leaves(d))))(outputs.delta)
  coordinates = flat(state.params).size
  # Clipped to S, then encoded: within √P·s/2 of the clipped update.
  assert np.all(np.asarray(outputs.parts['dp']) > clip)
  assert np.all(np.asarray(norms) <=
                clip + math.sqrt(coordinates) * part.step / 2)
  # The noise enters before the decode: the released sum of zero updates is
  # noise on the step's grid.
  zeros = jax.tree.map(lambda p: jnp.zeros((1,) + p.shape), state.params)
  released, _ = algorithm.parts.release_sums(state, plans.active_weight(),
                                             (zeros, None))
  grid = flat(released) / part.step
  np.testing.assert_array_equal(grid, np.round(grid))
  assert np.count_nonzero(grid) > grid.size // 2
  state, metrics = RoundRunner(algorithm, 'vmap').run(state, data, 2)
  assert np.all(np.isfinite(flat(state.params)))
  np.testing.assert_array_equal(metrics['dp_clipped'], [4, 4])


@pytest.mark.parametrize('name,secagg,match', [
    ('fedvarp', {'bits': 8}, 'fedvarp does not read the secagg section'),
    ('os', {'bits': 8}, 'os does not read the secagg section'),
    ('hist', {'bits': 8}, 'hist does not read the secagg section'),
    ('fedavg', {'clip_range': 2.0}, 'secagg.bits = 0 leaves'),
    ('fedavg', {'bits': 8, 'clip_range': 3.0}, 'power of two'),
    ('fedavg', {'bits': 1}, 'at least 2'),
])
def test_bad_secagg_settings_are_refused_in_one_line(name, secagg, match):
  config = tiny_config(algorithm=name)
  config.secagg.update(secagg)
  with pytest.raises(ConfigError, match=match) as info:
    config_lib.validate(config)
  assert '\n' not in str(info.value)


@pytest.mark.parametrize('secagg,section,values,match', [
    ({'bits': 24}, None, None, r'secagg.bits ≤ 23'),
    ({'bits': 8, 'dropout_threshold': 5}, None, None, 'exceeds the cohort'),
    ({'bits': 8}, 'clock', {'mu': 0.5}, r'^clock\.\* and secagg\.\* .*stale'),
    ({'bits': 8}, 'hierarchy', {'num_cells': 2},
     r'^hierarchy\.\* and secagg\.\* .*edge rounds'),
])
def test_what_the_ring_cannot_hold_is_refused_in_one_line(secagg, section,
                                                          values, match):
  config = tiny_config(algorithm='fedavg')
  config.secagg.update(secagg)
  if section:
    config.clients_per_round = 6
    config[section].update(values)
  with pytest.raises(ConfigError, match=match) as info:
    tiny_method(config)
  assert '\n' not in str(info.value)


@pytest.mark.parametrize('weights,released', [((1, 1, 0, 0), False),
                                              ((1, 1, 1, 0), True)])
def test_an_aborted_round_leaves_the_adaptive_clip_norm(weights, released):
  """A constructed round under dp's adaptive clipping (with count noise)
  and t = 3: two of four deliver, the round releases nothing and S stays
  bit for bit, though the delivering updates (norms 0.5 < S = 1) would move
  it; three deliver and S moves as dp's `finish` moves it."""
  algorithm, state, _ = build(
      dp={'clip_norm': 1.0, 'adaptive_quantile': 0.5, 'adaptive_lr': 0.2,
          'count_noise': 0.5},
      bits=16, clip_range=4.0, dropout_threshold=3)
  assert algorithm.parts.names == ('dp', 'secagg')
  dp = algorithm.parts['dp']
  k = len(weights)
  plans = ClientPlan(client_id=jnp.arange(k), key=None,
                     num_steps=jnp.ones(k, jnp.int32), lr=jnp.ones(k),
                     weight=jnp.asarray(weights, jnp.float32),
                     group=jnp.zeros(k, jnp.int32),
                     parts={'dp': jnp.ones(k, jnp.float32)})
  outputs = ClientOutput(delta=None, loss=jnp.zeros(k),
                         num_examples=jnp.zeros(k),
                         parts={'dp': jnp.asarray([0.5, 0.5, 2.0, 2.0]),
                                'secagg': jnp.zeros(k)})
  after = algorithm.parts.finish(state, state, plans, outputs)
  moved_by_dp = dp.finish(state, state, plans, outputs)
  assert float(dp.clip_norm(moved_by_dp)) != 1.0
  expected = moved_by_dp if released else state
  assert dp.clip_norm(after) == dp.clip_norm(expected)
