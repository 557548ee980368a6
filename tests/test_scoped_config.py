"""A run reads only its method's sections: a value set in any other section,
or a baseline's fixed option set otherwise, is refused in one line; what a
run trains with is what its resolved config says, and that config (shown by
`--show-config`, written to config.json) holds the core keys and the sections
the run reads only; an older workdir holding every section resumes."""
import json
import os

import pytest

from fedjax_het import cli, run
from fedjax_het import config as config_lib
from fedjax_het.methods import ALGORITHMS
from fedjax_het.methods.cos2p import vit_engine
from fedjax_het.options import ConfigError
from test_reliability import one_line_error
from test_run import QUICK, QUICKSTART, quick_config, read_rows


def configured(algorithm: str, **dotted):
  config = config_lib.base_config()
  config.algorithm = algorithm
  for key, value in dotted.items():
    section, name = key.split('__')
    config[section][name] = value
  return config


# Each kind of heterogeneity, as a config sets it (issue 27's table).
PARTS = {'availability': ('systems', 'availability', 'bernoulli'),
         'lossy links': ('systems', 'q', (0.3,)),
         'unequal work': ('systems', 'local_work', (1, 2)),
         'Markov links': ('systems', 'model', 'markov'),
         'virtual clock': ('clock', 'mu', 0.25),
         'cells': ('hierarchy', 'num_cells', 3),
         'AirComp channel': ('hierarchy', 'edge_channel', 'aircomp'),
         'DP': ('dp', 'clip_norm', 1.0),
         'secure aggregation': ('secagg', 'bits', 16),
         'buffered clock': ('clock', 'buffer_size', 2)}
# What a kind needs beside its key to be valid where it is read: buffered
# mode's staleness bound (its version table has τ_max + 1 rows).
COMPANIONS = {'buffered clock': {'clock__tau_max': 1}}


def part_config(algorithm: str, part: str):
  """A config of `algorithm` with the kind `part` set: its `PARTS` key and
  its `COMPANIONS`."""
  section, name, value = PARTS[part]
  return configured(algorithm, **{f'{section}__{name}': value},
                    **COMPANIONS.get(part, {}))


@pytest.mark.parametrize('part', PARTS)
@pytest.mark.parametrize('algorithm', sorted(ALGORITHMS))
def test_every_method_reads_a_part_or_refuses_it_in_one_line(algorithm, part):
  """No cell of method × kind of heterogeneity is accepted and ignored: a
  method whose sections hold the part's key runs under it (its paper's tests
  show the effect), or fixes it and refuses another value; any other method
  refuses it, naming the key and the methods that read it. A ViT method
  (`always_on_clock`) refuses a clock key its engine does not read
  (`vit_engine.CLOCK_KEYS`) in one line naming it."""
  section, name, value = PARTS[part]
  config = configured(algorithm, **{f'{section}__{name}': value})
  method = ALGORITHMS[algorithm]
  if any(group.key == section for group in method.option_groups):
    config = part_config(algorithm, part)
    if f'{section}.{name}' in getattr(method, 'fixed_options', {}):
      with pytest.raises(ConfigError, match=f'{algorithm} fixes {section}'):
        config_lib.validate(config)
    elif part == 'availability' and not method.samples_available_clients:
      with pytest.raises(ConfigError, match=f'but {algorithm} samples among '
                         'all clients by its own rule'):
        config_lib.validate(config)
    elif (section == 'clock' and method.always_on_clock and
          name not in vit_engine.CLOCK_KEYS):
      with pytest.raises(ConfigError, match=f'{section}.{name} = {value!r} '
                         f'is set, but {algorithm} does not read it') as e:
        config_lib.validate(config)
      assert '\n' not in str(e.value)
    else:
      config_lib.validate(config)
    return
  with pytest.raises(ConfigError) as raised:
    config_lib.validate(config)
  message = str(raised.value)
  assert message.startswith(f'{section}.{name} = {value!r} is set, but '
                            f'{algorithm} does not read the {section} section')
  readers = [n for n, cls in ALGORITHMS.items()
             if any(g.key == section for g in cls.option_groups)]
  assert f'(read by {", ".join(readers)})' in message and '\n' not in message


def test_the_same_values_are_read_by_their_methods():
  for algorithm, key, value in [('fedacs', 'systems__q', (0.3,)),
                                ('hist', 'hierarchy__num_cells', 3),
                                ('fedavg', 'hierarchy__num_cells', 3),
                                ('fedavg', 'hierarchy__edge_channel', 'aircomp'),
                                ('cos2p', 'clock__mu', 0.25),
                                ('fedavg', 'clock__mu', 0.25),
                                ('fedrolex', 'clock__t_clk', 2.0),
                                ('fiarse', 'submodel__partial_average', 'mask')]:
    config_lib.validate(configured(algorithm, **{key: value}))


def test_cells_and_the_aircomp_channel_are_parts_of_fedavg_and_hist():
  """The matrix's cells and AirComp rows: FedAvg and the submodel methods
  (FedAvg on submodels) run under them (the cells part,
  tests/test_cells_part.py) beside HIST and HFedAvg, and so do the FedACS
  family's rule-(3) methods (tests/test_fedacs_cells.py) and FSL_MC, FedAvg
  on the composed split model (tests/test_csefsl.py); every other method,
  FedVarp, FedAU and OS included, refuses them in one line."""
  readers = {name for name, cls in ALGORITHMS.items()
             if any(g.key == 'hierarchy' for g in cls.option_groups)}
  assert readers == {'fedavg', 'fiarse', 'fiarse_layerwise', 'pruning_greedy',
                     'heterofl', 'fedrolex', 'fjord', 'scalefl', 'hist',
                     'hfedavg', 'fedacs', 'fedavg_het', 'ca_fedavg',
                     'fednova', 'fsl_mc'}


def test_natural_options_need_the_natural_partition():
  config = configured('fedavg', natural__vocabulary='train')
  with pytest.raises(ConfigError, match='only partition=natural reads'):
    config_lib.validate(config)
  config.partition = 'natural'
  config.dataset = 'femnist'
  config_lib.validate(config)


def test_a_baselines_fixed_option_is_refused_not_overwritten():
  """vit_fedavg trains without Co-S²P's self-distillation (λ2 = 0): a config
  asking for λ2 = 0.2 is refused, not trained at λ2 = 0 with λ2 = 0.2 in
  config.json."""
  with pytest.raises(ConfigError, match=r'vit_fedavg fixes cos2p.lambda_kd = '
                                        r'0.0, got 0.2; leave it unset'):
    config_lib.validate(configured('vit_fedavg', cos2p__lambda_kd=0.2))
  config_lib.validate(configured('vit_fedavg', cos2p__lambda_kd=0.0))


def test_the_vit_methods_read_the_shared_clock_section():
  """One clock section for every method on the clock: a ViT baseline and
  Co-S²P train with clock.mu = 0.5 (the resolved config says so), and a
  baseline's resolved config holds the clock's defaults μ = 1, T_clk = 0,
  its synchronous rounds."""
  for algorithm in ('cos2p', 'vit_fedrolex'):
    config = configured(algorithm, clock__mu=0.5)
    assert config_lib.resolve(config).clock.mu == 0.5
  resolved = config_lib.resolve(configured('vit_fedrolex'))
  assert (resolved.clock.mu, resolved.clock.t_clk) == (1.0, 0.0)
  assert 'mu' not in config_lib.base_config().cos2p


def test_equal_client_times_are_judged_by_the_methods_cost_model():
  """μ < 1 with no jitter is refused where every client round is equally
  long: one clock.client_seconds for any method, or none for FedAvg (its
  default is local_steps seconds each); the ViT methods' default is the
  analytic model, whose times differ with the clients' budgets."""
  message = 'clock.mu = 0.5 with equal client times'
  for algorithm in ('fedavg', 'cos2p'):
    with pytest.raises(ConfigError, match=message):
      config_lib.validate(configured(algorithm, clock__mu=0.5, clock__jitter=0.0,
                                     clock__client_seconds=(2.0,)))
  with pytest.raises(ConfigError, match=message):
    config_lib.validate(configured('fedavg', clock__mu=0.5, clock__jitter=0.0))
  config = configured('cos2p', clock__mu=0.5, clock__jitter=0.0)
  config.cos2p.budgets = (0.25, 1.0)
  config_lib.validate(config)


@pytest.mark.parametrize('key,value', [('staleness_weight', 'polynomial'),
                                       ('staleness_weight', 'cos2p'),
                                       ('staleness_exponent', 1.0)])
def test_the_vit_methods_refuse_the_clocks_staleness_weights(key, value):
  """Co-S²P weighs stale updates by its own Eq. 4 (cos2p.weighting): the
  generic clock part's staleness weights are refused in one line naming
  the method and the key (μ < 1, so the clock's own checks pass)."""
  config = configured('cos2p', clock__mu=0.5)
  if key == 'staleness_exponent':
    config.clock.staleness_weight = 'polynomial'
  config.clock[key] = value
  with pytest.raises(ConfigError) as raised:
    config_lib.validate(config)
  assert str(raised.value).startswith(
      f'clock.{key} = {value!r} is set, but cos2p does not read it')
  assert '\n' not in str(raised.value)


def test_the_resolved_config_holds_what_the_baseline_trains_with():
  config = configured('vit_fedrolex')
  config.cos2p.personal_heads = True    # the default; the baseline fixes False
  resolved = config_lib.resolve(config)
  assert resolved.cos2p.personal_heads is False
  assert resolved.cos2p.width_masks == 'rolling'
  assert config.cos2p.personal_heads is True           # the caller's is a copy
  assert config_lib.resolve(configured('cos2p')).cos2p.width_masks == \
      config_lib.base_config().cos2p.width_masks        # Co-S²P fixes none


@pytest.mark.parametrize('algorithm,cells,edge_rounds', [
    ('hist', 2, 5), ('hfedavg', 2, 5), ('fedavg', 1, 1), ('heterofl', 1, 1),
    ('fedacs', 1, 1)])
def test_cells_and_edge_rounds_default_to_the_methods_own(algorithm, cells,
                                                          edge_rounds):
  """`hierarchy.num_cells` / `edge_rounds` left unset resolve to HIST's
  Sec. VI values for HIST's methods and to no cells for the others; the
  resolved config states them, and a value set is kept, 1 included."""
  resolved = config_lib.resolve(configured(algorithm))
  assert (resolved.hierarchy.num_cells,
          resolved.hierarchy.edge_rounds) == (cells, edge_rounds)
  assert config_lib.resolve(configured(
      algorithm, hierarchy__num_cells=1,
      hierarchy__edge_rounds=1)).hierarchy.num_cells == 1
  if algorithm.startswith('h'):
    assert config_lib.resolve(configured(
        algorithm, hierarchy__edge_rounds=1)).hierarchy.edge_rounds == 1


def test_show_config_and_a_run_refuse_in_one_line(capsys, tmp_path):
  for extra in (['--show-config'], [f'--workdir={tmp_path / "run"}']):
    err = one_line_error(capsys, cli.main(QUICK + [
        '--config.hierarchy.num_cells=2',
        '--config.hierarchy.partition_sizes=optimized', *extra]))
    assert ("hierarchy.partition_sizes = 'optimized' is set, but fedavg does "
            'not read it') in err
  assert not (tmp_path / 'run').exists()


@pytest.mark.parametrize('algorithm,key,value', [
    ('vit_fedrolex', 'mask_lr', 0.5), ('vit_fedavg', 'temperature', 2.0),
    ('ram_fed', 'ste', 'probability'), ('vit_fedavg_qvit', 'lambda_budget', 2.0),
    ('fedpm', 'final_mask', 'threshold'), ('prunefl', 'logit_init_std', 0.1)])
def test_a_vit_method_refuses_a_cos2p_key_it_does_not_read(algorithm, key,
                                                           value):
  """The ViT methods share the `cos2p` section; a key that only Co-S²P (or
  another ViT method) reads is refused in one line, never ignored."""
  with pytest.raises(ConfigError) as raised:
    config_lib.validate(configured(algorithm, **{f'cos2p__{key}': value}))
  assert str(raised.value) == (
      f'cos2p.{key} = {value!r} is set, but {algorithm} does not read it (it '
      "is Co-S²P's own or another ViT method's); leave it unset.")
  config_lib.validate(configured('cos2p', **{f'cos2p__{key}': value}))


# ---- the config of a run: the core keys and the sections it reads ---------------
def printed_sections(text: str) -> set[str]:
  """The sections of the `key = value` lines `format_config` printed."""
  keys = [line.split(' = ')[0] for line in text.splitlines()
          if line and not line.startswith(' ')]
  assert set(config_lib.CoreOptions.describe()) <= set(keys)
  return {key.split('.')[0] for key in keys if '.' in key}


def test_show_config_of_fedavg_prints_only_the_sections_it_reads(capsys):
  """`--show-config` of the quickstart (FedAvg) prints the core keys and
  FedAvg's sections (links and work, the clock, cells, DP, secure
  aggregation), no other method's nor `natural`; a resolved config resolves
  to itself."""
  assert cli.main(['--config', QUICKSTART, '--show-config']) == 0
  assert printed_sections(capsys.readouterr().out) == {'systems', 'clock',
                                                       'hierarchy', 'dp',
                                                       'secagg'}
  resolved = config_lib.resolve(configured('fedavg'))
  assert {'fedacs', 'cos2p', 'split', 'submodel', 'natural'}.isdisjoint(resolved)
  assert config_lib.resolve(resolved).to_json() == resolved.to_json()


@pytest.mark.parametrize('algorithm,sections', [
    ('fsl_oc', {'split'}), ('hist', {'hierarchy', 'systems'}),
    ('fedpm', {'cos2p', 'clock', 'fedpm', 'systems'}), ('fedvarp', {'systems', 'fedacs'})])
def test_a_resolved_config_holds_the_sections_its_method_lists(algorithm,
                                                               sections):
  resolved = config_lib.resolve(configured(algorithm))
  assert set(resolved) - set(config_lib.CoreOptions.defaults()) == sections
  natural = configured(algorithm)
  natural.partition, natural.dataset = 'natural', 'femnist'
  assert 'natural' in config_lib.resolve(natural)


def test_a_key_of_a_section_a_run_does_not_read_is_refused_naming_its_readers():
  """Sections of other methods are still in base_config(), so an experiment
  file may set them; the run refuses them in one line (`config.scoped`)."""
  with pytest.raises(ConfigError) as raised:
    config_lib.resolve(configured('fedavg', split__upload_every=3))
  assert str(raised.value) == (
      'split.upload_every = 3 is set, but fedavg does not read the split '
      'section (read by cse_fsl, fsl_an, fsl_mc, fsl_oc); leave it unset or '
      'choose one of those methods.')


def write_config_json(workdir, record: dict) -> None:
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    json.dump(record, f)


def with_every_section(record: dict) -> dict:
  """A run's config.json as workdirs before scoped configs held it: every
  section of base_config(), those the run does not read at their defaults."""
  return {**json.loads(config_lib.base_config().to_json()), **record}


def test_a_workdir_holding_every_section_resumes_bit_identically(tmp_path):
  """config.json holds the run's sections only; a workdir whose config.json
  holds every section (an older version's) resumes, one more round, to the
  metrics and parameters of an uninterrupted run."""
  one_call = dict(rounds_per_call=1, eval_every=1, checkpoint_every=1)
  whole, parts = str(tmp_path / 'whole'), str(tmp_path / 'parts')
  expected = run.train(quick_config(rounds=3, **one_call), whole)
  with open(os.path.join(whole, 'config.json')) as f:
    record = json.load(f)
  assert set(record) - set(config_lib.CoreOptions.defaults()) == {
      'systems', 'clock', 'hierarchy', 'dp', 'secagg', run._REVISION_KEY}
  run.train(quick_config(rounds=2, **one_call), parts)
  with open(os.path.join(parts, 'config.json')) as f:
    write_config_json(parts, with_every_section(json.load(f)))
  resumed = run.train(quick_config(rounds=3, **one_call), parts)
  assert read_rows(parts) == read_rows(whole)
  for key in ('final_test_accuracy', 'final_test_loss', 'final_train_loss',
              'totals'):
    assert resumed[key] == expected[key]


def test_a_stored_value_in_a_section_the_run_does_not_read_is_refused(
    tmp_path, capsys):
  """A workdir whose config.json sets a key of a section the resuming run
  does not read (here fedacs.calibrate under FedAvg) holds another run:
  refused in one line naming the section, before anything is built."""
  config, _ = cli.resolve(QUICK)
  record = with_every_section(json.loads(config_lib.resolve(config).to_json()))
  record['fedacs']['calibrate'] = not record['fedacs']['calibrate']
  write_config_json(tmp_path, record)
  err = one_line_error(capsys, cli.main(QUICK + [f'--workdir={tmp_path}']), 2)
  assert 'holds a run with a different config (fedacs)' in err


def test_an_old_workdir_of_a_method_without_systems_is_compared_on_every_key(
    tmp_path):
  """The key streams' revision check reads `systems.availability`, which
  FSL_OC's config lacks: it counts as its default, and the comparison goes
  on to the key that differs."""
  config = configured('fsl_oc')
  resolved = json.loads(config_lib.resolve(config).to_json())
  write_config_json(tmp_path, {**with_every_section(resolved),
                               'client_lr': 0.5, run._REVISION_KEY: 4})
  with pytest.raises(ConfigError, match=r'different config \(client_lr\)'):
    run.train(config, str(tmp_path))
