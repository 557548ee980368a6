"""CSE-FSL Figs. 4, 5 and 9: accuracy against communication rounds and against load, h swept.

Command:   fedjax-het --config experiments/csefsl/fig4_h_sweep.py --config.data_dir=DIR
           --workdir runs/csefsl/fig4                           (GPU, real CIFAR-10; not run here)
           Plot test_accuracy against comm_rounds (Figs. 4/5) and gb (Fig. 9) from each run's
           metrics.jsonl (running totals per evaluated round); --config.clients_per_round=10
           --config.num_clients=10 gives Fig. 4's 10-client panel; table5_femnist.py's runs give
           Fig. 5 and Fig. 9 right.
Paper:     larger h converges faster per communication round; CSE h=1 beats FSL_OC (L298); at equal
           load FSL_AN beats MC/OC and CSE h=1 beats FSL_AN (Fig. 9 left).
"""
from csefsl_setup import COLUMNS, cifar10, family

TITLE = 'CSE-FSL h sweep (Figs. 4, 5, 9), CIFAR-10'


def get_configs():
  return family(cifar10(iid=True), hs=(1, 5, 10, 25, 50))
