"""Shared settings of the CSE-FSL experiments (Mu & Shen, Sec. V).

`family(config, hs)` gives a comparison's configs: FSL_MC, FSL_OC, FSL_AN and
CSE-FSL for each h in `hs`. `COLUMNS` is the Table-V layout read from each
run's summary.json: accuracy, total load in GB (2^30 B, float32, labels not
counted), server storage in parameters, smashed uploads ("communication
rounds") and seconds per round.
"""
from fedjax_het.config import base_config

COLUMNS = (
    ('acc, last 5 evals', 'mean_test_accuracy_last5'),
    ('final acc', 'final_test_accuracy'),
    ('load GB', 'totals/gb'),
    ('server storage (params)', 'last_round/server_storage_params'),
    ('comm rounds', 'totals/comm_rounds'),
    ('s/round', 's_per_round_median'),
)


def cifar10(iid: bool = True):
  """CIFAR-10, n = 5 clients, full participation, B = 50, one local epoch
  (200 batches), η = 0.15 decayed ×0.99 every 10 rounds, 200 rounds;
  24x24 crops + colour jitter (centre crop at test); non-IID: 2 label
  shards per client (the authors' code path)."""
  c = base_config()
  c.update(dataset='cifar10', model='split_cifar_cnn', num_clients=5,
           clients_per_round=5, partition='iid' if iid else 'shards',
           shards_per_client=2, batch_size=50, local_steps=200,
           client_lr=0.15, rounds=200, augment='crop24_jitter',
           aggregation_weights='uniform', eval_every=1, checkpoint_every=10,
           backend='vmap')
  c.model_options = {}
  c.split.update(lr_decay=0.99, lr_decay_every=10)
  return c


def femnist(iid: bool = False):
  """F-EMNIST stand-in: EMNIST (62 classes) over 3,500 clients, 5 sampled per
  round, B = 10, η = 0.03, 500 rounds, ~209 examples (21 batches) per client.
  The paper's writer-ordered split needs writer ids (LEAF/TFDS); here
  'iid' or Dirichlet label skew stands in."""
  c = base_config()
  c.update(dataset='emnist', model='split_emnist_cnn', num_clients=3500,
           clients_per_round=5, partition='iid' if iid else 'dirichlet',
           alpha=0.3, batch_size=10, local_steps=21, client_lr=0.03,
           rounds=500, eval_every=5, checkpoint_every=50, backend='vmap')
  c.model_options = {}
  return c


def femnist_by_writer():
  """F-EMNIST by writer, the paper's setting: `femnist` on the writers of TFF's / FedJAX's /
  LEAF's files (partition='natural', `fedjax_het.data.natural`): 3,400 writers in TFF's
  and FedJAX's files (the paper counts 3,500, LEAF's FEMNIST 3,550), their own test images as
  the test set."""
  c = femnist()
  c.update(dataset='fed_emnist', partition='natural', num_clients=3400)
  return c


def family(config, hs, baselines=('fsl_mc', 'fsl_oc', 'fsl_an')):
  """label -> config: the baselines, then CSE-FSL for every h."""
  configs = {}
  for method in baselines:
    configs[method] = config.copy_and_resolve_references()
    configs[method].algorithm = method
  for h in hs:
    c = config.copy_and_resolve_references()
    c.algorithm = 'cse_fsl'
    c.split.upload_every = h
    configs[f'cse_fsl h={h}'] = c
  return configs
