"""CSE-FSL and its baselines (FSL_MC, FSL_OC, FSL_AN): split models, accounting, the server scan,
equivalences between methods, backends, resume and one-line errors."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_het import config as config_lib
from fedjax_het import methods, models
from fedjax_het.methods.split import split_accounting as accounting
from fedjax_het.config import base_config
from fedjax_het.core import RoundRunner, batching
from fedjax_het.data import FederatedData, augment
from fedjax_het.options import ConfigError
from engine_utils import (assert_backends_agree, checkpoint_round_trip,
                          cohort_outputs, committed, run_every_backend)
from script_utils import load_script
from test_cells_part import assert_cells_key_refused

CLIENTS, EXAMPLES, SHAPE = 3, 20, (8, 8, 1)


def split_data(seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(CLIENTS, EXAMPLES) + SHAPE).astype(np.float32)
  y = rng.integers(0, 10, (CLIENTS, EXAMPLES)).astype(np.int32)
  counts = np.array([EXAMPLES, 13, 17], np.int32)
  return FederatedData(x=x, y=y, counts=counts).to_device()


def split_config(algorithm='cse_fsl', **split):
  config = base_config()
  config.update(algorithm=algorithm, model='split_lenet5', num_clients=CLIENTS,
                clients_per_round=CLIENTS, local_steps=5, batch_size=4,
                client_lr=0.1)
  config.model_options = {}
  config.split.update(split)
  return config


def build(algorithm='cse_fsl', config=None, **split):
  config = config or split_config(algorithm, **split)
  data = split_data()
  model = models.create_model('split_lenet5', 10)
  params = models.init_params(model, jax.random.PRNGKey(0), SHAPE)
  method = methods.create_algorithm(config.algorithm, config, model, data)
  return method, method.init(params, jax.random.PRNGKey(1)), data


def count(tree):
  return sum(x.size for x in jax.tree.leaves(tree))


# ---- split models --------------------------------------------------------------
@pytest.mark.parametrize('name,classes,shape,options,sizes', [
    ('split_cifar_cnn', 10, (24, 24, 3), {}, (107_328, 23_050, 960_970)),
    ('split_cifar_cnn', 10, (24, 24, 3), {'aux': 'cnn', 'aux_channels': 54},
     (107_328, 22_960, 960_970)),
    ('split_cifar_cnn', 10, (24, 24, 3), {'aux': 'cnn', 'aux_channels': 27},
     (107_328, 11_485, 960_970)),
    ('split_cifar_cnn', 10, (24, 24, 3), {'aux': 'cnn', 'aux_channels': 14},
     (107_328, 5_960, 960_970)),
    ('split_cifar_cnn', 10, (24, 24, 3), {'aux': 'cnn', 'aux_channels': 7},
     (107_328, 2_985, 960_970)),
    ('split_emnist_cnn', 62, (28, 28, 1), {}, (18_816, 571_454, 1_187_774)),
    ('split_emnist_cnn', 62, (28, 28, 1), {'aux': 'cnn', 'aux_channels': 2},
     (18_816, 18_048, 1_187_774)),
])
def test_split_models_have_the_papers_parameter_counts(name, classes, shape,
                                                       options, sizes):
  model = models.create_model(name, classes, **options)
  params = jax.eval_shape(lambda: models.init_params(
      model, jax.random.PRNGKey(0), shape))
  assert tuple(count(params[p]) for p in ('client', 'aux', 'server')) == sizes


def test_inference_is_server_of_client_and_lenet_split_keeps_lenet_counts():
  model = models.create_model('split_lenet5', 10)
  shapes = jax.eval_shape(lambda: models.init_params(
      model, jax.random.PRNGKey(0), (28, 28, 1)))
  lenet = jax.eval_shape(lambda: models.init_params(
      models.create_model('lenet5', 10), jax.random.PRNGKey(0), (28, 28, 1)))
  assert count(shapes['client']) + count(shapes['server']) == count(lenet)
  params = models.init_params(model, jax.random.PRNGKey(0), SHAPE)
  x = jax.random.normal(jax.random.PRNGKey(1), (3,) + SHAPE)
  smashed = models.split_apply(model, params, 'client', x)
  assert smashed.shape == (3, 2, 2, 16)
  np.testing.assert_array_equal(model.apply({'params': params}, x),
                                models.split_apply(model, params, 'server',
                                                   smashed))


def test_smashed_shapes_and_dropout_keys():
  cifar = models.create_model('split_cifar_cnn', 10)
  params = jax.eval_shape(lambda: models.init_params(
      cifar, jax.random.PRNGKey(0), (24, 24, 3)))
  smashed = jax.eval_shape(lambda p: models.split_apply(
      cifar, p, 'client', jnp.ones((2, 24, 24, 3))), params)
  assert smashed.shape == (2, 6, 6, 64)
  emnist = models.create_model('split_emnist_cnn', 62)
  p = models.init_params(emnist, jax.random.PRNGKey(0), (10, 10, 1))
  run = jax.jit(lambda key: models.split_apply(
      emnist, p, 'client', jnp.ones((2, 10, 10, 1)), train=True, key=key))
  plain = models.split_apply(emnist, p, 'client', jnp.ones((2, 10, 10, 1)),
                             train=True)          # no key: no dropout
  a, b = run(jax.random.PRNGKey(1)), run(jax.random.PRNGKey(2))
  assert not np.array_equal(a, b)                 # per-step keys differ
  kept = np.asarray(a) != 0
  np.testing.assert_allclose(np.asarray(a)[kept],
                             np.asarray(plain)[kept] / 0.75, rtol=1e-5)


def test_local_response_norm_matches_torch_formula():
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 3, 6))
  got = models.split.local_response_norm(x, size=4, alpha=0.1, beta=0.75,
                                         k=1.0)
  sq = np.pad(np.asarray(x)**2, ((0, 0),) * 3 + ((2, 1),))
  window = sum(sq[..., i:i + 6] for i in range(4))
  np.testing.assert_allclose(got, x / (1 + 0.1 / 4 * window)**0.75,
                             rtol=1e-5)


def test_crop24_jitter_and_centre_crop():
  images = jax.random.uniform(jax.random.PRNGKey(0), (5, 32, 32, 3))
  out = augment.get_augmentation('crop24_jitter')(jax.random.PRNGKey(1),
                                                  images)
  assert out.shape == (5, 24, 24, 3)
  assert float(out.min()) >= 0 and float(out.max()) <= 1
  np.testing.assert_array_equal(augment.test_transform('crop24_jitter')(images),
                                images[:, 4:28, 4:28])
  assert augment.output_shape('crop24_jitter', (32, 32, 3)) == (24, 24, 3)
  assert augment.output_shape('crop_flip', (32, 32, 3)) == (32, 32, 3)


# ---- accounting: Table V from model sizes ------------------------------------
CIFAR = accounting.SplitSizes(client=107_328, aux=23_050, server=960_970,
                              smashed=2304)
FEMNIST = accounting.SplitSizes(client=18_816, aux=571_454, server=1_187_774,
                                smashed=9216)


@pytest.mark.parametrize('protocol,h,gb', [
    (accounting.FSL_MC, 1, 172.46), (accounting.FSL_OC, 1, 172.46),
    (accounting.FSL_AN, 1, 86.80), (accounting.CSE_FSL, 1, 86.80),
    (accounting.CSE_FSL, 5, 18.14), (accounting.CSE_FSL, 10, 9.55),
    (accounting.CSE_FSL, 25, 4.40), (accounting.CSE_FSL, 50, 2.69)])
def test_table_v_cifar_loads(protocol, h, gb):
  load = accounting.table_v_load_gb(protocol, CIFAR, clients=5,
                                    samples_per_client=10_000, batch_size=50,
                                    epochs=200, upload_every=h)
  assert round(load, 2) == gb


@pytest.mark.parametrize('sizes,storage', [
    (CIFAR, (5.34, 1.50, 5.46, 1.61)), (FEMNIST, (6.03, 1.28, 8.89, 4.14))])
def test_table_v_storage(sizes, storage):
  got = tuple(round(accounting.server_storage(p, sizes, 5) / 1e6, 2) for p in (
      accounting.FSL_MC, accounting.FSL_OC, accounting.FSL_AN,
      accounting.CSE_FSL))
  assert got == storage


def test_round_metrics_count_the_uploads_and_models():
  method, state, data = build(upload_every=2)
  _, metrics = RoundRunner(method, 'vmap').run(state, data, 2)
  q, b = 16 * 2 * 2, 4
  uploads = CLIENTS * (5 // 2)
  np.testing.assert_array_equal(metrics['comm_rounds'], [uploads] * 2)
  np.testing.assert_array_equal(metrics['smashed_bytes_up'],
                                [uploads * b * q * 4] * 2)
  np.testing.assert_array_equal(metrics['grad_bytes_down'], [0, 0])
  model = (method.sizes.client + method.sizes.aux) * 4 * CLIENTS
  np.testing.assert_array_equal(metrics['model_bytes_down'], [model] * 2)
  storage = method.sizes.server + CLIENTS * (method.sizes.client +
                                             method.sizes.aux)
  np.testing.assert_array_equal(metrics['server_storage_params'],
                                [storage] * 2)  # a per-round value


# ---- the server scan equals the interleaved protocol ---------------------------
def interleaved_reference(method, state, data, h):
  """Client k's block b (h aux-loss SGD steps, upload the last batch's
  pre-update smashed data), a server step; clients in ascending id (Eq. 11);
  block after block; the trailing batches train the clients only; then
  FedAvg."""
  plans = method.plan_round(state, data)
  model, lr, steps = method.model, 0.1, method.config.local_steps
  ce = optax.softmax_cross_entropy_with_integer_labels
  bound = batching.epochs_per_batch(4, int(np.min(data.counts)))

  def batch(k, s):  # slot k's minibatch s
    client = plans.client_id[k]
    idx = batching.batch_indices(plans.key[k], s, data.counts[client],
                                 batch_size=4, max_examples=EXAMPLES,
                                 max_epochs_per_batch=bound)
    return data.x[client, idx], data.y[client, idx]

  @jax.jit
  def client_step(p, x, y):
    def loss(p):
      s = models.split_apply(model, p, 'client', x)
      return ce(models.split_apply(model, p, 'aux', s), y).mean(), s
    (_, s), g = jax.value_and_grad(loss, has_aux=True)(p)
    return jax.tree.map(lambda a, b: a - lr * b, p, g), s

  @jax.jit
  def server_step(p, s, y):
    g = jax.grad(lambda p: ce(models.split_apply(
        model, {'server': p}, 'server', s), y).mean())(p)
    return jax.tree.map(lambda a, b: a - lr * b, p, g)

  local = [{'client': state.params['client'], 'aux': state.params['aux']}
           for _ in range(CLIENTS)]
  server = state.params['server']
  for block in range(steps // h):
    for k in np.argsort(np.asarray(plans.client_id)):
      for j in range(h):
        x, y = batch(k, block * h + j)
        local[k], smashed = client_step(local[k], x, y)
      server = server_step(server, smashed, y)
  for k in range(CLIENTS):
    for s in range(steps // h * h, steps):
      local[k], _ = client_step(local[k], *batch(k, s))
  weights = np.asarray(data.counts[plans.client_id], np.float32)
  weights = weights / np.sum(weights)
  averaged = jax.tree.map(lambda *ps: sum(w * p for w, p in zip(weights, ps)),
                          *local)
  return {**averaged, 'server': server}


def test_scanned_server_equals_interleaved_reference_loop():
  method, state, data = build(upload_every=2)   # 5 steps: 2 blocks + 1 tail
  expected = interleaved_reference(method, state, data, 2)
  got, _ = RoundRunner(method, 'vmap').run(state, data, 1)
  chex.assert_trees_all_close(got.params, expected, rtol=2e-5, atol=1e-6)


def test_server_order_and_upload_flags_change_only_the_server():
  base, state, data = build(upload_every=2)
  natural, _ = RoundRunner(base, 'vmap').run(state, data, 1)
  method, state, _ = build(upload_every=2, server_order='random',
                           upload_batch='first', activations='post')
  other, _ = RoundRunner(method, 'vmap').run(state, data, 1)
  for part in ('client', 'aux'):
    chex.assert_trees_all_equal(other.params[part], natural.params[part])
  assert not np.allclose(other.params['server']['head']['kernel'],
                         natural.params['server']['head']['kernel'])


def permuted(tree, perm):
  """Every leaf of `tree` (leading cohort axis) reordered by `perm`."""
  return jax.tree.map(lambda x: x[perm], tree)


def sampled_unsorted_round(method, state, data):
  """(state, plans) of the first round whose sampled cohort is not in
  ascending client id (the property below could not fail otherwise)."""
  plan_round = jax.jit(method.plan_round)
  for r in range(20):
    state = state.replace(round=jnp.asarray(r, jnp.int32))
    plans = plan_round(state, data)
    ids = np.asarray(plans.client_id)
    if (np.diff(ids) < 0).any():
      return state, plans
  raise AssertionError('every sampled cohort came in ascending order')


@pytest.mark.parametrize('order,invariant', [('natural', True),
                                             ('sampled', False)])
def test_natural_server_order_is_ascending_client_id(order, invariant):
  """Eq. 11 orders the server's steps 1..n: with 'natural' the server model
  does not depend on the slot order the cohort was sampled in ('sampled'
  keeps that order, so it does)."""
  config = split_config(upload_every=2, server_order=order)
  config.update(num_clients=CLIENTS, clients_per_round=CLIENTS)
  method, state, data = build(config=config)
  state, plans = sampled_unsorted_round(method, state, data)
  clients = RoundRunner(method, 'vmap').clients()
  outputs = jax.jit(lambda s, p, d: method.local_phase(s, p, d, clients))(
      state, plans, data)
  order_rows = np.asarray(method.arrival_order(state, plans, 2))
  served = np.asarray(plans.client_id)[order_rows]
  assert (np.diff(served, axis=1) > 0).all() == invariant
  perm = np.argsort(np.asarray(plans.client_id))
  train_server = jax.jit(method.train_server)
  server = train_server(state, plans, outputs)
  sorted_server = train_server(state, permuted(plans, perm),
                               permuted(outputs, perm))
  same = all(np.array_equal(a, b) for a, b in zip(
      jax.tree.leaves(server), jax.tree.leaves(sorted_server)))
  assert same == invariant


def test_fsl_oc_serves_clients_in_ascending_id():
  """FSL_OC's round robin (batch b of clients 1..K): the same server and
  client models whatever slot order the cohort was sampled in."""
  method, state, data = build('fsl_oc')
  state, plans = sampled_unsorted_round(method, state, data)
  perm = np.argsort(np.asarray(plans.client_id))
  round_robin = jax.jit(method.round_robin)
  got = round_robin(state.params, plans, data)
  expected = round_robin(state.params, permuted(plans, perm), data)
  chex.assert_trees_all_equal(got.extras['server'], expected.extras['server'])
  chex.assert_trees_all_equal(permuted(got.delta, perm), expected.delta)


# ---- the experiment configs follow the paper ------------------------------------
def csefsl_setup(monkeypatch):
  return load_script('experiments/csefsl/csefsl_setup.py', monkeypatch)


def test_fsl_oc_configs_clip_gradients(monkeypatch):
  """FSL_OC "incorporates gradient clipping" (Sec. V): every FSL_OC config of
  experiments/csefsl clips (the Table V rows ran unclipped before)."""
  for name in ('table5_cifar10', 'table5_femnist', 'fig4_h_sweep',
               'scaled_digits'):
    configs = load_script(f'experiments/csefsl/{name}.py',
                          monkeypatch).get_configs()
    for label, config in configs.items():
      assert (config.split.clip_norm > 0) == (label == 'fsl_oc'), label


def test_femnist_stand_in_averages_with_one_over_n_and_one_epoch(monkeypatch):
  """Eq. 14's 1/n average and one local epoch per client (Sec. V): client k
  runs ⌈n_k / B⌉ batches and uploads ⌊M_k / h⌋ smashed batches."""
  config = csefsl_setup(monkeypatch).femnist()
  assert config.aggregation_weights == 'uniform'
  assert config.split.round_steps == 'epoch'
  small = split_config(upload_every=2, round_steps='epoch')
  small.update(aggregation_weights=config.aggregation_weights)
  method, state, data = build(config=small)
  plans = method.plan_round(state, data)
  steps = -(-np.asarray(data.counts)[np.asarray(plans.client_id)] // 4)
  assert sorted(set(steps.tolist())) == [4, 5]      # unequal clients
  np.testing.assert_array_equal(plans.num_steps, steps)
  np.testing.assert_array_equal(plans.weight, np.ones(CLIENTS))
  _, metrics = RoundRunner(method, 'vmap').run(state, data, 1)
  assert int(metrics['comm_rounds'][0]) == int(np.sum(steps // 2))


# ---- equivalences between methods ----------------------------------------------
def test_fsl_mc_equals_fedavg_on_the_composed_model():
  mc, state, data = build('fsl_mc')
  fedavg, fedavg_state, _ = build(config=split_config('fedavg'))
  got, _ = RoundRunner(mc, 'vmap').run(state, data, 2)
  expected, _ = RoundRunner(fedavg, 'vmap').run(fedavg_state, data, 2)
  chex.assert_trees_all_close(got.params, expected.params, rtol=1e-5,
                              atol=1e-6)


def test_cse_fsl_with_h1_and_per_client_copies_is_fsl_an():
  cse, state, data = build(upload_every=1, server_copies='per_client')
  an, an_state, _ = build('fsl_an', upload_every=3)  # FSL_AN forces h = 1
  got, m1 = RoundRunner(cse, 'vmap').run(state, data, 2)
  expected, m2 = RoundRunner(an, 'vmap').run(an_state, data, 2)
  chex.assert_trees_all_equal(got.params, expected.params)
  chex.assert_trees_all_equal(m1, m2)


def test_fsl_oc_with_one_client_is_fsl_mc():
  config = split_config('fsl_oc')
  config.update(num_clients=CLIENTS, clients_per_round=1)
  oc, state, data = build(config=config)
  config = split_config('fsl_mc')
  config.update(clients_per_round=1)
  mc, mc_state, _ = build(config=config)
  got, _ = RoundRunner(oc, 'vmap').run(state, data, 2)
  expected, _ = RoundRunner(mc, 'vmap').run(mc_state, data, 2)
  chex.assert_trees_all_close(got.params, expected.params, rtol=1e-5,
                              atol=1e-6)


def test_fsl_oc_clipping_bounds_the_first_server_step():
  method, state, data = build('fsl_oc', clip_norm=1e-3)
  got, _ = RoundRunner(method, 'vmap').run(jax.tree.map(jnp.copy, state),
                                           data, 1)
  moved = optax.global_norm(jax.tree.map(jnp.subtract, got.params['server'],
                                         state.params['server']))
  # 5 steps × 3 clients, each at most lr · clip_norm.
  assert float(moved) <= 15 * 0.1 * 1e-3 * (1 + 1e-5)


# ---- backends and resume -------------------------------------------------------
@pytest.mark.parametrize('name', ['cse_fsl', 'fsl_oc'])
def test_backends_agree(name):
  assert_backends_agree(run_every_backend(
      lambda: build(name, upload_every=2, server_order='random'), 1))


def test_resume_is_bit_exact(tmp_path):
  method, state, data = build(upload_every=2, server_order='random',
                              lr_decay=0.5, lr_decay_every=1)
  runner = RoundRunner(method, 'vmap')
  half, _ = runner.run(committed(state), data, 2)
  method, fresh, data = build(upload_every=2, server_order='random',
                              lr_decay=0.5, lr_decay_every=1)
  restored, _ = checkpoint_round_trip(str(tmp_path), 2, half, fresh)
  straight, _ = runner.run(half, data, 2)   # the same chunks, uninterrupted
  resumed, _ = RoundRunner(method, 'vmap').run(restored, data, 2)
  assert int(resumed.round) == 4
  chex.assert_trees_all_equal(resumed.params, straight.params)


def test_lr_schedule():
  method, _, _ = build(lr_decay=0.99, lr_decay_every=10)
  np.testing.assert_allclose(
      [method.round_lr(jnp.asarray(r)) for r in (0, 9, 10, 25)],
      [0.1, 0.1, 0.1 * 0.99, 0.1 * 0.99**2], rtol=1e-6)


# ---- one-line errors -----------------------------------------------------------
@pytest.mark.parametrize('split,message', [
    ({'upload_every': 0}, 'split.upload_every'),
    ({'upload_every': 6}, 'split.upload_every'),
    ({'server_order': 'reverse'}, 'split.server_order'),
    ({'round_steps': 'epochs'}, 'split.round_steps')])
def test_bad_split_options_fail_with_one_line(split, message):
  with pytest.raises(ConfigError, match=message) as error:
    build(**split)
  assert '\n' not in str(error.value)


@pytest.mark.parametrize('options,message', [
    ({'cut': 'fc9'}, 'model_options.cut'),
    ({'aux': 'transformer'}, 'model_options.aux')])
def test_bad_split_model_options_fail_with_one_line(options, message):
  with pytest.raises(ValueError, match=message) as error:
    models.create_model('split_lenet5', 10, **options)
  assert '\n' not in str(error.value)


def test_split_method_with_a_non_split_model_fails_with_one_line():
  config = split_config()
  config.model = 'mlp'
  data = split_data()
  model = models.create_model('mlp', 10, hidden=(4,))
  with pytest.raises(ConfigError, match='config.model') as error:
    methods.create_algorithm('cse_fsl', config, model, data)
  assert '\n' not in str(error.value)


def test_under_the_systems_part_uploads_follow_the_steps_and_the_link():
  """CSE-FSL with unequal work (T = 5, 2, 3) and client 1's uplink always
  down: each client uploads one smashed batch per h = 2 steps it ran, client
  1's uploads never arrive (no server step, no average, no bytes up), and
  the result equals the run that gives client 1 weight 0 by hand."""
  config = split_config(upload_every=2)
  config.systems.update(local_work=(5, 2, 3), q=(0.0, 1.0, 0.0))
  method, state, data = build(config=config)
  got, metrics = RoundRunner(method, 'vmap').run(state, data, 1)
  assert float(metrics['comm_rounds'][0]) == 5 // 2 + 3 // 2
  smashed_batch = config.batch_size * method.sizes.smashed * 4
  assert float(metrics['smashed_bytes_up'][0]) == 3 * smashed_batch
  model_bytes = float(metrics['model_bytes_down'][0]) / 3
  assert float(metrics['model_bytes_up'][0]) == 2 * model_bytes

  class Without(methods.CseFsl):
    def client_weights(self, client_ids):
      return jnp.where(client_ids == 1, 0.0, super().client_weights(client_ids))

  reference_config = split_config(upload_every=2)
  reference_config.systems.local_work = (5, 2, 3)
  model = models.create_model('split_lenet5', 10)
  reference = Without(reference_config, model, data)
  params = models.init_params(model, jax.random.PRNGKey(0), SHAPE)
  expected, _ = RoundRunner(reference, 'vmap').run(
      reference.init(params, jax.random.PRNGKey(1)), data, 1)
  chex.assert_trees_all_close(got.params, expected.params, rtol=1e-6,
                              atol=1e-7)


def test_epoch_rounds_refuse_systems_local_work():
  config = split_config(round_steps='epoch')
  config.systems.local_work = (1, 2, 3)
  with pytest.raises(ConfigError, match="round_steps='epoch' gives every "
                     'client one local epoch'):
    build(config=config)


# ---- cells (the cells part: FSL_MC's client parts and server copies) -----------
def in_cells(algorithm, edge_rounds=2):
  """`split_config(algorithm)` in cells of 1 and 2 clients, E edge rounds."""
  config = split_config(algorithm)
  config.hierarchy.update(num_cells=2, cell_sizes=(1, 2),
                          edge_rounds=edge_rounds)
  return config


def test_fsl_mc_in_cells_is_fedavg_in_cells_on_the_composed_model():
  """Each edge round averages the composed models (client part and server
  copy) per cell and the cloud combines the cells: FedAvg on the composed
  model in the same cells, and another model than FSL_MC without cells;
  every smashed batch, gradient and model exchange is charged E times."""
  mc, state, data = build(config=in_cells('fsl_mc'))
  assert mc.parts.names == ('cells',)
  fedavg, fedavg_state, _ = build(config=in_cells('fedavg'))
  flat, flat_state, _ = build('fsl_mc')
  got, metrics = RoundRunner(mc, 'vmap').run(state, data, 2)
  expected, _ = RoundRunner(fedavg, 'vmap').run(fedavg_state, data, 2)
  without, flat_metrics = RoundRunner(flat, 'vmap').run(flat_state, data, 2)
  chex.assert_trees_all_close(got.params, expected.params, rtol=1e-5,
                              atol=1e-6)
  assert max(float(np.max(np.abs(a - b))) for a, b in zip(
      jax.tree.leaves(got.params), jax.tree.leaves(without.params))) > 1e-3
  for key in ('comm_rounds', 'smashed_bytes_up', 'grad_bytes_down',
              'model_bytes_up', 'model_bytes_down', 'bytes_up', 'bytes_down',
              'gb', 'examples'):
    np.testing.assert_allclose(metrics[key], 2 * flat_metrics[key],
                               rtol=1e-6)
  np.testing.assert_array_equal(metrics['server_storage_params'],
                                flat_metrics['server_storage_params'])


@pytest.mark.parametrize('name,says', [
    ('cse_fsl', "server part trains after the local phase on the round's "
                'smashed uploads'),
    ('fsl_an', "server part trains after the local phase on the round's "
               'smashed uploads'),
    ('fsl_oc', 'its one server serves the whole cohort round-robin')])
def test_split_methods_training_a_server_on_smashed_data_refuse_cells(name,
                                                                      says):
  message = assert_cells_key_refused(split_config(name), 'num_cells', 2, says)
  assert message.startswith(f'hierarchy.num_cells = 2 is set, but {name} '
                            'does not read the hierarchy section: ')
  assert 'fsl_mc runs in cells' in message and '(read by ' in message


# ---- DP on the client part (parts/dp.py) ------------------------------------
def dp_build(name, **dp):
  config = split_config(name)
  config.aggregation_weights = 'uniform'
  config.dp.update(dict(accountant='none', **dp))
  config_lib.validate(config)
  return build(config=config)


def norms_by_part(delta):
  """{top-level part: [K] L2 norms of each client's delta on it}."""
  return {part: np.sqrt(sum(np.sum(np.square(np.asarray(x)),
                                   axis=tuple(range(1, x.ndim)))
                            for x in jax.tree.leaves(tree)))
          for part, tree in delta.items()}


@pytest.mark.parametrize('name,uploaded', [
    ('cse_fsl', ('client', 'aux')), ('fsl_an', ('client', 'aux')),
    ('fsl_mc', ('client', 'server'))])
def test_dp_clips_every_split_upload_to_s(name, uploaded):
  """Each client's upload (CSE-FSL, FSL_AN: x_c and a_c; FSL_MC: x_c and its
  server copy) is clipped as a whole to S, longer before the clip; the part
  it does not upload is zero."""
  clip = 0.05
  method, state, data = dp_build(name, clip_norm=clip)
  assert method.parts.names == ('dp',)
  _, outputs = cohort_outputs(method, state, data)
  parts = norms_by_part(outputs.delta)
  total = np.sqrt(sum(np.square(parts[p]) for p in uploaded))
  np.testing.assert_allclose(total, clip, rtol=1e-5)
  assert np.all(np.asarray(outputs.parts['dp']) > clip)
  for part in set(parts) - set(uploaded):
    np.testing.assert_array_equal(parts[part], 0.0)
  for part in uploaded:   # both uploaded parts moved: the clip covers both
    assert np.all(parts[part] > 0)


@pytest.mark.parametrize('name,noised', [('cse_fsl', ('client', 'aux')),
                                         ('fsl_mc', ('client', 'server'))])
def test_dp_noise_on_the_client_part_sum_has_std_sigma_s(name, noised):
  """One round with σ against the same round with σ = 0 (same clip, same
  keys): the averaged parts differ by the sum's noise over K (uniform
  weights), std σS/K; the other part (CSE-FSL's x_s, trained on the smashed
  data; FSL_MC's unused aux head) is bit for bit the same."""
  sigma, clip = 2.0, 0.01
  finals = []
  for noise in (sigma, 0.0):
    method, state, data = dp_build(name, clip_norm=clip,
                                   noise_multiplier=noise)
    finals.append(RoundRunner(method, 'vmap').run(state, data, 1)[0].params)
  noisy, clean = finals
  draws = np.concatenate([
      (np.asarray(a) - np.asarray(b)).ravel() * CLIENTS
      for part in noised for a, b in zip(jax.tree.leaves(noisy[part]),
                                         jax.tree.leaves(clean[part]))])
  assert draws.size > 3000
  np.testing.assert_allclose(draws.std(), sigma * clip, rtol=0.06)
  assert abs(draws.mean()) < 0.06 * sigma * clip
  for part in set(noisy) - set(noised):
    jax.tree.map(np.testing.assert_array_equal, noisy[part], clean[part])


def test_dp_facts_say_the_epsilon_covers_the_client_part_only():
  method, _, _ = dp_build('cse_fsl', clip_norm=0.1, noise_multiplier=1.0)
  covers = method.summary_facts()['dp']['epsilon_covers']
  assert covers.startswith('the client part and aux head (x_c, a_c) only')
  assert 'smashed activations' in covers
  fedavg = methods.ALGORITHMS['fedavg']
  assert fedavg.dp_release == 'the released model'


def test_fsl_oc_refuses_dp_in_one_line():
  config = split_config('fsl_oc')
  config.dp.clip_norm = 1.0
  with pytest.raises(ConfigError) as raised:
    config_lib.validate(config)
  message = str(raised.value)
  assert '\n' not in message
  assert message.startswith('dp.clip_norm = 1.0 is set, but fsl_oc does not '
                            'read the dp section: its one server model')
  assert 'cse_fsl' in message and 'fsl_mc' in message
