"""s/round and useful_step_fraction of FedAvg under heavy-tailed local work.

200 synthetic clients of lognormal sizes (sized_dirichlet, median 40, σ = 1),
cohort 20, one epoch of batch 10 each (systems.work_unit='epochs'), MLP
784-200-200-10. Prints one JSON line: the process's median s/round over
ROUNDS rounds after a compiling one, the rounds' `useful_step_fraction`
(absent before the metric existed), the fraction a loop of the static step
bound computes (`static_loop_fraction`: Σ steps / (K × max_local_steps)) and
Σ|params| after the rounds. Alternate code versions with PYTHONPATH:

    PYTHONPATH=. python experiments/bench/unequal_work.py ROUNDS BACKEND CHUNK
"""
import json, sys, time
import numpy as np
import jax
import jax.numpy as jnp
import fedjax_het
from fedjax_het import run
from fedjax_het.config import base_config

rounds, backend, chunk = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
M, K, B = 200, 20, 10
rng = np.random.default_rng(0)
sizes = np.exp(rng.normal(np.log(40), 1.0, M))          # median 40, heavy tail
config = base_config()
config.update(dict(algorithm='fedavg', model='mlp', num_clients=M,
                   clients_per_round=K, local_steps=1, batch_size=B,
                   client_lr=0.01, backend=backend, map_chunk_size=chunk,
                   aggregation_weights='uniform', partition='sized_dirichlet',
                   alpha=100.0, client_sizes=tuple(float(s) for s in sizes),
                   min_client_size=2, dataset='synthetic', seed=0))
config.dataset_options = dict(num_train=int(sizes.sum()), num_test=10,
                              shape=(28, 28, 1), num_classes=10)
config.model_options = dict(hidden=(200, 200))
config.systems.work_unit = 'epochs'
config.systems.local_work = (1,)
split, model, params, method = run.build_experiment(config)
runner = run.make_runner(config, method)
data = runner.place(split.train.to_device())
state = runner.place(method.init(params, jax.random.PRNGKey(1)))
counts = np.asarray(split.train.counts)
steps_all = -(-counts // B)
state, metrics = runner.run(state, data, 1)  # compile
jax.block_until_ready(state)
seconds, fractions, old_fractions = [], [], []
for r in range(rounds):
  plans = method.plan_round(state, data)
  steps = np.asarray(jnp.where(plans.is_active(), plans.num_steps, 0))
  old_fractions.append(steps.sum() / (K * method.max_local_steps()))
  tic = time.perf_counter()
  state, metrics = runner.run(state, data, 1)
  jax.block_until_ready(state)
  seconds.append(time.perf_counter() - tic)
  if 'useful_step_fraction' in metrics:
    fractions.append(float(metrics['useful_step_fraction'][0]))
print(json.dumps({
    'code': fedjax_het.__file__, 'backend': runner.backend, 'chunk': chunk,
    'counts_min': int(counts.min()), 'counts_median': float(np.median(counts)),
    'counts_max': int(counts.max()), 'max_local_steps': method.max_local_steps(),
    's_per_round_median': float(np.median(seconds)), 'seconds': seconds,
    'useful_step_fraction': fractions,
    'static_loop_fraction': [float(f) for f in old_fractions],
    'params_sum': float(sum(jnp.sum(jnp.abs(l)) for l in jax.tree.leaves(state.params)))}))
