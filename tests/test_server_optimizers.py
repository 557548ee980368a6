"""The server optimisers: FedAdam, FedYogi and FedAdagrad step as Reddi et
al.'s Algorithm 2 written here in numpy, on the pseudo-gradients a run makes;
they checkpoint and resume; a key the run does not read is refused."""
import json
import os

import jax
import numpy as np
import pytest

from fedjax_het import cli, run
from fedjax_het import config as config_lib
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.methods import ALGORITHMS
from fedjax_het.options import ConfigError
from engine_utils import tiny_config, tiny_fedavg, tiny_method
from test_run import QUICK, quick_config, read_rows

ADAPTIVE = [('adam', False), ('adam', True), ('yogi', False), ('yogi', True),
            ('adagrad', False)]


def algorithm_2(rule, config, x, deltas, bias_correction=False):
  """Reddi et al.'s Algorithm 2 on the server's Δ_t = x̄ − x (one array of
  parameters), float64: m_{−1} = 0, v_{−1} = v0, x ← x + η m/(√v + τ)
  (times √(1 − β2^t)/(1 − β1^t) with bias correction, the Keras form).
  Returns the iterates and the signs sign(v_{t−1} − Δ_t²) met."""
  b1, b2, tau = config.server_b1, config.server_b2, config.server_tau
  m, v = np.zeros_like(x), np.full_like(x, config.server_v0)
  iterates, signs = [], set()
  for t, delta in enumerate(deltas, start=1):
    m = b1 * m + (1 - b1) * delta
    signs |= set(np.sign(v - delta ** 2).ravel())
    if rule == 'adagrad':
      v = v + delta ** 2
    elif rule == 'yogi':
      v = v - (1 - b2) * delta ** 2 * np.sign(v - delta ** 2)
    else:
      v = b2 * v + (1 - b2) * delta ** 2
    scale = np.sqrt(1 - b2 ** t) / (1 - b1 ** t) if bias_correction else 1.0
    x = x + config.server_lr * scale * m / (np.sqrt(v) + tau)
    iterates.append(x)
  return iterates, signs


@pytest.mark.parametrize('rule,bias_correction', ADAPTIVE)
def test_a_server_step_is_algorithm_2(rule, bias_correction):
  """`server_step` on pseudo-gradients g = −Δ of unequal scales (Yogi's
  sign(v − Δ²) takes both values) moves the params as Algorithm 2."""
  moments = {} if rule == 'adagrad' else {
      'server_b2': 0.9, 'server_bias_correction': bias_correction}
  config = tiny_config(server_optimizer=rule, server_lr=0.3, server_tau=0.05,
                       server_v0=0.01, **moments)
  config_lib.validate(config)
  algorithm, state, _ = tiny_fedavg(config)
  rng = np.random.default_rng(3)
  leaves, treedef = jax.tree.flatten(state.params)
  scales = (0.02, 1.0, 0.05, 0.5, 0.01)
  grads = [[rng.normal(size=p.shape) * s for p in leaves] for s in scales]
  x0 = [np.asarray(p, np.float64) for p in leaves]
  step = jax.jit(algorithm.server_step)
  params, opt_state = state.params, state.opt_state
  for g in grads:
    params, opt_state = step(
        state.replace(params=params, opt_state=opt_state),
        jax.tree.unflatten(treedef, [np.float32(a) for a in g]))
  all_signs = set()
  for i, leaf in enumerate(jax.tree.leaves(params)):
    expected, signs = algorithm_2(rule, config, x0[i], [-g[i] for g in grads],
                                  bias_correction)
    all_signs |= signs
    np.testing.assert_allclose(leaf, expected[-1], rtol=2e-5, atol=2e-6)
  assert {-1.0, 1.0} <= all_signs
  assert int(opt_state[0].count) == len(grads)


def pseudo_gradient(sgd_runner, state, data):
  """g of the round `state` starts: its step under SGD with η_s = 1."""
  start = jax.tree.map(lambda p: np.asarray(p, np.float64), state.params)
  probe = jax.tree.map(np.array, state).replace(   # a copy: `run` donates it
      opt_state=sgd_runner.algorithm.server_optimizer().init(state.params))
  after, _ = sgd_runner.run(probe, data, 1)
  return jax.tree.map(lambda a, b: a - np.asarray(b, np.float64), start,
                      after.params)


@pytest.mark.parametrize('algorithm', ['fedavg', 'fedacs'])
def test_a_run_steps_fedadam_on_its_rounds_pseudo_gradients(algorithm):
  """Three rounds of a run with server_optimizer='adam' (FedAvg's server
  step; FedACS's rule (3) through `systems_aware`) equal Algorithm 2 fed
  with each round's pseudo-gradient, replayed as the round's SGD step
  (η_s = 1) from the same state: the sign Δ = −g and the wiring."""
  config = tiny_config(algorithm=algorithm, server_optimizer='adam',
                       server_lr=0.05)
  adam, state, data = tiny_method(config)
  sgd = RoundRunner(tiny_method(tiny_config(algorithm=algorithm))[0], 'map')
  runner = RoundRunner(adam, 'map')
  start = jax.tree.map(lambda p: np.asarray(p, np.float64), state.params)
  deltas = []
  for _ in range(3):
    deltas.append(jax.tree.map(np.negative, pseudo_gradient(sgd, state, data)))
    state, _ = runner.run(state, data, 1)
  for got, x0, *ds in zip(jax.tree.leaves(state.params),
                          jax.tree.leaves(start),
                          *map(jax.tree.leaves, deltas)):
    assert max(np.abs(d).max() for d in ds) > 1e-3  # non-trivial rounds
    expected, _ = algorithm_2('adam', config, x0, ds)
    np.testing.assert_allclose(got, expected[-1], rtol=1e-4, atol=1e-5)


def test_sgd_is_optax_sgd_with_the_heavy_ball_momentum():
  """server_optimizer='sgd' is the engine's SGD of before (the pinned
  hashes of tests/test_pinned.py hold it bit for bit): FedAvgM's
  x ← x − η(μ b + g) with momentum."""
  config = tiny_config(server_lr=0.5, server_momentum=0.9)
  algorithm, state, _ = tiny_fedavg(config)
  g = jax.tree.map(np.ones_like, state.params)
  x0 = jax.tree.map(np.asarray, state.params)
  params, opt_state = algorithm.server_step(state, g)
  params, _ = algorithm.server_step(
      state.replace(params=params, opt_state=opt_state), g)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(
      a, b - 0.5 * (1 + 1.9), rtol=1e-6), params, x0)


@pytest.mark.parametrize('name', sorted(ALGORITHMS))
def test_a_method_without_an_optimiser_step_refuses_the_server_keys(name):
  """Every method either steps the chosen server optimiser or, where its
  server rule is its own (split learning, the ViT methods), refuses every
  server key in one line naming the method, never ignoring it."""
  method = ALGORITHMS[name]
  for key, value in (('server_optimizer', 'adam'), ('server_lr', 0.5)):
    config = config_lib.base_config()
    config.update({'algorithm': name, key: value})
    if method.own_server_rule is None:
      config_lib.validate(config)
      continue
    with pytest.raises(ConfigError) as raised:
      config_lib.validate(config)
    message = str(raised.value)
    assert message.startswith(f'{key} = {value!r} is set, but {name} takes no '
                              'server optimiser step (')
    assert '\n' not in message


@pytest.mark.parametrize('optimizer,key,value,readers', [
    ('sgd', 'server_b2', 0.9, 'adam, yogi'),
    ('sgd', 'server_tau', 0.01, 'adam, yogi, adagrad'),
    ('adam', 'server_momentum', 0.9, 'sgd'),
    ('adagrad', 'server_b2', 0.999, 'adam, yogi'),
    ('adagrad', 'server_bias_correction', True, 'adam, yogi')])
def test_a_server_key_the_optimiser_does_not_read_is_refused(optimizer, key,
                                                             value, readers):
  config = config_lib.base_config()
  config.update({'server_optimizer': optimizer, key: value})
  with pytest.raises(ConfigError) as raised:
    config_lib.validate(config)
  assert str(raised.value) == (
      f'{key} = {value!r} is set, but server_optimizer={optimizer!r} does not '
      f'read it (read by {readers}); leave it unset or choose one of those.')


def test_show_config_states_the_server_optimiser(capsys):
  assert cli.main(QUICK + ['--config.server_optimizer=yogi',
                           '--config.server_b2=0.999', '--show-config']) == 0
  out = capsys.readouterr().out
  assert "server_optimizer = 'yogi'\n    the server optimiser" in out
  assert 'server_b2 = 0.999\n' in out


def test_an_adaptive_server_resumes_bit_identically_and_only_as_itself(
    tmp_path, capsys):
  """FedYogi's moments are checkpointed: 2 + 2 rounds equal 4; a resume
  that names another optimiser is refused; a workdir from before the
  server keys existed is the same run as SGD's (its keys count as their
  defaults, `run._on_library_keys`)."""
  yogi = dict(server_optimizer='yogi', server_lr=0.01)
  whole, parts = str(tmp_path / 'whole'), str(tmp_path / 'parts')
  expected = run.train(quick_config(rounds=4, **yogi), whole)
  run.train(quick_config(rounds=2, **yogi), parts)
  resumed = run.train(quick_config(rounds=4, **yogi), parts)
  assert read_rows(parts) == read_rows(whole)
  assert resumed['final_test_loss'] == expected['final_test_loss']
  assert cli.main(QUICK + ['--config.rounds=6', '--config.server_lr=0.01',
                           '--config.server_optimizer=adam',
                           f'--workdir={parts}']) == 2
  assert 'different config (server_optimizer)' in capsys.readouterr().err

  old = str(tmp_path / 'old')
  summary = run.train(quick_config(rounds=2), old)
  path = os.path.join(old, 'config.json')
  with open(path) as f:
    stored = json.load(f)
  for key in ('server_optimizer', 'server_b1', 'server_b2', 'server_tau',
              'server_v0', 'server_bias_correction'):
    del stored[key]
  with open(path, 'w') as f:
    json.dump(stored, f)
  assert run.train(quick_config(rounds=2), old) == summary
