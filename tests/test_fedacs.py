"""FedACS and its baselines: fixed points, one-round expectations, FedAvg limits, bad input.

Expected values are the paper's formulas, written out
here independently of the methods' own `expected_weights`.
"""
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het import methods, cli, models, run
from fedjax_het.methods import FEDACS_FAMILY
from fedjax_het.methods.base import FederatedAlgorithm
from fedjax_het.methods.fedacs.systems_aware import FedAvgHet
from fedjax_het.core import program
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.core.state import ClientPlan
from fedjax_het.parts import local_work
from engine_utils import tiny_config, tiny_data, tiny_fedavg
from script_utils import REPO, load_script

TINY_MLP = models.create_model('mlp', 3, hidden=(7,))

# The toy quadratic lives with its experiment (it builds on the algorithms).
sys.path.insert(0, os.path.join(REPO, 'experiments', 'fedacs'))
import quadratic_toy as quadratic  # pylint: disable=g-import-not-at-top,wrong-import-position
QUICKSTART = os.path.join(REPO, 'experiments', 'quickstart.py')


def toy(systems=None, **overrides):
  """The toy's defaults with top-level `overrides` and `systems` keys."""
  config = quadratic.default_config()
  config.update(overrides)
  config.systems.update(systems or {})
  return config


def toy_arrays(config):
  """E, q, T and ω of a toy with scalar optima and static systems. [M] each."""
  e = np.asarray(config.optima, np.float64)
  q = np.asarray(config.systems.q, np.float64)
  t = np.asarray(config.systems.local_work, np.float64)
  return e, q, t, np.full(e.shape, 1 / e.size)


def spec_lr(method, config):
  """App. I.2: η₂ (FedACS), η₃ = η₄ (c-a-FedAvg, FedVarp), else η₁."""
  _, q, t, w = toy_arrays(config)
  eta1 = config.client_lr
  if not config.calibrate:
    return eta1
  step = np.sum(w * (1 - q) * t)  # Eq. (111)
  if method == 'fedacs':
    return eta1 * step * np.sum(w / ((1 - q) * t))  # Eq. (112)
  if method in ('ca_fedavg', 'fedvarp'):
    return eta1 * step / np.sum(w * t)  # Eq. (113d)
  return eta1


def spec_weights(method, config):
  """e_m of E[update] = Σ e_m U_m (Eqs. (16), (23c), (25b), (113), (116))."""
  _, q, t, w = toy_arrays(config)
  if method == 'fedacs':
    p = (w / ((1 - q) * t)) / np.sum(w / ((1 - q) * t))  # Eq. (15)
    return p * (1 - q)
  if method in ('ca_fedavg', 'fedvarp', 'fedau'):
    return w
  if method == 'fednova':
    tau = np.sum(w * (1 - q) * t) / np.sum(w * (1 - q))
    return w * (1 - q) * tau / t
  return w * (1 - q)  # FedAvg (IS, US, full), OS


def test_time_averaged_iterate_settles_at_each_methods_fixed_point():
  config = toy()
  summary = quadratic.run(config)
  e, q, t, _ = toy_arrays(config)
  eta = config.client_lr
  true_optimum = e.mean()
  for method in FEDACS_FAMILY:
    row = summary[method]
    w = spec_weights(method, config) * (1 - (1 - eta)**t)  # App. C Eq. (39)
    (fixed_point,), (time_avg,) = row['analytic_fixed_point'], row['time_avg_iterate']
    np.testing.assert_allclose(fixed_point, w @ e / w.sum(), rtol=1e-6)
    assert row['true_optimum'] == [true_optimum]
    np.testing.assert_allclose(row['distance_fixed_point'],
                               abs(fixed_point - true_optimum), rtol=1e-6)
    np.testing.assert_allclose(row['distance_time_avg'],
                               abs(time_avg - true_optimum), rtol=1e-6)
    assert row['mean_distance'] >= row['distance_time_avg'] - 1e-9  # Jensen
    # Noise of the time average is ≈ 0.05 (FedACS, across seeds); the fixed
    # points of different rules are ≥ 0.3 apart.
    assert abs(time_avg - fixed_point) < 0.15
  # FedAvg leans toward the reliable, hard-working clients (large E_m here).
  assert summary['fedavg_het']['analytic_fixed_point'][0] > true_optimum + 1.5
  # FedACS lands on X* up to O(ηT): its weights are (1 − (1 − η)^T)/(ηT)
  # ∈ [1 − ηT/2, 1].
  fedacs = summary['fedacs']
  bound = eta * t.max() / 2 * np.abs(e - true_optimum).max()
  assert fedacs['distance_fixed_point'] < bound
  assert fedacs['distance_time_avg'] < 0.15
  # The paper's ranking of distances to X* (Fig. 7): FedACS < FedNova <
  # c-a-FedAvg = FedVarp = FedAU < FedAvg = OS.
  distance = {m: summary[m]['distance_fixed_point'] for m in FEDACS_FAMILY}
  assert (distance['fedacs'] < distance['fednova'] < distance['ca_fedavg']
          < distance['fedavg_het'])


def one_round_updates(method, config, n, form='paper', clients=None):
  """X_1 − X_0 from X_0 = 0 over n independent draws of round 0's randomness."""
  engine_config = quadratic.algorithm_config(config, method)
  engine_config.fedacs.fedvarp_form = form
  data = quadratic.quadratic_data(config.optima)
  algorithm = quadratic.quadratic_algorithm(engine_config, data)
  state = algorithm.init({'x': jnp.zeros((1,))}, jax.random.PRNGKey(0))
  if clients is not None:
    state = state.replace(clients=clients(state.clients))
  runner = RoundRunner(algorithm, 'vmap')
  step = jax.jit(jax.vmap(
      lambda r: runner.round(state.replace(round=r), data)[0].params['x'][0]))
  return np.asarray(step(jnp.arange(n, dtype=jnp.int32)), np.float64)


def assert_expectation(samples, expected, other=None):
  """Monte-Carlo mean within 4.5 standard errors; `other` outside of them."""
  se = samples.std() / np.sqrt(samples.size)
  assert abs(samples.mean() - expected) < 4.5 * se, (samples.mean(), expected)
  if other is not None:
    assert abs(samples.mean() - other) > 10 * se


MC_ROUNDS = 20000


@pytest.mark.parametrize('method, participation', [
    ('fedavg_het', 'with_replacement'),  # IS, Eq. (18) → (23c)
    ('fedavg_het', 'uniform'),           # US, Eq. (19) → (24a)
    ('fedavg_het', 'full'),              # Eq. (21) → (26a)
    ('ca_fedavg', 'with_replacement'),   # Eq. (113)
    ('fedacs', 'with_replacement'),      # Eq. (16)
    ('fednova', 'with_replacement'),     # Eq. (116)
    ('os', 'with_replacement'),          # Eq. (25b)
])
def test_one_round_expectation_is_the_specs(method, participation):
  config = toy(client_lr=0.05, calibrate=True, participation=participation)
  e, _, t, _ = toy_arrays(config)
  weights = spec_weights(method, config)
  lr = spec_lr(method, config)
  expected = weights @ (e * (1 - (1 - lr)**t))  # U_m from X = 0
  # The same rule at the uncalibrated lr η₁ must be told apart.
  uncalibrated = weights @ (e * (1 - (1 - config.client_lr)**t))
  samples = one_round_updates(method, config, MC_ROUNDS)
  assert_expectation(samples, expected,
                     other=None if lr == config.client_lr else uncalibrated)
  # The method's own E[update] weights (used for the analytic fixed points).
  algorithm = quadratic.quadratic_algorithm(
      quadratic.algorithm_config(config, method),
      quadratic.quadratic_data(config.optima))
  state = algorithm.init({'x': jnp.zeros((1,))}, jax.random.PRNGKey(0))
  rnd = algorithm.systems(state)
  np.testing.assert_allclose(algorithm.expected_weights(state, rnd), weights,
                             rtol=1e-5)
  np.testing.assert_allclose(algorithm.client_lr(rnd), lr, rtol=1e-5)


@pytest.mark.parametrize('form', ['paper', 'saga'])
def test_fedvarp_expectation_with_a_memory(form):
  config = toy(client_lr=0.05, calibrate=True)
  e, q, t, w = toy_arrays(config)
  updates = e * (1 - (1 - spec_lr('fedvarp', config))**t)
  memory = np.linspace(-2.0, 3.0, e.size)  # y_m, stale updates of X − X_local
  if form == 'paper':  # Eq. (114): failed slots reuse y
    expected = np.sum(w * (1 - q) * updates) - np.sum(w * q * memory)
  else:  # SAGA: (1/K) Σ_received (U − y) + Σ ω y, with y = −delta
    expected = np.sum(w * (1 - q) * (updates + memory)) - np.sum(w * memory)
  clients = lambda x: {**x, 'memory': {'x': jnp.asarray(memory)[:, None]}}
  samples = one_round_updates('fedvarp', config, MC_ROUNDS, form, clients)
  assert_expectation(samples, expected, other=np.sum(w * (1 - q) * updates))


def test_fedau_expectation_with_interval_statistics():
  config = toy(client_lr=0.05)
  e, q, t, w = toy_arrays(config)
  k = config.clients_per_round
  updates = e * (1 - (1 - config.client_lr)**t)
  counts = np.arange(e.size) % 3  # 0: no interval yet → ω̂ = 1
  sums = counts * np.linspace(1.5, 6.0, e.size)
  omega_hat = np.where(counts > 0, sums / np.maximum(counts, 1), 1.0)
  participation = (1 - q) * (1 - (1 - w)**k)  # P(m ∈ S̃)
  expected = np.sum(participation * w * omega_hat * updates)

  def clients(x):
    return {**x, 'fedau': {'since': jnp.zeros(e.size),
                           'interval_sum': jnp.asarray(sums, jnp.float32),
                           'interval_count': jnp.asarray(counts, jnp.float32)}}

  samples = one_round_updates('fedau', config, MC_ROUNDS, clients=clients)
  assert_expectation(samples, expected)


@pytest.mark.parametrize('momentum, prox_mu, lr_decay', [
    (0.3, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 0.1)])
def test_local_solver_contraction_is_the_engines(momentum, prox_mu, lr_decay):
  # Reliable links and full participation make a round deterministic:
  # X_1 − X_0 = Σ_m ω_m U_m with U_m = c_m (E_m − X_0), c_m from the solver's
  # recursion in numpy (momentum, FedProx's prox term, the decayed lr).
  config = toy(systems=dict(q=(0.0,) * 10), participation='full',
               momentum=momentum, prox_mu=prox_mu, lr_decay=lr_decay,
               client_lr=0.05)
  e, _, t, w = toy_arrays(config)
  data = quadratic.quadratic_data(config.optima)
  algorithm = quadratic.quadratic_algorithm(
      quadratic.algorithm_config(config, 'fedavg_het'), data)
  state = algorithm.init({'x': jnp.full((1,), 2.0)}, jax.random.PRNGKey(0))
  new_state, _ = jax.jit(RoundRunner(algorithm, 'vmap').round)(state, data)
  c = quadratic.contraction(t.astype(int), 0.05, momentum, prox_mu, lr_decay)
  np.testing.assert_allclose(float(new_state.params['x'][0]) - 2.0,
                             np.sum(w * c * (e - 2.0)), rtol=1e-4)
  assert not np.allclose(c, 1 - 0.95**t)  # differs from plain SGD's


def toy_algorithm(config, method, key=0):
  """(the toy's `method` for `config`, its initial state, the data)."""
  data = quadratic.quadratic_data(config.optima)
  algorithm = quadratic.quadratic_algorithm(
      quadratic.algorithm_config(config, method), data)
  dimension = quadratic.optima_array(config.optima).shape[1]
  state = algorithm.init({'x': jnp.zeros((dimension,))},
                         jax.random.PRNGKey(key))
  return algorithm, state, data


@pytest.mark.parametrize('lr_decay', [0.005, 0.2])
def test_decayed_lr_norm_is_the_explicit_sum(lr_decay):
  """‖a‖₁ of SGD whose step t runs at η(1 − d)^t is Σ_{t<S} a_t with
  a_t = η_t/η = (1 − d)^t: in local_work, in FedACS's p (Eq. (15)) and
  calibrated lr (Eq. (112)), and in FedNova's τ_eff/‖a‖₁ (Eq. (116))."""
  explicit = lambda s: sum((1 - lr_decay)**t for t in range(s))
  steps = (0, 1, 2, 7, 30)
  np.testing.assert_allclose(
      local_work.accumulation_norm(jnp.asarray(steps), 0.05, lr_decay=lr_decay),
      [explicit(s) for s in steps], rtol=1e-5)
  config = toy(lr_decay=lr_decay, calibrate=True)
  _, q, t, w = toy_arrays(config)
  a = np.array([explicit(int(s)) for s in t])
  assert not np.allclose(a, t, rtol=1e-3)
  fedacs, state, _ = toy_algorithm(config, 'fedacs')
  rnd = fedacs.systems(state)
  np.testing.assert_allclose(fedacs.work_norms(rnd), a, rtol=1e-5)
  inverse = w / ((1 - q) * a)
  np.testing.assert_allclose(fedacs.sampling_probs(rnd),
                             inverse / inverse.sum(), rtol=1e-5)
  np.testing.assert_allclose(
      fedacs.client_lr(rnd),
      config.client_lr * np.sum(w * (1 - q) * a) * inverse.sum(), rtol=1e-5)
  fednova, state, _ = toy_algorithm(config, 'fednova')
  tau = np.sum(w * (1 - q) * a) / np.sum(w * (1 - q))
  np.testing.assert_allclose(fednova.client_coefficients(state, rnd), tau / a,
                             rtol=1e-5)


def client_iterates(algorithm, data, client, start, max_steps):
  """x_s of `client` running `algorithm`'s local program from `start` for
  s = 0, …, max_steps steps at the config's lr. [max_steps + 1, D]."""
  n = max_steps + 1
  plans = ClientPlan(
      client_id=jnp.full(n, client, jnp.int32),
      key=jax.random.split(jax.random.PRNGKey(0), n),
      num_steps=jnp.arange(n, dtype=jnp.int32),
      lr=jnp.full(n, algorithm.config.client_lr, jnp.float32),
      weight=jnp.ones(n), group=jnp.zeros(n, jnp.int32))
  local = program.LocalModel({'x': jnp.asarray(start, jnp.float32)})
  run_one = lambda plan: program.run_program(
      algorithm.local_program, local, plan, data, min_count=1).delta['x']
  return start - np.asarray(jax.jit(jax.vmap(run_one))(plans), np.float64)


def test_decayed_lr_client_iterates_are_a_numpy_loop():
  """One FedACS client on F_m = ½‖x − E_m‖², E_m ∈ R³, under
  fedacs.lr_decay = d: x_{t+1} = x_t − η(1 − d)^t (x_t − E_m), the first
  step at the full rate η and each later one (1 − d) slower."""
  d, lr, client, steps = 0.1, 0.3, 2, 8
  optima = quadratic.gaussian_optima(4, 3, seed=1)
  config = toy(optima=optima, systems=dict(q=(0.0,), local_work=(steps,)),
               lr_decay=d, client_lr=lr, clients_per_round=2)
  algorithm, _, data = toy_algorithm(config, 'fedacs')
  start = np.array([0.5, -1.0, 2.0])
  got = client_iterates(algorithm, data, client, start, steps)
  e = np.asarray(optima[client])
  x, want = start.copy(), [start.copy()]
  for t in range(steps):
    x = x - lr * (1 - d)**t * (x - e)
    want.append(x.copy())
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  sgd = start + (1 - (1 - lr)**np.arange(steps + 1))[:, None] * (e - start)
  np.testing.assert_allclose(got[:2], sgd[:2], rtol=1e-5, atol=1e-6)
  assert np.all(np.abs(got[2:] - sgd[2:]).max(axis=1) > 1e-3)


def test_zero_decay_is_the_plain_sgd_solver():
  """fedacs.lr_decay = 0 runs the engine's plain SGD (FederatedAlgorithm's
  optimiser) bit for bit with ‖a‖₁ = T, and a tiny decay is close to it."""
  config = toy(lr_decay=0.0, calibrate=True)
  _, _, t, _ = toy_arrays(config)
  algorithm, state, data = toy_algorithm(config, 'fedacs')
  np.testing.assert_array_equal(
      algorithm.work_norms(algorithm.systems(state)), t)
  plain = type('PlainSgd', (type(algorithm),),
               {'client_optimizer': FederatedAlgorithm.client_optimizer})(
                   algorithm.config, None, data)
  tiny, _, _ = toy_algorithm(toy(lr_decay=1e-6, calibrate=True), 'fedacs')
  ends = [run_copy(a, state, data, 'vmap', rounds=5)[0].params['x']
          for a in (algorithm, plain, tiny)]
  np.testing.assert_array_equal(ends[0], ends[1])
  np.testing.assert_allclose(ends[2], ends[0], rtol=1e-4)
  assert float(ends[0][0]) != 0.0  # the rounds moved the model


def test_equal_links_and_work_every_method_agrees_with_fedavg():
  # With q_m ≡ q and T_m ≡ T every rule weighs the clients equally (so every
  # fixed point is X*), and every calibrated method's expected step e_m·η is
  # FedAvg's, ω(1 − q)η₁ (App. I.2); FedAU keeps lr η₁ and steps 1/(1 − q)
  # further. The e_m and η are the hooks the Monte-Carlo tests above check.
  n = 10
  optima = tuple(float(m) for m in range(n))
  config = toy(optima=optima, systems=dict(q=(0.3,) * n, local_work=(4,) * n),
               calibrate=True)
  data = quadratic.quadratic_data(optima)
  fedavg_step = 0.7 * config.client_lr / n  # ω(1 − q)η₁
  for method in FEDACS_FAMILY:
    algorithm = quadratic.quadratic_algorithm(
        quadratic.algorithm_config(config, method), data)
    state = algorithm.init({'x': jnp.zeros((1,))}, jax.random.PRNGKey(0))
    np.testing.assert_allclose(
        quadratic.analytic_fixed_point(
            algorithm, algorithm.systems_metrics(state), optima),
        [np.mean(optima)], rtol=1e-6)
    rnd = algorithm.systems(state)
    step = algorithm.expected_weights(state, rnd) * algorithm.client_lr(rnd)
    expected = fedavg_step / (0.7 if method == 'fedau' else 1.0)
    np.testing.assert_allclose(step, expected, rtol=1e-5)


def run_copy(algorithm, state, data, backend, rounds=3):
  """Runs `algorithm` from a copy of `state` (the runner donates its input)."""
  start = algorithm.init(*jax.tree.map(jnp.copy, (state.params, state.key)))
  return RoundRunner(algorithm, backend).run(start, data, rounds)


def test_reliable_links_and_equal_work_are_the_engines_fedavg():
  # Engine FedAvg with K draws ∝ examples and uniform weights (Li et al.'s
  # scheme I) is IS with ω ∝ examples; q = 0 and T = local_steps for all.
  engine, state, data = tiny_fedavg(tiny_config(
      client_sampling='proportional', aggregation_weights='uniform'))
  expected, _ = run_copy(engine, state, data, 'vmap')
  for method, backend in (('fedavg_het', 'vmap'), ('fedavg_het', 'sequential'),
                          ('fedacs', 'vmap')):
    config = tiny_config(algorithm=method, aggregation_weights='examples')
    het = methods.create_algorithm(method, config, engine.model, data)
    got, metrics = run_copy(het, state, data, backend)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-6),
                 got.params, expected.params)
    np.testing.assert_array_equal(metrics['uploads'], 4)
  # K distinct clients with ω = 1/M (US, Eq. (19)) is the engine's default.
  engine, state, data = tiny_fedavg(tiny_config(aggregation_weights='uniform'))
  expected, _ = run_copy(engine, state, data, 'vmap')
  config = tiny_config(algorithm='fedavg_het', aggregation_weights='uniform')
  config.fedacs.participation = 'uniform'
  got, _ = run_copy(FedAvgHet(config, engine.model, data), state, data, 'vmap')
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-6),
               got.params, expected.params)


def test_dynamic_systems_are_drawn_in_the_round_and_fedacs_follows_them():
  config = tiny_config(algorithm='fedacs', num_clients=6, clients_per_round=4)
  config.systems.model = 'dynamic'
  config.systems.dynamic_work = ((1, 3), (5, 8))
  data = tiny_data()
  model = models.create_model('mlp', 3, hidden=(7,))
  algorithm = methods.create_algorithm('fedacs', config, model, data)
  params = models.init_params(model, jax.random.PRNGKey(0), (5,))
  state = algorithm.init(params, jax.random.PRNGKey(1))
  plan = jax.jit(algorithm.plan_round)
  lrs, probs = set(), []
  for r in range(6):
    s = state.replace(round=jnp.int32(r))
    plans = plan(s, data)
    rnd = algorithm.systems(s)
    ids = np.asarray(plans.client_id)
    np.testing.assert_array_equal(plans.num_steps, np.asarray(rnd.steps)[ids])
    np.testing.assert_array_equal(plans.weight,
                                  np.asarray(rnd.link_up, np.float32)[ids])
    q, t = np.asarray(rnd.failure_prob, np.float64), np.asarray(rnd.steps)
    omega = np.asarray(data.counts) / np.sum(data.counts)
    p = omega / ((1 - q) * t)
    probs.append(p / p.sum())
    np.testing.assert_allclose(algorithm.sampling_probs(rnd), probs[-1],
                               rtol=1e-5)
    lr = 0.1 * np.sum(omega * (1 - q) * t) * np.sum(omega / ((1 - q) * t))
    np.testing.assert_allclose(plans.lr, lr, rtol=1e-5)
    lrs.add(round(float(plans.lr[0]), 6))
  assert len(lrs) == 6 and not np.allclose(probs[0], probs[1])


@pytest.mark.parametrize('method, overrides, message', [
    ('fedacs', {'q': (0.1, 1.0, 0.2, 0.2, 0.2, 0.2)},
     r'fedacs divides by the upload success probability .* client 1 can have q = 1'),
    ('ca_fedavg', {'model': 'markov', 'markov_recover': (0.0,)},
     r'ca_fedavg divides by the upload success probability'),
    ('fedavg_het', {'q': (2.0,)}, r'systems.q must be probabilities in \[0, 1\]'),
    ('fedavg_het', {'q': (1.0,)}, r'q = 1 for all clients'),
    ('fednova', {'local_work': (0,)}, r'local_work must be positive integers'),
])
def test_bad_systems_for_a_method_fail_clearly(method, overrides, message):
  config = tiny_config(algorithm=method)
  config.systems.update(overrides)
  with pytest.raises(ValueError, match=message):
    methods.create_algorithm(method, config, TINY_MLP, tiny_data())


@pytest.mark.parametrize('method, fedacs, top, message', [
    ('fedacs', {'participation': 'uniform'}, {},
     r'fedacs is defined for fedacs.participation in with_replacement'),
    ('os', {'participation': 'full'}, {}, r'os is defined for'),
    ('fedavg_het', {'prox_mu': -1.0}, {}, r'fedacs.prox_mu must be ≥ 0'),
    ('fedavg_het', {'prox_mu': 0.1}, {'client_momentum': 0.5}, r'no closed-form'),
    ('fedavg_het', {}, {'client_weight_decay': 1e-4}, r'client_weight_decay'),
    ('fedvarp', {'fedvarp_form': 'sag'}, {}, r'fedvarp_form must be paper or saga'),
    ('fedau', {'fedau_cutoff': 0}, {}, r'fedau_cutoff must be a positive integer'),
])
def test_bad_method_options_fail_clearly(method, fedacs, top, message):
  config = tiny_config(algorithm=method, **top)
  config.fedacs.update(fedacs)
  with pytest.raises(ValueError, match=message):
    methods.create_algorithm(method, config, TINY_MLP, tiny_data())


def test_trainer_reports_communication_and_computation_and_resumes(tmp_path):
  config, _ = cli.resolve([
      '--config', QUICKSTART, '--config.algorithm=fedvarp', '--config.num_clients=10',
      '--config.clients_per_round=4', '--config.batch_size=8',
      '--config.model_options.hidden=(16,)', '--config.eval_every=2',
      '--config.checkpoint_every=2', '--config.rounds_per_call=2',
      '--config.progress=False', '--config.systems.model=markov',
      '--config.systems.local_work=(2, 3, 2, 3, 2, 3, 2, 3, 2, 3)',
      '--config.systems.markov_fail=(0.3,)', '--config.rounds=4'])
  whole = run.train(config, str(tmp_path / 'whole'))
  config.rounds = 2
  run.train(config, str(tmp_path / 'parts'))
  config.rounds = 4
  resumed = run.train(config, str(tmp_path / 'parts'))
  assert resumed['totals'] == whole['totals']
  assert resumed['final_test_loss'] == whole['final_test_loss']
  totals = whole['totals']
  model_bytes = whole['num_params'] * 4
  assert totals['bytes_up'] == totals['uploads'] * model_bytes
  assert totals['bytes_down'] == 4 * 4 * model_bytes
  assert 0 < totals['uploads'] < 4 * 4  # Markov links fail sometimes
  assert 4 * 4 * 2 <= totals['local_steps'] <= 4 * 4 * 3
  assert totals['examples'] == totals['local_steps'] * 8


def test_bad_input_through_the_command_line(tmp_path, capsys):
  code = cli.main(['--config', QUICKSTART, '--config.algorithm=fedacs',
                   '--config.systems.q=(1.5,)',
                   '--config.rounds=1', '--config.progress=False',
                   f'--workdir={tmp_path}'])
  assert code == 2
  err = capsys.readouterr().err
  assert err.strip() == ('fedjax-het: error: systems.q must be probabilities '
                         'in [0, 1], got 1.5.')


def fedacs_script(name):
  return load_script(os.path.join('experiments', 'fedacs', name))


def test_quadratic_script_writes_the_summary(tmp_path, capsys):
  script = fedacs_script('quadratic.py')
  assert script.main([f'--workdir={tmp_path}', '--config.rounds=200',
                      "--config.methods=('fedacs',)"]) == 0
  with open(tmp_path / 'summary.json') as f:
    summary = json.load(f)
  assert set(summary) == {'default'} and set(summary['default']) == {'fedacs'}
  assert set(summary['default']['fedacs']) == {
      'time_avg_iterate', 'analytic_fixed_point', 'true_optimum',
      'distance_time_avg', 'distance_fixed_point', 'mean_distance'}
  assert script.main(['--config.systems.local_work=(0, 1)']) == 2
  assert 'one per client (10)' in capsys.readouterr().err
  assert script.main(['--config.systems.local_work=' + repr((0,) + (1,) * 9)]) == 2
  assert 'positive integers' in capsys.readouterr().err


def test_compare_script_prints_the_table_and_plots(tmp_path, capsys):
  script = fedacs_script('compare.py')
  argv = ['--config', os.path.join(REPO, 'experiments', 'fedacs',
                                   'digits_table1.py'),
          f'--workdir={tmp_path}', '--methods', 'fedacs', '--seeds=0',
          '--config.rounds=3', '--config.target_accuracy=0.01',
          '--config.checkpoint_every=3']
  assert script.main(argv) == 0
  table = (tmp_path / 'comparison.md').read_text().splitlines()
  assert table[0].startswith('| algorithm | test accuracy (last 5) | '
                             'rounds to 1% |')
  assert table[2].startswith('| FedACS |') and '| 1 (1.00×) |' in table[2]
  assert '\n'.join(table) in capsys.readouterr().out
  assert (tmp_path / 'comparison.png').exists()
  assert (tmp_path / 'seed0' / 'comparison.md').exists()  # the shared table
  stats = json.loads((tmp_path / 'comparison.json').read_text())
  assert stats['fedacs']['rounds'] == 1 and stats['fedacs']['reached'] == 1
  assert script.main(argv[:3] + ['--methods=fedacs,nope']) == 2
  assert "unknown method(s) ['nope']" in capsys.readouterr().err


def test_paper_configs_are_valid():
  from fedjax_het.config import validate
  from fedjax_het.parts.links_work import Heterogeneity
  folder = os.path.join(REPO, 'experiments', 'fedacs')
  names = sorted(n for n in os.listdir(folder)
                 if n.startswith(('table', 'digits')))
  assert len(names) == 7
  for name in names:
    configs = cli.load_experiment(os.path.join(folder, name)).get_configs()
    assert tuple(configs) == FEDACS_FAMILY
    for method, config in configs.items():
      assert config.algorithm == method
      validate(config)
    model = Heterogeneity.from_config(
        config.systems, client_counts=np.full(20, 3000),
        batch_size=config.batch_size, default_work=config.local_steps, seed=0)
    # The paper-scale tables count T in epochs (steps = T·⌈n_m/B⌉), the scaled digits in steps.
    assert config.systems.work_unit == ('steps' if name.startswith('digits') else 'epochs')
    per_work = -(-3000 // config.batch_size) if config.systems.work_unit == 'epochs' else 1
    assert model.max_steps() in (30 * per_work, 39 * per_work)


@pytest.mark.parametrize('method', ['fedacs', 'ca_fedavg', 'fedvarp'])
def test_proximal_norms_under_calibration_are_at_the_rate_used(method):
  """With FedProx's solver ‖a‖₁ depends on η: the calibrated rate η₂ and the method's ‖a‖₁
  (its p, coefficients) are the fixed point where ‖a‖₁ is the explicit sum Σ_t (1 − η₂μ)^{S−t}
  at η₂, while FedAvg's reference is at η₁."""
  mu = 2.0
  config = toy(client_lr=0.05, calibrate=True, prox_mu=mu)
  _, q, t, w = toy_arrays(config)
  data = quadratic.quadratic_data(config.optima)
  algorithm = quadratic.quadratic_algorithm(quadratic.algorithm_config(config, method), data)
  state = algorithm.init({'x': jnp.zeros((1,))}, jax.random.PRNGKey(0))
  rnd = algorithm.systems(state)
  eta2 = float(algorithm.client_lr(rnd))
  explicit = lambda eta: np.array([sum((1 - eta * mu)**(s - k) for k in range(1, s + 1))
                                   for s in t.astype(int)])
  np.testing.assert_allclose(algorithm.work_norms(rnd), explicit(eta2), rtol=1e-5)
  a1, a2 = explicit(config.client_lr), explicit(eta2)
  fedavg = np.sum(w * (1 - q) * a1)  # Eq. (111) at η₁
  if method == 'fedacs':
    want = config.client_lr * fedavg * np.sum(w / ((1 - q) * a2))  # Eq. (112)
    np.testing.assert_allclose(algorithm.sampling_probs(rnd),
                               w / ((1 - q) * a2) / np.sum(w / ((1 - q) * a2)), rtol=1e-5)
  else:
    want = config.client_lr * fedavg / np.sum(w * a2)  # Eq. (113d)
  np.testing.assert_allclose(eta2, want, rtol=1e-5)
  assert abs(eta2 - config.client_lr) > 1e-3 and not np.allclose(a1, a2, rtol=1e-3)


def test_fednova_tau_eff_from_the_received_updates():
  """fednova_tau='received' (FedNova's code): τ_eff is the mean ‖a‖₁ of this round's received
  slots; the default is Eq. (116)'s expectation over all clients."""
  config = toy(systems=dict(q=(0.5,) * 10))
  data = quadratic.quadratic_data(config.optima)
  by_form = {}
  for form in ('expected', 'received'):
    engine = quadratic.algorithm_config(config, 'fednova')
    engine.fedacs.fednova_tau = form
    algorithm = quadratic.quadratic_algorithm(engine, data)
    state = algorithm.init({'x': jnp.zeros((1,))}, jax.random.PRNGKey(3))
    plans = jax.device_get(algorithm.plan_round(state, data))
    by_form[form] = plans
  plans = by_form['received']
  a = np.asarray(config.systems.local_work, np.float64)[plans.client_id]
  up = plans.extras['link_up']
  assert 0 < up.sum() < up.size
  tau = np.sum(up * a) / up.sum()
  np.testing.assert_allclose(plans.extras['coefficient'], tau / a, rtol=1e-5)  # ω/π = 1 (IS)
  assert not np.allclose(by_form['expected'].extras['coefficient'], tau / a)


def test_toy_figure_configs_are_the_papers_settings():
  """fig4.py: M = 30, K = 15, η = 0.001, E_m ∈ R^10, the three systems × four
  solvers, FedAvg and FedACS; fig7.py: M = 20, K = 6, lr 0.002, calibrated,
  the DNN tables' static and dynamic systems, all seven methods."""
  solvers = {'SGD': {}, 'proximal SGD μ = 1': {'prox_mu': 1.0},
             'decayed-lr SGD d = 0.005': {'lr_decay': 0.005},
             'momentum SGD 0.3': {'momentum': 0.3}}
  fig4 = fedacs_script('fig4.py').get_configs()
  assert set(fig4) == {f'{s}, {v}' for s in ('left', 'middle', 'right')
                       for v in solvers}
  # setting → (most local steps, smallest and largest q of any client)
  systems = {'left': (15, 0.2, 0.2), 'middle': (30, 0.01, 0.3),
             'right': (30, 0.0, 0.4), 'static': (39, 0.02, 0.4),
             'dynamic': (30, 0.0, 0.5)}
  fig7 = fedacs_script('fig7.py').get_configs()
  assert set(fig7) == {'static', 'dynamic'}
  for label, config in {**fig4, **fig7}.items():
    setting, _, solver = label.partition(', ')
    in_fig4 = label in fig4
    assert (len(config.optima), config.clients_per_round, config.client_lr) \
        == ((30, 15, 0.001) if in_fig4 else (20, 6, 0.002))
    assert quadratic.optima_array(config.optima).shape[1] == 10
    assert tuple(config.methods) == (('fedavg_het', 'fedacs') if in_fig4
                                     else FEDACS_FAMILY)
    assert config.calibrate == (not in_fig4)
    keys = {'prox_mu': 0.0, 'lr_decay': 0.0, 'momentum': 0.0,
            **solvers.get(solver, {})}
    assert {k: config[k] for k in keys} == keys
    for method in config.methods:
      algorithm, _, _ = toy_algorithm(config, method)
      model = algorithm.parts.parts[0].model
      lo, hi = model.failure_prob_bounds()
      np.testing.assert_allclose((model.max_steps(), lo.min(), hi.max()),
                                 systems[setting])


def test_quadratic_script_runs_a_figure_config(tmp_path):
  script = fedacs_script('quadratic.py')
  assert script.main(['--config', os.path.join(REPO, 'experiments', 'fedacs',
                                                'fig7.py'),
                      f'--workdir={tmp_path}', '--config.rounds=4',
                      "--config.methods=('fedacs',)"]) == 0
  summary = json.loads((tmp_path / 'summary.json').read_text())
  assert set(summary) == {'static', 'dynamic'}
  for rows in summary.values():
    assert set(rows) == {'fedacs'} and len(rows['fedacs']['true_optimum']) == 10
  configs = json.loads((tmp_path / 'config.json').read_text())
  assert configs['dynamic']['rounds'] == 4
