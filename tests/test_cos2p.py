"""Co-S²P on the engine: reductions, the clock in the compiled rounds, Eqs. 2–5."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine_utils import (TINY_VIT, checkpoint_round_trip, committed,
                          tiny_vit_config, vit_experiment)
from fedjax_het import config as config_lib
from fedjax_het import run
from fedjax_het.methods.cos2p import budget_masks, vit_engine
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.options import ConfigError
from fedjax_het.parts import clock as clock_part
from script_utils import load_script

def cos2p_config(clock=(), **cos2p_options):
  """Four digits clients of ~360 examples on a 2-block ViT, fixed clocks;
  `clock` updates the clock section, `cos2p_options` the cos2p section."""
  config = tiny_vit_config()
  config.clock.update(dict(clock))
  config.cos2p.update(cos2p_options)
  return config


def build(config):
  algorithm, state, split = vit_experiment(config)
  return algorithm, state, split.train.to_device()


def test_reduces_to_fedavg():
  """Budgets 1, λ2 = 0, no masks, μ = 1, T_clk = 0 and uniform weights over
  holders: FedAvg's parameters (to 1e-5)."""
  config = cos2p_config(width_masks='full', weighting='holders',
                        personal_heads=False, clock=dict(mu=1.0, t_clk=0.0))
  config.aggregation_weights = 'uniform'
  algorithm, state, data = build(config)
  assert (algorithm.batches == algorithm.batches[0]).all()
  state, _ = RoundRunner(algorithm, 'map').run(state, data, 2)

  fedavg_config = cos2p_config()
  fedavg_config.update(dict(algorithm='fedavg', aggregation_weights='uniform',
                            local_steps=int(algorithm.batches[0])))
  fedavg_config.clock = config_lib.base_config().clock   # FedAvg off the clock
  fedavg, fedavg_state, _ = build(fedavg_config)
  fedavg_state, _ = RoundRunner(fedavg, 'map').run(fedavg_state, data, 2)
  chex.assert_trees_all_close(state.params, fedavg_state.params, atol=1e-5)


def test_stale_client_trains_from_its_dispatch_model():
  """Durations 1, 1, 2.5 s with ⌈μN⌉ = 2: client 2, dispatched in round 0,
  arrives in round 2 with τ = 2 and starts from w_0 with round 0's key."""
  config = cos2p_config(clock=dict(client_seconds=(1.0, 1.0, 2.5, 1.0), mu=0.5))
  config.num_clients = config.clients_per_round = 4
  algorithm, state, data = build(config)
  schedule = algorithm.schedule
  np.testing.assert_array_equal(schedule.arrivals[:3, 2], [False, False, True])
  assert schedule.staleness[2, 2] == 2 and schedule.dispatch_round[2, 2] == 0
  w0 = jax.tree.map(np.asarray, state.params)   # the run donates state
  state, _ = RoundRunner(algorithm, 'map').run(state, data, 2)
  inputs = jax.tree.map(lambda x: jnp.asarray(x[0]),
                        algorithm.round_inputs(2, 1))
  plans = algorithm.plan_round(state, data, inputs)
  assert int(plans.extras['clock']['staleness'][2]) == 2
  assert bool(plans.active[2])
  table = algorithm.start_models(state, plans)
  chex.assert_trees_all_equal(jax.tree.map(lambda t: t[2], table), w0)
  round0_key = jax.random.fold_in(jax.random.fold_in(jax.random.split(
      jax.random.fold_in(state.key, 0))[1], 2), 0)
  np.testing.assert_array_equal(plans.key[2], round0_key)


def test_the_engines_clock_with_fixed_seconds_is_the_generic_part():
  """One clock: with `clock.client_seconds` set, the ViT engine's part and
  the generic one of the same section (FedAvg's, whose default seconds the
  fixed ones replace) give the same round inputs and facts, jitter and
  stragglers included."""
  config = cos2p_config(clock=dict(client_seconds=(1.0, 1.5, 2.5, 4.0),
                                   mu=0.5, t_clk=0.2, jitter=0.3))
  config.rounds = 6
  algorithm, _, _ = build(config)
  generic = clock_part.VirtualClock(
      algorithm.clock_options, num_clients=4, rounds=6,
      duration=clock_part.step_durations(
          algorithm.clock_options, num_clients=4, rounds=6, local_steps=7,
          seed=config.seed))
  assert algorithm.schedule.max_staleness > 0
  chex.assert_trees_all_equal(algorithm.round_inputs(0, 6)['clock'],
                              generic.round_inputs(0, 6))
  facts = algorithm.summary_facts()
  del facts['client_memory_bytes']
  assert facts == generic.summary_facts()


def test_staleness_weights_match_a_hand_computation():
  """Eq. 4 per fc1-row and head segment, Eq. 5's normalised sum."""
  config = cos2p_config(clock=dict(client_seconds=(1.0, 1.0, 2.5, 1.0), mu=0.5))
  algorithm, state, data = build(config)
  rng = np.random.default_rng(0)
  noisy = lambda t: jax.tree.map(lambda p: np.asarray(p) + rng.normal(
      size=p.shape).astype(p.dtype), t)
  params = noisy(state.params)
  past = noisy(state.params)                  # w_{q−1}; w_{q−2} = w_{q−1} + ½
  # Clients 0..3 were dispatched with w_q, w_{q−1}, w_{q−2}, w_q (τ = 0, 1, 2).
  start = jax.tree.map(lambda p, h: np.stack([p, h, h + np.float32(0.5), p]),
                       params, past)
  state = state.replace(params=params, extras={'start': start})
  active = np.array([True, True, True, False])
  units = {k: rng.integers(0, 2, (4,) + s).astype(np.float32)
           for k, s in algorithm.model.unit_shapes().items()}
  delta = noisy(jax.tree.map(lambda p: np.zeros((4,) + p.shape, p.dtype),
                             params))
  inputs = jax.tree.map(lambda x: x[0], algorithm.round_inputs(2, 1))

  @jax.jit   # one program: op by op, every small op would compile on its own
  def weighted(state, data, inputs, delta, units):
    plans = algorithm.plan_round(state, data, inputs).replace(active=active)
    return (algorithm.staleness_weighted(state, plans, delta, units,
                                         plans.active),
            algorithm.start_models(state, plans))

  update, table = jax.device_get(weighted(state, data, inputs, delta, units))
  for kind, leaves, axes in (
      ('fc1', ('blocks_fc1_kernel', 'blocks_fc1_bias'), (2, 1)),
      ('heads', ('blocks_qkv_kernel', 'blocks_qkv_bias'), (3, 2))):
    for layer in range(2):
      for unit in range(units[kind].shape[2]):
        def entries(tree, k=None, layer=layer, unit=unit):
          return np.concatenate([np.take(
              (tree[name] if k is None else tree[name][k])[layer], unit,
              axis=axis - 1).ravel() for name, axis in zip(leaves, axes)])
        gammas = []
        for k in range(4):
          holds = units[kind][k, layer, unit] and active[k]
          drift = np.abs(entries(params) - entries(
              jax.tree.map(lambda t: t[k], table))).sum()
          size = entries(params).size
          gammas.append(holds * np.abs(entries(delta, k)).sum() /
                        (drift + size))
        gammas = np.array(gammas) / max(np.sum(gammas), 1e-30)
        expected = sum(g * entries(delta, k) for k, g in enumerate(gammas))
        np.testing.assert_allclose(entries(update), expected, rtol=2e-5,
                                   atol=1e-7)


def test_straight_through_gradients():
  """∂f(M)/∂I = f'(M)·σ'(I) ('identity') or f'(M)·P·σ'(I) ('probability')."""
  logits = jnp.array([-1.0, 0.3, 2.0, 0.0])
  weights = jnp.array([0.5, -2.0, 1.5, 3.0])
  key = jax.random.PRNGKey(3)
  for ste, factor in (('identity', 1.0), ('probability', None)):
    f = lambda i, ste=ste: jnp.sum(weights * budget_masks.straight_through(
        i, key, ste)**2)
    m = budget_masks.straight_through(logits, key, ste)
    np.testing.assert_array_equal(m, jax.random.bernoulli(
        key, jax.nn.sigmoid(logits)).astype(jnp.float32))
    p = jax.nn.sigmoid(logits)
    expected = 2 * weights * m * p * (1 - p) * (p if factor is None else 1.0)
    np.testing.assert_allclose(jax.grad(f)(logits), expected, rtol=1e-6)


def test_semi_async_rounds_resume_exactly_and_backends_agree(tmp_path):
  """Mask phase, self-distillation, stragglers: a run checkpointed while a
  straggler is in flight resumes bit-exactly, and vmap agrees with map."""
  config = cos2p_config(budgets=(0.25, 1.0), mask_rounds=2, lambda_kd=0.3,
                        clock=dict(client_seconds=(1.0, 2.2), mu=0.5,
                                   t_clk=0.1))
  config.num_clients = config.clients_per_round = 2
  config.rounds = 4
  algorithm, state, data = build(config)
  assert algorithm.schedule.dispatch_round[2, 1] < 2   # in flight at round 2
  runner = RoundRunner(algorithm, 'map')
  state, _ = runner.run(committed(state), data, 2)
  restored, _ = checkpoint_round_trip(str(tmp_path), 2, state, state)
  full, _ = runner.run(state, data, 2)
  resumed, _ = runner.run(restored, data, 2)
  chex.assert_trees_all_equal(resumed.params, full.params)
  chex.assert_trees_all_equal(resumed.clients, full.clients)
  algorithm, state, data = build(config)
  runner = RoundRunner(algorithm, 'vmap')
  state, _ = runner.run(*runner.run(state, data, 2)[:1], data, 2)
  chex.assert_trees_all_close(state.params, full.params, rtol=1e-5,
                              atol=1e-6)


@pytest.mark.parametrize('key,value,message', [
    ('clock.mu', 0.0, 'clock.mu must be in (0, 1]'),
    ('clock.mu', 1.5, 'clock.mu must be in (0, 1]'),
    ('clock.t_clk', -1.0, 'clock.t_clk must be ≥ 0'),
    ('cos2p.budgets', (0.5, 1.2), 'cos2p.budgets must be in (0, 1]'),
    ('cos2p.budgets', (0.01,), 'trainable blocks'),
    ('cos2p.device_types', ('tx2',), "unknown device type 'tx2'"),
    ('model_options', dict(TINY_VIT, heads=3), 'divisible by heads'),
    ('clients_per_round', 2, 'needs clients_per_round = num_clients'),
])
def test_bad_input_fails_with_one_line(key, value, message):
  config = cos2p_config()
  if key == 'cos2p.device_types':
    config.clock.client_seconds = ()
  section, _, name = key.rpartition('.')
  if key == 'model_options':
    config.model_options = value
  else:
    (config[section] if section else config)[name] = value
  with pytest.raises((ConfigError, ValueError), match=message.replace(
      '(', r'\(').replace(')', r'\)').replace('[', r'\[')) as info:
    config_lib.validate(config)
    build(config)
  assert '\n' not in str(info.value)


# ---- the paper's defaults; the clock charges the realised masks ----------------
def test_default_options_learn_masks():
  """Alg. 2 l.3–12: masks are always learned (App. E: Q̂ = 20 / 10 / 10).
  With default options every client leaves round 0 holding a learned mask
  of its window, not all of its units."""
  assert vit_engine.Cos2pOptions().mask_rounds == 20
  config = cos2p_config(budgets=(0.25,))              # R_w = 0.5, D = 1 of 2
  algorithm, state, data = build(config)
  state, _ = RoundRunner(algorithm, 'map').run(state, data, 1)
  kept = algorithm.kept_counts(state.clients['mask'])[:, 0]  # block 0
  units = [count for _, count in algorithm.model.unit_shapes().values()]
  assert (kept < np.asarray(units)).any(axis=1).all()


def block_units(masks: dict, client: int, layers: range) -> tuple:
  """Kept (heads, proj, fc1, fc2) of each layer of `masks` {kind: [N, L, U]}."""
  return tuple(tuple(int(np.sum(masks[k][client, layer]))
                     for k in ('heads', 'proj', 'fc1', 'fc2'))
               for layer in layers)


def one_round_chunks(runner, state, data, rounds):
  """(state after `rounds` one-round calls of `runner`, the clients' masks at
  each round's start)."""
  masks_before = []
  for _ in range(rounds):
    masks_before.append(jax.device_get(state.clients['mask']))
    state, _ = runner.run(state, data, 1)
  return state, masks_before


def charged_against_masks(algorithm, masks_before, charged):
  """Per dispatch (q, n): (charged seconds, the analytic cost of the units
  of the mask client n held at round q's start, the cost at width R_w)."""
  from fedjax_het.systems import vit_cost
  o, shape = algorithm.options, algorithm.cost_shape()
  rows = []
  for q, masks in enumerate(masks_before):
    for n in np.flatnonzero(algorithm.schedule.dispatched[q]):
      h, d = int(algorithm.offsets(np.int32(q))[n]), int(algorithm.depth[n])
      exits = int(np.sum(np.unique(algorithm.depth) <= d))
      common = dict(frozen=h, trainable=d, exits=exits,
                    train_embedding=h == 0, learns_mask=True)
      device = vit_cost.device(algorithm.device_types[n])
      seconds = lambda sub: np.float32(vit_cost.round_seconds(
          shape, sub, device, train_samples=int(algorithm.counts[n]),
          batch=algorithm.config.batch_size,
          steps=o.epochs * int(algorithm.batches[n]),
          mask_epochs=o.mask_epochs if q < o.mask_rounds else 0,
          bandwidth_bps=o.bandwidth_bps))
      realised = seconds(vit_cost.Submodel(
          blocks=block_units(masks, n, range(h, h + d)), **common))
      nominal = seconds(vit_cost.Submodel(
          width=vit_cost.Width.uniform(float(algorithm.width[n])), **common))
      rows.append((charged[q, n], realised, nominal))
  return np.asarray(rows)


def test_clock_charges_the_realised_masks(tmp_path):
  """The clock, RU and virtual time follow the submodel a client trains and
  uploads: every dispatch is charged the analytic cost of the units of the
  mask the client holds (chunks of one round), recorded in the state; from
  round Q̂ on that is the mask it trains and uploads, whose kept fraction is
  not R_w (Eq. 2's budget term is soft). A resumed run replays the clock."""
  config = cos2p_config(budgets=(0.25,), clock=dict(client_seconds=()),
                        device_types=('agx64',), mask_rounds=1)
  config.rounds = 3
  algorithm, state, data = build(config)
  state = committed(state)
  runner = RoundRunner(algorithm, 'map')
  masks_before, uploaded = [], []
  for q in range(3):
    masks_before.append(jax.device_get(state.clients['mask']))
    state, _ = runner.run(state, data, 1)
    uploaded.append(jax.device_get(state.clients['units']))
    if q == 1:
      restored, _ = checkpoint_round_trip(str(tmp_path), 2, state,
                                          build(config)[1])
  charged = np.asarray(state.extras['charged_seconds'])
  rows = charged_against_masks(algorithm, masks_before, charged)
  assert len(rows) == 3 * 4 and (rows[:, 0] > 0).all()
  np.testing.assert_array_equal(rows[:, 0], rows[:, 1])
  assert (rows[4:, 1] != rows[4:, 2]).all()     # realised ≠ R_w after round 0
  s = algorithm.schedule
  np.testing.assert_array_equal(s.update_seconds[:3][s.arrivals[:3]],
                                charged[:3][s.arrivals[:3]])
  for q in (1, 2):   # no mask phase: the charged mask is trained, uploaded
    for kind in algorithm.options.learned_units:
      np.testing.assert_array_equal(uploaded[q][kind], masks_before[q][kind])
  fresh, _, _ = build(config)
  resumed, _ = RoundRunner(fresh, 'map').run(restored, data, 1)
  np.testing.assert_array_equal(resumed.extras['charged_seconds'], charged)
  np.testing.assert_array_equal(fresh.schedule.end_time, s.end_time)


def test_a_mask_drawn_mid_chunk_is_charged_from_the_next_round():
  """Client 1 (budget 1, AGX32) is dispatched in mask round 0 and arrives
  in round 2, where it draws its mask: its round-3 dispatch is charged that
  mask, whether the rounds run one per call or all four in one (the runner
  then runs rounds [0], [1, 2], [3]: a mask is drawn in rounds 0 and 2).
  The two runs have the same charges, clock and masks, bit for bit, and
  the same parameters to float32 rounding (a scan of two rounds compiles
  to other fusions than two scans of one)."""
  config = cos2p_config(budgets=(0.25, 1.0), device_types=('agx64', 'agx32'),
                        mask_rounds=1, clock=dict(client_seconds=(), mu=0.5,
                                                  t_clk=0.0))
  config.num_clients = config.clients_per_round = 2
  config.rounds = 4
  algorithm, state, data = build(config)
  state, masks_before = one_round_chunks(RoundRunner(algorithm, 'map'), state,
                                         data, 4)
  charged = np.asarray(state.extras['charged_seconds'])
  s = algorithm.schedule
  np.testing.assert_array_equal(algorithm.draws_masks(s),
                                [[1, 0], [0, 0], [0, 1], [0, 0]])
  np.testing.assert_array_equal(s.dispatched[3], [False, True])
  rows = charged_against_masks(algorithm, masks_before, charged)
  np.testing.assert_array_equal(rows[:, 0], rows[:, 1])
  late = block_units(masks_before[3], 1, range(2))
  assert late != block_units(masks_before[2], 1, range(2))   # drawn in round 2
  assert rows[-1, 0] != charged[0, 1]      # not charged the units it held

  chunked, chunked_state, _ = build(config)
  chunked_state, metrics = RoundRunner(chunked, 'map').run(chunked_state,
                                                           data, 4)
  assert metrics['train_loss'].shape == (4,)
  np.testing.assert_array_equal(chunked_state.extras['charged_seconds'],
                                charged)
  np.testing.assert_array_equal(chunked.schedule.end_time, s.end_time)
  chex.assert_trees_all_equal(chunked_state.clients['mask'],
                              state.clients['mask'])
  chex.assert_trees_all_close(chunked_state.params, state.params, rtol=1e-5,
                              atol=1e-8)


def test_time_budget_fit_trains_the_mask_phases(monkeypatch):
  """`cos2p_setup.train_mask_phases` leaves the algorithm with the clock a
  run of the config follows (every mask it draws charged), not the one
  projected at width R_w before training."""
  setup = load_script('experiments/cos2p/cos2p_setup.py', monkeypatch)
  config = cos2p_config(budgets=(0.25, 1.0), device_types=('agx64', 'agx32'),
                        mask_rounds=2, clock=dict(client_seconds=(), mu=0.5,
                                                  t_clk=0.0))
  config.num_clients = config.clients_per_round = 2
  config.rounds = 6
  split, _, params, fitted = run.build_experiment(config)
  projected = fitted.schedule.end_time
  setup.train_mask_phases(config, fitted, params, split.train)
  assert (fitted.schedule.end_time[3:] != projected[3:]).all()

  algorithm, state, data = build(config)
  run.make_runner(config, algorithm).run(state, data, 6)
  np.testing.assert_array_equal(algorithm.schedule.end_time,
                                fitted.schedule.end_time)


def test_no_mask_rounds_is_charged_full_width():
  """Q̂ = 0 learns no mask: clients train their windows at full width, and
  the clock charges full width, not R_w."""
  config = cos2p_config(budgets=(0.25,), clock=dict(client_seconds=()),
                        device_types=('agx64',), mask_rounds=0)
  config.rounds = 2
  algorithm, state, data = build(config)
  state, masks_before = one_round_chunks(RoundRunner(algorithm, 'map'), state,
                                         data, 2)
  for kind in algorithm.options.learned_units:
    assert (np.asarray(state.clients['units'][kind]) == 1).all()
  rows = charged_against_masks(algorithm, masks_before,
                               np.asarray(state.extras['charged_seconds']))
  np.testing.assert_array_equal(rows[:, 0], rows[:, 1])   # all units
  assert (rows[:, 0] > rows[:, 2]).all()


def test_self_distillation_is_eq3_as_written(monkeypatch):
  """Eq. 3: KL_i = Σ_j σ(ŷ_i/t)_j ln(σ(ŷ_i/t)_j / σ(ŷ_c/t)_j), i.e.
  KL(student‖teacher), by default and in the paper-scale configs."""
  from fedjax_het.methods import self_distillation
  assert vit_engine.Cos2pOptions().kd_direction == 'paper'
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(3, 5, 4)).astype(np.float32)
  labels = rng.integers(0, 4, 5)
  t = 3.0
  _, kd = self_distillation.exit_terms(jnp.asarray(logits),
                                       jnp.asarray(labels), 2, t, 'paper')
  soft = lambda z: np.exp(z / t) / np.exp(z / t).sum(-1, keepdims=True)
  student, teacher = soft(logits), soft(logits[2])[None]
  expected = t**2 * (student * np.log(student / teacher)).sum(-1).mean(-1)
  np.testing.assert_allclose(kd, expected, rtol=1e-5, atol=1e-7)
  reverse = t**2 * (teacher * np.log(teacher / student)).sum(-1).mean(-1)
  assert not np.allclose(kd[:2], reverse[:2], rtol=1e-3)
  for name in ('e1_vit_tiny_imagenet200', 'e2_vit_base_imagenet300',
               'e3_vit_base_ext_imagenet300'):
    config = load_script(f'experiments/cos2p/{name}.py',
                         monkeypatch).get_config()
    assert config.cos2p.kd_direction == 'paper'


def test_no_vit_baseline_inherits_cos2p():
  """The ViT baselines share the engine (`vit_engine.VitOnClock`), not Co-S²P:
  none of them is a `Cos2p` with Co-S²P's behaviour undone."""
  from fedjax_het.methods import ALGORITHMS
  from fedjax_het.methods.cos2p.cos2p import Cos2p
  vit_methods = {name: cls for name, cls in ALGORITHMS.items()
                 if issubclass(cls, vit_engine.VitOnClock)}
  assert set(vit_methods) == {
      'cos2p', 'vit_fedavg', 'vit_fedrolex', 'ram_fed', 'fedpm', 'prunefl',
      'vit_fedavg_platon', 'vit_fedavg_adavit', 'vit_fedavg_qvit'}
  assert [name for name, cls in vit_methods.items()
          if issubclass(cls, Cos2p)] == ['cos2p']
