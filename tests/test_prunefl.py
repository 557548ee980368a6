"""PruneFL on the ViT engine: the unit search, trimming, the reconfiguration
schedule and the reduction to FedAvg."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine_utils import tiny_vit_config, vit_experiment
from fedjax_het import run
from fedjax_het.methods.cos2p import prunefl
from fedjax_het.core.rounds import RoundRunner

KINDS = ('heads', 'proj', 'fc1', 'fc2')


def prunefl_config(num_clients=2, batch_size=128, **options):
  config = tiny_vit_config(num_clients, algorithm='vit_fedavg',
                           batch_size=batch_size, rounds=4,
                           aggregation_weights='uniform')
  config.prunefl.update(options)
  return config


def build(config, cls=prunefl.PruneFL):
  algorithm, state, split = vit_experiment(config, cls)
  return algorithm, state, split.train.to_device()


def reference_search(kept, imp, mag, fixed_imp, time, size, c, cap, dec):
  """The authors' loop (architecture_search) on units, in numpy."""
  stays = {}
  for k in KINDS:
    stays[k] = kept[k].copy()
    for l in range(kept[k].shape[0]):
      on = np.flatnonzero(kept[k][l])
      drop = int(np.floor(dec * len(on) + 1e-6))
      stays[k][l, on[np.argsort(mag[k][l, on], kind='stable')[:drop]]] = 0
  units = [(k, l, u) for k in KINDS for l in range(kept[k].shape[0])
           for u in range(kept[k].shape[1])]
  num = fixed_imp + sum(imp[k][l, u] for k, l, u in units if stays[k][l, u])
  den = c + sum(time[k] for k, l, u in units if stays[k][l, u])
  used = sum(size[k] for k, l, u in units if stays[k][l, u])
  total = sum(size[k] for k, _, _ in units)
  candidates = sorted([x for x in units if not stays[x[0]][x[1], x[2]]],
                      key=lambda x: -imp[x[0]][x[1], x[2]] / time[x[0]])
  new = {k: v.copy() for k, v in stays.items()}
  for k, l, u in candidates:
    if imp[k][l, u] / time[k] <= num / den or used + size[k] > cap * total:
      break
    new[k][l, u] = 1
    num, den, used = num + imp[k][l, u], den + time[k], used + size[k]
  return new


@pytest.mark.parametrize('c,dec,cap', [(1e6, 1.0, 0.4), (0.05, 0.3, 0.9),
                                       (2.0, 0.5, 0.6)])
def test_search_keeps_the_best_units_per_time_within_the_cap(c, dec, cap):
  """On a hand-made table: exactly the authors' greedy; with a huge c the
  ratio test always passes and the result is the highest-I/t prefix that
  fits the cap."""
  rng = np.random.default_rng(0)
  shapes = {'heads': (2, 3), 'proj': (2, 5), 'fc1': (2, 6), 'fc2': (2, 5)}
  kept = {k: (rng.random(s) < 0.7).astype(np.float32)
          for k, s in shapes.items()}
  imp = {k: rng.random(s).astype(np.float32) for k, s in shapes.items()}
  mag = {k: rng.random(s).astype(np.float32) for k, s in shapes.items()}
  time = {'heads': 3.0, 'proj': 1.0, 'fc1': 1.2, 'fc2': 2.0}
  size = {'heads': 12.0, 'proj': 5.0, 'fc1': 5.0, 'fc2': 9.0}
  got = prunefl.reconfigure(jax.tree.map(jnp.asarray, kept),
                            jax.tree.map(jnp.asarray, imp),
                            jax.tree.map(jnp.asarray, mag), 0.5, time, size,
                            c, cap, dec)
  expected = reference_search(kept, imp, mag, 0.5, time, size, c, cap, dec)
  for k in KINDS:
    np.testing.assert_array_equal(got[k], expected[k])
  if c == 1e6 and dec == 1.0:
    flat = sorted([(-imp[k][l, u] / time[k], k, l, u) for k in KINDS
                   for l in range(2) for u in range(shapes[k][1])])
    total = sum(size[k] * np.prod(shapes[k]) for k in KINDS)
    used, top = 0.0, set()
    for _, k, l, u in flat:
      if used + size[k] > cap * total:
        break
      used += size[k]
      top.add((k, l, u))
    assert {(k, l, u) for k in KINDS for l, u in zip(
        *np.nonzero(np.asarray(got[k])))} == top


def test_trim_keeps_the_highest_scores_within_the_budget():
  rng = np.random.default_rng(1)
  shapes = {'heads': (2, 2), 'proj': (2, 4), 'fc1': (2, 8), 'fc2': (2, 4)}
  kept = {k: (rng.random(s) < 0.8).astype(np.float32)
          for k, s in shapes.items()}
  score = {k: rng.random(s).astype(np.float32) for k, s in shapes.items()}
  size = {'heads': 10.0, 'proj': 3.0, 'fc1': 3.0, 'fc2': 5.0}
  total = sum(size[k] * np.prod(s) for k, s in shapes.items())
  for budget in (0.2, 0.5, 1.0):
    got = prunefl.trim(kept, score, size, jnp.float32(budget))
    ranked = sorted((-score[k][l, u], k, l, u) for k in KINDS
                    for l, u in zip(*np.nonzero(kept[k])))
    used, top = 0.0, set()
    for _, k, l, u in ranked:
      if used + size[k] > budget * total:
        break
      used += size[k]
      top.add((k, l, u))
    assert {(k, l, u) for k in KINDS for l, u in zip(
        *np.nonzero(np.asarray(got[k])))} == top
    if budget == 1.0:
      for k in KINDS:
        np.testing.assert_array_equal(got[k], kept[k])


def test_reconfiguration_happens_exactly_every_interval():
  """ΔR = 2: importance accumulates over rounds 0, 2 and is consumed after
  rounds 1, 3, where the mask and scores change (and only there); every
  client trains within its budget √R_n."""
  config = prunefl_config(reconfig_every=2)
  config.cos2p.budgets = (0.25, 0.5)
  config.rounds = 5
  algorithm, state, data = build(config)
  runner = RoundRunner(algorithm, 'map')
  mask = jax.tree.map(np.asarray, state.extras['mask'])
  for q in range(4):
    state, _ = runner.run(state, data, 1)
    total = sum(float(np.sum(v)) for v in jax.tree.leaves(
        state.extras['importance']))
    new = jax.tree.map(np.asarray, state.extras['mask'])
    changed = any(not np.array_equal(new[k], mask[k]) for k in KINDS)
    if (q + 1) % 2:
      assert total > 0 and not changed
    else:
      assert total == 0 and changed
    mask = new
    inputs = jax.tree.map(lambda x: jnp.asarray(x[0]),
                          algorithm.round_inputs(q + 1, 1))
    units = algorithm.plan_round(state, data, inputs).extras['units']
    size = {k: algorithm.unit_params[k] for k in KINDS}
    all_units = sum(size[k] * units[k][0].size for k in KINDS)
    for n, width in enumerate(algorithm.width):
      used = sum(size[k] * float(np.sum(units[k][n])) for k in KINDS)
      assert used <= width * all_units + 1e-3
      assert all(np.all(units[k][n] <= new[k]) for k in KINDS)


def test_reduces_to_fedavg_without_pruning():
  """Budgets 1, no initial or adaptive pruning: vit_fedavg's params."""
  # tiny_vit_config's clients and batches: the FedAvg reference is the
  # program of the other ViT methods' (test_qvit, test_platon, test_adavit).
  config = prunefl_config(num_clients=4, batch_size=64, reconfig_every=0)
  algorithm, state, data = build(config)
  state, _ = RoundRunner(algorithm, 'map').run(state, data, 2)
  fedavg, fedavg_state, _ = build(config, cls=None)
  fedavg_state, _ = RoundRunner(fedavg, 'map').run(fedavg_state, data, 2)
  chex.assert_trees_all_close(state.params, fedavg_state.params, atol=1e-5)
  for v in state.extras['mask'].values():
    np.testing.assert_array_equal(v, 1.0)


def test_the_floor_keeps_units_when_the_fixed_part_wins():
  """Fixed importance per second above every unit's: the greedy rule keeps
  nothing; with a floor the best-ratio units are added up to it."""
  rng = np.random.default_rng(1)
  shapes = {'heads': (2, 3), 'proj': (2, 5), 'fc1': (2, 6), 'fc2': (2, 5)}
  none = {k: jnp.zeros(s) for k, s in shapes.items()}
  imp = {k: jnp.asarray(rng.random(s), jnp.float32) for k, s in shapes.items()}
  time = {'heads': 3.0, 'proj': 1.0, 'fc1': 1.2, 'fc2': 2.0}
  size = {'heads': 12.0, 'proj': 5.0, 'fc1': 5.0, 'fc2': 9.0}
  args = (none, imp, imp, 1e6, time, size, 1.0, 0.9, 1.0)
  empty = prunefl.reconfigure(*args)
  assert all(float(jnp.sum(v)) == 0 for v in empty.values())
  floored = prunefl.reconfigure(*args, floor=0.3)
  total = sum(size[k] * np.prod(shapes[k]) for k in KINDS)
  used = sum(size[k] * float(jnp.sum(floored[k])) for k in KINDS)
  assert 0.3 * total <= used < 0.3 * total + max(size.values())
  ratio = {k: np.asarray(imp[k]) / time[k] for k in KINDS}
  kept = min(ratio[k][np.asarray(floored[k]) > 0].min() for k in KINDS
             if float(jnp.sum(floored[k])))
  dropped = max(ratio[k][np.asarray(floored[k]) == 0].max() for k in KINDS)
  assert kept >= dropped


def test_initial_pruning_trains_on_client_zero_and_meets_the_cap():
  config = prunefl_config(init_steps=3, max_density=0.5)
  algorithm, state, _ = build(config)
  _, _, params, _ = run.build_experiment(config)
  size = {k: algorithm.unit_params[k] for k in KINDS}
  mask = state.extras['mask']
  density = sum(size[k] * float(jnp.sum(mask[k])) for k in KINDS) / sum(
      size[k] * mask[k].size for k in KINDS)
  assert algorithm.floor - 0.05 <= density <= 0.5 + 1e-6
  assert not np.allclose(state.params['blocks_fc1_kernel'],
                         params['blocks_fc1_kernel'])
