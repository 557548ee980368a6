"""CSE-FSL Table V, F-EMNIST by writer (experiments/csefsl/table5_femnist.py splits EMNIST by a
Dirichlet stand-in; this is the paper's writer partition, read from the natural files).

Command:   fedjax-het --config experiments/natural/csefsl_table5_femnist.py --config.data_dir=DIR
           --workdir runs/natural/csefsl_table5_femnist --seeds 5   (GPU; not run here)
Paper:     non-IID acc / load GB / storage M: FSL_MC 72.58 / 36.23 / 6.03, FSL_OC 70.05 / 36.23 /
           1.28, FSL_AN 73.26 / 28.16 / 8.89, CSE h=2 70.63 / 19.58 / 4.14, h=4 68.77 / 15.29,
           h=5 67.91 / 14.43. Loads depend on the writers' sizes; storage is exact.
Setting:   csefsl_setup.femnist_by_writer: 3,400 writers (TFF/FedJAX files), 5 a round, B 10,
           21 local batches, η 0.03, 500 rounds, split_emnist_cnn.
"""
import importlib.util
import os

_SETUP = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, 'csefsl',
                      'csefsl_setup.py')
_spec = importlib.util.spec_from_file_location('csefsl_setup', _SETUP)
csefsl_setup = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(csefsl_setup)

TITLE = 'CSE-FSL Table V, F-EMNIST by writer'
COLUMNS = csefsl_setup.COLUMNS


def get_configs():
  return csefsl_setup.family(csefsl_setup.femnist_by_writer(), hs=(2, 4, 5))
