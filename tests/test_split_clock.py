"""Split learning on the virtual clock (`config.clock`): CSE-FSL, FSL_AN and
FSL_MC run on it (`methods/split/split_learning.py`'s reading), FSL_OC
refuses it.

The schedule is `test_clock_part`'s hand-written one: three clients of round
times 1, 1.5 and 2.5 s, μ = 1/3, T_clk = 0, no jitter, whose arrivals
(client n, dispatch round k, τ = q − k) are

    round 0: 0 (k=0)   1: 1 (k=0)   2: 0 (k=1)   3: 2 (k=0)   4: 0 (k=3), 1 (k=2)
"""
import re
import types

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het import config as config_lib
from fedjax_het.core import RoundRunner
from fedjax_het.core.state import ClientPlan
from fedjax_het.options import ConfigError
from test_clock_part import ARRIVALS, ROUNDS, SECONDS, assert_start_rows
from test_csefsl import build, split_config

# Unequal work: client n runs WORK[n] steps (h = 2: 2, 1 and 1 uploads).
WORK = (5, 2, 3)


def synchronous(algorithm):
  """`test_csefsl`'s federation (3 clients, 5 steps) with the lr halved
  every 2 rounds and CSE-FSL's h = 2."""
  config = split_config(algorithm, lr_decay=0.5, lr_decay_every=2)
  if algorithm == 'cse_fsl':
    config.split.upload_every = 2
  return config


def on_clock(algorithm, asynchronous=True, **clock):
  """`synchronous(algorithm)` on the clock: the hand-written schedule, or
  μ = 1 with equal 2 s rounds."""
  config = synchronous(algorithm)
  if asynchronous:
    config.clock.update(mu=1 / 3, client_seconds=SECONDS, jitter=0.0,
                        **clock)
  else:
    config.clock.update(client_seconds=(2.0,), jitter=0.0)
  return config


@pytest.mark.parametrize('algorithm', ['cse_fsl', 'fsl_an', 'fsl_mc'])
def test_a_neutral_clock_is_the_synchronous_run_bit_for_bit(algorithm):
  """μ = 1, equal seconds: every client arrives every round with τ = 0, and
  the params and split accounting are the synchronous run's bit for bit
  (K = N; the mean train loss to an ulp: its per-client losses come from
  another fusion of the same program)."""
  plain, state, data = build(config=synchronous(algorithm))
  assert 'clock' not in plain.parts.names
  expected, expected_metrics = RoundRunner(plain, 'vmap').run(state, data, 3)
  timed, state, data = build(config=on_clock(algorithm, asynchronous=False))
  assert 'clock' in timed.parts.names
  got, metrics = RoundRunner(timed, 'vmap').run(state, data, 3)
  chex.assert_trees_all_equal(got.params, expected.params)
  for name, values in expected_metrics.items():
    if name == 'train_loss':
      np.testing.assert_allclose(metrics[name], values, rtol=1e-6)
    else:
      np.testing.assert_array_equal(metrics[name], values, err_msg=name)
  np.testing.assert_array_equal(metrics['arrivals'], [3, 3, 3])


def weighted_mean(weights, trees):
  """Σ w_i t_i / Σ w_i, leaf by leaf."""
  return jax.tree.map(lambda *leaves: sum(
      w * leaf for w, leaf in zip(weights, leaves)) / sum(weights), *trees)


def l1(tree, parts):
  return sum(float(np.abs(x).sum()) for part in parts
             for x in jax.tree.leaves(tree[part]))


def by_hand(method, state, data, weighting, exponent):
  """[w_0, ..., w_Q] with the arrivals applied by hand: client n trains
  (x_c, a_c), or FSL_MC's (x_c, x_s), from w_k with round k's key and lr
  for its steps (WORK[n]; FSL_MC 5); the round's FedAvg weighs its delta by
  (1 + τ)^−a ('polynomial') or its weight by Eq. 4's γ on the parts it
  trains ('cos2p'); CSE-FSL's server model of round q takes one step per uploaded
  batch with round q's lr, block after block, the arrivals in ascending
  client id within a block; FSL_AN's per-client copies start from round
  q's x_s and are averaged with the clients' weights."""
  counts = np.asarray(data.counts, np.float32)
  lr = lambda r: jnp.float32(0.1 * 0.5**(r // 2))   # halved every 2 rounds
  update = jax.jit(lambda p, plan: method.client_update(p, plan, data))
  if method.name != 'fsl_mc':   # FSL_MC's server copy trains in the client
    server_step = jax.jit(method.server_sgd)

  @jax.jit
  def key_of(k, n):   # plan_round's key of client n in round k
    clients_key = jax.random.split(jax.random.fold_in(state.key, k))[1]
    return jax.random.fold_in(jax.random.fold_in(clients_key, n), 0)

  def train_server(server, q, uploads):
    """`uploads`: [(client, its output)]; block-major, clients as listed."""
    blocks = uploads[0][1].emitted_active.shape[0]
    for b in range(blocks):
      for n, output in uploads:
        ids = types.SimpleNamespace(client_id=jnp.asarray([n]))
        key = method.server_keys(state.replace(round=q), ids, blocks)[0, b]
        server = server_step(
            server, jax.tree.map(lambda u, b=b: u[b], output.emitted),
            output.emitted_active[b], key, lr(q))
    return server

  history = [jax.device_get(state.params)]
  for q, arrivals in enumerate(ARRIVALS):
    weights, deltas, outputs = [], [], []
    for n, k in sorted(arrivals):
      plan = ClientPlan(
          client_id=jnp.int32(n), key=key_of(k, n),
          num_steps=jnp.int32(5 if method.name == 'fsl_mc' else WORK[n]),
          lr=lr(k), weight=jnp.float32(counts[n]),
          group=jnp.int32(0))
      output = update(history[k], plan)
      delta, weight = output.delta, counts[n]
      if weighting == 'polynomial':
        delta = jax.tree.map(lambda d, t=q - k: d * (1.0 + t)**-exponent,
                             delta)
      if weighting == 'cos2p':
        parts = method.averaged_parts
        drift = jax.tree.map(jnp.subtract, history[q], history[k])
        size = sum(x.size for part in parts
                   for x in jax.tree.leaves(delta[part]))
        weight *= l1(delta, parts) / (l1(drift, parts) + size)
      weights.append(weight)
      deltas.append(delta)
      outputs.append((n, output))
    now = history[q]
    new = jax.tree.map(jnp.subtract, now, weighted_mean(weights, deltas))
    if method.name == 'cse_fsl':
      new['server'] = train_server(now['server'], q, outputs)
    elif method.name == 'fsl_an':
      new['server'] = weighted_mean(weights, [
          train_server(now['server'], q, [one]) for one in outputs])
    history.append(jax.device_get(new))
  return history


@pytest.mark.parametrize('algorithm,weighting,exponent', [
    ('cse_fsl', 'polynomial', 1.0), ('cse_fsl', 'none', 0.5),
    ('cse_fsl', 'cos2p', 0.5), ('fsl_an', 'polynomial', 1.0),
    ('fsl_mc', 'polynomial', 1.0)])
def test_the_run_applies_the_arrivals_one_by_one(algorithm, weighting,
                                                 exponent):
  """Params after each chunk equal `by_hand` (stale start models, round-k
  keys and lr, (1 + τ)^−a, the server's arrival-order scan at round q), the
  start table holds each client's dispatch model (after 3 rounds clients
  0, 1, 2 were last dispatched in rounds 3, 2, 0), and the clock counts
  the hand table's arrivals and staleness."""
  config = on_clock(algorithm, staleness_weight=weighting,
                    staleness_exponent=exponent)
  if algorithm != 'fsl_mc':
    config.systems.local_work = WORK
  method, state, data = build(config=config)
  expected = by_hand(method, state, data, weighting, exponent)
  runner = RoundRunner(method, 'vmap')
  state, first = runner.run(state, data, 3)
  assert_start_rows(state, expected)
  state, last = runner.run(state, data, 2)
  chex.assert_trees_all_close(jax.device_get(state.params), expected[ROUNDS],
                              rtol=1e-5, atol=1e-6)
  metrics = jax.tree.map(lambda a, b: np.concatenate([a, b]), first, last)
  np.testing.assert_array_equal(metrics['arrivals'], [1, 1, 1, 1, 2])
  np.testing.assert_array_equal(metrics['staleness'], [0, 1, 1, 3, 3])


def test_smashed_uploads_count_only_arrivals_and_the_steps_they_ran():
  """CSE-FSL, h = 2, WORK = (5, 2, 3): an arrival uploads 2, 1 or 1 smashed
  batches (client 0, 1, 2) in its arrival round, idle slots none; the
  models go up once per arrival and down once per arrival."""
  config = on_clock('cse_fsl')
  config.systems.local_work = WORK
  method, state, data = build(config=config)
  _, metrics = RoundRunner(method, 'vmap').run(state, data, ROUNDS)
  uploads = [sum(WORK[n] // 2 for n, _ in arrivals) for arrivals in ARRIVALS]
  assert uploads == [2, 1, 2, 1, 3]
  np.testing.assert_array_equal(metrics['comm_rounds'], uploads)
  batch = config.batch_size * method.sizes.smashed * 4
  np.testing.assert_array_equal(metrics['smashed_bytes_up'],
                                np.multiply(uploads, batch))
  model = (method.sizes.client + method.sizes.aux) * 4
  arrivals = np.array([len(a) for a in ARRIVALS])
  np.testing.assert_array_equal(metrics['model_bytes_up'], arrivals * model)
  np.testing.assert_array_equal(metrics['model_bytes_down'], arrivals * model)


def test_fsl_oc_refuses_the_clock_in_one_line():
  """FSL_OC's one server serves the cohort round-robin, batch by batch: it
  has no reading on an asynchronous clock and does not read the section."""
  config = on_clock('fsl_oc')
  with pytest.raises(ConfigError) as raised:
    config_lib.validate(config)
  message = str(raised.value)
  assert re.match(r'clock\.\w+ = .+ is set, but fsl_oc does not read the '
                  'clock section', message) and '\n' not in message
  for algorithm in ('cse_fsl', 'fsl_an', 'fsl_mc'):
    config_lib.validate(on_clock(algorithm))


def test_epoch_rounds_charge_each_client_its_batches():
  """With `split.round_steps='epoch'` a client round runs M_k = ⌈n_k / B⌉
  batches (counts 20, 13, 17, B = 4: 5, 4, 5), and the clock's default
  round time is one second per batch: at μ = 1 the window is 5 s and the
  clients are busy 5, 4 and 5 s of it."""
  config = synchronous('fsl_an')
  config.split.round_steps = 'epoch'
  config.clock.jitter = 0.0
  method, _, _ = build(config=config)
  inputs = method.round_inputs(0, 1)['clock']
  np.testing.assert_array_equal(inputs['busy_seconds'][0], [5, 4, 5])
  np.testing.assert_array_equal(inputs['window_seconds'][0], [5, 5, 5])
