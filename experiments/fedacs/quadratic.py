"""FedACS's toy quadratic: where each method's iterate settles (Example 1-2, Fig. 4, Fig. 7).

Command:   python experiments/fedacs/quadratic.py [--config FILE] [--workdir DIR] [--config.KEY=VALUE ...]
           homogeneous systems, where every method coincides: --config.optima='(0., 1., 5.)'
           --config.systems.q='(0.3,)' --config.systems.local_work='(4,)' --config.clients_per_round=2
           the paper's settings: --config experiments/fedacs/fig4.py, --config experiments/fedacs/fig7.py
Expected:  ≈ 20 s on 2 CPU cores. With the defaults (E_m = m, q_m = 0.5 − 0.05m, T_m = m + 1,
           η = 0.01, M = 10, K = 5, 4000 rounds) the true optimum is 4.5; FedAvg settles at its
           analytic point 6.35 (biased toward reliable, hard-working clients), c-a-FedAvg, FedVarp
           and FedAU at 5.97 (link bias removed, work bias kept), FedNova at 5.03 (the reverse),
           OS with FedAvg, and FedACS at 4.46 (the true optimum up to O(ηT)); the paper's Fig. 7
           ranking.

Keys (quadratic_toy.py:default_config beside this file): optima (E_m: scalars, or vectors of one
length), systems (the engine's systems section: q, local_work, model, dynamic_q, ...), client_lr,
rounds, clients_per_round (K), methods, seed, calibrate, participation, momentum, prox_mu,
lr_decay. FILE defines get_configs() (label → toy config, e.g. one per setting and local solver);
the overrides apply to each. Writes DIR/config.json ({label: config}) and DIR/summary.json:
{label: {method: {time_avg_iterate, analytic_fixed_point, true_optimum, distance_time_avg,
distance_fixed_point, mean_distance}}} (time average X̄ over the second half of the rounds; the
analytic point X̃* = Σ w_m E_m / Σ w_m, w_m = e_m c_m averaged over the rounds, e_m the method's
expected aggregation weight, p_m (1 − q_m) for FedAvg and FedACS, c_m = 1 − (1 − η)^{T_m} for SGD;
mean_distance = mean of ‖X_r − X*‖ over the second half, the tail of the paper's curves).
"""
import json
import os
import sys

from fedjax_het import cli
from fedjax_het.methods import FEDACS_FAMILY
from fedjax_het.config import ConfigError
import quadratic_toy as quadratic

USAGE = __doc__.split('\n\n')[1]


def check_methods(methods) -> None:
  """ConfigError unless `methods` are FedACS-family methods (the toy's)."""
  unknown = [m for m in methods if m not in FEDACS_FAMILY]
  if not methods or unknown:
    raise ConfigError(
        f'methods must be a non-empty tuple of {", ".join(FEDACS_FAMILY)}'
        f' (the methods with systems heterogeneity), got {tuple(methods)!r}.')


def toy_configs(config_path: str | None) -> dict:
  """{label: toy config}: FILE's get_configs(), or {'default': the defaults}."""
  if config_path is None:
    return {'default': quadratic.default_config()}
  module = cli.load_experiment(config_path)
  if not hasattr(module, 'get_configs'):
    raise ConfigError(f'{config_path!r} must define get_configs() (label → toy '
                      'config).')
  return module.get_configs()


def main(argv: list[str]) -> int:
  if any(a in ('-h', '--help') for a in argv):
    print(USAGE)
    return 0
  try:
    config_path, workdir, overrides = cli.parse_args(argv)
    configs = toy_configs(None if config_path == cli.DEFAULT_CONFIG
                          else config_path)
    for config in configs.values():
      for key, raw in overrides:
        cli.apply_override(config, key, cli.parse_value(raw))
      check_methods(config.methods)
    summary = {label: quadratic.run(config) for label, config in configs.items()}
  except ValueError as e:  # ConfigError is a ValueError
    print(f'quadratic: error: {e}', file=sys.stderr)
    return 2
  workdir = workdir or os.path.join('runs', 'fedacs_quadratic')
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    json.dump({label: c.to_dict() for label, c in configs.items()}, f, indent=2)
  with open(os.path.join(workdir, 'summary.json'), 'w') as f:
    json.dump(summary, f, indent=2)
  print('| setting | method | ‖X̄ − X*‖ | ‖X̃* − X*‖ (analytic) | mean ‖X_r − X*‖ |')
  print('|---|---|---|---|---|')
  for label, rows in summary.items():
    for method, row in rows.items():
      print(f'| {label} | {method} | {row["distance_time_avg"]:.4f} | '
            f'{row["distance_fixed_point"]:.4f} | {row["mean_distance"]:.4f} |')
  print(f'written: {os.path.join(workdir, "summary.json")}')
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
