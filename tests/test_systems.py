"""The heterogeneity simulator and the local solvers' accumulation norms."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from fedjax_het.config import base_config
from fedjax_het.core import program
from fedjax_het.core.state import ClientPlan
from fedjax_het.data import FederatedData
from fedjax_het.parts.links_work import Heterogeneity
from fedjax_het.parts.local_work import accumulation_norm


def systems_section(**overrides) -> ml_collections.ConfigDict:
  section = base_config().systems
  section.update(overrides)
  return section


def build(section, num_clients=20, counts=None, batch_size=4, seed=0):
  counts = np.full(num_clients, 8) if counts is None else np.asarray(counts)
  return Heterogeneity.from_config(section, client_counts=counts,
                                   batch_size=batch_size, default_work=3,
                                   seed=seed)


def draw_rounds(model, num_rounds, seed=0):
  keys = jax.random.split(jax.random.PRNGKey(seed), num_rounds)
  return jax.jit(jax.vmap(lambda k, r: model.draw(k, r)))(
      keys, jnp.arange(num_rounds))


def test_dynamic_draws_follow_the_papers_two_groups():
  model = build(systems_section(model='dynamic'))
  rounds = draw_rounds(model, 4000)
  q, work = np.asarray(rounds.failure_prob), np.asarray(rounds.work)
  groups = {0: (slice(0, 10), (0.4, 0.5), (1, 10)),
            1: (slice(10, 20), (0.0, 0.1), (20, 30))}
  for clients, (q_lo, q_hi), (t_lo, t_hi) in groups.values():
    gq, gt = q[:, clients], work[:, clients]
    assert q_lo <= gq.min() and gq.max() < q_hi
    assert set(np.unique(gt)) == set(range(t_lo, t_hi + 1))  # U{lo..hi}
    np.testing.assert_allclose(gq.mean(), (q_lo + q_hi) / 2, atol=0.003)
    np.testing.assert_allclose(gt.mean(), (t_lo + t_hi) / 2, atol=0.1)
    # Upload success is Bernoulli(1 − q): Z = 1 is success.
    success = np.asarray(rounds.link_up)[:, clients]
    np.testing.assert_allclose(success.mean(), 1 - gq.mean(), atol=0.01)
  # Redrawn every round, independently per client; same key, same draw.
  assert len({tuple(row) for row in work}) > 3900
  again = draw_rounds(model, 4000)
  np.testing.assert_array_equal(again.work, rounds.work)
  np.testing.assert_array_equal(again.link_up, rounds.link_up)


def test_static_lists_are_assigned_by_a_seeded_permutation():
  section = systems_section(q=tuple(0.02 * i for i in range(20)),
                            local_work=tuple(range(1, 40, 2)))
  given = build(section)
  np.testing.assert_array_equal(given.work, np.arange(1, 40, 2))
  section.shuffle = True
  shuffled, same, other = build(section), build(section), build(section, seed=1)
  assert sorted(shuffled.work) == list(range(1, 40, 2))
  np.testing.assert_allclose(sorted(shuffled.failure_prob), given.failure_prob)
  assert not np.array_equal(shuffled.work, given.work)
  np.testing.assert_array_equal(shuffled.work, same.work)
  assert not np.array_equal(shuffled.work, other.work)
  # The two lists get independent permutations.
  assert not np.array_equal(np.argsort(shuffled.work),
                            np.argsort(-shuffled.failure_prob))


def test_markov_links_switch_with_their_transition_probabilities():
  fail, recover = (0.1, 0.3, 0.05, 0.5), (0.5, 0.2, 0.9, 0.5)
  model = build(systems_section(model='markov', markov_fail=fail,
                                markov_recover=recover), num_clients=4)

  def step(state, key):
    rnd = model.draw(key, 0, state)
    return rnd.link_up.astype(jnp.int32), (state, rnd.failure_prob)

  keys = jax.random.split(jax.random.PRNGKey(3), 40000)
  _, (states, q) = jax.lax.scan(step, model.init_link_state(), keys)
  states, q = np.asarray(states), np.asarray(q)  # state entering each round
  before, after, q = states[:-1], states[1:], q[:-1]
  assert np.all(states[0] == 1)  # every link starts on
  for m in range(4):
    on, off = before[:, m] == 1, before[:, m] == 0
    np.testing.assert_allclose((after[on, m] == 0).mean(), fail[m], atol=0.015)
    np.testing.assert_allclose((after[off, m] == 1).mean(), recover[m],
                               atol=0.03)
    # The round's q is the failure probability given the previous state.
    np.testing.assert_allclose(q[on, m], fail[m], rtol=1e-6)
    np.testing.assert_allclose(q[off, m], 1 - recover[m], rtol=1e-6)
    np.testing.assert_allclose(before[:, m].mean(),
                               recover[m] / (fail[m] + recover[m]), atol=0.03)


def test_trace_rows_repeat_and_epochs_count_batches(tmp_path):
  q = np.array([[0.1, 0.2, 0.3], [0.0, 0.5, 0.9]])
  work = np.array([[1, 2, 3], [4, 5, 6]])
  path = str(tmp_path / 'trace.npz')
  np.savez(path, q=q, local_work=work)
  model = build(systems_section(model='trace', trace=path, work_unit='epochs'),
                num_clients=3, counts=[8, 9, 3], batch_size=4)
  key = jax.random.PRNGKey(0)
  for r in range(5):
    rnd = model.draw(key, jnp.int32(r))
    np.testing.assert_allclose(rnd.failure_prob, q[r % 2], rtol=1e-6)
    np.testing.assert_array_equal(rnd.work, work[r % 2])
    np.testing.assert_array_equal(rnd.steps, work[r % 2] * [2, 3, 1])
  assert model.max_steps() == 15  # client 1 in row 1: 5 epochs × 3 batches


@pytest.mark.parametrize('content', ['text', 'npy'])
def test_a_trace_that_is_not_an_npz_archive_fails_with_one_line(tmp_path,
                                                                content):
  path = tmp_path / 'trace.npz'
  if content == 'text':
    path.write_text('q,local_work\n0.1,3\n')
  else:
    with open(path, 'wb') as f:
      np.save(f, np.zeros((2, 3)))
  with pytest.raises(ValueError) as error:
    build(systems_section(model='trace', trace=str(path)), num_clients=3,
          counts=[4, 4, 4], batch_size=2)
  message = str(error.value)
  assert message.startswith(f'systems.trace file {path} is not an .npz')
  assert '\n' not in message and 'pickle' not in message


@pytest.mark.parametrize('overrides, message', [
    ({'q': (0.2, 1.5) * 10}, r'systems.q must be probabilities in \[0, 1\], got 1.5'),
    ({'q': (-0.1,)}, r'systems.q must be probabilities in \[0, 1\]'),
    ({'q': (float('nan'),)}, r'systems.q must be probabilities'),
    ({'q': (1.0,)}, r'q = 1 for all clients'),
    ({'q': (0.1, 0.2, 0.3)}, r'one value or one per client \(20\)'),
    ({'local_work': (0,)}, r'systems.local_work must be positive integers'),
    ({'local_work': (-2, 3) * 10}, r'local_work must be positive integers'),
    ({'local_work': (2.5,)}, r'local_work must be positive integers'),
    ({'model': 'dynamic', 'dynamic_work': ((0, 10), (20, 30))},
     r'systems.dynamic_work must be positive integers'),
    ({'model': 'dynamic', 'dynamic_q': ((0.4, 1.2), (0.0, 0.1))},
     r'systems.dynamic_q must be probabilities'),
    ({'model': 'dynamic', 'dynamic_q': ((0.5, 0.4), (0.0, 0.1))},
     r'lo ≤ hi'),
    ({'model': 'dynamic', 'dynamic_q': ((1.0, 1.0), (1.0, 1.0))},
     r'q = 1 for all clients'),
    ({'model': 'dynamic', 'dynamic_q': ((0.4, 0.5),)}, r'same number of client groups'),
    ({'model': 'markov', 'markov_fail': (1.2,)}, r'markov_fail must be probabilities'),
    ({'model': 'markov', 'markov_fail': (1.0,), 'markov_recover': (0.0,)},
     r'q = 1 for all clients'),
    ({'model': 'trace', 'trace': '/nonexistent.npz'}, r'systems.trace must name an .npz'),
    ({'model': 'bursty'}, r'systems.model must be one of'),
    ({'work_unit': 'hours'}, r'systems.work_unit must be one of'),
])
def test_bad_systems_fail_with_one_clear_sentence(overrides, message):
  with pytest.raises(ValueError, match=message):
    build(systems_section(**overrides))


def run_linear_solver(steps, lr, momentum=0.0, prox_mu=0.0):
  """Displacements of the engine's client update on F(x) = x (gradient 1),
  one client per entry of `steps`."""
  data = FederatedData(x=np.zeros((1, 4, 1), np.float32),
                       y=np.zeros((1, 4), np.int32),
                       counts=np.array([4], np.int32))

  def loss(local, x, y, plan, ctx):
    del x, y, plan
    params = local.params
    prox = 0.5 * prox_mu * jnp.sum(jnp.square(params - ctx.global_params))
    return jnp.sum(params) + prox

  solver = program.sgd_program(loss, program.sgd_factory(momentum),
                               num_steps=12, batch_size=2)
  update = lambda params, plan, data: program.run_program(
      solver, program.LocalModel(params), plan, data, min_count=4)
  k = len(steps)
  plans = ClientPlan(client_id=jnp.zeros(k, jnp.int32),
                     key=jax.random.split(jax.random.PRNGKey(0), k),
                     num_steps=jnp.asarray(steps, jnp.int32),
                     lr=jnp.full(k, lr, jnp.float32),
                     weight=jnp.ones(k), group=jnp.zeros(k, jnp.int32))
  run = jax.jit(jax.vmap(update, in_axes=(None, 0, None)))
  return np.asarray(run(jnp.zeros((1,)), plans, data).delta[:, 0])


@pytest.mark.parametrize('momentum, prox_mu', [(0.0, 0.0), (0.3, 0.0),
                                               (0.9, 0.0), (0.0, 1.0),
                                               (0.0, 4.0)])
def test_accumulation_norm_is_the_solvers_summed_gradient_weight(momentum,
                                                                  prox_mu):
  lr, steps = 0.05, (1, 4, 12)
  displacement = run_linear_solver(steps, lr, momentum, prox_mu)
  expected = lr * np.asarray(accumulation_norm(
      jnp.asarray(steps), lr, momentum=momentum, prox_mu=prox_mu))
  np.testing.assert_allclose(displacement, expected, rtol=1e-5)
  if not momentum and not prox_mu:
    assert float(accumulation_norm(7, lr)) == 7.0  # SGD: ‖a‖₁ = T
  with pytest.raises(ValueError, match='no closed-form'):
    accumulation_norm(3, lr, momentum=0.5, prox_mu=1.0)


def test_optax_sgd_momentum_is_heavy_ball_as_the_formula_assumes():
  # v ← ρv + g, x ← x − ηv: two steps of unit gradient move by η(1 + (1 + ρ)).
  tx = optax.sgd(0.1, momentum=0.5)
  params, state = jnp.zeros(()), tx.init(jnp.zeros(()))
  for _ in range(2):
    updates, state = tx.update(jnp.ones(()), state, params)
    params = optax.apply_updates(params, updates)
  np.testing.assert_allclose(-params, 0.1 * (1 + 1.5), rtol=1e-6)
