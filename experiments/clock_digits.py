"""FedAvg and FedRolex on the virtual clock (`config.clock`): synchronous, semi-asynchronous and
fully asynchronous rounds on one federation of slow and fast clients.

Command:   fedjax-het --config experiments/clock_digits.py --workdir runs/clock_digits
Paper:     none: a composition check of issue 27 (Co-S²P's Alg. 1 clock under methods other than
           Co-S²P). Expected: at equal rounds the asynchronous runs finish in less virtual time
           with a higher RU (busy form), and staleness weights change the result.
Setting:   digits, 20 IID clients, an MLP; every client is dispatched whenever idle
           (clients_per_round = num_clients); client rounds take 1, 2 or 4 s (clients in turn)
           times lognormal jitter σ = 0.05. sync: μ = 1, T_clk = 0; semi: μ = 0.5, T_clk = 0.5 s;
           async: μ = 1/N, T_clk = 0, unweighted or with FedBuff's (1 + τ)^−½.
Run time:  56 s on a 2-core CPU (all 8 runs). Seed 0, 60 rounds: FedAvg 90.6 / 90.0 / 31.9 /
           75.6 % (sync / semi / async / async_poly), virtual time 255.9 / 92.9 / 5.9 / 5.9 s,
           RU (busy) 0.53 / 0.72 / 1 / 1, largest staleness 0 / 3 / 46 / 46; FedRolex 85.0 /
           83.6 / 72.2 / 60.8 %. Equal rounds are not equal virtual time: the asynchronous runs
           stop after 6 virtual seconds, the synchronous one after 256.
"""
from fedjax_het.config import base_config

NUM_CLIENTS = 20
TITLE = 'FedAvg and FedRolex on the virtual clock (digits)'
COLUMNS = (('test accuracy', 'final_test_accuracy'),
           ('virtual time (s)', 'virtual_time_s'),
           ('RU (busy)', 'ru_busy'),
           ('max staleness', 'max_staleness'))
CURVES = ('virtual_seconds',)
CLOCKS = {
    'sync': dict(mu=1.0, t_clk=0.0),
    'semi': dict(mu=0.5, t_clk=0.5),
    'async': dict(mu=1 / NUM_CLIENTS, t_clk=0.0),
    'async_poly': dict(mu=1 / NUM_CLIENTS, t_clk=0.0,
                       staleness_weight='polynomial'),
}


def base(algorithm: str):
  config = base_config()
  config.update(algorithm=algorithm, dataset='digits', partition='iid',
                num_clients=NUM_CLIENTS, clients_per_round=NUM_CLIENTS,
                rounds=60, local_steps=5, batch_size=16, client_lr=0.05,
                aggregation_weights='uniform', eval_every=10,
                rounds_per_call=10, checkpoint_every=60, progress=False)
  config.model_options.hidden = (64,)
  if algorithm == 'fedrolex':
    config.capacities = (0.25, 1.0)
  config.clock.client_seconds = tuple(
      (1.0, 2.0, 4.0)[n % 3] for n in range(NUM_CLIENTS))
  return config


def get_configs():
  configs = {}
  for algorithm in ('fedavg', 'fedrolex'):
    for label, clock in CLOCKS.items():
      config = base(algorithm)
      config.clock.update(clock)
      configs[f'{algorithm}_{label}'] = config
  return configs
