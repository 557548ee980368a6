"""FedAvg on LEAF's CelebA by celebrity (Smiling or not): LEAF's 4-block CNN.

Command:   fedjax-het --config experiments/natural/fedavg_celeba.py --config.data_dir=DIR
           (DIR holds LEAF's data/celeba/data/train/ and test/ as train/ and test/, and CelebA's
           img_align_celeba/, or --config.natural.images_dir=PATH; the 84x84 images are decoded
           once into DIR/fedjax_het_cache; README "Natural datasets"; not run here: no copy of
           the set is on this machine)
Setting:   LEAF (Caldas et al. 2018, "LEAF: A Benchmark for Federated Settings"; its code's
           defaults: models/main.py -t large, models/baseline_constants.py): 2 clients a round,
           400 rounds evaluated every 20, B 10, 1 local epoch, SGD lr 0.1, 4 x (conv 32, batch
           norm, max-pool, ReLU) (natural_setup.celeba).
Published: LEAF reports CelebA as curves, no single target number; none is quoted here (not
           re-checked).
CPU-sized: --config.num_clients=200 --config.rounds=100
"""
from natural_setup import celeba


def get_config():
  return celeba()
