"""FedAvg+Q-ViT: the LSQ quantiser and its gradients, the bit budget, FedAvg at 32 bits."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine_utils import tiny_vit_config, vit_experiment
from fedjax_het import run
from fedjax_het.methods.cos2p import qvit
from fedjax_het.methods.cos2p.width_baselines import FedAvgFull
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.options import ConfigError

# w/s with s = 0.5: −6.2, −2.6, −0.52, 0, 0.48, 0.52, 1.48, 10.
W = jnp.array([-3.1, -1.3, -0.26, 0.0, 0.24, 0.26, 0.74, 5.0])
INSIDE = np.array([False, True, True, True, True, True, True, False])


def qvit_config(**qvit_options):
  """Four digits clients of ~360 examples on a 2-block ViT, fixed clocks."""
  config = tiny_vit_config(algorithm='vit_fedavg',
                           aggregation_weights='uniform')
  config.qvit.update(qvit_options)
  return config


def build(config, cls=qvit.FedAvgQvit):
  """The experiment of `config` with `cls` as its algorithm."""
  algorithm, state, split = vit_experiment(config, cls)
  return algorithm, state, split.train.to_device()


def test_quantiser_rounds_and_clips():
  """3 bits, s = 0.5: levels −4..3 times s."""
  q = qvit.lsq_quantize(W, jnp.float32(0.5), jnp.float32(3.0), 1.0)
  np.testing.assert_allclose(
      q, [-2.0, -1.5, -0.5, 0.0, 0.0, 0.5, 0.5, 1.5], atol=1e-7)


def test_straight_through_passes_the_gradient_inside_the_range_only():
  c = jnp.arange(1.0, 9.0)
  grad = jax.grad(lambda w: jnp.sum(c * qvit.lsq_quantize(
      w, jnp.float32(0.5), jnp.float32(3.0), 1.0)))(W)
  np.testing.assert_array_equal(grad, np.where(INSIDE, c, 0.0))


def test_lsq_scale_gradient_matches_the_closed_form():
  """∂q/∂s = round(w/s) − w/s inside, the clip bound outside, times g."""
  c, s, g = jnp.arange(1.0, 9.0), 0.5, 0.1
  grad = jax.grad(lambda scale: jnp.sum(c * qvit.lsq_quantize(
      W, scale, jnp.float32(3.0), g)))(jnp.float32(s))
  v = np.asarray(W) / s
  per_entry = np.where(INSIDE, np.round(v) - v, np.where(v < 0, -4.0, 3.0))
  np.testing.assert_allclose(grad, g * np.sum(np.asarray(c) * per_entry),
                             rtol=1e-5)


def test_projection_meets_the_budget_with_the_least_shift():
  """The shifted, clipped, rounded bits fit R_n, a slightly smaller shift
  does not; the ratio counts N_g entries per group."""
  algorithm, _, _ = build(qvit_config())
  rng = np.random.default_rng(0)
  bits = {k: jnp.asarray(rng.uniform(3, 12, s), jnp.float32)
          for k, s in algorithm.bit_shapes.items()}
  budget = jnp.float32(0.2)
  shift = algorithm.budget_shift(bits, budget)
  ratio = lambda c: float(algorithm.memory_ratio(
      algorithm.clipped_bits(bits, c)))
  assert float(shift) > 0 and ratio(shift) <= 0.2 < ratio(shift - 1e-3)
  by_hand = sum(algorithm.group_entries[k] * np.round(np.clip(
      np.asarray(b) - float(shift), 2, 32)).sum() for k, b in bits.items())
  size = sum(algorithm.group_entries[k] * b.size for k, b in bits.items())
  assert ratio(shift) == pytest.approx(by_hand / (32 * size))


def test_low_budgets_train_within_it_and_count_quantised_bytes():
  """Budgets 1/4 and 1/2 (8 and 16 bits): after a round every client's
  bit-widths fit its budget and the bytes up are Σ N_g·b_g/8 + float32
  rest + 5 bytes per group."""
  config = qvit_config()
  config.cos2p.budgets = (0.25, 0.5, 0.25, 0.5)
  algorithm, state, data = build(config)
  state, metrics = RoundRunner(algorithm, 'map').run(state, data, 1)
  assert np.isfinite(np.asarray(metrics['train_loss'])).all()
  total = 0.0
  for n, budget in enumerate((0.25, 0.5, 0.25, 0.5)):
    bits = algorithm.effective_bits(
        jax.tree.map(lambda b, n=n: b[n], state.clients['bits']), budget)
    assert float(algorithm.memory_ratio(bits)) <= budget + 1e-6
    groups = sum(b.size for b in bits.values())
    total += sum(algorithm.group_entries[k] * float(np.sum(b)) / 8
                 for k, b in bits.items()) + 5 * groups + \
        4 * algorithm.float_entries
  np.testing.assert_allclose(float(metrics['bytes_up'][0]), total, rtol=1e-6)


def test_clock_charges_the_quantised_kernels():
  """Analytic clock: a budget-1/4 client's round is shorter than a
  budget-1 client's by the 3/4 of the kernels' float32 bytes both ways."""
  config = qvit_config()
  config.clock.client_seconds = ()
  config.cos2p.budgets = (0.25, 1.0, 1.0, 1.0)
  algorithm, _, _ = build(config)
  duration = algorithm.client_round_seconds()
  m = algorithm.model
  kernels = m.depth * (4 * m.hidden**2 + 2 * m.hidden * m.mlp)
  saved = 2 * 4 * kernels * 0.75 * 8 / config.cos2p.bandwidth_bps
  reference = FedAvgFull(config, algorithm.model, _train(config))
  same_size = reference.client_round_seconds()
  assert duration(1, 0, 0) == pytest.approx(same_size(1, 0, 0))
  assert duration(0, 0, 0) == pytest.approx(same_size(0, 0, 0) - saved)


def _train(config):
  return run.build_experiment(config)[0].train


def test_32_bits_reduce_to_fedavg():
  """Budget 1 (32 bits everywhere): q(w) = w up to s/2 ≈ 2^-15·mean|w|, and
  the run is `vit_fedavg`'s (parameters to 1e-5)."""
  config = qvit_config()
  algorithm, state, data = build(config)
  bits = jax.tree.map(lambda b: b[0], state.clients['bits'])
  assert all(np.all(np.asarray(b) == 32) for b in bits.values())
  state, _ = RoundRunner(algorithm, 'map').run(state, data, 2)
  fedavg, fedavg_state, _ = build(config, cls=FedAvgFull)
  fedavg_state, _ = RoundRunner(fedavg, 'map').run(fedavg_state, data, 2)
  chex.assert_trees_all_close(state.params, fedavg_state.params, atol=1e-5)


def test_penalty_adds_the_squared_excess_over_the_budget():
  """budget_rule='penalty': 16 bits everywhere (ρ = 1/2) add λ·(1/2 − R)²
  to the loss at R = 1/4 and nothing at R = 1/2 (the same forward)."""
  config = qvit_config(budget_rule='penalty', lambda_bits=3.0)
  config.cos2p.budgets = (0.25, 0.25, 0.5, 1.0)
  algorithm, state, data = build(config)
  inputs = jax.tree.map(lambda x: jnp.asarray(x[0]),
                        algorithm.round_inputs(0, 1))
  plan = jax.tree.map(lambda x: x[0], algorithm.plan_round(state, data,
                                                           inputs))
  row = jax.tree.map(lambda x: x[0], state.clients)
  row['bits'] = jax.tree.map(lambda b: jnp.full_like(b, 16.0), row['bits'])
  local = qvit.program.LocalModel(state.params, row)
  x, y = jnp.asarray(data.x[0, :8]), jnp.asarray(data.y[0, :8])
  loss = jax.jit(lambda budget: algorithm.weight_loss(
      local, x, y, plan.replace(extras={**plan.extras, 'budget': budget}),
      None))
  excess = float(loss(jnp.float32(0.25))) - float(loss(jnp.float32(0.5)))
  assert excess == pytest.approx(3.0 * 0.25**2, rel=1e-4)


@pytest.mark.parametrize('key,value,message', [
    ('budgets', (0.05,), 'below qvit.min_bits'),
    ('max_bits', 1, 'qvit.max_bits'),
    ('min_bits', 40, 'qvit.min_bits must be in'),
])
def test_bad_input_fails_with_one_line(key, value, message):
  config = qvit_config()
  (config.cos2p if key == 'budgets' else config.qvit)[key] = value
  with pytest.raises(ConfigError, match=message) as info:
    build(config)
  assert '\n' not in str(info.value)
