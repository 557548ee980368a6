"""FedAvg (McMahan et al., 2017) on the shared engine.

Each round K clients are drawn uniformly without replacement, each runs
`local_steps` SGD steps of batch `batch_size` from the global model, and the
server moves along the weighted mean of the deltas:

    x ← x − η_s · Σ_c w_c (x − x_c) / Σ_c w_c,

with w_c = n_c (examples held; `aggregation_weights='examples'`) or 1, and η_s
= `server_lr` (1 recovers the plain weighted average of the client models).
With `client_sampling='proportional'` and uniform weights the cohort is K draws
with replacement ∝ n_c and the server takes their plain mean, the unbiased
scheme I of Li et al. (2020, "On the convergence of FedAvg on non-IID data").
Every piece is the base class's shared mechanism: FedAvg is the method that
changes nothing (it only declares that its deltas are needed as sums alone).
It runs under the systems part and on the virtual clock (`config.clock`;
the base class's module docstring gives our reading of FedAvg on it).
"""
from fedjax_het.methods.base import FederatedAlgorithm
from fedjax_het.parts.clock import ClockOptions
from fedjax_het.systems import heterogeneity


class FedAvg(FederatedAlgorithm):
  name = 'fedavg'
  # Runs under lossy uplinks and unequal work (the base class's systems
  # part) and on the virtual clock (its clock part).
  option_groups = (heterogeneity.SystemsOptions, ClockOptions)
  sums_deltas_in_map = True
