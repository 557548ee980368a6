"""Client compute proportional to the steps run: each client's step loop has
its own trip count, a chunked cohort is ordered by steps into its chunks, and
every round reports useful ÷ computed steps (`useful_step_fraction`)."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het import run
from fedjax_het.core import backends, program
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.core.state import ClientPlan
from engine_utils import tiny_config, tiny_data, tiny_fedavg
from test_run import quick_config

STEPS = (5, 1, 3, 2, 5, 0, 4)   # 7 slots: MapClients(3) has a partial chunk
ACTIVE = (True, True, True, True, True, False, True)   # slot 5 is idle


class UnbucketedMapClients(backends.MapClients):
  """The chunked driver without the ordering by steps: the reference."""

  def _bucket_order(self, per_client):
    return None


def linear_loss(local, x, y, plan, ctx):
  del plan, ctx
  pred = x @ local.params['a'] + local.params['b']
  return jnp.mean(jnp.square(pred - jax.nn.one_hot(y, 3)))


def cohort_plans(steps=STEPS, active=ACTIVE):
  k = len(steps)
  return ClientPlan(
      client_id=jnp.arange(k, dtype=jnp.int32) % 6,
      key=jax.random.split(jax.random.PRNGKey(3), k),
      num_steps=jnp.asarray(steps, jnp.int32),
      lr=jnp.full((k,), 0.1), weight=jnp.ones((k,)),
      group=jnp.zeros((k,), jnp.int32), active=jnp.asarray(active))


def linear_program(num_steps, loss=linear_loss):
  return program.sgd_program(loss, program.sgd_factory(momentum=0.5),
                             num_steps=num_steps, batch_size=4)


def run_cohort(clients, prog, plans, data):
  """Every slot's `ClientOutput` under driver `clients` (jitted)."""
  params = {'a': jnp.ones((5, 3)), 'b': jnp.full((3,), 0.5)}
  min_count = int(data.counts.min())

  def one(shared, plan):
    return program.run_program(prog, program.LocalModel(shared), plan, data,
                               min_count=min_count)

  return jax.jit(lambda p, c: clients.map(one, p, c))(params, plans)


DRIVERS = [backends.VmapClients(), backends.MapClients(None),
           backends.MapClients(3)]


@pytest.mark.parametrize('clients', DRIVERS, ids=['vmap', 'map', 'map3'])
def test_a_client_ends_where_its_own_steps_end_bit_for_bit(clients):
  """A slot asking for k ∈ {2, 4} of a program bounded by 9, in a cohort
  whose most is K = 5: its delta and loss are those of the cohort run with a
  program of exactly k steps for everyone (same driver, same shapes)."""
  data = tiny_data()
  plans = cohort_plans()
  ragged = run_cohort(clients, linear_program(9), plans, data)
  for k in (2, 4):
    exact = run_cohort(clients, linear_program(k), plans.replace(
        num_steps=jnp.full((len(STEPS),), k, jnp.int32)), data)
    for slot in np.flatnonzero(np.asarray(STEPS) == k):
      if not ACTIVE[slot]:
        continue
      for got, want in zip(jax.tree.leaves(ragged.delta),
                           jax.tree.leaves(exact.delta)):
        np.testing.assert_array_equal(got[slot], want[slot])
      assert ragged.loss[slot] == exact.loss[slot]
      assert int(ragged.num_examples[slot]) == k * 4
  # The idle slot and the bound: nothing moved, nothing counted.
  assert all(np.all(d[5] == 0) for d in jax.tree.leaves(ragged.delta))
  assert int(ragged.num_examples[5]) == 0


def test_computed_steps_counts_hand_computed_layouts():
  """Steps (5, 1, 3, 2, 5, 0, 4): one at a time 20; vmapped 7 × 5 = 35;
  chunks of 3 of the sorted steps (0, 1, 2 | 3, 4, 5 | 5): 3·2 + 3·5 + 1·5."""
  steps = jnp.asarray([5, 1, 3, 2, 5, 0, 4])
  assert int(backends.VmapClients().computed_steps(steps)) == 35
  assert int(backends.MapClients(None).computed_steps(steps)) == 20
  assert int(backends.MapClients(1).computed_steps(steps)) == 20
  assert int(backends.MapClients(3).computed_steps(steps)) == 26
  assert int(backends.MapClients(10).computed_steps(steps)) == 35
  assert int(backends.SequentialClients().computed_steps(steps)) == 20


@pytest.mark.parametrize('clients', DRIVERS, ids=['vmap', 'map', 'map3'])
def test_the_step_loop_runs_what_the_driver_counts(clients):
  """A host callback in the loss counts the steps computed: one at a time
  the clients' own 20 steps (not 7 × 9 of the static bound), vmapped the
  cohort's most for every slot, in chunks each ordered chunk's most."""
  calls = []

  def counted(local, x, y, plan, ctx):  # vmapped: a step per client
    jax.debug.callback(lambda step: calls.append(np.size(step)), ctx.step)
    return linear_loss(local, x, y, plan, ctx)

  plans = cohort_plans()
  jax.block_until_ready(run_cohort(clients, linear_program(9, counted),
                                   plans, tiny_data()))
  jax.effects_barrier()
  expected = clients.computed_steps(backends.planned_steps(plans))
  assert sum(calls) == int(expected)


def test_bucketing_keeps_outputs_and_bounds_the_reordered_sum():
  """Ordering the cohort by steps moves no client's output (bit for bit);
  the summands are then added in that order: each coordinate of Σ Δ stays
  within 2(K − 1)·2⁻²⁴·Σ|Δ_k| of the cohort-order sum (the bound of
  reordering K − 1 float32 additions)."""
  data = tiny_data()
  plans = cohort_plans()
  prog = linear_program(9)
  params = {'a': jnp.ones((5, 3)), 'b': jnp.full((3,), 0.5)}
  min_count = int(data.counts.min())

  def one(shared, plan):
    out = program.run_program(prog, program.LocalModel(shared), plan, data,
                              min_count=min_count)
    return out.replace(delta=None), out.delta

  results = [jax.jit(lambda p, c, d=driver: d.map_sum(one, p, c))(params, plans)
             for driver in (backends.MapClients(3), UnbucketedMapClients(3))]
  (outs, total), (ref_outs, ref_total) = results
  jax.tree.map(np.testing.assert_array_equal, outs, ref_outs)
  deltas = run_cohort(backends.MapClients(None), prog, plans, data).delta
  for got, want, stacked in zip(jax.tree.leaves(total),
                                jax.tree.leaves(ref_total),
                                jax.tree.leaves(deltas)):
    bound = 2 * (len(STEPS) - 1) * 2.0**-24 * np.sum(np.abs(stacked), 0)
    assert np.all(np.abs(np.asarray(got) - np.asarray(want)) <= bound)


def _unequal_fedavg(backend, chunk=None, bucketed=True, rounds=3):
  """FedAvg rounds on `tiny_data`'s 6 clients, all in every round, client m
  asking for m mod 4 + 1 of at most 4 steps (1, 2, 3, 4, 1, 2: 13 steps):
  (final params, useful_step_fraction per round)."""
  algorithm, state, data = tiny_fedavg(tiny_config(local_steps=4,
                                                   clients_per_round=6))
  plan_clients = algorithm.plan_clients
  algorithm.plan_clients = lambda s, ids, keys: plan_clients(
      s, ids, keys).replace(num_steps=(ids % 4 + 1).astype(jnp.int32))
  runner = RoundRunner(algorithm, backend, chunk)
  if not bucketed:
    runner.clients = lambda: UnbucketedMapClients(chunk)
  state, metrics = runner.run(state, data, rounds)
  return state.params, np.asarray(metrics['useful_step_fraction'])


def test_bucketed_rounds_end_near_the_unbucketed_rounds():
  """Bucketing moves FedAvg's final parameters by no more than the
  reordered sums do (1e-6 after 3 rounds, the backends' agreement)."""
  params, _ = _unequal_fedavg('map', 2)
  reference, _ = _unequal_fedavg('map', 2, bucketed=False)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=0,
                                                       atol=1e-6),
               params, reference)


@pytest.mark.parametrize('backend,chunk,fraction', [
    ('map', None, 1.0),        # every client its own 13 steps
    ('sequential', None, 1.0),
    ('vmap', None, 13 / 24),   # 6 clients run to the most, 4
    ('map', 2, 13 / 14),       # chunks (1, 1 | 2, 2 | 3, 4): 2 + 4 + 8
])
def test_useful_step_fraction_is_the_layouts(backend, chunk, fraction):
  _, fractions = _unequal_fedavg(backend, chunk)
  np.testing.assert_allclose(fractions, fraction, rtol=1e-6)


def test_the_trainer_logs_the_rounds_fraction_not_a_sum(tmp_path):
  """metrics.jsonl and summary.json carry the last round's fraction (1
  with equal work), not a running total over rounds."""
  summary = run.train(quick_config(rounds=4), str(tmp_path))
  with open(os.path.join(tmp_path, 'metrics.jsonl')) as f:
    rows = [json.loads(line) for line in f]
  assert [row['useful_step_fraction'] for row in rows] == [1.0, 1.0]
  assert summary['last_round']['useful_step_fraction'] == 1.0
