"""`fedjax-het bench`: the last output line is the JSON report, and its numbers add up."""
import json
import os

import pytest

from fedjax_het import bench, cli

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
