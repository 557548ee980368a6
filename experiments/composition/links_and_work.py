"""Composition 1: FIARSE vs HeteroFL vs FedAvg under FedACS's dynamic links and unequal work.

No paper ran this: FIARSE (and its HeteroFL baseline) assume every sampled client uploads and
does the same local work; FedACS's dynamic systems (App. I.3.1) drop uploads and give weak
devices fewer steps. Here the submodel methods run under that systems model.

Command:   fedjax-het --config experiments/composition/links_and_work.py --seeds 3
           (18 runs of 300 rounds; about 10 minutes on 2 CPU cores)

Setting: FIARSE's scaled digits protocol (`experiments/fiarse/fiarse_setup.scaled_config`, the
demo's): 50 clients, balanced Dirichlet(0.3), MLP 64-200-200-10, capacities {1/64, 1/16, 1/4, 1}
in equal groups of clients (clients 0–12 hold 1/64, …, 38–49 the full model), 10 of 50 clients
per round, batch 16, lr 0.1, 300 rounds. FedAvg trains the full model on every client: an
upper reference that ignores the capacity limits, not a competitor under them.

'+ links & work' is FedACS's dynamic model (`systems.model='dynamic'`): each round the weak half
of the clients (0–24: the two small capacities) redraws q ~ U(0.4, 0.5) and T ~ U{1..10} local
steps, the strong half (25–49) q ~ U(0, 0.1) and T ~ U{20..30}; an upload fails with probability
q (the update enters no aggregate and its bytes are not counted), and a client stops after its T
steps. Without it every client uploads and runs `local_steps` = 10 steps. Weak devices are the
small-capacity ones, as in a real fleet.

Columns: FIARSE's Table-1 layout (Local: mean accuracy of Model(γ) on the clients' local test
shards; Global: the full model on the test set); mean ± std over 3 seeds (the README's
"Composition" table).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fiarse.fiarse_setup import FOUR_SIZES, scaled_config  # noqa: E402

from fedjax_het.config import base_config  # noqa: E402

TITLE = 'FIARSE vs HeteroFL vs FedAvg, ideal and under dynamic links + unequal work (digits)'
COLUMNS = (('Local', 'final/local_accuracy'), ('Global', 'final/test_accuracy'))
SEEDS = 3


def _config(method: str, systems: bool):
  config = scaled_config(method, FOUR_SIZES if method != 'fedavg' else (1.0,))
  if method == 'fedavg':  # no submodels: the submodel section at its defaults
    config.submodel = base_config().submodel
  if systems:
    config.systems.model = 'dynamic'
  return config


def get_configs():
  return {f'{method}{" + links & work" if systems else ""}': _config(method, systems)
          for systems in (False, True) for method in ('fiarse', 'heterofl', 'fedavg')}
