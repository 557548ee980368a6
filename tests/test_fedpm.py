"""FedPM on the ViT engine: Bayesian aggregation, STE score loss, frozen weights."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from engine_utils import tiny_vit_config, vit_experiment
from fedjax_het import evaluation
from fedjax_het.methods.cos2p.fedpm import FedPM
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.core import program
from fedjax_het.core.state import ClientOutput, StepContext
from fedjax_het.options import ConfigError

def fedpm_config(num_clients=2, **fedpm_options):
  config = tiny_vit_config(num_clients, batch_size=128)
  config.fedpm.update(fedpm_options)
  return config


def build(config):
  return vit_experiment(config, FedPM)


def fake_round(algorithm, state, data, masks, active):
  """The server's step on hand-made uploads {kind: [N, L, U]}."""
  inputs = jax.tree.map(lambda x: jnp.asarray(x[0]),
                        algorithm.round_inputs(int(state.round), 1))
  plans = algorithm.plan_round(state, data, inputs).replace(
      active=jnp.asarray(active))
  outputs = ClientOutput(
      delta=jax.tree.map(jnp.zeros_like, state.params),
      loss=jnp.zeros(len(active)), num_examples=jnp.zeros(len(active)),
      client_state={'units': masks})
  state = algorithm.aggregate(state, plans, outputs)
  return state.replace(round=state.round + 1)


@pytest.mark.parametrize('posterior', ['mode', 'mean'])
def test_posterior_matches_closed_form_with_periodic_reset(posterior):
  """α = λ0 + Σ M, β = λ0 + Σ (1 − M) over arrived clients since the last
  reset (rounds 0 and 2 with reset_every = 2); θ its mode or mean."""
  config = fedpm_config(num_clients=3, posterior=posterior, prior=2.0,
                        reset_every=2)
  algorithm, state, split = build(config)
  data = split.train.to_device()
  rng = np.random.default_rng(0)
  shapes = algorithm.model.unit_shapes()
  active = [[True, True, False], [True, True, True], [False, True, True]]
  uploads = [{k: rng.integers(0, 2, (3,) + s).astype(np.float32)
              for k, s in shapes.items()} for _ in range(3)]
  for masks, act in zip(uploads, active):
    state = fake_round(algorithm, state, data, jax.tree.map(jnp.asarray,
                                                            masks), act)
  for kind in shapes:
    ones = sum(np.tensordot(np.asarray(a, np.float32), m[kind], axes=1)
               for m, a in zip(uploads[2:], active[2:]))
    count = sum(sum(a) for a in active[2:])
    alpha, beta = 2.0 + ones, 2.0 + count - ones
    expected = ((alpha - 1) / (alpha + beta - 2) if posterior == 'mode'
                else alpha / (alpha + beta))
    np.testing.assert_allclose(state.extras['alpha'][kind], alpha)
    np.testing.assert_allclose(state.extras['beta'][kind], beta)
    np.testing.assert_allclose(state.extras['p'][kind], expected, rtol=1e-6)
  # Round 1 accumulated on round 0 (no reset in between).
  config = fedpm_config(num_clients=3, posterior=posterior, prior=2.0,
                        reset_every=2)
  algorithm, state, _ = build(config)
  for masks, act in zip(uploads[:2], active[:2]):
    state = fake_round(algorithm, state, data, jax.tree.map(jnp.asarray,
                                                            masks), act)
  ones = sum(np.tensordot(np.asarray(a, np.float32), m['fc1'], axes=1)
             for m, a in zip(uploads[:2], active[:2]))
  np.testing.assert_allclose(state.extras['alpha']['fc1'], 2.0 + ones)


def test_score_loss_uses_the_straight_through_gradient():
  """∂loss/∂s = ∂f/∂u|_{u=M} · σ'(s) with M the step's Bernoulli draw and
  f(u) = CE + λ1·|kept(u) − R_w| ('identity' STE of Co-S²P)."""
  config = fedpm_config(num_clients=2)
  config.cos2p.update(dict(budgets=(0.5,), lambda_budget=2.0))
  algorithm, state, split = build(config)
  data = split.train.to_device()
  inputs = jax.tree.map(lambda x: jnp.asarray(x[0]),
                        algorithm.round_inputs(0, 1))
  plans = algorithm.plan_round(state, data, inputs)
  plan = jax.tree.map(lambda v: v[0], plans)
  row = jax.tree.map(lambda v: v[0],
                     algorithm.program_client_state(state, plans))
  rng = np.random.default_rng(1)
  row['logits'] = {k: jnp.asarray(rng.normal(size=v.shape), jnp.float32)
                   for k, v in row['logits'].items()}
  x, y = data.x[0, :32], data.y[0, :32]
  key = jax.random.PRNGKey(5)
  ctx = StepContext(global_params=state.params, step=jnp.int32(0), key=key,
                    client_state=row)
  local = program.LocalModel(state.params, row)
  grad = jax.grad(lambda logits: algorithm.mask_loss(
      local.replace(client_state={**row, 'logits': logits}), x, y, plan,
      ctx))(row['logits'])
  masks = {k: jax.random.bernoulli(jax.random.fold_in(key, i),
                                   jax.nn.sigmoid(row['logits'][k])).astype(
                                       jnp.float32)
           for i, k in enumerate(algorithm.options.learned_units)}
  window = plan.extras

  def f(units):
    logits = algorithm.exits_logits(state.params, x, units, window)
    ce = optax.softmax_cross_entropy_with_integer_labels(
        logits[window['teacher']], y).mean()
    return ce + 2.0 * jnp.abs(algorithm.kept_fraction(units, window) -
                              window['width'])

  du = jax.grad(f)(masks)
  for k in masks:
    p = jax.nn.sigmoid(row['logits'][k])
    np.testing.assert_allclose(grad[k], du[k] * p * (1 - p), rtol=1e-4,
                               atol=1e-7)


def test_weights_never_change_and_theta_is_the_mean_upload():
  """Two rounds: params bit-identical; θ (mode, λ0 = 1, reset every round)
  is a multiple of 1/N, the mean of binary uploads; bytes are θ and bits."""
  config = fedpm_config(num_clients=2)
  algorithm, state, split = build(config)
  w0 = jax.tree.map(np.asarray, state.params)
  p0 = jax.tree.map(np.asarray, state.extras['p'])
  state, metrics = RoundRunner(algorithm, 'map').run(
      state, split.train.to_device(), 2)
  chex.assert_trees_all_equal(jax.tree.map(np.asarray, state.params), w0)
  units = sum(v.size for v in p0.values())
  changed = False
  for kind, p in state.extras['p'].items():
    p = np.asarray(p)
    np.testing.assert_allclose(p * 2, np.round(p * 2), atol=1e-6)
    changed |= not np.allclose(p, p0[kind])
  assert changed
  up = np.asarray(metrics['bytes_up']).ravel()
  np.testing.assert_allclose(up, 2 * units / 8)


def test_all_ones_uploads_give_the_full_model():
  """All clients keep every unit: θ = 1 and the evaluated server model
  (threshold or sample) is the full initial model."""
  for eval_mask in ('threshold', 'sample'):
    config = fedpm_config(num_clients=2, eval_mask=eval_mask)
    algorithm, state, split = build(config)
    masks = {k: jnp.ones((2,) + s)
             for k, s in algorithm.model.unit_shapes().items()}
    state = fake_round(algorithm, state, split.train.to_device(), masks,
                       [True, True])
    for p in state.extras['p'].values():
      np.testing.assert_array_equal(p, 1.0)
    got = algorithm.state_evaluator(split)(state)
    full = evaluation.make_evaluator(
        lambda p, x: algorithm.model.apply({'params': p}, x), split.test_x,
        split.test_y, config.eval_batch_size, extended=True)(state.params)
    np.testing.assert_allclose(got['accuracy'], full['accuracy'])
    np.testing.assert_allclose(got['loss'], full['loss'], rtol=1e-6)


def test_bad_prior_fails_with_one_line():
  with pytest.raises(ConfigError, match=r'fedpm.prior ≥ 1') as info:
    build(fedpm_config(prior=0.5))
  assert '\n' not in str(info.value)
