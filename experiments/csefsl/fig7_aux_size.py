"""CSE-FSL Figs. 7/8: the auxiliary head's kind and size (Table III on CIFAR-10).

Command:   fedjax-het --config experiments/csefsl/fig7_aux_size.py --config.data_dir=DIR
           --workdir runs/csefsl/fig7                           (GPU, real CIFAR-10; not run here)
           Fig. 8 (F-EMNIST, Table IV: cnn c = 64/32/8/2, h = 2/4) is the same sweep on
           csefsl_setup.femnist().
Paper:     MLP aux (23,050) and CNN aux c = 54 (22,960) reach ≈77% (h=5) and ≈76% (h=10); the CNN aux
           keeps it at c = 27 (11,485), the shrunk MLP does not (L338).
"""
from csefsl_setup import COLUMNS, cifar10

TITLE = 'CSE-FSL aux head (Fig. 7), CIFAR-10'


def get_configs():
  configs = {}
  for h in (5, 10):
    for aux, channels in (('mlp', 54), ('cnn', 54), ('cnn', 27), ('cnn', 14),
                          ('cnn', 7)):
      c = cifar10(iid=True)
      c.algorithm = 'cse_fsl'
      c.split.upload_every = h
      c.model_options = {'aux': aux, 'aux_channels': channels}
      label = 'mlp' if aux == 'mlp' else f'cnn c={channels}'
      configs[f'h={h} {label}'] = c
  return configs
