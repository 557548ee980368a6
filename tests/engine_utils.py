"""Small federations and models shared by the engine tests."""
import chex
import jax
import numpy as np

from fedjax_het import config as config_lib
from fedjax_het import models, run
from fedjax_het.methods import ALGORITHMS, FedAvg
from fedjax_het.checkpoint import RunCheckpoints
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.config import base_config
from fedjax_het.data import FederatedData


def tiny_data(num_clients=6, max_examples=9, features=5, classes=3, seed=0):
  """Random padded federated arrays with unequal client sizes (1..max)."""
  rng = np.random.default_rng(seed)
  counts = rng.integers(1, max_examples + 1, num_clients).astype(np.int32)
  counts[0] = max_examples
  x = rng.normal(size=(num_clients, max_examples, features)).astype(np.float32)
  y = rng.integers(0, classes, (num_clients, max_examples)).astype(np.int32)
  valid = np.arange(max_examples)[None] < counts[:, None]
  x = np.where(valid[..., None], x, 0).astype(np.float32)
  y = np.where(valid, y, 0).astype(np.int32)
  return FederatedData(x=x, y=y, counts=counts).to_device()


def tiny_config(**overrides):
  config = base_config()
  config.num_clients = 6
  config.clients_per_round = 4
  config.local_steps = 3
  config.batch_size = 4
  config.client_lr = 0.1
  config.model_options.hidden = (7,)
  config.update(overrides)
  return config


def tiny_fedavg(config=None, data=None, seed=0):
  """(algorithm, initial state, data) of FedAvg on `tiny_data`."""
  config = config or tiny_config()
  data = data if data is not None else tiny_data()
  model = models.create_model('mlp', 3, **config.model_options.to_dict())
  params = models.init_params(model, jax.random.PRNGKey(seed), data.x.shape[2:])
  algorithm = FedAvg(config, model, data)
  return algorithm, algorithm.init(params, jax.random.PRNGKey(seed + 1)), data


def tiny_method(config):
  """(algorithm, initial state, data) of `config.algorithm` on `tiny_data`,
  the config validated first as a run's is."""
  config_lib.validate(config)
  data = tiny_data()
  model = models.create_model('mlp', 3, **config.model_options.to_dict())
  params = models.init_params(model, jax.random.PRNGKey(0), data.x.shape[2:])
  algorithm = ALGORITHMS[config.algorithm](config, model, data)
  return algorithm, algorithm.init(params, jax.random.PRNGKey(1)), data


def run_every_backend(build, rounds, backends=('vmap', 'map', 'sequential')):
  """[(final params, train losses)] of `build()`'s (algorithm, state, data)
  run for `rounds` rounds under each backend."""
  results = []
  for backend in backends:
    algorithm, state, data = build()
    state, metrics = RoundRunner(algorithm, backend).run(state, data, rounds)
    results.append((state.params, metrics['train_loss']))
  return results


def assert_backends_agree(results, rtol=1e-5, atol=1e-6):
  """Every backend's params and losses equal the first's (float tolerance)."""
  for params, loss in results[1:]:
    chex.assert_trees_all_close(params, results[0][0], rtol=rtol, atol=atol)
    np.testing.assert_allclose(loss, results[0][1], rtol=rtol)


def committed(state):
  """`state` committed to the device, as a restored checkpoint is: a runner
  compiles one program for runs from either (uncommitted and committed
  arguments are two signatures)."""
  return jax.device_put(state, jax.devices()[0])


def checkpoint_round_trip(directory: str, round_index: int, state, like,
                          host=None):
  """(state, host) saved as round `round_index` in `directory` and read back
  onto the structure of `like`, each through its own `RunCheckpoints`."""
  checkpoints = RunCheckpoints(directory, 2, {})
  checkpoints.save(round_index, state, {} if host is None else host)
  checkpoints.close()
  checkpoints = RunCheckpoints(directory, 2, {})
  try:
    return checkpoints.restore(round_index, like)
  finally:
    checkpoints.close()


# A 2-block ViT for the tests of the Co-S²P family.
TINY_VIT = {'depth': 2, 'hidden': 16, 'mlp': 32, 'heads': 2, 'patch': 4}


def tiny_vit_config(num_clients=4, **overrides):
  """IID digits clients on TINY_VIT with fixed 1 s client rounds, no jitter
  and SGD; `overrides` are core keys."""
  config = base_config()
  config.update(dict(algorithm='cos2p', dataset='digits', model='vit',
                     num_clients=num_clients, clients_per_round=num_clients,
                     partition='iid', batch_size=64, client_lr=0.05,
                     rounds=3))
  config.update(overrides)
  config.model_options = dict(TINY_VIT)   # replaced, not merged
  config.clock.update(dict(client_seconds=(1.0,), jitter=0.0))
  config.cos2p.optimizer = 'sgd'
  return config


def vit_experiment(config, cls=None):
  """(algorithm, initial state, federated split) of `config`, the algorithm
  built as `cls` when given."""
  split, model, params, algorithm = run.build_experiment(config)
  if cls is not None:
    algorithm = cls(config, model, split.train)
  return algorithm, algorithm.init(params, jax.random.PRNGKey(config.seed)), \
      split


def stacked_masks(plans):
  """`plans` with the clients' masks stacked in `mask` (no mask table), so
  that every field vmaps or slices over the cohort."""
  return plans.replace(mask=plans.client_masks(), mask_table=None,
                       mask_row=None)


def cohort_outputs(algorithm, state, data):
  """The round's plans and its clients' uploads [K] (after the parts')."""
  plans = jax.jit(algorithm.plan_round)(state)
  outputs = jax.jit(lambda p: jax.vmap(
      algorithm.run_client, in_axes=(None, (p.cohort_axes(), None)))(
          (state.params, None, data, p.mask_table),
          (p.replace(mask_table=None), None)))(plans)
  return plans, outputs
