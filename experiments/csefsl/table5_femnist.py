"""CSE-FSL Table V, F-EMNIST (stand-in split, see csefsl_setup.femnist).

Command:   fedjax-het --config experiments/csefsl/table5_femnist.py --config.data_dir=DIR
           --workdir runs/csefsl/table5_femnist --seeds 5      (GPU, real EMNIST; not run here)
Paper:     non-IID acc / load GB / storage M: FSL_MC 72.58 / 36.23 / 6.03, FSL_OC 70.05 / 36.23 / 1.28,
           FSL_AN 73.26 / 28.16 / 8.89, CSE h=2 70.63 / 19.58 / 4.14, h=4 68.77 / 15.29, h=5 67.91 / 14.43.
           Loads depend on the per-client sizes (~±5%); storage is exact.
"""
from csefsl_setup import COLUMNS, family, femnist

TITLE = 'CSE-FSL Table V, F-EMNIST'


def get_configs():
  return family(femnist(iid=False), hs=(2, 4, 5))
