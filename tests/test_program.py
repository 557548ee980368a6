"""Engine v2: client programs, client drivers, per-client state, idle slots, round inputs."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_het.methods import FedAvg
from fedjax_het.core import aggregation, backends, program
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.core.state import ClientPlan
from engine_utils import (assert_backends_agree, checkpoint_round_trip,
                          committed, run_every_backend, tiny_data,
                          tiny_fedavg)

BACKENDS = ('vmap', 'map', 'sequential')


def one_plan(num_steps=6, key=0, client_id=0, **changes):
  plan = ClientPlan(client_id=jnp.int32(client_id),
                    key=jax.random.PRNGKey(key),
                    num_steps=jnp.int32(num_steps), lr=jnp.float32(0.1),
                    weight=jnp.float32(1.0), group=jnp.int32(0))
  return plan.replace(**changes)


def linear_params():
  return {'a': jnp.ones((5, 3)), 'b': jnp.full((3,), 0.5)}


def linear_loss(local, x, y, plan, ctx):
  """Squared error of a linear model; also returns the step index."""
  del plan
  p = local.params
  pred = x @ p['a'] + p['b']
  loss = jnp.mean(jnp.square(pred - jax.nn.one_hot(y, 3)))
  return loss, {'step': ctx.step, 'x_sum': jnp.sum(x)}


def plain_loss(local, x, y, plan, ctx):
  return linear_loss(local, x, y, plan, ctx)[0]


def run(prog, params, plan, data, client_state=None):
  return program.run_program(prog, program.LocalModel(params, client_state),
                             plan, data, min_count=int(data.counts.min()))


# ---- emitted step outputs ---------------------------------------------------
@pytest.mark.parametrize('steps,h', [(6, 2), (7, 3), (5, 5), (4, 1)])
def test_emit_every_keeps_exactly_steps_h_minus_1_2h_minus_1(steps, h):
  data = tiny_data()
  sgd = program.sgd_factory()
  emitting = program.sgd_program(linear_loss, sgd, num_steps=steps,
                                 batch_size=4, emit_every=h)
  silent = program.sgd_program(plain_loss, sgd, num_steps=steps, batch_size=4)
  plan = one_plan(num_steps=steps)
  out = run(emitting, linear_params(), plan, data)
  np.testing.assert_array_equal(out.emitted['step'],
                                np.arange(h - 1, steps - steps % h, h))
  assert out.emitted['x_sum'].shape == (steps // h,)
  np.testing.assert_array_equal(out.emitted_active, True)
  # Emitting changes nothing else: the trailing steps mod h still train.
  reference = run(silent, linear_params(), plan, data)
  chex.assert_trees_all_close(out.delta, reference.delta, atol=1e-7)
  np.testing.assert_allclose(out.loss, reference.loss, rtol=1e-6)


def test_emitted_outputs_of_steps_not_run_are_flagged_inactive():
  data = tiny_data()
  prog = program.sgd_program(linear_loss, program.sgd_factory(), num_steps=6,
                             batch_size=4, emit_every=2)
  out = run(prog, linear_params(), one_plan(num_steps=3), data)
  np.testing.assert_array_equal(out.emitted_active, [True, False, False])


# ---- trainable sub-trees ----------------------------------------------------
def test_trainable_leaves_others_bit_identical_without_optimizer_state():
  data = tiny_data()
  adam = lambda lr: optax.adam(lr)
  prog = program.sgd_program(plain_loss, adam, num_steps=4, batch_size=4,
                             trainable=(('params', 'a'),))
  plan = one_plan()
  out = run(prog, linear_params(), plan, data)
  np.testing.assert_array_equal(out.delta['b'], 0.0)
  assert np.abs(np.asarray(out.delta['a'])).max() > 0
  carry = prog.init(program.LocalModel(linear_params()), plan)
  state_sizes = sorted(x.size for x in jax.tree.leaves(carry.opt_state))
  assert state_sizes == [1, 15, 15]  # Adam's count, mu and nu of 'a' only
  # The frozen leaf is still seen by the forward: training all of `params`
  # from the same start gives a different 'a'.
  full = program.sgd_program(plain_loss, adam, num_steps=4, batch_size=4)
  assert not np.allclose(run(full, linear_params(), plan, data).delta['a'],
                         out.delta['a'])


def test_trainable_client_state_is_trained_and_returned():
  data = tiny_data()

  def loss(local, x, y, plan, ctx):  # a per-client bias on top of frozen params
    del plan, ctx
    pred = x @ local.params['a'] + local.client_state['bias']
    return jnp.mean(jnp.square(pred - jax.nn.one_hot(y, 3)))

  prog = program.sgd_program(loss, program.sgd_factory(), num_steps=3,
                             batch_size=4,
                             trainable=(('client_state', 'bias'),))
  start = {'bias': jnp.zeros((3,))}
  out = run(prog, linear_params(), one_plan(), data, start)
  chex.assert_trees_all_equal(out.delta, jax.tree.map(jnp.zeros_like,
                                                      linear_params()))
  assert np.abs(np.asarray(out.client_state['bias'])).max() > 0


# ---- sequences --------------------------------------------------------------
def test_sequence_equals_running_the_two_programs_by_hand():
  data = tiny_data()

  def loss(local, x, y, plan, ctx):
    del plan, ctx
    pred = x @ local.params['a'] + local.params['b'] + local.client_state
    return jnp.mean(jnp.square(pred - jax.nn.one_hot(y, 3)))

  mask_phase = program.sgd_program(loss, program.sgd_factory(), num_steps=2,
                                   batch_size=3,
                                   trainable=(('client_state',),))
  weight_phase = program.sgd_program(loss, program.sgd_factory(0.9),
                                     num_steps=4, batch_size=4)
  plan = one_plan(num_steps=4)
  state = jnp.zeros((3,))
  both = run(program.sequence(mask_phase, weight_phase), linear_params(),
             plan, data, state)
  first = run(mask_phase, linear_params(), plan, data, state)
  second_key = program.phase_key(plan.key, 1)
  middle = jax.tree.map(jnp.subtract, linear_params(), first.delta)
  second = run(weight_phase, middle, plan.replace(key=second_key), data,
               first.client_state)
  chex.assert_trees_all_close(
      both.delta, jax.tree.map(jnp.add, first.delta, second.delta),
      atol=1e-7)
  chex.assert_trees_all_equal(both.client_state, second.client_state)
  np.testing.assert_allclose(both.loss, (2 * first.loss + 4 * second.loss) / 6,
                             rtol=1e-6)
  assert int(both.num_examples) == 2 * 3 + 4 * 4


def test_bad_programs_are_refused():
  with pytest.raises(ValueError, match='emit_every'):
    program.sgd_program(plain_loss, program.sgd_factory(), num_steps=3,
                        batch_size=2, emit_every=4)
  with pytest.raises(ValueError, match='sequence'):
    program.sequence()


# ---- algorithms on the drivers ----------------------------------------------
class CountingFedAvg(FedAvg):
  """FedAvg whose clients count their participations in per-client state,
  with a client optimiser of its own (Adan) and idle slots from round inputs."""

  def client_optimizer(self):
    return lambda lr: optax.adan(lr)

  def init_clients(self, params):
    del params
    return {'rounds_trained': jnp.zeros((self.num_clients,), jnp.int32)}

  def client_program(self):
    train = super().client_program()
    final = train.final

    def count(carry, plan):
      local = final(carry, plan)
      return local.replace(client_state={
          'rounds_trained': local.client_state['rounds_trained'] + 1})

    return program.ClientProgram(train.init, train.step, count,
                                 num_steps=train.num_steps,
                                 batch_size=train.batch_size)

  def plan_round(self, state, data=None, inputs=None):
    plans = super().plan_round(state, data)
    if inputs is None:
      return plans
    return plans.replace(active=inputs['active'],
                         lr=plans.lr * inputs['lr_scale'])


def counting(config=None):
  base, state, data = tiny_fedavg(config)
  algorithm = CountingFedAvg(base.config, base.model, data)
  return algorithm, algorithm.init(state.params, state.key), data


@pytest.mark.parametrize('backend', BACKENDS)
def test_per_client_state_is_gathered_and_scattered(backend):
  algorithm, state, data = counting()
  counts = np.zeros(6, int)
  runner = RoundRunner(algorithm, backend)
  for _ in range(3):
    cohort = np.asarray(runner._plan(state, data, None).client_id)  # pylint: disable=protected-access
    counts[cohort] += 1
    state, _ = runner.run(state, data, 1)
  np.testing.assert_array_equal(state.clients['rounds_trained'], counts)


def test_idle_slots_change_nothing():
  algorithm, state, data = counting()
  runner = RoundRunner(algorithm, 'vmap')
  idle = {'active': jnp.asarray([[True, False, True, False]]),
          'lr_scale': jnp.ones((1,))}
  first = jax.tree.map(jnp.copy, state)
  after, metrics = runner.run(state, data, 1, inputs=idle)
  plans = runner._plan(first, data, None)  # pylint: disable=protected-access
  cohort = np.asarray(plans.client_id)
  # Idle clients keep their state row; active ones count the round.
  np.testing.assert_array_equal(
      np.asarray(after.clients['rounds_trained'])[cohort], [1, 0, 1, 0])
  # The aggregate equals the same round with the idle slots' weight at 0.
  zero_weight = plans.replace(weight=plans.weight * jnp.asarray([1., 0, 1, 0]))

  @jax.jit
  def weighted_round(state, plans, data):
    outputs = algorithm.local_phase(state, plans, data, backends.VmapClients())
    return algorithm.finish_round(state, plans, outputs)[0]

  expected = weighted_round(first, zero_weight, data)
  chex.assert_trees_all_close(after.params, expected.params, atol=1e-7)
  assert int(metrics['examples'][0]) == 2 * 3 * 4  # 2 clients × 3 steps × B


def test_round_inputs_change_the_round_as_a_host_loop_would():
  inputs = {'active': jnp.asarray([[True] * 4, [True, True, False, True],
                                   [False, True, True, True]]),
            'lr_scale': jnp.asarray([1.0, 0.5, 2.0])}
  algorithm, state, data = counting()
  scanned, scanned_metrics = RoundRunner(algorithm, 'vmap').run(
      state, data, 3, inputs=inputs)
  algorithm, state, data = counting()
  runner = RoundRunner(algorithm, 'vmap')
  for r in range(3):
    state, _ = runner.run(state, data, 1,
                          inputs=jax.tree.map(lambda x, r=r: x[r:r + 1],
                                              inputs))
  chex.assert_trees_all_close(scanned.params, state.params, atol=1e-6)
  chex.assert_trees_all_equal(scanned.clients, state.clients)
  algorithm, plain, data = counting()
  unscaled, _ = RoundRunner(algorithm, 'vmap').run(plain, data, 3)
  assert not np.allclose(jax.tree.leaves(unscaled.params)[0],
                         jax.tree.leaves(scanned.params)[0])
  assert scanned_metrics['examples'].tolist() == [48, 36, 36]


class TwoPassFedAvg(FedAvg):
  """Two passes of every client per round through `clients.scan`, the second
  from the first pass's per-segment means (a toy of HIST's edge rounds)."""
  sums_deltas_in_map = False  # it reads the deltas

  def local_phase(self, state, plans, data, clients):
    def one_pass(moved, i):
      table = jax.tree.map(lambda p, m: p[None] - m, state.params, moved)
      keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(plans.key, i)
      out = self.run_clients(clients, plans.replace(key=keys, start_model=
                                                    plans.group), data,
                             table=table)
      means, _ = aggregation.masked_segment_mean(out.delta, plans.weight,
                                                 plans.group, 1)
      return jax.tree.map(jnp.add, moved, means), out.loss

    moved = jax.tree.map(lambda p: jnp.zeros((1,) + p.shape), state.params)
    moved, losses = clients.scan(one_pass, moved, jnp.arange(2))
    return self.run_clients(clients, plans, data, params=state.params).replace(
        delta=jax.tree.map(lambda m: jnp.broadcast_to(
            m[0], plans.weight.shape + m.shape[1:]), moved),
        loss=losses.mean(0))


def test_clients_scan_gives_the_same_result_under_every_backend():
  def build():
    base, state, data = tiny_fedavg()
    return TwoPassFedAvg(base.config, base.model, data), state, data

  assert_backends_agree(run_every_backend(build, 2, BACKENDS))


def test_per_client_state_survives_checkpoint_and_resume(tmp_path):
  algorithm, state, data = counting()
  straight, _ = RoundRunner(algorithm, 'vmap').run(
      jax.tree.map(jnp.copy, state), data, 4)
  runner = RoundRunner(algorithm, 'vmap')
  half, _ = runner.run(committed(state), data, 2)
  algorithm, fresh, data = counting()
  restored, host = checkpoint_round_trip(str(tmp_path), 2, half, fresh,
                                         {'note': 1})
  assert host == {'note': 1}
  resumed, _ = RoundRunner(algorithm, 'vmap').run(restored, data, 2)
  chex.assert_trees_all_equal(resumed.clients, straight.clients)
  chex.assert_trees_all_equal(resumed.params, straight.params)
  assert int(np.sum(straight.clients['rounds_trained'])) == 4 * 4


# ---- aggregation sums -------------------------------------------------------
def test_structured_unit_weights_equal_their_expanded_coordinates():
  rng = np.random.default_rng(0)
  values = {'kernel': jnp.asarray(rng.normal(size=(4, 3, 5)), jnp.float32)}
  rows = jnp.asarray(rng.uniform(size=(4, 1, 5)), jnp.float32)  # per output row
  weights = jnp.asarray([1.0, 2.0, 0.5, 0.0])
  segments = jnp.asarray([0, 1, 0, 1])
  num, den = aggregation.segment_sums(values, weights, segments, 2,
                                      {'kernel': rows})
  full_num, full_den = aggregation.segment_sums(
      values, weights, segments, 2,
      {'kernel': jnp.broadcast_to(rows, (4, 3, 5))})
  np.testing.assert_allclose(num['kernel'], full_num['kernel'], rtol=1e-6)
  assert den['kernel'].shape == (2, 1, 5)
  np.testing.assert_allclose(np.broadcast_to(den['kernel'], (2, 3, 5)),
                             full_den['kernel'], rtol=1e-6)
  expected = np.einsum('c,cij,cij->ij', np.asarray(weights) * (segments == 0),
                       np.broadcast_to(rows, (4, 3, 5)), values['kernel'])
  np.testing.assert_allclose(num['kernel'][0], expected, rtol=1e-5)
  mean, _ = aggregation.masked_segment_mean(values, weights, segments, 2,
                                            {'kernel': rows})
  np.testing.assert_allclose(mean['kernel'],
                             full_num['kernel'] / full_den['kernel'],
                             rtol=1e-5)
