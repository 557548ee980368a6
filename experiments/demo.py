"""The heterogeneous demo: FIARSE vs HeteroFL, four capacity levels, offline.

Command:   fedjax-het            (or: fedjax-het --config experiments/demo.py)
Expected:  about a minute on 2 CPU cores (measured 46–65 s); prints FIARSE's Table-1 layout
           (Local and Global accuracy per capacity) for both methods and
           writes runs/demo/comparison.{md,json,png}.

50 clients hold scikit-learn's 1,437 training digits, split by FIARSE's
balanced Dirichlet(0.3) partitioner, with local test shards that follow each
client's label distribution. Capacities {1/64, 1/16, 1/4, 1} in equal groups
of clients; an MLP 64-200-200-10. 10 clients per round run 10 SGD steps
(batch 16, lr 0.1); 300 rounds. Width submodels use the largest width that
holds a γ share of the parameters (submodel.width_rule='params'), so both
methods train equally many parameters per client, and no Scaler (HeteroFL's
Scaler divides hidden outputs by r in training; on this norm-free MLP it
inflates small submodels' logits by 1/r: γ=1/16 local accuracy 14% with it,
93% without). The γ-submodels of sizes never trained (0.5% … 50%) are
evaluated too (unparticipated clients).
"""
from fiarse.fiarse_setup import FOUR_SIZES, columns, scaled_config

TITLE = 'FIARSE vs HeteroFL on digits, capacities {1/64, 1/16, 1/4, 1}'
COLUMNS = columns(FOUR_SIZES)


def get_configs():
  """FIARSE's scaled protocol (experiments/fiarse/fiarse_setup.py)."""
  return {m: scaled_config(m) for m in ('fiarse', 'heterofl')}
