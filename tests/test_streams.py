"""No two draws share a key: the named streams of `core.key_streams`.

The derivation paths of every named stream, and of the indices folded in
beside them (rounds, the round key's split halves, client ids, occurrences,
epochs, steps, phases), are enumerated for a few seeds × rounds × clients ×
epochs × steps in one jitted program; every raw key must be distinct. The
same check finds the collisions the table replaced (the old derivations).
"""
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het.core import key_streams, program
from fedjax_het.core.key_streams import Stream, fold
from fedjax_het.core.state import ServerState, round_key

SEEDS, ROUNDS, CLIENTS, OCCURRENCES = 2, 16, 3, 2
EPOCHS, STEPS, PHASES, EDGE_ROUNDS = 16, 3, 3, 3
LIBRARY = pathlib.Path(key_streams.__file__).parents[1]


def _fold_each(key, count):
  """[..., 2] keys -> [..., count, 2]: indices 0..count-1 folded into each."""
  fold_one = lambda k: jax.vmap(jax.random.fold_in, in_axes=(None, 0))(
      k, jnp.arange(count))
  for _ in range(key.ndim - 1):
    fold_one = jax.vmap(fold_one)
  return fold_one(key)


def _stream(key, stream):
  """fold(key, stream) over the leading axes of [..., 2] keys."""
  return jax.vmap(lambda k: fold(k, stream))(key.reshape(-1, 2)).reshape(
      key.shape)


def _paths(seed):
  """{path: [..., 2] raw keys} of one seed: the current derivations, then
  the old ones (`old:`) and the kept exceptions (`kept:`)."""
  state = lambda r: ServerState(None, None, r, seed)
  rounds = jax.vmap(lambda r: round_key(state(r)))(jnp.arange(ROUNDS))
  halves = jax.vmap(jax.random.split)(rounds)
  # base.plan_round: fold_in(fold_in(half 1, client id), occurrence).
  plans = _fold_each(_fold_each(halves[:, 1], CLIENTS), OCCURRENCES)
  paths = {'round': rounds, 'sampling': halves[:, 0],
           'client keys': halves[:, 1], 'client': plans,
           'epoch': _fold_each(plans, EPOCHS)}
  step_parents = {'step': _stream(plans, Stream.STEP_KEYS),
                  'round robin step': _stream(plans, Stream.ROUND_ROBIN)}
  for i in range(1, PHASES):
    phase = jax.vmap(lambda k, i=i: program.phase_key(k, i))(
        plans.reshape(-1, 2)).reshape(plans.shape)
    paths[f'phase {i}'] = phase
    paths[f'phase {i} epoch'] = _fold_each(phase, EPOCHS)
    step_parents[f'phase {i} step'] = _stream(phase, Stream.STEP_KEYS)
  for name, parent in step_parents.items():
    paths[name] = _fold_each(parent, STEPS)
  steps = jnp.concatenate([paths[n].reshape(-1, 2) for n in step_parents])
  for stream in Stream:
    parent = {'seed': seed, 'round': rounds, 'client': plans,
              'step': steps}[stream.parent.name]
    paths[stream.name] = _stream(parent, stream)
  # data.augment.crop24_jitter's five parts of the augmentation key; the
  # crop and left offsets' randint splits its key again.
  split_each = lambda keys, n: jax.vmap(lambda k: jax.random.split(k, n))(
      keys.reshape(-1, 2))
  augment = split_each(paths['AUGMENT'], 5)
  paths['augment parts'] = augment
  paths['top randint parts'] = split_each(augment[:, 0], 2)
  paths['left randint parts'] = split_each(augment[:, 4], 2)
  # The derivations the table replaced.
  fold_plans = lambda n: jax.vmap(jax.random.fold_in, in_axes=(0, None))(
      plans.reshape(-1, 2), n).reshape(plans.shape)
  old = {'old: FedPM eval': jax.vmap(jax.random.fold_in, in_axes=(None, 0))(
             jax.random.fold_in(seed, 12), jnp.arange(ROUNDS)),
         'old: PruneFL init': jax.random.fold_in(seed, 13),
         'old: Co-S²P mask draw': fold_plans(7),
         'old: Co-S²P random units': fold_plans(8),
         'old: FedPM upload': fold_plans(11),
         'old: phase 1': fold_plans(2**31 - 1),
         # FjORD's randint(step key) splits it: its part 1 is AUGMENT.
         'old: FjORD randint parts': split_each(steps, 2),
         'old: crop24 left': jax.vmap(jax.random.fold_in, in_axes=(0, None))(
             augment[:, 0], 1)}
  # Kept: HIST's edge rounds e ≥ 1 (hist.local_phase), the trainer's model
  # init key (run.py).
  kept = {'kept: HIST edge round': _fold_each(plans, EDGE_ROUNDS)[..., 1:, :],
          'kept: model init': jax.random.split(seed)[0]}
  return paths, old, kept


@pytest.fixture(scope='module')
def paths():
  seeds = jax.vmap(jax.random.PRNGKey)(jnp.arange(SEEDS))
  return jax.device_get(jax.jit(jax.vmap(_paths))(seeds))


def collisions(paths: dict) -> set:
  """{(path a, path b)} of the paths (a ≤ b) that share a raw key at the
  same seed (a path may collide with itself)."""
  names = sorted(paths)
  flat = [np.asarray(paths[n]).reshape(SEEDS, -1, 2) for n in names]
  labels = np.concatenate([np.full(f.shape[1], i) for i, f in enumerate(flat)])
  found = set()
  for s in range(SEEDS):
    bits = np.concatenate([f[s] for f in flat]).astype(np.uint64)
    keys = bits[:, 0] << np.uint64(32) | bits[:, 1]
    order = np.argsort(keys, kind='stable')
    same = np.nonzero(keys[order][1:] == keys[order][:-1])[0]
    for i in same:
      a, b = sorted((labels[order[i]], labels[order[i + 1]]))
      found.add((names[a], names[b]))
  return found


def test_no_two_draws_share_a_key(paths):
  current, _, _ = paths
  assert collisions(current) == set()


def test_the_old_derivations_collided(paths):
  """The check finds what the table fixed: FedPM's evaluation key under
  round 12's key (its rounds 0, 1 are round 12's split halves), PruneFL's
  init key = round 13's, the client-key constants 7, 8, 11 = epochs 7, 8,
  11, phase 1's key = the first phase's step-key parent, FjORD's
  randint(step key) consumed AUGMENT, crop24's left offsets the key the top
  offsets' randint consumed."""
  current, old, _ = paths
  found = collisions({**current, **old})
  assert found == {('client keys', 'old: FedPM eval'),
                   ('old: FedPM eval', 'sampling'),
                   ('old: PruneFL init', 'round'),
                   ('epoch', 'old: Co-S²P mask draw'),
                   ('epoch', 'old: Co-S²P random units'),
                   ('epoch', 'old: FedPM upload'),
                   ('STEP_KEYS', 'old: phase 1'),
                   ('AUGMENT', 'old: FjORD randint parts'),
                   ('old: crop24 left', 'top randint parts')}


def test_the_kept_exceptions_collide_as_documented(paths):
  """`key_streams`' known exceptions, kept for the pinned results: HIST's
  edge round e ≥ 1 is folded in beside the epochs, and the trainer's model
  init key is round 0's key. Fixing one changes this test and the table."""
  current, _, kept = paths
  assert collisions({**current, **kept}) == {
      ('epoch', 'kept: HIST edge round'), ('kept: model init', 'round')}


def test_named_streams_sit_outside_their_parents_indices():
  numbers = [s.number for s in Stream]
  assert len(set(numbers)) == len(numbers)
  for stream in Stream:
    assert stream.parent.indices <= stream.number < 2**32, stream


def test_the_docstring_table_lists_every_stream():
  rows = {}
  for line in key_streams.__doc__.splitlines():
    cells = [c.strip() for c in line.strip('| ').split('|')]
    if cells[0] in Stream.__members__:
      number = cells[1].replace('^', '**').replace('−', '-')  # '2^30 + 1'
      rows[cells[0]] = (eval(number, {'__builtins__': {}}), cells[2])  # pylint: disable=eval-used
  assert rows == {s.name: (s.number, s.parent.name) for s in Stream}


def test_no_literal_stream_constants_in_the_library():
  """A stream constant outside the table: a name with STREAM or KEY bound to
  an int literal (e.g. `_EVAL_KEY = 12`)."""
  pattern = re.compile(
      r'^\s*_?[A-Z_, ]*(STREAM|KEY)[A-Z_, ]*=\s*\(?\s*(\d|0x)', re.M)
  offenders = [path.name for path in LIBRARY.rglob('*.py')
               if path.name != 'key_streams.py'
               and pattern.search(path.read_text())]
  assert offenders == []
