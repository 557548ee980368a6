"""The CPU-sized variant of femnist.py: FedBuff on 100 synthetic clients.

Command:   fedjax-het --config experiments/fedbuff/femnist_cpu.py
Setting:   femnist.py's clock (τ_max = 5, 1/√(1 + τ) normalised by the buffer's sum) scaled down:
           100 clients of the synthetic set (noise 3, Dirichlet 0.5), K = 10, C = 12, 40 server steps of
           an MLP, 5 local steps of batch 10; README "The buffered clock" gives its measured
           numbers (virtual time to the 0.6 target, wall time).
"""
from femnist import fedbuff
from fedjax_het.config import base_config


def get_config():
  c = base_config()
  c.update(algorithm='fedavg', dataset='synthetic', num_clients=100, partition='dirichlet',
           alpha=0.5, model='mlp', rounds=40, local_steps=5, batch_size=10, client_lr=0.05,
           eval_every=10, checkpoint_every=40, rounds_per_call=10, target_accuracy=0.6)
  c.dataset_options = {'noise': 3.0}
  c.model_options.hidden = (64,)
  return fedbuff(c, buffer_size=10, concurrency=12)
