"""The DrJAX peer (experiments/bench/drjax_peer.py) computes fedjax_het's FedAvg round.

Skipped unless the optional `drjax` is installed (`pip install fedjax_het[peers]`).
"""
import os

import pytest

from fedjax_het.tools import bench
from script_utils import load_script

pytest.importorskip('drjax')



def _peer():
  return load_script(os.path.join('experiments', 'bench', 'drjax_peer.py'))


def test_a_drjax_round_equals_a_fedjax_het_fedavg_round():
  peer = _peer()
  # W-MLP's round in miniature: 8 clients, cohort 2, 2 steps of batch 5.
  workload = bench.Workload('mlp', {'hidden': (16,)}, (4, 4, 1), 8, 10, 2, 2, 5)
  split, model, params, method, runner = bench.build_federation(workload)
  data = runner.place(split.train.to_device())
  round_fn = peer.make_round(method, model, data, runner.mesh)
  check = peer.check_against_fedjax_het(method, runner, round_fn, params, data)
  assert check['max_abs_update'] > 1e-4  # the round moved the model
  assert check['allclose'], check


def test_the_peer_refuses_workloads_that_are_not_fedavg():
  with pytest.raises(ValueError, match='FedAvg'):
    _peer().peer_benchmark('W-FIARSE')
