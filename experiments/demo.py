"""The heterogeneous demo: FIARSE vs HeteroFL, four capacity levels, offline.

Command:   fedjax-het            (or: fedjax-het --config experiments/demo.py)
Expected:  about a minute on 2 CPU cores; prints FIARSE's Table-1 layout
           (Local and Global accuracy per capacity) for both methods and
           writes runs/demo/comparison.{md,json,png}.

50 clients hold scikit-learn's 1,437 training digits, split by FIARSE's
balanced Dirichlet(0.3) partitioner, with local test shards that follow each
client's label distribution. Capacities {1/64, 1/16, 1/4, 1} in equal groups
of clients; an MLP 64-200-200-10. 10 clients per round run 10 SGD steps
(batch 16, lr 0.1); 300 rounds. Width submodels use the largest width that
holds a γ share of the parameters (submodel.width_rule='params'), so both
methods train equally many parameters per client, and no Scaler. The γ-submodels of sizes
never trained (0.5% … 50%) are evaluated too (unparticipated clients).
"""
from fedjax_het.compare import capacity_columns
from fedjax_het.config import base_config

CAPACITIES = (1 / 64, 1 / 16, 1 / 4, 1.0)
TITLE = 'FIARSE vs HeteroFL on digits, capacities {1/64, 1/16, 1/4, 1}'
COLUMNS = capacity_columns(CAPACITIES)


def shared_config():
  config = base_config()
  config.dataset = 'digits'
  config.num_clients = 50
  config.partition = 'balanced_dirichlet'
  config.alpha = 0.3
  config.local_test = True
  config.model = 'mlp'
  config.model_options.hidden = (200, 200)
  config.capacities = CAPACITIES
  config.aggregation_weights = 'uniform'
  config.rounds = 300
  config.clients_per_round = 10
  config.local_steps = 10
  config.batch_size = 16
  config.client_lr = 0.1
  config.eval_every = 50
  config.checkpoint_every = 150
  config.rounds_per_call = 25
  config.submodel.width_rule = 'params'
  # HeteroFL's Scaler (hidden outputs / r in training) is meant for models with
  # a norm after every layer; on this norm-free MLP it inflates the small
  # submodels' logits by 1/r and wrecks their training (measured: γ=1/16
  # local accuracy 14% with it, 93% without).
  config.submodel.scaler = False
  config.submodel.eval_capacities = (0.005, 0.01, 0.03, 0.1, 0.5)
  return config


def get_configs():
  configs = {}
  for method in ('fiarse', 'heterofl'):
    configs[method] = shared_config()
    configs[method].algorithm = method
  return configs
