"""Shared settings of the privacy experiments: DP-FedAvg's ε against accuracy (issue 37).

`sweep(config_of)` is the comparison: FedAvg and FIARSE at every ε of `EPSILONS`, each config
built by `config_of(method)`. A finite ε sets `dp.target_epsilon`: σ is calibrated by the run's
accountant (RDP, Poisson sampling at q = K/N, T rounds) to end the run at (ε, δ), δ = 1/N^1.1
(`dp.delta = 0`); ε = ∞ is the same run with the same clip S and σ = 0 (clipping alone), so
that a row differs from the ∞ row only by the noise. Uniform aggregation weights, so the sum's
noise is N(0, σ²S²) (w_max = 1) and the mean's σS/K, McMahan et al.'s DP-FedAvg.

`digits_config(method)` is the offline stand-in for F-EMNIST by writer: scikit-learn's digits
(1,437 train images) over N = 500 writer-like clients, sizes ∝ F-EMNIST's writer-size law
(`bench.emnist_sizes`: a log-normal of coefficient of variation 0.39, scaled to the 1,437
images, median 3 a client) with Dirichlet(1) labels; K = 100 a round (q = 0.2); 100 rounds of
5 local SGD steps of batch 3 at lr 0.1, server lr 1; MLP 64-32-10 (2,410 parameters: the
noise's norm on the mean, σS·√d/K, grows with √d, so DP at this N wants a small model);
S = 0.5: in the ε = ∞ run (seed 0) it clips 97 % of rounds 1-20's updates, 47 % of rounds
41-60's and 13 % of rounds 81-100's (updates shorten as training goes on), a clip near the
median norm of the middle rounds (Andrew et al. 2021 find the median a good fixed clip).
User-level DP wants many clients a round: σ(ε = 1) is 5.9 here, and the mean's noise std
σS/K = 0.03 per coordinate, against a mean update of norm ≤ S. FIARSE trains four capacities
{1/64, 1/16, 1/4, 1} in equal client groups (parameter-budget widths, no Scaler, as the scaled
FIARSE protocol); its clip is on the update embedded in the full model.

`femnist_config(method)` is the natural F-EMNIST-62 by writer (`natural_setup.femnist`, 3,400
writers, TFF's CNN) with the DP settings of the stand-in scaled to it: K = 100 (q = 0.029),
500 rounds, the same S and uniform weights. S = 0.5 is the stand-in's, not measured on
F-EMNIST (no copy of the set here): the CNN's update norms differ, so check the clipped
fraction (`dp_clipped`) of an ε = ∞ run first.
"""
import math
import os
import sys

from fedjax_het.config import base_config
from fedjax_het.tools import bench

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                'natural'))

from natural_setup import femnist  # noqa: E402

EPSILONS = (1.0, 4.0, 8.0, math.inf)
METHODS = {'FedAvg': 'fedavg', 'FIARSE': 'fiarse'}
FOUR_SIZES = (1 / 64, 1 / 16, 1 / 4, 1.0)
CLIP_NORM = 0.5
SEEDS = 3
COLUMNS = (
    ('test acc (submodels: mean of sizes)', 'final/test_accuracy'),
    ('submodels: γ = 1', 'final/accuracy@1'),
    ('ε reported', 'epsilon'),
    ('σ', 'dp/noise_multiplier'),
    ('δ', 'dp/delta'),
    ('updates clipped', 'totals/dp_clipped'),
)


def with_dp(config, epsilon: float):
  """`config` with DP-FedAvg at `epsilon` (∞: clipping alone, σ = 0)."""
  config.aggregation_weights = 'uniform'
  config.dp.clip_norm = CLIP_NORM
  if math.isfinite(epsilon):
    config.dp.target_epsilon = epsilon
  return config


def with_method(config, method: str):
  """`config` run by `method`; a submodel method (FIARSE, HeteroFL) with the scaled FIARSE
  protocol's four capacities."""
  config.algorithm = method
  if method == 'fedavg':
    return config
  config.capacities = FOUR_SIZES
  config.submodel.width_rule = 'params'
  config.submodel.scaler = False
  return config


def sweep(config_of, methods=METHODS, epsilons=EPSILONS) -> dict:
  """label → config: every method of `methods` (label → algorithm) at every ε of `epsilons`,
  `config_of(algorithm)` with DP."""
  return {f'{label} ε={epsilon:g}': with_dp(config_of(method), epsilon)
          for label, method in methods.items() for epsilon in epsilons}


def digits_config(method: str):
  """The offline stand-in (module docstring)."""
  c = base_config()
  num_clients = 500
  c.update(dataset='digits', num_clients=num_clients, clients_per_round=100,
           partition='sized_dirichlet', alpha=1.0,
           client_sizes=tuple(float(s) for s in bench.emnist_sizes(num_clients)),
           model='mlp', rounds=100, local_steps=5, batch_size=3, client_lr=0.1,
           server_lr=1.0, eval_every=20, checkpoint_every=100, rounds_per_call=20,
           progress=False)
  c.model_options.hidden = (32,)
  return with_method(c, method)


def femnist_config(method: str):
  """F-EMNIST-62 by writer with the stand-in's DP settings (module docstring)."""
  c = femnist()
  c.update(clients_per_round=100, rounds=500)
  return with_method(c, method)
