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
Without parts every piece is the base class's shared mechanism: FedAvg is the
method that changes nothing (it only declares that its deltas are needed as
sums alone).

It runs under three parts: the systems part (lossy uplinks, unequal work and
client availability, the base class's), the virtual clock (`config.clock`;
the base class's module docstring gives our reading of FedAvg on it) and the
cells part (`config.hierarchy`, `fedjax_het.parts.cells`): with more than one
cell or edge round, or the AirComp channel, the sampled clients are grouped
by cell, run E edge rounds from their cell's edge model with exact (OMA) or
over-the-air edge means of their weighted deltas, and the cloud averages the
cells (hierarchical FedAvg in FedAvg's cohort). HIST's own keys (edge
weights, partition sizing, the latency model) are refused in one line. With
a part's section at its defaults the part is off and the round is the same
program as without it. All three parts are the base class's
(`methods.base`), shared with the other methods that list them.
"""
from fedjax_het.methods.base import FederatedAlgorithm
from fedjax_het.parts import cells as cells_lib
from fedjax_het.parts.clock import ClockOptions
from fedjax_het.parts import dp as dp_lib
from fedjax_het.parts import secagg as secagg_lib
from fedjax_het.parts import links_work


class FedAvg(FederatedAlgorithm):
  name = 'fedavg'
  # Runs under the parts of these sections (`core.parts`): lossy uplinks,
  # unequal work and availability, the virtual clock, cells (with the
  # 'mean' edge rule: Eq. (6)), DP-FedAvg (`parts.dp`) and secure
  # aggregation (`parts.secagg`).
  option_groups = (links_work.SystemsOptions, ClockOptions,
                   cells_lib.HierarchyOptions, dp_lib.DPOptions,
                   secagg_lib.SecaggOptions)
  sums_deltas_in_map = True
  per_round_metrics = cells_lib.PER_ROUND_METRICS
