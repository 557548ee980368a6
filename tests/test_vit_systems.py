"""The ViT methods (Co-S²P and its baselines) under the clock's μ, lossy
links and unequal work (`methods/cos2p/vit_engine.py`).

The runs compared bit for bit are made in a child process at XLA:CPU's
fusion emitters (`comparisons`, this file run as a script), as the
heterogeneity matrix makes its runs: under the suite's elemental emitters
two programs that compute the same may fuse differently and move the last
bit (test_heterogeneity_matrix.py)."""
import json

import jax
import numpy as np
import pytest

from engine_utils import tiny_vit_config, vit_experiment
from fedjax_het import config as config_lib
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.methods import ALGORITHMS
from fedjax_het.options import ConfigError
from fedjax_het.systems import vit_cost
from script_utils import child_report
from test_pinned import params_hash


def trained(config):
  """(algorithm, final params as numpy, the rounds' metrics) of `config`,
  resolved as a run resolves it."""
  config = config_lib.resolve(config)
  algorithm, state, split = vit_experiment(config)
  state, metrics = RoundRunner(algorithm, 'map').run(
      state, split.train.to_device(), config.rounds)
  return algorithm, [np.asarray(x) for x in jax.tree.leaves(state.params)], \
      metrics


def fedrolex(**clock):
  """FedRolex on four clients of unequal budgets and round times."""
  config = tiny_vit_config(algorithm='vit_fedrolex')
  config.cos2p.budgets = (0.25, 0.5, 1.0, 1.0)
  config.clock.update({'client_seconds': (1.0, 1.5, 4.0, 2.0), **clock})
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


# ---- lossy links and unequal work --------------------------------------------
def systems(algorithm='vit_fedrolex', **keys):
  """`fedrolex()`'s federation under `algorithm` for 2 rounds on the
  analytic clock (round times follow each client's work), `keys` in the
  systems section."""
  config = fedrolex(client_seconds=(), jitter=0.05)
  config.update(algorithm=algorithm, rounds=2)
  return with_systems(config, **keys)


def with_systems(config, **keys):
  """`config` (a copy) with `keys` in the systems section."""
  config = config.copy_and_resolve_references()
  config.systems.update(keys)
  return config


def weight_zero(algorithm: str, client: int) -> type:
  """`algorithm`'s class with `client`'s aggregation weight 0 by hand."""
  class WeightZero(ALGORITHMS[algorithm]):
    def client_weights(self, client_ids):
      return super().client_weights(client_ids) * (client_ids != client)

  return WeightZero


def comparisons() -> dict:
  """{run: params hash} of the runs compared bit for bit: FedRolex without
  the part and at its neutral setting (q = 0, every client its E = 1 epoch:
  `work_unit='epochs'`), and for Co-S²P (Eq. 4) and FedRolex (holder
  means) client 1 with q = 1 and with weight 0 by hand, with the bytes
  they upload."""
  runs = {'without': (systems(), None),
          'neutral': (systems(q=(0.0,) * 4, work_unit='epochs',
                              local_work=(1,)), None)}
  for algorithm in ('cos2p', 'vit_fedrolex'):
    config = systems(algorithm)
    if algorithm == 'cos2p':   # Eq. 4 without a mask phase (compile time)
      config.cos2p.mask_rounds = 0
    runs[f'{algorithm} q=1'] = (with_systems(config, q=(0.0, 1.0, 0.0, 0.0)),
                                None)
    runs[f'{algorithm} weight 0'] = (config, weight_zero(algorithm, 1))
  out = {}
  for name, (config, cls) in runs.items():
    config = config_lib.resolve(config)
    algorithm, state, split = vit_experiment(config, cls)
    state, metrics = RoundRunner(algorithm, 'map').run(
        state, split.train.to_device(), config.rounds)
    out[name] = {'hash': params_hash(state.params),
                 'parts': list(algorithm.parts.names),
                 'end_time': algorithm.schedule.end_time.tolist(),
                 'bytes_up': np.asarray(metrics['bytes_up']).tolist()}
  return out


@pytest.fixture(scope='session')
def vit_systems_report(tmp_path_factory, worker_id):
  """`comparisons()` from a child at the fusion emitters
  (`script_utils.CHILDREN`), once per session."""
  return child_report(tmp_path_factory, worker_id, 'vit_systems_report')


def test_the_neutral_setting_is_the_run_without_the_part(vit_systems_report):
  """The part on at q = 0 and equal work trains the run without it, bit
  for bit, on the same clock."""
  without = vit_systems_report['without']
  neutral = vit_systems_report['neutral']
  assert neutral['parts'] == ['links_work', 'clock']
  assert without['parts'] == ['clock']
  assert neutral['hash'] == without['hash']
  assert neutral['end_time'] == without['end_time']


@pytest.mark.parametrize('algorithm', ['cos2p', 'vit_fedrolex'])
def test_a_lost_upload_is_a_client_of_weight_zero(vit_systems_report,
                                                  algorithm):
  """q = 1 for client 1 (its upload never arrives) trains what giving it
  weight 0 by hand trains, bit for bit: no holder's mean counts it (Co-S²P's
  Eq. 4 weights, FedRolex's holder means), and it uploads no bytes."""
  lost = vit_systems_report[f'{algorithm} q=1']
  hand = vit_systems_report[f'{algorithm} weight 0']
  assert lost['hash'] == hand['hash']
  assert lost['bytes_up'] == hand['bytes_up']
  assert lost['hash'] != vit_systems_report['without']['hash']


def test_unequal_work_runs_and_is_charged_as_the_clients_steps():
  """T = 1, 2, 3, 4 steps: each round trains Σ T·B examples, and the
  clock charges each client the analytic time of its T steps
  (`vit_cost.round_seconds`), not of its epoch."""
  algorithm, _, metrics = trained(systems(local_work=(1, 2, 3, 4)))
  np.testing.assert_array_equal(metrics['examples'], [10 * 64] * 2)
  duration = algorithm.client_round_seconds()
  shape = algorithm.cost_shape()
  for n, steps in enumerate((1, 2, 3, 4)):
    expected = vit_cost.round_seconds(
        shape, algorithm.cost_submodel(n, 0), vit_cost.device('agx64'),
        train_samples=int(algorithm.counts[n]), batch=64, steps=steps)
    assert duration(n, 0, 0) == expected


def test_only_online_clients_are_dispatched_on_the_vit_clock():
  """Availability under a ViT method (hosted by its clock): with P(online)
  = 0.5 no client is dispatched in a round it is offline, some round
  dispatches fewer than all idle clients, and every arrival trains."""
  config = fedrolex(mu=0.5)
  config.systems.availability = 'bernoulli'
  config.systems.available_p = (0.5,)
  algorithm, params, metrics = trained(config)
  online = algorithm.virtual_clock.online
  schedule = algorithm.schedule
  assert 'availability' not in algorithm.parts.names
  assert not (schedule.dispatched & ~online[:config.rounds]).any()
  assert (online[:config.rounds] < 1).any()
  np.testing.assert_array_equal(metrics['arrivals'],
                                schedule.arrivals.sum(1))
  assert all(np.isfinite(p).all() for p in params)


@pytest.mark.parametrize('keys,message', [
    (dict(model='dynamic'), "systems.model = 'dynamic' draws each client's "
     'local work per round in the compiled round'),
    (dict(model='trace'), "systems.model = 'trace' draws"),
])
def test_what_the_vit_clock_cannot_model_is_refused_in_one_line(keys,
                                                                 message):
  with pytest.raises(ConfigError) as raised:
    config_lib.validate(systems(**keys))
  assert str(raised.value).startswith(message)
  assert '\n' not in str(raised.value)


if __name__ == '__main__':
  # The child of `vit_systems_report`: its report as JSON on the last line.
  print(json.dumps(comparisons()))
