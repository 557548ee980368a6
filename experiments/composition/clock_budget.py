"""Composition 2: FedAvg, HeteroFL and FedRolex on the virtual clock, at equal virtual time.

No paper ran this: HeteroFL and FedRolex are synchronous methods; Co-S²P's clock (its Alg. 1)
lets the server aggregate after ⌈μN⌉ arrivals, so fast clients are dispatched again while slow
ones are still training and arrive with stale models. Does a width-submodel method survive it?

Command:   fedjax-het --config experiments/composition/clock_budget.py --seeds 3
           (27 runs; about 15 minutes on 2 CPU cores)

Setting: digits, 20 clients (IID split), an MLP 64-64-10, 5 local steps of batch 16, lr 0.05,
uniform weights. Capacities {1/4, 1} in equal groups for the submodel methods: the weak half
(clients 0–9) hold width 1/4 and take 3 s per round, the strong half the full model and 1 s
(lognormal jitter σ = 0.05, `clock.jitter`). Every idle client is dispatched at a round's start
(clients_per_round = N). Clocks: sync (μ = 1, T_clk = 0: every round waits for the slowest),
semi (μ = 1/2, T_clk = 0.5 s) and async (μ = 1/N: every arrival closes a round), the latter two
weighting a stale update by FedBuff's (1 + τ)^−½ (`clock.staleness_weight='polynomial'`). Each
run trains for the rounds its clock fits in VIRTUAL_SECONDS of virtual time (`rounds_within`),
so the columns compare methods at equal wall-clock on the simulated devices, not at equal
rounds.
"""
import numpy as np

from fedjax_het.config import base_config
from fedjax_het.parts.clock import ClockOptions, VirtualClock, step_durations

NUM_CLIENTS = 20
VIRTUAL_SECONDS = 90.0
TITLE = f'FedAvg, HeteroFL, FedRolex on the virtual clock, {VIRTUAL_SECONDS:g} virtual seconds (digits)'
COLUMNS = (('test accuracy', 'final_test_accuracy'),
           ('rounds', 'rounds'),
           ('RU (busy)', 'ru_busy'),
           ('max staleness', 'max_staleness'))
SEEDS = 3
CLOCKS = {'sync': dict(mu=1.0, t_clk=0.0),
          'semi': dict(mu=0.5, t_clk=0.5, staleness_weight='polynomial'),
          'async': dict(mu=1 / NUM_CLIENTS, t_clk=0.0,
                        staleness_weight='polynomial')}


def rounds_within(config, seconds: float) -> int:
  """Rounds of `config`'s virtual clock that end within `seconds` (simulated
  for twice as many rounds until the clock passes `seconds`)."""
  rounds = 32
  while True:
    options = ClockOptions.from_config(config)
    schedule = VirtualClock(
        options, num_clients=config.num_clients, rounds=rounds,
        duration=step_durations(options, num_clients=config.num_clients,
                                rounds=rounds, local_steps=config.local_steps,
                                seed=config.seed)).schedule
    if schedule.end_time[-1] > seconds:
      return int(np.searchsorted(schedule.end_time, seconds, side='right'))
    rounds *= 2


def _config(algorithm: str, clock: dict):
  config = base_config()
  config.update(algorithm=algorithm, dataset='digits', partition='iid',
                num_clients=NUM_CLIENTS, clients_per_round=NUM_CLIENTS,
                local_steps=5, batch_size=16, client_lr=0.05,
                aggregation_weights='uniform', backend='map', progress=False)
  config.model_options.hidden = (64, 64)
  if algorithm != 'fedavg':
    config.capacities = (0.25, 1.0)
  config.clock.update(clock)
  config.clock.client_seconds = tuple(
      3.0 if n < NUM_CLIENTS // 2 else 1.0 for n in range(NUM_CLIENTS))
  within = rounds_within(config, VIRTUAL_SECONDS)
  chunk = max(1, within // 10)
  rounds = within // chunk * chunk   # whole chunks, still within the budget
  config.update(rounds=rounds, eval_every=rounds, rounds_per_call=chunk,
                checkpoint_every=rounds)
  return config


def get_configs():
  return {f'{algorithm} {label}': _config(algorithm, clock)
          for label, clock in CLOCKS.items()
          for algorithm in ('fedavg', 'heterofl', 'fedrolex')}
