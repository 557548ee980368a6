"""HIST and HFedAvg on the engine: identities, a per-cell reference loop, accounting, bad input."""
import functools
import itertools
import os

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_het import cli, models
from fedjax_het import run as trainer
from fedjax_het import workdir as workdir_lib
from fedjax_het.methods import ALGORITHMS, FedAvg
from fedjax_het.core import aggregation, batching
from fedjax_het.core.state import ClientOutput
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.systems import latency, partition_sizing
from engine_utils import stacked_masks, tiny_config, tiny_data


def hierarchical(algorithm='hist', data=None, hidden=(7,), cls=None,
                 systems=(), **hierarchy):
  """(algorithm, initial state, data): 6 clients in cells of 2 and 4, with
  `config.systems` updated by the pairs `systems`; `cls` replaces the
  method's class (a variant of it)."""
  config = tiny_config(algorithm=algorithm, clients_per_round=6,
                       local_steps=2)
  config.model_options.hidden = hidden
  config.hierarchy.update(num_cells=2, cell_sizes=(2, 4), edge_rounds=2,
                          beamformer_sca_steps=3, beamformer_inner_steps=20)
  config.hierarchy.update(hierarchy)
  config.systems.update(dict(systems))
  data = data if data is not None else tiny_data()
  model = models.create_model('mlp', 3, hidden=hidden)
  params = models.init_params(model, jax.random.PRNGKey(0), data.x.shape[2:])
  algorithm = (cls or ALGORITHMS[algorithm])(config, model, data)
  return algorithm, algorithm.init(params, jax.random.PRNGKey(1)), data


def run(algorithm, state, data, rounds=2, backend='vmap'):
  return RoundRunner(algorithm, backend).run(state, data, rounds)


@functools.lru_cache(maxsize=None)
def two_rounds(name='hist', backend='vmap', **hierarchy):
  """(algorithm, first state, final state, metrics) of 2 rounds, run once.

  Tests share runs: every distinct configuration compiles a whole round.
  """
  algorithm, state, data = hierarchical(name, **hierarchy)
  first = jax.tree.map(jnp.copy, state)  # the run donates `state`
  final, metrics = run(algorithm, state, data, backend=backend)
  return algorithm, first, final, jax.device_get(metrics)


def test_hist_with_one_cell_equals_hfedavg_and_fedavg():
  one_cell = {'num_cells': 1, 'cell_sizes': (), 'edge_rounds': 1}
  _, first, hist, hist_metrics = two_rounds('hist', **one_cell)
  algorithm, _, hfedavg, hfedavg_metrics = two_rounds('hfedavg', **one_cell)
  chex.assert_trees_all_close(hist.params, hfedavg.params, atol=1e-6)
  for key in ('bytes_up', 'mb_per_client', 'latency_s', 'train_loss'):
    np.testing.assert_allclose(hist_metrics[key], hfedavg_metrics[key],
                               rtol=1e-6)
  # One cell and one edge round: plain FedAvg over all clients (with HIST's
  # default 1/n_j edge weights: uniform client weights).
  config = algorithm.config.copy_and_resolve_references()
  config.aggregation_weights = 'uniform'
  fedavg = FedAvg(config, algorithm.model, tiny_data())
  fedavg_state, _ = run(fedavg, fedavg.init(first.params, first.key),
                        tiny_data())
  chex.assert_trees_all_close(hfedavg.params, fedavg_state.params, atol=2e-6)


def reference_hierarchical_rounds(algorithm, state, data, rounds):
  """Algorithm 1 as written: loops over rounds, cells, edge rounds, clients.

  Plans (cells, keys, weights, steps, this round's masks) come from the
  engine; local SGD, edge averages (6) and the cloud (7) are recomputed
  here. Client i runs its plan's steps in every edge round; a client of
  weight 0 (its upload lost) trains and is left out of every edge mean; a
  cell of weight 0 keeps its edge model and holds nothing for the cloud (a
  coordinate no cell holds keeps its value).
  """
  config = algorithm.config
  x, y, counts = (np.asarray(a) for a in (data.x, data.y, data.counts))
  model = algorithm.model

  def loss(p, mask, xb, yb):
    p = p if mask is None else jax.tree.map(lambda a, m: a * m, p, mask)
    logits = model.apply({'params': p}, xb, train=True)
    return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

  grad = jax.jit(jax.grad(loss))
  bound = batching.epochs_per_batch(config.batch_size, int(counts.min()))
  params = jax.tree.map(np.asarray, state.params)
  plan_round = jax.jit(algorithm.plan_round)
  for r in range(rounds):
    plans = jax.device_get(stacked_masks(plan_round(
        state.replace(round=jnp.int32(r)), data)))
    cells = []
    for j in range(algorithm.segments):
      members = np.flatnonzero(plans.group == j)
      mask = None if plans.mask is None else jax.tree.map(
          lambda m, i=members[0]: m[i].astype(np.float32), plans.mask)
      edge = params
      for e in range(config.hierarchy.edge_rounds):
        local_models, weights = [], []
        for i in members:
          client = plans.client_id[i]
          key = plans.key[i] if e == 0 else jax.random.fold_in(plans.key[i], e)
          local = edge
          for s in range(plans.num_steps[i]):
            rows = batching.batch_indices(
                key, s, counts[client], batch_size=config.batch_size,
                max_examples=x.shape[1], max_epochs_per_batch=bound)
            g = grad(local, mask, x[client, rows], y[client, rows])
            if mask is not None:
              g = jax.tree.map(lambda a, m: a * m, g, mask)
            local = jax.tree.map(lambda w, gw: w - config.client_lr * gw,
                                 local, g)
          local_models.append(local)
          weights.append(plans.weight[i])
        if np.sum(weights) == 0:   # every upload lost: the edge keeps it
          continue
        w = np.asarray(weights) / np.sum(weights)
        average = jax.tree.map(
            lambda *ms: sum(wi * np.asarray(m) for wi, m in zip(w, ms)),
            *local_models)
        edge = average if mask is None else jax.tree.map(
            lambda a, old, m: np.where(m > 0, a, old), average, edge, mask)
      received = float(np.sum(plans.weight[members]) > 0)
      cells.append((edge, mask, received))
    # The cloud: each coordinate from the cells that hold it, equal weights.
    held = [jax.tree.map(lambda p, r=r: np.ones_like(p) * r, params)
            if m is None else jax.tree.map(lambda a, r=r: a * r, m)
            for _, m, r in cells]
    weighted = [jax.tree.map(lambda p, h: np.asarray(p) * h, edge, h)
                for (edge, _, _), h in zip(cells, held)]
    total = jax.tree.map(lambda *hs: sum(hs), *held)
    params = jax.tree.map(
        lambda p, t, *ws: np.where(t > 0, sum(ws) / np.where(t > 0, t, 1), p),
        params, total, *weighted)
  return params


@pytest.mark.parametrize('name', ['hist', 'hfedavg'])
def test_segment_sum_edge_aggregation_equals_a_per_cell_loop(name):
  algorithm, first, final, _ = two_rounds(name)
  expected = reference_hierarchical_rounds(algorithm, first, tiny_data(),
                                           rounds=2)
  chex.assert_trees_all_close(final.params, expected, atol=2e-5)


NOISY = {'edge_channel': 'aircomp', 'snr_db_slow': -10.0, 'snr_db_fast': 0.0}


def test_compiled_and_sequential_backends_agree():
  """The compiled round (edge rounds in `lax.scan`) and the host loop (edge
  rounds in Python, one jitted call per client) agree; vmap ≡ map is an
  engine test."""
  *_, expected, expected_metrics = two_rounds('hist', 'vmap')
  *_, final, metrics = two_rounds('hist', 'sequential')
  chex.assert_trees_all_close(final.params, expected.params, atol=1e-5)
  for key in ('train_loss', 'latency_s', 'bytes_up'):
    np.testing.assert_allclose(metrics[key], expected_metrics[key], rtol=1e-5)


def test_noiseless_aircomp_equals_oma_and_noise_perturbs_the_model():
  oma, first, oma_final, oma_metrics = two_rounds('hist')
  silent, *_ = hierarchical('hist', edge_channel='aircomp',
                            aircomp_noise='none')
  plans = stacked_masks(jax.jit(oma.plan_round)(first, tiny_data()))
  deltas = jax.tree.map(lambda m: 0.01 * m.astype(jnp.float32) * jax.random.normal(
      jax.random.PRNGKey(0), m.shape), plans.mask)
  # OMA divides the cells' sums (summed in the client map); AirComp reads
  # the stacked deltas.
  sums = aggregation.segment_sums(deltas, plans.weight, plans.group,
                                  oma.segments, plans.mask,
                                  values_masked=True)
  exact, no_stats = jax.jit(oma.parts.owner('local_phase').edge_aggregate)(
      jax.random.PRNGKey(1), ClientOutput(None, None, None, delta_sums=sums),
      plans)
  over_the_air, stats = jax.jit(silent.parts.owner('local_phase').edge_aggregate)(
      jax.random.PRNGKey(1), ClientOutput(deltas, None, None), plans)
  assert not no_stats
  chex.assert_trees_all_close(over_the_air, exact, rtol=1e-4, atol=1e-8)
  *_, noisy, metrics = two_rounds('hist', **NOISY)
  assert not np.allclose(noisy.params['fc1']['kernel'],
                         oma_final.params['fc1']['kernel'], atol=1e-3)
  assert np.all(metrics['beamformer_gain'] >= metrics['beamformer_initial_gain'])
  # The mean over cells of 1/(SNR_j g_j), SNR −10 dB (cell 0), 0 dB (cell 1);
  # g_j ≤ min_i ||h_i||² ≈ 2..20 for 10 antennas, so MSE ≫ 0.
  assert np.all(metrics['aircomp_mse'] > 0.01)
  np.testing.assert_array_equal(stats['aircomp_mse'] > 0, True)
  # Over the air, the upload is one submodel long whatever n_j: faster.
  assert np.all(metrics['latency_s'] < oma_metrics['latency_s'])


def test_partitions_are_fresh_each_round_and_optimised_sizes_cut_latency():
  uniform, state, _, _ = two_rounds('hist')
  data = tiny_data()
  plan_round = jax.jit(uniform.plan_round)
  plans = [stacked_masks(plan_round(state.replace(round=jnp.int32(r)), data))
           for r in range(3)]
  owners = [np.asarray(p.mask['fc1']['bias'][0]) for p in plans]  # cell 0
  assert not np.array_equal(owners[0], owners[1])
  for plan in plans:  # client 0 in cell 0 and client 2 in cell 1: disjoint
    both = plan.mask['fc1']['bias'][0].astype(int) + plan.mask['fc1'][
        'bias'][2].astype(int)
    np.testing.assert_array_equal(both, 1)
  # Cell 0 computes at 0.5-0.6 GHz, cell 1 at 2-4 GHz.
  optimized, first, data = hierarchical(
      'hist', partition_sizes='optimized', cpu_ghz_slow=(0.5, 0.6))
  plan = stacked_masks(optimized.plan_round(first, data))
  sizes = np.asarray(plan.mask['fc1']['bias'])[[0, 2]].sum(axis=1)
  group, layout = optimized.layout.groups[0], optimized.layout
  cost = latency.edge_round_latency(
      'oma', jnp.ones(6), optimized.total_params, plan.num_steps,
      plan.extras['cpu_hz'], plan.extras['rate_bps'], plan.group, 2,
      optimized.hierarchy.system)
  np.testing.assert_array_equal(sizes, partition_sizing.optimal_unit_counts(
      cost, num_units=7, unit_params=group.unit_params,
      shared_params=layout.shared_params, max_units=5))
  round_latency = lambda k: 2 * np.max(cost * (layout.shared_params +
                                               k * group.unit_params))
  # The slow cell gets fewer neurons, and the round is faster than with
  # the uniform 3/4 split under the same draws.
  assert sizes[0] < 3 and round_latency(sizes) < 0.8 * round_latency(
      np.asarray([3, 4]))


def brute_force_sizes(cost, *, num_units, unit_params, shared_params, cap):
  """Every split of `num_units` neurons into len(cost) cells of 1..cap, and
  the least max_j c_j·(s + k_j·u) among them (Eq. (19a))."""
  splits = [k for k in itertools.product(range(1, cap + 1), repeat=len(cost))
            if sum(k) == num_units]
  slowest = [np.max(cost * (shared_params + np.asarray(k) * unit_params))
             for k in splits]
  return min(slowest)


@pytest.mark.parametrize('channel', ['oma', 'aircomp'])
def test_optimised_sizes_solve_eq19_for_cells_in_any_speed_order(channel):
  # 4 cells of 1, 2, 1, 2 clients; cells 0-1 compute at 0.5-0.6 GHz with
  # 30 dB, cells 2-3 at 2-4 GHz with 40 dB: neither speed nor size is
  # monotone in the cell index, so every cell's cost must be its own.
  cells = dict(num_cells=4, cell_sizes=(1, 2, 1, 2), slow_cells=2,
               cpu_ghz_slow=(0.5, 0.6), edge_channel=channel)
  optimized, first, data = hierarchical('hist', hidden=(12,),
                                        partition_sizes='optimized', **cells)
  plan = jax.device_get(optimized.plan_round(first, data))
  cell = np.repeat(np.arange(4), (1, 2, 1, 2))
  np.testing.assert_array_equal(plan.group, cell)
  # c_j of Eq. (17)/(35) by hand: the latency of a one-parameter submodel.
  h, d, system = plan.num_steps, optimized.total_params, optimized.hierarchy.system
  compute = h * system.cycles_per_step / (plan.extras['cpu_hz'] * d)
  if channel == 'oma':
    n_j = np.bincount(cell)[cell]
    per_client = compute + n_j * system.bits_per_param / plan.extras['rate_bps']
    cost = np.array([per_client[cell == j].max() for j in range(4)])
  else:
    cost = np.array([compute[cell == j].max() for j in range(4)]) + (
        system.symbol_s * system.subcarrier_hz / system.bandwidth_hz)
  group, layout = optimized.layout.groups[0], optimized.layout
  sizes = np.stack([plan.mask_table['fc1']['bias'][j].sum() for j in range(4)])
  assert sizes.sum() == 12 and sizes.min() >= 1 and sizes.max() <= optimized.size_cap
  slowest = lambda k: np.max(cost * (layout.shared_params + k * group.unit_params))
  np.testing.assert_allclose(slowest(sizes), brute_force_sizes(
      cost, num_units=12, unit_params=group.unit_params,
      shared_params=layout.shared_params, cap=optimized.size_cap), rtol=1e-6)
  assert slowest(sizes) < slowest(np.full(4, 3))
  # The simulated round latency (Eq. (18)) under the same draws: the
  # optimised sizes are faster than the uniform 3/3/3/3.
  uniform, state, _ = hierarchical('hist', hidden=(12,), **cells)
  _, optimized_metrics = run(optimized, first, data, rounds=1)
  _, uniform_metrics = run(uniform, state, data, rounds=1)
  assert optimized_metrics['latency_s'][0] < uniform_metrics['latency_s'][0]


def test_round_metrics_count_bytes_per_client_and_oma_latency():
  algorithm, first, _, metrics = two_rounds('hfedavg')
  plan = jax.device_get(algorithm.plan_round(first, tiny_data()))
  d = algorithm.total_params
  np.testing.assert_allclose(metrics['mb_per_client'], 2 * 4 * d / 2**20)
  np.testing.assert_allclose(metrics['bytes_up'], 2 * 6 * 4 * d)
  # Eqs. (17)-(18) by hand: E = 2 edge rounds of H = 2 steps on the full
  # model, then n_j TDMA uploads of 32·d bits in cells of 2 and 4 clients.
  n_j = np.where(plan.group == 0, 2, 4)
  per_client = (2 * 1e6 / plan.extras['cpu_hz'] +
                n_j * 32 * d / plan.extras['rate_bps'])
  np.testing.assert_allclose(metrics['latency_s'][0], 2 * per_client.max(),
                             rtol=1e-5)
  *_, hist_metrics = two_rounds('hist')
  # K = 7 neurons split 3/4, each with 5 + 1 + 3 parameters; 3 biases shared.
  owned = np.where(plan.group == 0, 3, 4) * 9 + 3
  np.testing.assert_allclose(hist_metrics['bytes_up'], 2 * 4 * owned.sum())
  np.testing.assert_allclose(hist_metrics['partition_dmax'], 4 * 9 + 3)
  # The same draws (they depend on the round only), on submodels of d_j.
  per_client = (2 * 1e6 * owned / d / plan.extras['cpu_hz'] +
                n_j * 32 * owned / plan.extras['rate_bps'])
  np.testing.assert_allclose(hist_metrics['latency_s'][0],
                             2 * per_client.max(), rtol=1e-5)


@pytest.mark.parametrize('overrides,message', [
    ({'hidden': (3,), 'num_cells': 4, 'cell_sizes': ()},
     'cannot split 3 hidden neurons into 4'),
    ({'cell_sizes': (6, 0)}, 'every cell needs at least one client'),
    ({'cell_sizes': (2, 3)}, 'add up to 5, not num_clients=6'),
    ({'aircomp_power': 0.0}, 'aircomp_power must be positive'),
    ({'snr_db_fast': float('inf')}, 'snr_db_fast must be a finite number'),
    ({'edge_channel': 'wifi'}, 'edge_channel must be one of oma, aircomp'),
    ({'partition_sizes': 'given', 'given_sizes': (3, 3)},
     'summing to the 7 hidden neurons'),
    ({'partition_sizes': 'optimized', 'max_size_ratio': 0.5},
     'raise hierarchy.max_size_ratio'),
])
def test_bad_hierarchies_fail_clearly(overrides, message):
  with pytest.raises(ValueError, match=message):
    hierarchical('hist', **overrides)


def test_trainer_reports_mb_and_latency_to_target_and_rejects_bad_input(
    tmp_path, capsys):
  quickstart = os.path.join(os.path.dirname(__file__), '..', 'experiments',
                            'hist', 'quickstart.py')
  argv = ['--config', quickstart, '--config.num_clients=8',
          '--config.clients_per_round=8', '--config.local_steps=2',
          '--config.batch_size=8', '--config.model_options.hidden=(16,)',
          '--config.rounds=2', '--config.checkpoint_every=2',
          '--config.progress=False', '--config.target_accuracy=0.01',
          '--config.hierarchy.num_cells=2', '--config.hierarchy.edge_rounds=2']
  config, _ = cli.resolve(argv)
  summary = trainer.train(config, str(tmp_path / 'ok'))
  reached = summary['to_target']
  assert reached['round'] == 1
  # 2 edge rounds × a half model (8 of 16 neurons + 10 shared biases).
  per_client = 2 * 4 * (8 * (64 + 1 + 10) + 10) / 2**20
  assert reached['mb_per_client'] == pytest.approx(per_client)
  assert 0 < reached['latency_s'] < summary['totals']['latency_s']
  code = cli.main(argv + ['--config.clients_per_round=4',
                          f'--workdir={tmp_path / "bad"}'])
  assert code == 2
  assert 'clients_per_round (4) must equal num_clients (8)' in (
      capsys.readouterr().err)


def test_edge_weights_default_to_one_per_client_and_examples_is_an_option():
  data = tiny_data()
  for weights, want in (('uniform', np.ones(6)), ('examples', np.asarray(data.counts))):
    algorithm, state, _ = hierarchical('hfedavg', edge_weights=weights)
    plans = jax.device_get(algorithm.plan_round(state, data))
    np.testing.assert_array_equal(plans.weight, want)
  assert hierarchical('hist')[0].hierarchy.edge_weights == 'uniform'


def test_per_round_metrics_are_the_rounds_values_not_running_sums(tmp_path):
  """partition_dmax, aircomp_mse and beamformer_gain are logged as the round's value; bytes
  stay running totals; summary.json names the AirComp noise model."""
  host = trainer.new_host_counters()
  per_round = ALGORITHMS['hist'].per_round_metrics
  assert {'partition_dmax', 'aircomp_mse', 'beamformer_gain'} <= set(per_round)
  for chunk in ([5.0, 7.0], [6.0]):
    trainer.accumulate(host, {'train_loss': np.ones(len(chunk)), 'partition_dmax':
                              np.asarray(chunk), 'bytes_up': np.asarray(chunk)}, 0.0, per_round)
  assert host['totals'] == {'partition_dmax': 6.0, 'bytes_up': 18.0}
  config = tiny_config(algorithm='hist', clients_per_round=6, local_steps=2, rounds=3,
                       eval_every=1, checkpoint_every=3, progress=False, dataset='digits',
                       num_clients=6, partition='iid')
  config.hierarchy.update(num_cells=2, edge_rounds=2, edge_channel='aircomp',
                          beamformer_sca_steps=3, beamformer_inner_steps=20)
  summary = trainer.train(config, str(tmp_path / 'run'))
  rows = workdir_lib.read_metrics(str(tmp_path / 'run' / 'metrics.jsonl'))
  params = summary['num_params']
  dmax = [r['partition_dmax'] for r in rows]
  assert len(rows) == 3 and all(0 < d < params for d in dmax)  # a half model, never a sum
  assert abs(dmax[2] - dmax[0]) < params / 2
  mse = [r['aircomp_mse'] for r in rows]
  assert max(mse) < 3 * min(mse)  # would grow ~ linearly if summed
  assert rows[2]['bytes_up'] == pytest.approx(3 * rows[0]['bytes_up'])  # a running total
  assert summary['last_round']['partition_dmax'] == dmax[-1]
  assert 'partition_dmax' not in summary['totals']
  assert summary['edge_channel'] == 'aircomp'
  assert summary['aircomp_noise'].startswith('real Gaussian, variance MSE')


def test_every_hist_experiment_config_is_valid_and_builds():
  """Paper-scale files too: their data is not here, so zeros of its shape."""
  from fedjax_het import config as config_lib  # pylint: disable=g-import-not-at-top
  from fedjax_het.data import FederatedData  # pylint: disable=g-import-not-at-top
  folder = os.path.join(os.path.dirname(__file__), '..', 'experiments', 'hist')
  shapes = {'fashion_mnist': (28, 28, 1), 'cifar10': (32, 32, 3),
            'digits': (8, 8, 1)}
  names = [f for f in sorted(os.listdir(folder)) if f.endswith('.py') and
           f not in ('hist_setup.py', 'compare.py', 'quickstart.py')]
  assert len(names) == 10
  for name in names:
    module = cli.load_experiment(os.path.join(folder, name))
    for label, config in module.get_configs().items():
      config_lib.validate(config)
      n = config.num_clients
      data = FederatedData(
          x=np.zeros((n, 1) + shapes[config.dataset], np.float32),
          y=np.zeros((n, 1), np.int32), counts=np.ones(n, np.int32))
      model = models.create_model(config.model, 10,
                                  **config.model_options.to_dict())
      ALGORITHMS[config.algorithm](config, model, data)  # checks the hierarchy
      assert config.clients_per_round == n, (name, label)
