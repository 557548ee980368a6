"""CSE-FSL Fig. 6: natural vs random order of the server's updates within a block.

Command:   fedjax-het --config experiments/csefsl/fig6_server_order.py --config.data_dir=DIR
           --workdir runs/csefsl/fig6                           (GPU, real CIFAR-10; not run here)
Paper:     ordered and random arrival give nearly identical accuracy on CIFAR-10 IID and F-EMNIST
           non-IID (L318).
"""
from csefsl_setup import COLUMNS, cifar10

TITLE = 'CSE-FSL server update order (Fig. 6), CIFAR-10'


def get_configs():
  configs = {}
  for h in (5, 10):
    for order in ('natural', 'random'):
      c = cifar10(iid=True)
      c.algorithm = 'cse_fsl'
      c.split.update(upload_every=h, server_order=order)
      configs[f'h={h} {order}'] = c
  return configs
