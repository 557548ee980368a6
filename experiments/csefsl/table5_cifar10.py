"""CSE-FSL Table V, CIFAR-10 (IID; `--config.partition=shards` for the non-IID column).

Command:   fedjax-het --config experiments/csefsl/table5_cifar10.py --config.data_dir=DIR
           --workdir runs/csefsl/table5_cifar10 --seeds 5      (GPU, real CIFAR-10; not run here)
Paper:     IID acc / load GB / storage M: FSL_MC 80.55 / 172.46 / 5.34, FSL_OC 73.74 / 172.46 / 1.50,
           FSL_AN 77.75 / 86.80 / 5.46, CSE h=5 76.52 / 18.14 / 1.61, h=10 75.75 / 9.55,
           h=25 73.57 / 4.40, h=50 73.29 / 2.69 (non-IID: 61.17, 50.14, 54.67, 42.33, 40.24, 37.94, 34.97).
           The loads and storage are reproduced exactly by tests/test_csefsl.py.
"""
from csefsl_setup import COLUMNS, cifar10, family

TITLE = 'CSE-FSL Table V, CIFAR-10'


def get_configs():
  return family(cifar10(iid=True), hs=(5, 10, 25, 50))
