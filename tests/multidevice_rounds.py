"""Runs rounds on 1 device and sharded over every device; prints a JSON report.

Run by tests/test_sharding.py in a subprocess with
XLA_FLAGS=--xla_force_host_platform_device_count=4 (the flag must be set
before JAX starts, so it cannot run inside the pytest process).
Usage: python multidevice_rounds.py WORKDIR
"""
import json
import os
import sys

import jax
import numpy as np

from fedjax_het import run
from fedjax_het.config import ConfigError, base_config
from fedjax_het.core import sharding
from fedjax_het.core.rounds import RoundRunner


def digits_config(algorithm, backend, **overrides):
  config = base_config()
  config.update(dict(algorithm=algorithm, backend=backend, dataset='digits',
                     num_clients=8, clients_per_round=4, local_steps=3,
                     batch_size=8, rounds=2, eval_every=2, progress=False,
                     partition='dirichlet', alpha=0.5))
  config.model_options.hidden = (16,)
  config.update(overrides)
  return config


CASES = {
    'fedavg/vmap': digits_config('fedavg', 'vmap'),
    'fedavg/map': digits_config('fedavg', 'map', map_chunk_size=0),
    'fiarse/vmap': digits_config('fiarse', 'vmap', capacities=(0.25, 1.0)),
    'heterofl/map': digits_config('heterofl', 'map', capacities=(0.25, 1.0)),
    'fedacs/vmap': digits_config('fedacs', 'vmap'),
    'hist/vmap': digits_config('hist', 'vmap', clients_per_round=8),
}
for case in ('fiarse/vmap', 'heterofl/map'):
  CASES[case].submodel.scaler = False
CASES['hist/vmap'].hierarchy.update(num_cells=2, edge_rounds=2)


# The mesh splits the method's cohort: all 8 clients for OS and for
# fedavg_het's full participation (rule (21)), whatever clients_per_round
# says (3 would split over 3 of the 4 devices, 8 splits over all 4); 6
# sampled clients of FedAvg split over 3, and over 4 are refused.
MESH_CASES = {
    'fedavg': digits_config('fedavg', 'vmap', clients_per_round=6),
    'os': digits_config('os', 'vmap', clients_per_round=3),
    'fedavg_het full': digits_config('fedavg_het', 'vmap',
                                     clients_per_round=3),
    'fedavg on 4': digits_config('fedavg', 'vmap', clients_per_round=6,
                                 client_devices=4),
}
MESH_CASES['fedavg_het full'].fedacs.participation = 'full'


def mesh_devices(config):
  """The devices `run.make_runner` shards `config`'s cohort over, or its
  one-line refusal."""
  _, _, _, algorithm = run.build_experiment(config)
  try:
    mesh = run.make_runner(config, algorithm).mesh
  except ConfigError as e:
    return str(e)
  return 1 if mesh is None else mesh.devices.size


def final_params(config, mesh, rounds=3):
  split, _, params, algorithm = run.build_experiment(config)
  runner = RoundRunner(algorithm, config.backend, config.map_chunk_size, mesh)
  data = runner.place(split.train.to_device())
  state = runner.place(algorithm.init(params, jax.random.PRNGKey(0)))
  state, metrics = runner.run(state, data, rounds)
  return jax.device_get(state.params), jax.device_get(metrics)


def max_difference(a, b):
  return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def main(workdir):
  mesh = sharding.client_mesh(0)
  report = {'devices': jax.device_count(), 'cases': {}}
  for name, config in CASES.items():
    one, one_metrics = final_params(config, None)
    many, many_metrics = final_params(config, mesh)
    report['cases'][name] = {
        'params': max_difference(one, many),
        'metrics': max_difference(one_metrics, many_metrics),
        'scale': max(float(np.max(np.abs(x))) for x in jax.tree.leaves(one)),
    }
  try:
    final_params(digits_config('fedavg', 'vmap', clients_per_round=6), mesh, 1)
    report['indivisible_cohort'] = 'no error'
  except ValueError as e:
    report['indivisible_cohort'] = str(e)
  report['mesh_devices'] = {name: mesh_devices(config)
                            for name, config in MESH_CASES.items()}
  summaries = {}
  for devices in (1, 0):
    config = digits_config('fiarse', 'auto', capacities=(0.25, 1.0),
                           client_devices=devices)
    config.submodel.scaler = False
    summaries[devices] = run.train(config, os.path.join(workdir, str(devices)))
  report['trainer'] = {
      key: [summaries[1]['final'][key], summaries[0]['final'][key]]
      for key in ('test_accuracy', 'train_loss')}
  print(json.dumps(report))


if __name__ == '__main__':
  main(sys.argv[1])
