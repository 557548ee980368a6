"""FSL_OC's clipping threshold by the heuristic of the work the paper cites for its clipping.

Command:   python experiments/csefsl/fsl_oc_grad_norms.py [EXPERIMENT_FILE [ROUNDS]] [--config.KEY=VALUE ...]
           (default: experiments/csefsl/scaled_digits.py, 30 rounds; the CIFAR-10 / F-EMNIST files
           need their data: run them where the data are, e.g.
           python experiments/csefsl/fsl_oc_grad_norms.py experiments/csefsl/table5_cifar10.py 30 --config.data_dir=DIR)
Source:    the CSE-FSL paper adds "gradient clipping [56]" to FSL_OC without a threshold, and the
           authors' code has no FSL_OC. [56] (Pascanu, Mikolov & Bengio 2013, Sec. 3.2) sets the
           threshold from "statistics on the average norm over a sufficiently large number of
           updates". This script trains the experiment's FSL_OC config unclipped and prints the
           mean and quantiles of the global L2 norm of the client's and the server's gradients
           over every step; the configs clip at the mean (`csefsl_setup.FSL_OC_CLIP`).
Measured:  scaled_digits.py, 30 rounds (5,100 gradients per seed: 17 batches × 5 clients × client
           and server), mean / median / 90% / 99%: seed 0 1.263 / 0.990 / 2.836 / 4.909, seed 1
           1.181 / 0.878 / 2.730 / 4.772, seed 2 1.228 / 1.031 / 2.603 / 4.698; threshold 1.2.
"""
import sys

import jax
import numpy as np
import optax

from fedjax_het import cli, run
from fedjax_het.methods.split import fsl_baselines
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.options import ConfigError


def gradient_norms(config, rounds: int) -> np.ndarray:
  """Global L2 norms of every client and server gradient of `rounds`
  unclipped FSL_OC rounds of `config` (in step order)."""
  config = config.copy_and_resolve_references()
  config.split.clip_norm = 0.0
  norms = []
  unclipped = fsl_baselines.clip_global_norm

  def record(grads, max_norm):
    jax.debug.callback(lambda n: norms.append(float(n)),
                       optax.global_norm(grads))
    return unclipped(grads, max_norm)

  fsl_baselines.clip_global_norm = record
  try:
    try:
      split, _, params, algorithm = run.build_experiment(config)
    except ValueError as e:   # no data, bad sizes: one line, as the trainer
      raise ConfigError(str(e)) from e
    state = algorithm.init(params, jax.random.PRNGKey(config.seed))
    state, _ = RoundRunner(algorithm, 'vmap').run(
        state, split.train.to_device(), rounds)
    jax.block_until_ready(state.params)
  finally:
    fsl_baselines.clip_global_norm = unclipped
  return np.asarray(norms)


DEFAULTS = ['experiments/csefsl/scaled_digits.py', '30']   # EXPERIMENT_FILE, ROUNDS


def main(argv: list[str]) -> None:
  """argv: [EXPERIMENT_FILE [ROUNDS]] and `--config.KEY=VALUE` overrides."""
  positional = [arg for arg in argv if not arg.startswith('--')]
  path, rounds = (positional + DEFAULTS[len(positional):])[:2]
  _, _, pairs = cli.parse_args([arg for arg in argv if arg.startswith('--')])
  config = cli.experiment_configs(cli.load_experiment(path), path)['fsl_oc']
  for key, raw in pairs:
    cli.apply_override(config, key, cli.parse_value(raw))
  for seed in range(3):
    config.seed = seed
    norms = gradient_norms(config, int(rounds))
    q = np.quantile(norms, [0.1, 0.5, 0.9, 0.99])
    print(f'seed {seed}: {norms.size} gradients, mean {norms.mean():.3f}, '
          f'quantiles 10/50/90/99%: ' + ' / '.join(f'{v:.3f}' for v in q))


if __name__ == '__main__':
  sys.exit(cli.report_errors('fsl_oc_grad_norms', lambda: main(sys.argv[1:]) or 0))
