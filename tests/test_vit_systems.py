"""The ViT methods (Co-S²P and its baselines) under the clock's μ, lossy
links and unequal work (`methods/cos2p/vit_engine.py`)."""
import jax
import numpy as np

from engine_utils import tiny_vit_config, vit_experiment
from fedjax_het import config as config_lib
from fedjax_het.core.rounds import RoundRunner


def trained(config, rounds=None):
  """(algorithm, final params as numpy, the rounds' metrics) of `config`,
  resolved as a run resolves it."""
  config = config_lib.resolve(config)
  algorithm, state, split = vit_experiment(config)
  state, metrics = RoundRunner(algorithm, 'map').run(
      state, split.train.to_device(), rounds or config.rounds)
  return algorithm, [np.asarray(x) for x in jax.tree.leaves(state.params)], \
      metrics


def fedrolex(**clock):
  """FedRolex on four clients of unequal budgets and round times."""
  config = tiny_vit_config(algorithm='vit_fedrolex')
  config.cos2p.budgets = (0.25, 0.5, 1.0, 1.0)
  config.clock.update(dict(client_seconds=(1.0, 1.5, 4.0, 2.0), **clock))
  return config


def test_a_baseline_runs_semi_asynchronously_at_mu_below_one():
  """μ = 1, T_clk = 0 are the baselines' defaults, not fixed: FedRolex at
  μ = ½ closes each round after ⌈μN⌉ = 2 arrivals (client 2, 4 s a round,
  arrives stale), and trains another model than at its defaults, where all
  N = 4 arrive every round."""
  _, sync, sync_metrics = trained(fedrolex())
  algorithm, semi, metrics = trained(fedrolex(mu=0.5))
  np.testing.assert_array_equal(sync_metrics['arrivals'], [4, 4, 4])
  np.testing.assert_array_equal(metrics['arrivals'], [2, 2, 2])
  assert algorithm.schedule.max_staleness >= 1
  assert max(float(np.max(np.abs(a - b))) for a, b in zip(semi, sync)) > 1e-4
