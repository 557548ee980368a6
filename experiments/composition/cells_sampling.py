"""Composition 4: FedAvg vs FedACS sampling inside HIST's cells, under dynamic links and work.

No paper ran this: FedACS (Weng et al.) samples a flat federation; HIST (Fang, Han & Brinton)
puts clients in cells with E edge rounds per global round but samples every client. Here the
FedACS family's sampling runs inside HIST's topology (the cells part, `parts/cells.py`, the
'draws' edge rule): the K draws of a round are grouped by cell, each cell runs E edge rounds
of the method's rule (3) on its draws, x̄_j ← x̄_j − (1/K_j) Σ_{k∈j} Z_k c_k Δ_k, with the
round's link outcomes, coefficients, calibrated lr and local work, and the cloud weighs the
cells by their draws K_j/K. FedAvg is the family's 'fedavg_het' (p = ω, c = 1, unaware of q and
T); FedACS samples ∝ ω/((1 − q)‖a‖₁) (its Eq. (15)).

Command:   fedjax-het --config experiments/composition/cells_sampling.py --workdir DIR
           (12 runs of 200 rounds, 3 seeds; 3:36 wall, 112 s of CPU, on the shared 2-core machine)
Measured:  final / best accuracy, mean ± std over seeds 0-2: FedAvg 71.20 ± 5.64 / 80.00 ± 5.58,
           FedACS 70.37 ± 3.70 / 80.19 ± 2.84, FedAvg in cells 74.44 ± 6.51 / 80.74 ± 4.57, FedACS
           in cells 70.28 ± 3.55 / 79.35 ± 2.70: no ordering beyond the seeds' spread, flat or in
           cells. FedACS's draws favour the weak half, so it receives ~22% fewer uploads and runs
           ~64% fewer local steps than FedAvg, at accuracy within its spread; cells double both.

Setting: FedACS's scaled digits protocol (`experiments/fedacs/fedacs_setup.shared_config`,
digits_table1.py's): 20 clients, client m holds class ⌊m/2⌋, K = 6 draws with replacement per
round, ω ∝ examples, MLP 64-200-10, batch 16, η₁ = 0.05 with step-length calibration, 200
rounds, FedACS's dynamic systems (clients 0–9 redraw q ~ U(0.4, 0.5) and T ~ U{1..10} steps
every round, clients 10–19 q ~ U(0, 0.1) and T ~ U{20..30}). 'in cells' is 4 cells of 5
clients in client order (cells 0–1 hold the weak half, classes 0–4; cells 2–3 the strong half)
and E = 2 edge rounds over exact (OMA) edge links: every draw trains and uploads twice per
round, so the cells' bytes and local steps are twice the flat runs' at equal rounds.

Columns: final and best test accuracy over the 200 rounds, and the run's totals of uploads
received, bytes uploaded and local steps of the sampled clients; mean ± std over 3 seeds.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                'fedacs'))

from fedacs_setup import shared_config  # noqa: E402

TITLE = ('FedAvg vs FedACS sampling, flat and in 4 cells × 2 edge rounds, '
         'dynamic links + work (digits)')
COLUMNS = (('final acc', 'final_test_accuracy'),
           ('best acc', 'best_test_accuracy'),
           ('uploads', 'totals/uploads'),
           ('bytes up', 'totals/bytes_up'),
           ('local steps', 'totals/local_steps'))
SEEDS = 3
CELLS = {'num_cells': 4, 'edge_rounds': 2}


def _config(method: str, cells: bool):
  config = shared_config('digits', 'dynamic', algorithm=method)
  if cells:
    config.hierarchy.update(CELLS)
  return config


def get_configs():
  names = {'fedavg_het': 'FedAvg', 'fedacs': 'FedACS'}
  return {f'{label}{" in cells" if cells else ""}': _config(method, cells)
          for cells in (False, True) for method, label in names.items()}
