"""Every registered method × every kind of heterogeneity, run: a cell that
config validation accepts is effective (the part changes the trained model;
its neutral setting leaves it bit for bit as without it), or refused in one
line when the method is built. Zero silent cells, zero crashes.

`test_scoped_config.test_every_method_reads_a_part_or_refuses_it_in_one_line`
checks the same matrix at validation only (a method whose `option_groups`
hold the section accepts it, the others refuse it in one line); this file
runs what validation accepts, so "accepted and silently ignored" fails here.
The cells are derived from `ALGORITHMS`, `PARTS` and `config.validate` at
collection time, never listed by hand: a newly accepted cell is exercised.

Each cell runs its method for `ROUNDS` rounds on a tiny federation of
digits (`tiny_config`: an MLP, a split LeNet-5 for the split methods, a
2-block ViT for the Co-S²P family) three ways: without the part (shared by
all cells of a method), with it ON (`ON`: the kind's key from `PARTS`, with
companion values that make the effect certain) and at its neutral setting
(`NEUTRAL`, where one is expressible other than by the defaults and is the
method's run without the part, `neutral_applies`; the neutral settings of a
method's kinds share one run, but those of `NEUTRAL_ALONE`). The final parameters are
compared directly: ON must move some parameter by more than float rounding
(`EFFECT`), the neutral run must equal the run without the part bit for bit.

The runs are in-process (`run.build_experiment` and the run's `RoundRunner`,
no workdir), all of them in child processes, once per session (`matrix`,
`script_utils.MATRIX_CHILDREN`), in two groups (`REPORTS`), each compiled at
its own flags and taken a method at a time from its own queue
(`claimed_methods`):

- 'exact' (one child): each method without a part and its neutral runs,
  compared bit for bit, at XLA:CPU's fusion emitters: bit for bit across two
  programs holds at a user's flags, not always at the suite's elemental
  emitters (HeteroFL's neutral q, T and clock move 1 ulp there);
- 'pinned' (two children): each method without a part again, its cells ON
  compared with it, and the pins, at the suite's flags (elemental emitters:
  about half the compile time of the fusion emitters, and an effect is
  orders above a last-bit change).

The same runs pin every method's first rounds across engine refactors, as
`test_pinned.py` pins its runs: the final parameters of each method without
a part (every registered method: the paper experiments' mechanisms, Co-S²P's
ViT baselines and FSL_OC included), of each accepted cell ON and of each ViT
method under unequal budgets (`PAPER`), by their hash on the host they were
recorded on and by summary statistics on every host (`pinned_matrix.json`;
`python tests/test_heterogeneity_matrix.py --record` adds what it does not
hold yet).

`python tests/test_heterogeneity_matrix.py --markdown` prints the whole
matrix (method × kind → effective / refused / SILENT, a neutral setting
that is not neutral, the CPU seconds per method) as a markdown table from
the same functions.
"""
import collections
import concurrent.futures
import functools
import json
import os
import pathlib
import sys
import tempfile
import time

import jax
import numpy as np
import pytest

from fedjax_het import config as config_lib
from fedjax_het import run
from fedjax_het.methods import ALGORITHMS
from fedjax_het.options import ConfigError
from engine_utils import TINY_VIT
from script_utils import (MATRIX_CHILDREN, add_test_flags, child_report,
                          reads_a_child, run_child)
from test_pinned import codegen_host, params_hash
from test_scoped_config import PARTS, part_config

NUM_CLIENTS = 6   # K = N: the clock parts dispatch every client (Alg. 1)
LOCAL_STEPS = 2
ROUNDS = 2

# Companions of the AirComp channel: a low SNR, so that the channel noise
# certainly moves float32 parameters (at the default 30/40 dB it is ~1e-4 of
# an update), and a short beamformer solve (compile time).
_AIRCOMP = {'hierarchy.snr_db_slow': -10.0, 'hierarchy.snr_db_fast': 0.0,
            'hierarchy.beamformer_sca_steps': 2,
            'hierarchy.beamformer_inner_steps': 5}

# The part ON, per kind: the key and value of `PARTS`, plus what makes the
# effect certain in a 2-round run of 6 clients (draws are seeded, so a
# passing cell always passes; the values keep it far from luck).
ON = {
    # PARTS's 'bernoulli' keeps available_p at its default 1.0: every client
    # online, which is the neutral setting. P(online) = 0.3 leaves some of
    # the 6 clients offline in a round with probability 1 − 0.3⁶ ≈ 1.
    'availability': {'systems.availability': 'bernoulli',
                     'systems.available_p': (0.3,)},
    # q = 0.5: P(no upload lost in 2 rounds of 6) = 0.5¹² ≈ 2e-4.
    'lossy links': {'systems.q': (0.5,)},
    # Half the clients take 1 step instead of LOCAL_STEPS (one value per
    # client; PARTS's (1, 2) is for two clients).
    'unequal work': {'systems.local_work': (1,) * (NUM_CLIENTS // 2) + (
        LOCAL_STEPS,) * (NUM_CLIENTS - NUM_CLIENTS // 2)},
    # A link that is on fails with probability 0.5 and an off one comes back
    # with 0.3: some upload of the 12 is lost with probability ≈ 1.
    'Markov links': {'systems.model': 'markov', 'systems.markov_fail': (0.5,),
                     'systems.markov_recover': (0.3,)},
    'virtual clock': {'clock.mu': 0.25},       # ⌈μN⌉ = 2 of 6 per round
    # Two edge rounds besides the cells: with one edge round, equal cells
    # and FedAvg's weights the cloud mean is the flat mean to rounding
    # (test_cells_part.test_two_cells_one_edge_round_is_flat_fedavg), so
    # three cells alone need not change FedAvg's model.
    'cells': {'hierarchy.num_cells': 3, 'hierarchy.edge_rounds': 2},
    'AirComp channel': {'hierarchy.edge_channel': 'aircomp', **_AIRCOMP},
    # A clip norm far below the tiny runs' update norms, and noise.
    'DP': {'dp.clip_norm': 1e-3, 'dp.noise_multiplier': 1.0},
    # 8 bits over ±1: a step of 2^−7, far above float32 rounding.
    'secure aggregation': {'secagg.bits': 8, 'secagg.clip_range': 1.0},
    # K = 2 of the N = 6 clients a server step with C = 3 in flight: the
    # third client dispatched with version 0 arrives after step 0, stale
    # (τ = 1 ≤ τ_max), and a step takes 2 updates where a round took 6.
    'buffered clock': {'clock.buffer_size': 2, 'clock.concurrency': 3,
                       'clock.tau_max': 1, 'clients_per_round': 2},
}

# The neutral setting of each kind, set to values other than the defaults
# (so that the part is on); None where the neutral setting is only
# expressible as the defaults, which are the run without the part: there
# the comparison could not fail and is not made.
NEUTRAL = {
    'availability': {'systems.availability': 'bernoulli',
                     'systems.available_p': (1.0,)},
    'lossy links': {'systems.q': (0.0,) * NUM_CLIENTS},
    'unequal work': {'systems.local_work': (LOCAL_STEPS,) * NUM_CLIENTS},
    # Links that never fail: every link stays on from round 0.
    'Markov links': {'systems.model': 'markov', 'systems.markov_fail': (0.0,)},
    # μ = 1, T_clk = 0, no staleness weight: every round is FedAvg's with
    # K = N (parts/clock.py), Co-S²P's synchronous; the jitter only moves
    # the virtual times.
    'virtual clock': {'clock.mu': 1.0, 'clock.t_clk': 0.0,
                      'clock.jitter': 0.5},
    # One cell, one edge round and OMA are the defaults (an explicit 1 for
    # num_cells / edge_rounds resolves to the same config), and any other
    # hierarchy key set while the part is off is refused in one line
    # (parts.cells.refuse_unread_keys): test_cells_part checks the explicit
    # defaults.
    'cells': None,
    # OMA is the default; noiseless AirComp equals OMA to rounding only
    # (test_cells_part.test_noiseless_aircomp_equals_oma_and_...).
    'AirComp channel': None,
    # No clipping (S = ∞) and no noise (σ = 0, the default): the part on,
    # every update as it is.
    'DP': {'dp.clip_norm': float('inf')},
    # Enough bits equal the exact sum within the quantisation bound only,
    # not bit for bit (test_secagg.test_neutral_setting_is_the_run_without_the_part_within_the_bound).
    'secure aggregation': None,
    # C = K = N with the constant weight and τ_max = 0 (no update is stale):
    # Alg. 1 at μ = 1, T_clk = 0 (parts/clock.py), which is the run without
    # the part where the method's own run is off the clock; the jitter only
    # moves the virtual times. Not for a method always on the clock
    # (`neutral_applies`).
    'buffered clock': {'clock.buffer_size': NUM_CLIENTS,
                       'clock.concurrency': NUM_CLIENTS, 'clock.tau_max': 0,
                       'clock.jitter': 0.5},
}
assert set(ON) == set(NEUTRAL) == set(PARTS)
# The ViT methods' equal work is every client's E = cos2p.epochs (1) epochs,
# not local_steps steps (`methods/cos2p/vit_engine.work_steps`).
VIT_EQUAL_WORK = {'systems.work_unit': 'epochs',
                  'systems.local_work': (1,) * NUM_CLIENTS}

# The ViT methods' own width rules (rolling, random or pruned units, learned
# masks) act on clients below the full budget only: at the default budget 1
# the runs without a part of vit_fedavg, vit_fedrolex, ram_fed, prunefl and
# PLATON are one run bit for bit. Each ViT method is also pinned under these
# budgets ('method|budgets', `pinned_runs`).
PAPER = {'budgets': {'cos2p.budgets': (0.25, 0.25, 0.5, 0.5, 1.0, 1.0)}}
SETTINGS = {'on': ON, 'neutral': NEUTRAL, 'paper': PAPER}
for _kind, (_section, _name, _) in PARTS.items():
  assert f'{_section}.{_name}' in ON[_kind], _kind


def accepted(algorithm: str, kind: str) -> bool:
  """Whether config validation accepts `kind` (its `PARTS` value) for
  `algorithm` (with its `COMPANIONS`); a refusal is test_scoped_config's to
  check."""
  try:
    config_lib.validate(part_config(algorithm, kind))
  except ConfigError:
    return False
  return True


def accepted_cells(methods=tuple(sorted(ALGORITHMS))
                   ) -> list[tuple[str, str]]:
  return [(algorithm, kind) for algorithm in methods
          for kind in PARTS if accepted(algorithm, kind)]


def tiny_config(algorithm: str):
  """The quickest config of `algorithm`'s family: digits, 6 clients, all of
  them every round, 2 local steps of 8 examples, 2 rounds; an 8-unit MLP
  (capacities 1/2 and 1 for the submodel methods, 3 layers with exits for
  ScaleFL), the split LeNet-5 for split learning, a 2-block ViT for the
  Co-S²P family (with AdaViT's decision networks where the method reads
  them)."""
  method = ALGORITHMS[algorithm]
  sections = {group.key for group in method.option_groups}
  config = config_lib.base_config()
  config.update(dict(algorithm=algorithm, dataset='digits', partition='iid',
                     num_clients=NUM_CLIENTS, clients_per_round=NUM_CLIENTS,
                     local_steps=LOCAL_STEPS, batch_size=8, client_lr=0.1,
                     rounds=ROUNDS, progress=False))
  if 'cos2p' in sections:
    config.model = 'vit'
    config.model_options = dict(TINY_VIT)
    if getattr(method, 'reads_decisions', False):  # AdaViT's gates
      config.model_options['decisions'] = True
  elif 'split' in sections:
    config.model = 'split_lenet5'
    config.model_options = {}
  elif getattr(method, 'reads_exits', False):
    config.model_options = {'hidden': (8, 8, 8), 'exits': True}
  else:
    config.model_options = {'hidden': (8,)}
  if method.supports_capacities:
    config.capacities = (0.5, 1.0)
  return config


def with_values(config, values: dict):
  """`config` with `values` {'section.key' or a core 'key': value} set."""
  config = config.copy_and_resolve_references()
  for key, value in values.items():
    if '.' in key:
      section, name = key.split('.')
      config[section][name] = value
    else:
      config[key] = value
  return config


class Refused(Exception):
  """A one-line ConfigError raised while the run was validated or built."""


# What a method trains besides its parameters, compared with them (the pins
# hold the parameters): FedPM trains its mask posterior θ (`extras['p']`)
# over weights that stay at their initialisation.
TRAINED_EXTRAS = {'fedpm': 'p'}


def final_params(config):
  """{'params': the parameters after `config.rounds` rounds, and the
  method's `TRAINED_EXTRAS` under their key}, run in-process as `run.train`
  runs them (no evaluation, no workdir). A ConfigError (or the ValueError
  `run.train` turns into one) while validating or building is `Refused`;
  anything else propagates."""
  try:
    config = config_lib.resolve(config)
    split, _, params, algorithm = run.build_experiment(config)
    state = algorithm.init(params, jax.random.PRNGKey(config.seed))
    runner = run.make_runner(config, algorithm)
  except (ConfigError, ValueError) as e:
    raise Refused(str(e)) from e
  state, _ = runner.run(state, split.train.to_device(), config.rounds)
  trained = {'params': state.params}
  if config.algorithm in TRAINED_EXTRAS:
    key = TRAINED_EXTRAS[config.algorithm]
    trained[key] = state.extras[key]
  trained = jax.device_get(trained)
  for leaf in jax.tree.leaves(trained):
    assert np.all(np.isfinite(leaf)), f'{config.algorithm}: not finite'
  return trained


def neutral_kinds(algorithm: str, kind: str) -> tuple[str, ...]:
  """The kinds whose NEUTRAL settings share `kind`'s neutral run: every
  accepted kind of `algorithm` with a neutral setting, set together (each
  part on at its neutral values: equal parameters show each of them
  neutral, and cost one compile instead of one per kind), except those in
  NEUTRAL_ALONE, run each on its own."""
  if kind in NEUTRAL_ALONE:
    return (kind,)
  return tuple(k for k in PARTS if NEUTRAL[k] is not None and
               k not in NEUTRAL_ALONE and accepted(algorithm, k))


# DP runs its neutral setting alone: the virtual clock refuses it, so it
# cannot share the clock's run. So does the buffered clock: it is the same
# clock part in another mode (with it Alg. 1's neutral run would not be
# Alg. 1's), which refuses DP and availability too.
NEUTRAL_ALONE = ('DP', 'buffered clock')


def neutral_applies(algorithm: str, kind: str) -> bool:
  """Whether `kind`'s neutral setting is `algorithm`'s run without the
  part: `kind` has one (NEUTRAL), and for the buffered clock, whose neutral
  setting is Alg. 1 at μ = 1, the method's own run is off the clock; a
  method always on the clock (`always_on_clock`: the ViT methods, Co-S²P at
  its μ) runs without the part on its own clock, which C = K = N is not."""
  if NEUTRAL[kind] is None:
    return False
  return not (kind == 'buffered clock' and
              ALGORITHMS[algorithm].always_on_clock)


@functools.lru_cache(maxsize=None)
def run_with(algorithm: str, kinds: tuple[str, ...] = (),
             setting: str = 'on'):
  """Final params of `algorithm` with the values of `kinds` in
  `SETTINGS[setting]` set (`ON`, `NEUTRAL` or `PAPER`), () without any part;
  cached, so the run without a part is shared by a method's cells and a
  neutral run by its kinds."""
  config = tiny_config(algorithm)
  for kind in kinds:
    values = SETTINGS[setting][kind]
    if (setting, kind) == ('neutral', 'unequal work') and config.model == 'vit':
      values = VIT_EQUAL_WORK
    config = with_values(config, values)
  started = time.process_time()
  try:
    return final_params(config)
  finally:
    CPU_SECONDS[algorithm] += time.process_time() - started


# CPU seconds of each method's runs (build, compile, rounds), for the report.
CPU_SECONDS = collections.Counter()


def max_change(a, b) -> float:
  """The largest |a − b| over all leaves, relative to max(1, |b|)."""
  return max(float(np.max(np.abs(x - y) / np.maximum(1.0, np.abs(y))))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def bit_equal(a, b) -> bool:
  return all(np.array_equal(x, y)
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


# A part is effective when it moves some parameter by more than float32
# rounding could (a reordered sum moves the last bits only).
EFFECT = 1e-5


def on_report(algorithm: str, kind: str) -> dict:
  """An accepted cell ON: 'verdict' 'effective' (the part moves some
  parameter by more than EFFECT, by 'change', the largest relative change),
  'SILENT', or 'refused' (a ConfigError when the method is built, its
  message in 'detail')."""
  try:
    on = run_with(algorithm, (kind,))
  except Refused as e:
    return {'verdict': 'refused', 'detail': str(e)}
  change = max_change(on, run_with(algorithm))
  return {'verdict': 'effective' if change > EFFECT else 'SILENT',
          'change': change}


def neutral_report(algorithm: str, kind: str) -> dict:
  """An accepted cell at its neutral setting (NEUTRAL[kind] not None): the
  kinds of its run, whether it equals the run without the part bit for
  bit, the largest relative difference; or the one-line refusal."""
  kinds = neutral_kinds(algorithm, kind)
  try:
    neutral = run_with(algorithm, kinds, 'neutral')
  except Refused as e:
    return {'kinds': list(kinds), 'refused': str(e)}
  without = run_with(algorithm)
  return {'kinds': list(kinds), 'bit_equal': bit_equal(neutral, without),
          'difference': max_change(neutral, without)}


def summary(params) -> dict:
  """What a run's final parameters are pinned by on every host: their
  number, sum, sum of absolute values, sum of squares and largest absolute
  value (float64 over every leaf)."""
  values = np.concatenate([np.ravel(np.asarray(leaf, np.float64))
                           for leaf in jax.tree.leaves(params)])
  return {'size': int(values.size), 'sum': float(values.sum()),
          'sum_abs': float(np.abs(values).sum()),
          'sum_sq': float(np.square(values).sum()),
          'max_abs': float(np.abs(values).max())}


def pinned_runs(methods) -> dict:
  """{run name: {'hash', 'summary'}} of every run the matrix pins of
  `methods`: each method without a part (name 'method': every method's
  first rounds, the paper experiments' included) and each accepted cell ON
  that the method builds ('method|kind'), and each ViT method under
  `PAPER`'s budgets ('method|budgets'). The neutral runs equal their
  method's run without a part bit for bit (the matrix test), so they are
  pinned through it."""
  runs = {algorithm: run_with(algorithm) for algorithm in methods}
  for algorithm in methods:
    if tiny_config(algorithm).model == 'vit':
      runs[f'{algorithm}|budgets'] = run_with(algorithm, ('budgets',), 'paper')
  for algorithm, kind in accepted_cells(methods):
    try:
      runs[f'{algorithm}|{kind}'] = run_with(algorithm, (kind,))
    except Refused:
      continue
  return {name: {'hash': params_hash(run['params']),
                 'summary': summary(run['params'])}
          for name, run in runs.items()}


# What each group of children reports (module docstring): the neutral runs
# at the fusion emitters, the cells ON and the pins at the suite's flags.
REPORTS = {'exact': ('neutral',), 'pinned': ('on', 'pins')}


def method_report(algorithm: str, group: str | None = None) -> dict:
  """The report of `algorithm`'s runs in `group` (`REPORTS`; None: both):
  'on' {'method|kind': on_report} of every accepted cell, 'neutral'
  {'method|kind': neutral_report} of those whose neutral setting is the run
  without the part (`neutral_applies`), 'pins' (`pinned_runs`), and
  'cpu_seconds' {method: CPU seconds of its runs}."""
  cells = accepted_cells((algorithm,))
  reports = {
      'on': lambda: {f'{a}|{k}': on_report(a, k) for a, k in cells},
      'neutral': lambda: {f'{a}|{k}': neutral_report(a, k) for a, k in cells
                          if neutral_applies(a, k)},
      'pins': lambda: pinned_runs((algorithm,))}
  keys = REPORTS[group] if group else tuple(reports)
  report = {key: reports[key]() for key in keys}
  return {**report, 'cpu_seconds': {algorithm: CPU_SECONDS[algorithm]}}


def matrix_report(methods=tuple(sorted(ALGORITHMS)), group=None) -> dict:
  """The reports of `methods` (an iterable, read once) in `group`, merged."""
  return merged([method_report(algorithm, group) for algorithm in methods])


def costliest_first() -> list[str]:
  """The methods, the costliest first, so that the cheap ones even out the
  children's ends: by model (a ViT method's runs took 42-85 s of CPU, the
  split LeNet-5's 4-39 s, the MLPs' 17-49 s), then by the number of cells
  they run."""
  model_cost = {'vit': 0, 'split_lenet5': 1}
  return sorted(ALGORITHMS, key=lambda algorithm: (
      model_cost.get(tiny_config(algorithm).model, 2),
      -len(accepted_cells((algorithm,))), algorithm))


def claimed_methods(claims: pathlib.Path):
  """Yields the methods of `costliest_first()` that this process claims, one
  at a time, each once its predecessor has run: a method is claimed by
  creating the file `claims/method`, which fails where another child of
  the session created it first."""
  claims.mkdir(exist_ok=True)
  for algorithm in costliest_first():
    try:
      os.close(os.open(claims / algorithm, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
      continue
    yield algorithm


REPORT_KEYS = ('on', 'neutral', 'pins', 'cpu_seconds')


def merged(reports) -> dict:
  """The reports (`method_report`s, children's) as one: their dicts joined,
  the CPU seconds of a method summed over the groups that ran it."""
  joined = {key: {} for key in REPORT_KEYS}
  for report in reports:
    for key, values in report.items():
      for name, value in values.items():
        joined[key][name] = (joined[key].get(name, 0) + value
                             if key == 'cpu_seconds' else value)
  return joined


@pytest.fixture(scope='session')
def matrix(tmp_path_factory, worker_id):
  """`matrix_report()` from the child processes (`python
  test_heterogeneity_matrix.py --queue GROUP SCRATCH`,
  `script_utils.MATRIX_CHILDREN`), once per session: the neutral runs at
  XLA:CPU's fusion emitters, the cells ON and the pins at the suite's flags
  (module docstring)."""
  return merged([child_report(tmp_path_factory, worker_id, name)
                 for name in MATRIX_CHILDREN])


@pytest.mark.parametrize('algorithm,kind', accepted_cells())
def test_an_accepted_part_changes_the_model_and_its_neutral_setting_does_not(
    matrix, algorithm, kind):
  cell = matrix['on'][f'{algorithm}|{kind}']
  if cell['verdict'] == 'refused':  # one line when the method is built
    assert cell['detail'] and '\n' not in cell['detail'], cell['detail']
    return
  assert cell['verdict'] == 'effective', (
      f'{algorithm} accepts {ON[kind]} and trains the same model: the part '
      f'is ignored (largest relative change {cell["change"]:.2g})')
  if not neutral_applies(algorithm, kind):
    return   # the neutral setting is the defaults, or not the run without it
  cell = matrix['neutral'][f'{algorithm}|{kind}']
  settings = [NEUTRAL[k] for k in cell['kinds']]
  assert 'refused' not in cell, (
      f'{algorithm} runs under {ON[kind]} but refuses the neutral settings '
      f'{settings}: {cell.get("refused")}')
  assert cell['bit_equal'], (
      f'{algorithm} at the neutral settings {settings} is not the run '
      f'without them bit for bit: largest relative difference '
      f'{cell["difference"]:.2g}')


def test_the_tests_reading_children_run_last(request):
  """conftest.py orders the session: no test reading a child's report runs
  before one that does not (their children have the cycles the others
  leave until then)."""
  reads = [reads_a_child(item.fixturenames) for item in request.session.items]
  assert reads == sorted(reads)


def test_every_kind_is_accepted_by_some_method():
  """The matrix runs something in every column."""
  assert {kind for _, kind in accepted_cells()} == set(PARTS)


def test_the_children_claim_every_method_once(tmp_path):
  """Two children taking turns on one queue run every method, each method
  in one of them, the costliest first."""
  first, second = claimed_methods(tmp_path), claimed_methods(tmp_path)
  taken = [next(first), next(second), next(second), next(first)]
  taken += list(first) + list(second)   # first takes the rest
  assert taken == costliest_first() and len(set(taken)) == len(ALGORITHMS)
  assert tiny_config(taken[0]).model == 'vit'
  assert tiny_config(taken[-1]).model == 'mlp'


# ---- pins: the matrix's runs held across engine refactors ------------------
# `pinned_matrix.json`: 'hashes' {host: {run: params_hash}}, bit for bit on
# the host they were recorded on (`test_pinned.codegen_host`; the 'pinned'
# children's flags), and 'summaries' {run: summary}, compared on every host to
# SUMMARY_RTOL of their scale (but the ViT methods', `chaotic`). Recorded
# by `python tests/test_heterogeneity_matrix.py --record`, which adds only
# what the file does not hold yet (this host's hashes, new runs' summaries):
# a pinned value is never overwritten; a change is a behaviour change,
# explained in the commit and re-pinned by hand.
# Re-pinned, explained: vit_fedavg_platon and vit_fedavg_platon|budgets
# (723cb4caf9450303 -> d1f84faaab03e4df, e83ea5c9e8a55d72 -> c27443533c622803)
# when a client's steps became a lax.while_loop of its own count: the same
# code with the loop written back as a scan over num_steps freezing finished
# clients gives the old hash, so the loop's compiled form alone moved the
# last bits, which PLATON's per-step top-k of its unit scores turns into
# other units (every other pinned run, the 8 other ViT methods' included,
# kept its hash).
# Re-pinned, explained: every hash, and the ViT methods' summaries, when the
# cells ON and the pins moved to the 'pinned' children at the suite's
# elemental emitters (they ran at the fusion emitters before): the run of
# the old children just before, on this host, reproduced every pinned hash,
# and the other summaries were kept, so the new flags are held to them.
PINS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                    'pinned_matrix.json')
RECORD = 'python tests/test_heterogeneity_matrix.py --record'

# A summary statistic may move by SUMMARY_RTOL of its scale (the sum of
# absolute values for the sums, the sum of squares, the largest absolute
# value): every parameter moved by that much relative to itself moves it by
# at most that. Compiled at default flags (LLVM level 2) instead of the
# child's, the MLP and split LeNet-5 runs move by at most 6e-9 of it (every
# hash changes); what a run computes, by orders more.
SUMMARY_RTOL = 1e-6


def chaotic(algorithm: str) -> str | None:
  """Why `algorithm`'s summaries cannot be compared off the pinning host,
  or None. Its 2-round runs on the 2-block ViT amplify rounding: initial
  parameters moved by 1 ulp move vit_fedavg's final sum by 1.1e-3 of its
  scale and its sum of squares by 0.8%; compiled at default flags, the
  ViT methods' summaries move by 2-6% (the MLP runs: 8e-8 and 6e-9)."""
  if tiny_config(algorithm).model != 'vit':
    return None
  return (f'{algorithm} on the 2-block ViT moves its summary by up to 6% '
          'under last-bit changes (another compilation or host): it is '
          'pinned by hash on the hosts that recorded it')


def load_pins() -> dict:
  with open(PINS) as f:
    return json.load(f)


def method_runs(runs: dict, algorithm: str) -> set:
  """The names in `runs` of `algorithm`'s runs (itself and its cells)."""
  return {name for name in runs if name.split('|')[0] == algorithm}


def summary_mismatch(got: dict, pinned: dict) -> str | None:
  """The first statistic of `got` further than SUMMARY_RTOL of its scale
  from `pinned`, described; None when all are within it."""
  if got['size'] != pinned['size']:
    return f'{got["size"]} parameters, pinned {pinned["size"]}'
  scale = {'sum': 'sum_abs', 'sum_abs': 'sum_abs', 'sum_sq': 'sum_sq',
           'max_abs': 'max_abs'}
  for key, by in scale.items():
    if abs(got[key] - pinned[key]) > SUMMARY_RTOL * pinned[by]:
      return f'{key} {got[key]!r}, pinned {pinned[key]!r}'
  return None


@pytest.mark.parametrize('algorithm', sorted(ALGORITHMS))
def test_the_matrix_runs_keep_their_pinned_summaries(matrix, algorithm):
  """On every host: the method's runs are the pinned ones, each with its
  pinned summary to SUMMARY_RTOL (the ViT methods' on the pinning host
  only, `chaotic`)."""
  pins = load_pins()
  if chaotic(algorithm) and codegen_host() not in pins['hashes']:
    pytest.skip(chaotic(algorithm))
  pinned = pins['summaries']
  runs = method_runs(matrix['pins'], algorithm)
  assert runs <= set(pinned), (
      f'not pinned: {sorted(runs - set(pinned))}; record them with {RECORD}')
  assert method_runs(pinned, algorithm) <= runs, (
      f'pinned but no longer run: '
      f'{sorted(method_runs(pinned, algorithm) - runs)}')
  moved = {name: summary_mismatch(matrix['pins'][name]['summary'],
                                  pinned[name]) for name in sorted(runs)}
  moved = {name: why for name, why in moved.items() if why}
  assert not moved, f'final parameters moved: {moved}'


@pytest.mark.parametrize('algorithm', sorted(ALGORITHMS))
def test_the_matrix_runs_are_bit_identical_on_the_pinning_host(matrix,
                                                               algorithm):
  host = codegen_host()
  hashes = load_pins()['hashes']
  if host not in hashes:
    pytest.skip(f'the matrix was not pinned on this host ({host}); hosts '
                f'recorded: {"; ".join(hashes)}')
  runs = method_runs(matrix['pins'], algorithm)
  assert runs <= set(hashes[host]), (
      f'not pinned on this host: {sorted(runs - set(hashes[host]))}; '
      f'record them with {RECORD}')
  changed = [name for name in sorted(runs)
             if matrix['pins'][name]['hash'] != hashes[host][name]]
  assert not changed, f'final parameters not bit-identical: {changed}'


def record(pins: dict, report: dict) -> list[str]:
  """Adds to `pins` this host's hashes and the summaries of the runs of
  `report` (`matrix_report`) it does not hold yet; returns what it added."""
  host = codegen_host()
  hashes = pins.setdefault('hashes', {}).setdefault(host, {})
  summaries = pins.setdefault('summaries', {})
  added = []
  for name, run in report['pins'].items():
    if name not in hashes:
      hashes[name] = run['hash']
      added.append(f'{host}: {name}')
    if name not in summaries:
      summaries[name] = run['summary']
      added.append(f'summary: {name}')
  return added


def record_pins() -> None:
  """--record: runs the children as a test session does (`run_child`, at
  their flags, side by side) and adds what `pinned_matrix.json` does not
  hold yet."""
  add_test_flags()
  with tempfile.TemporaryDirectory() as scratch, \
      concurrent.futures.ThreadPoolExecutor(len(MATRIX_CHILDREN)) as pool:
    report = merged([json.loads(line) for line in pool.map(
        lambda name: run_child(name, pathlib.Path(scratch) / name, None),
        MATRIX_CHILDREN)])
  pins = load_pins() if os.path.exists(PINS) else {}
  added = record(pins, report)
  with open(PINS, 'w') as f:
    json.dump(pins, f, indent=1, sort_keys=True)
    f.write('\n')
  print('\n'.join(added) or 'nothing new to pin')


def markdown_matrix() -> str:
  """The matrix as a markdown table of every method × kind: 'effective
  (largest relative change)', 'refused' (at validation, or 'refused when
  built'), '**SILENT**'; a neutral setting that is not bit for bit the run
  without the part is marked 'neutral ≠'. The counts and the CPU seconds
  per method follow. Compiled at this process's flags (a user's by
  default)."""
  report = matrix_report()
  counts = {'effective': 0, 'refused': 0, 'SILENT': 0, 'neutral ≠': 0}
  lines = ['| method | ' + ' | '.join(PARTS) + ' |',
           '|---' * (len(PARTS) + 1) + '|']
  for algorithm in sorted(ALGORITHMS):
    row = []
    for kind in PARTS:
      if not accepted(algorithm, kind):
        counts['refused'] += 1
        row.append('refused')
        continue
      cell = report['on'][f'{algorithm}|{kind}']
      counts[cell['verdict']] += 1
      text = {'effective': 'effective ({change:.1g})',
              'refused': 'refused when built',
              'SILENT': '**SILENT** ({change:.1g})'}[cell['verdict']]
      text = text.format(**cell)
      cell = report['neutral'].get(f'{algorithm}|{kind}')
      if cell and not cell.get('bit_equal'):
        counts['neutral ≠'] += 1
        text += f', **neutral ≠** ({cell.get("difference", "refused")})'
      row.append(text)
    lines.append(f'| {algorithm} | ' + ' | '.join(row) + ' |')
  lines.append('')
  lines.append(', '.join(f'{n} {verdict}' for verdict, n in counts.items()))
  lines.append('')
  lines.append('CPU seconds of the runs: ' + ', '.join(
      f'{name} {seconds:.1f}' for name, seconds in sorted(
          CPU_SECONDS.items(), key=lambda item: -item[1])) +
               f'; total {sum(CPU_SECONDS.values()):.1f}')
  return '\n'.join(lines)


if __name__ == '__main__':
  # As a child of `matrix` (--queue GROUP SCRATCH, `script_utils.CHILDREN`):
  # the GROUP report of the methods it claims from the group's queue beside
  # SCRATCH (`claimed_methods`) as JSON on the last line. With --markdown, the whole
  # matrix as a table; with --record, the pins this host adds
  # (`record_pins`).
  if sys.argv[1:] == ['--markdown']:
    print(markdown_matrix())
  elif sys.argv[1:] == ['--record']:
    record_pins()
  elif (len(sys.argv) == 4 and sys.argv[1] == '--queue' and
        sys.argv[2] in REPORTS):
    group = sys.argv[2]
    print(json.dumps(matrix_report(claimed_methods(
        pathlib.Path(sys.argv[3]).parent /
        f'heterogeneity_matrix_claims_{group}'), group)))
  else:
    sys.exit(f'usage: {sys.argv[0]} [--markdown | --record | '
             f'--queue {"|".join(REPORTS)} SCRATCH]')
