"""Composition 4: CSE-FSL vs FSL_MC vs FSL_AN under stragglers on the virtual clock, at equal
virtual time.

No paper ran this: CSE-FSL's and its baselines' papers run synchronous rounds. Here two of five
clients take three times as long per round, and Co-S²P's clock (its Alg. 1, `config.clock`)
either waits for them (sync: μ = 1) or closes a round after ⌈μN⌉ = 3 arrivals (semi: μ = 3/5,
T_clk = 0), so the slow clients arrive with staleness τ of 2–3, their stale client side weighed by
FedBuff's (1 + τ)^−½. On the clock a straggler's smashed uploads enter the server's scan of its
arrival round, at the current server model; FSL_MC's per-client server copy is that of its
dispatch round (`methods/split/split_learning.py`). Accuracy is read at fixed virtual times
(the last evaluation at or before each), with the bytes uploaded over the whole budget.

Command:   python experiments/composition/split_clock.py --seeds 3 --workdir runs/split_clock
           (18 runs, one evaluation per round; 9:50 wall, 193 s of CPU, on the 2-core machine
           shared with three other jobs; rerunning resumes).
           `fedjax-het --config experiments/composition/split_clock.py --seeds 3` runs the same
           configs with the final-accuracy table and curves against virtual seconds.

Setting: CSE-FSL's CPU-scaled digits (`experiments/csefsl/csefsl_setup.digits`): 8×8 digits
over 5 IID clients, split LeNet-5 with an MLP aux head, B = 16, 17 batches per round, η = 0.1,
1/n averaging; CSE-FSL uploads one smashed batch every h = 5. Clients 0–2 take 17 s per round
(1 s per batch), clients 3–4 51 s, times lognormal jitter σ = 0.05 (`clock.jitter`). Every run
trains for the rounds its clock fits in VIRTUAL_SECONDS (`clock_budget.rounds_within`).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), 'csefsl'))
sys.path.insert(0, HERE)

from clock_budget import rounds_within  # noqa: E402
from csefsl_setup import digits  # noqa: E402

TITLE = 'CSE-FSL vs FSL_MC vs FSL_AN under stragglers on the virtual clock (split digits)'
SEEDS = 3
VIRTUAL_SECONDS = 510.0
CHECKPOINTS = (VIRTUAL_SECONDS / 3, 2 * VIRTUAL_SECONDS / 3, VIRTUAL_SECONDS)
CLIENT_SECONDS = (17.0, 17.0, 17.0, 51.0, 51.0)
CLOCKS = {'sync': dict(mu=1.0),
          'semi': dict(mu=3 / 5, staleness_weight='polynomial')}
METHODS = {'cse_fsl h=5': 'cse_fsl', 'fsl_mc': 'fsl_mc', 'fsl_an': 'fsl_an'}
COLUMNS = (('final acc', 'final_test_accuracy'),
           ('MiB up', 'totals/bytes_up'),
           ('rounds', 'rounds'),
           ('max staleness', 'max_staleness'))
CURVES = ('virtual_seconds',)


def _config(algorithm: str, clock: dict):
  config = digits()
  config.algorithm = algorithm
  if algorithm == 'cse_fsl':
    config.split.upload_every = 5
  config.clock.update(clock, client_seconds=CLIENT_SECONDS)
  rounds = rounds_within(config, VIRTUAL_SECONDS)
  config.update(rounds=rounds, eval_every=1, rounds_per_call=1,
                checkpoint_every=rounds)
  return config


def get_configs():
  return {f'{label} {clock_label}': _config(algorithm, clock)
          for clock_label, clock in CLOCKS.items()
          for label, algorithm in METHODS.items()}


def at_virtual_times(run_dir: str) -> dict:
  """Accuracy at each of CHECKPOINTS (the last evaluation whose running
  virtual seconds are at most it) from the run's metrics.jsonl."""
  with open(os.path.join(run_dir, 'metrics.jsonl')) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return {f'accuracy@{t:g}': max(
      (row for row in rows if row['virtual_seconds'] <= t),
      key=lambda row: row['virtual_seconds'])['test_accuracy']
          for t in CHECKPOINTS}


def main():
  parser = argparse.ArgumentParser(description=TITLE)
  parser.add_argument('--seeds', type=int, default=SEEDS)
  parser.add_argument('--workdir', default='runs/split_clock')
  args = parser.parse_args()
  from fedjax_het import compare, run   # after the path set-up: a quick --help
  runs = {}
  for label, config in get_configs().items():
    runs[label] = {}
    for seed in range(config.seed, config.seed + args.seeds):
      run_dir = os.path.join(args.workdir, label.replace(' ', '_'),
                             f'seed{seed}')
      seeded = config.copy_and_resolve_references()
      seeded.seed = seed
      summary = run.train(seeded, run_dir)
      summary['at'] = at_virtual_times(run_dir)
      summary['totals']['bytes_up'] /= 2**20
      runs[label][seed] = summary
  columns = tuple((f'acc @ {t:g} s', f'at/accuracy@{t:g}')
                  for t in CHECKPOINTS) + COLUMNS[1:]
  table = compare.seeds_table(runs, columns)
  with open(os.path.join(args.workdir, 'split_clock.md'), 'w') as f:
    f.write(f'{TITLE}\n\n{table}\n')
  print(table)


if __name__ == '__main__':
  main()
