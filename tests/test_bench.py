"""`fedjax-het bench`: the last output line is the JSON report, and its numbers add up."""
import dataclasses
import json
import os

import numpy as np
import pytest

from fedjax_het import cli
from fedjax_het.tools import bench
from script_utils import load_script

KEYS = ('workload', 'backend', 's_per_round_median', 's_per_round_min',
        's_per_round_max', 'examples_per_s', 'centralized_s', 'roofline_s',
        'roofline_fraction', 'peak_memory_bytes', 'matmul_flops_per_s',
        'copy_bytes_per_s')


def test_bench_prints_a_consistent_json_last_line(capsys):
  argv = ['bench', '--workload', 'W-MLP', '--rounds', '2', '--num-clients',
          '40', '--cohort', '4', '--local-steps', '2', '--backend', 'vmap']
  assert cli.main(argv) == 0
  result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert set(KEYS) <= set(result)
  assert (result['workload'], result['backend']) == ('W-MLP', 'vmap')
  assert (result['cohort'], result['local_steps'], result['rounds_timed']) == (4, 2, 2)
  examples = 4 * 2 * 10
  assert (result['s_per_round_min'] <= result['s_per_round_median']
          <= result['s_per_round_max'])
  assert result['examples_per_s'] == pytest.approx(
      examples / result['s_per_round_median'])
  assert result['roofline_fraction'] == pytest.approx(
      result['roofline_s'] / result['s_per_round_median'])
  # XLA's count for 8 SGD steps of batch 10 on 784-200-200-10: per example
  # 2·198,800 forward and 2·198,800 weight-gradient matmul FLOPs, plus
  # 2·(200·200 + 200·10) for the input gradients of the two upper layers
  # (none for the data); elementwise work adds a few percent.
  matmul_flops = examples * (4 * 198_800 + 2 * (200 * 200 + 200 * 10))
  assert matmul_flops <= result['round_flops'] <= 1.1 * matmul_flops
  assert result['roofline_s'] == pytest.approx(
      result['round_flops'] / result['matmul_flops_per_s'])
  assert result['data_bytes_per_client'] == 50 * (784 * 4 + 4)


def test_bench_rejects_unknown_workloads_and_bad_rounds(capsys):
  with pytest.raises(SystemExit):
    bench.parse_args(['--workload', 'W-GPT'])
  with pytest.raises(SystemExit):
    bench.parse_args(['--rounds', '0'])
  assert 'invalid choice' in capsys.readouterr().err
  with pytest.raises(ValueError, match='unknown workload'):
    bench.benchmark('W-GPT')


def test_cpu_is_split_into_one_device_per_core_unless_flags_say_otherwise(monkeypatch):
  monkeypatch.setenv('XLA_FLAGS', '--xla_cpu_foo=1')
  cli.split_cpu_into_devices()
  flags = os.environ['XLA_FLAGS']
  count = int(flags.split('--xla_force_host_platform_device_count=')[1])
  assert flags.startswith('--xla_cpu_foo=1 ')
  assert 1 <= count <= cli.MAX_CPU_DEVICES
  monkeypatch.setenv('XLA_FLAGS', '--xla_force_host_platform_device_count=3')
  cli.split_cpu_into_devices()
  assert os.environ['XLA_FLAGS'] == '--xla_force_host_platform_device_count=3'


SMALL = ['--workload', 'W-MLP', '--rounds', '2', '--cohort', '4',
         '--local-steps', '2']


def last_json(capsys) -> dict:
  return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_bench_in_two_processes_shards_the_cohort_over_both(capsys):
  """`--processes 2`: two `jax.distributed` processes of one CPU device each;
  process 0's report is the only one printed and counts both."""
  argv = ['bench', *SMALL, '--num-clients', '40', '--processes', '2']
  assert cli.main(argv) == 0
  result = last_json(capsys)
  assert (result['processes'], result['devices']) == (2, 2)
  assert (result['cohort'], result['rounds_timed']) == (4, 2)
  assert result['examples_per_s'] == pytest.approx(
      4 * 2 * 10 / result['s_per_round_median'])


def test_hierarchical_bench_trains_one_cohort_of_cells(capsys):
  """HIST trains every client each round: its federation is the cohort and a
  round is one edge round, the local work of the FedAvg round."""
  assert cli.main(['bench', *SMALL, '--algorithm', 'hist']) == 0
  result = last_json(capsys)
  assert (result['algorithm'], result['num_clients'], result['cohort']) == (
      'hist', 4, 4)
  config = bench.workload_config(
      bench.WORKLOADS['W-MLP'], 'auto', 'hist', 0)
  assert config.hierarchy.edge_rounds == 1


def test_bench_rejects_streams_across_processes(capsys):
  with pytest.raises(SystemExit):
    bench.parse_args(['--stream', '--processes', '2'])
  assert '--stream runs in one process' in capsys.readouterr().err


def bench_script(name, monkeypatch=None):
  """experiments/bench/<name>.py as a module (`script_utils.load_script`)."""
  return load_script(os.path.join('experiments', 'bench', f'{name}.py'), monkeypatch)


def test_speed_table_reports_medians_over_repeats_and_ratios_to_its_fedavg():
  """Each case's s/round is the median of its repeats' medians, its spread
  their min..max, its ratio to the FedAvg on its own federation (HIST's:
  FedAvg on one cohort); W-PFL has no streamed case, peers only if asked."""
  speed_table = bench_script('speed_table')
  table = speed_table.cases('W-MLP', 20, 50, ['drjax'])
  assert table['hist'][1] == 'fedavg@cohort' and table['fiarse'][1] == 'fedavg'
  assert '--processes' in table['fedavg, 2 processes'][0]
  assert 'DrJAX' in table and 'PyTorch loop' not in table
  assert 'fedavg, streamed' not in speed_table.cases('W-PFL', 3, 50, [])
  run = lambda *seconds: [{'s_per_round_median': s, 'examples_per_s': 500 / s}
                          for s in seconds]
  results = {'fedavg': run(0.3, 0.1, 0.2), 'fiarse': run(0.5, 0.3, 0.4),
             'fedavg@cohort': run(0.2, 0.2, 0.2), 'hist': run(0.1, 0.5, 0.3)}
  rows = speed_table.table_rows(results, table)
  assert rows[2] == '| fedavg | 0.2000 | 0.1000..0.3000 | 1.00 | 2,500 |'
  assert rows[3] == '| fiarse | 0.4000 | 0.3000..0.5000 | 2.00 | 1,250 |'
  assert rows[5] == '| hist | 0.3000 | 0.1000..0.5000 | 1.50 | 1,667 |'


def test_alternation_times_variants_in_turns_and_threads_their_states():
  """Each repeat runs every variant's turn (a warm-up and `calls` timed calls)
  in order; a variant's state carries over between its turns; the table gives
  medians over repeats and ratios to the first variant."""
  alternation = bench_script('alternation')
  calls = []

  def step(name):
    def run(state):
      calls.append((name, state))
      return state + 1
    return run

  wall, cpu = alternation.alternate({'a': (step('a'), 0), 'b': (step('b'), 10)},
                                    repeats=2, calls=1)
  assert calls == [('a', 0), ('a', 1), ('b', 10), ('b', 11),
                   ('a', 2), ('a', 3), ('b', 12), ('b', 13)]
  assert [len(wall['a']), len(cpu['b'])] == [2, 2]
  rows = alternation.ratio_rows({'a': [0.2, 0.4], 'b': [0.6, 0.6]},
                                {'a': [1.0, 1.0], 'b': [3.0, 1.0]}, 'method')
  assert rows[0].startswith('| method |')
  assert rows[2] == '| a | 0.3000 | 0.2000..0.4000 | 1.00 | 1.0000 | 1.00 |'
  assert rows[3] == '| b | 0.6000 | 0.6000..0.6000 | 2.00 | 2.0000 | 2.00 |'


def test_cpu_lowering_rejects_an_unknown_library(monkeypatch):
  cpu_lowering = bench_script('cpu_lowering', monkeypatch)
  with pytest.raises(ValueError, match='unknown library .mkl.'):
    cpu_lowering.build(bench.WORKLOADS['W-PFL'], 'im2col+mkl')


def test_the_stackoverflow_size_law_has_the_documented_floor_and_tail():
  sizes = bench.stackoverflow_sizes(200_000)
  assert sizes.min() == 100 and sizes.max() == 256
  # Pareto(x_min 100, α = 396.6 / 296.6): median 100·2^(1/α) = 168, P(n > 256) = 0.285,
  # here at the cap; 200,000 draws put both within 3 standard errors.
  assert abs(np.median(sizes) - 168) <= 2
  assert abs(np.mean(sizes == 256) - 0.2853) < 0.003
  np.testing.assert_array_equal(bench.stackoverflow_sizes(5), bench.stackoverflow_sizes(5))


def test_the_tail_workload_is_stored_ragged(tmp_path):
  workload = dataclasses.replace(bench.WORKLOADS['W-TAIL'], num_clients=30)
  data = bench.host_federation(workload, str(tmp_path))
  counts = bench.client_sizes(workload)
  np.testing.assert_array_equal(data.counts, counts)
  # 20 uint16 ids and 20 int32 next tokens a row, int32 counts and offsets a client.
  assert data.nbytes == counts.sum() * 20 * (2 + 4) + 30 * 8
  assert data.max_examples == 256 and data.x.dtype == np.uint16
  np.testing.assert_array_equal(data.y[:, :-1], data.x[:, 1:])
  assert data.y.min() >= 1 and data.y.max() < 10_004
  # One epoch of batch 16: ⌈n/16⌉ steps a client, the cohort's 50 on average.
  assert bench.cohort_steps(workload) == round(50 * np.mean(-(-counts // 16)))


def test_the_emnist_size_law_has_femnists_mean_and_leafs_spread():
  sizes = bench.emnist_sizes(200_000)
  # Log-normal with mean 671,585 / 3,400 = 197.5 and coefficient of variation
  # 88.94 / 226.83 = 0.392 (clipping at 1 and 600 moves neither measurably).
  assert abs(sizes.mean() - 197.5) < 0.5
  assert abs(sizes.std() / sizes.mean() - 0.392) < 0.005
  assert sizes.min() >= 1 and sizes.max() <= 600
  np.testing.assert_array_equal(bench.emnist_sizes(5), bench.emnist_sizes(5))


def test_a_heavy_tailed_workload_reports_the_useful_fraction_of_its_steps(capsys):
  # One client at a time (map): each computes only its own ⌈n/B⌉ steps.
  argv = ['bench', '--workload', 'W-EMNIST', '--rounds', '1', '--num-clients', '12',
          '--cohort', '3', '--backend', 'map']
  assert cli.main(argv) == 0
  result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert result['useful_step_fraction'] == 1.0
  assert result['client_sizes']['max'] > result['client_sizes']['min']
