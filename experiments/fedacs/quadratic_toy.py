"""FedACS's toy quadratic: where each method's iterate settles (Example 1-2, App. C).

M clients hold F_m(X) = ½(X − E_m)² (scalars, equal importance ω_m = 1/M)
with deterministic gradients: client m's only example is E_m. Each client has
a static upload failure probability q_m and T_m local steps. The methods are
the real `fedjax_het.algorithms` classes with this objective mixed in, run
through the round engine.

A client that runs its solver from X returns U_m = c_m (E_m − X), with the
contraction c_m = 1 − (1 − η)^{T_m} for SGD (closed forms for momentum and
FedProx in `contraction`). Any method whose expected update is
Σ_m e_m U_m (`expected_weights`) therefore has its iterate's stationary mean
at (App. C Eq. (39))

    X̃* = Σ_m w_m E_m / Σ_m w_m,   w_m = e_m c_m,

e.g. FedAvg: w_m = (1/M)(1 − q_m)(1 − (1 − η)^{T_m}), biased toward reliable,
hard-working clients; FedACS: w_m ∝ (1 − (1 − η)^{T_m})/T_m → 1/M as η → 0,
the true optimum X* = Σ_m E_m / M up to O(ηT).

`run(config)` returns, per method, the iterate averaged over the second half
of the rounds, the analytic X̃* and X*. `default_config()` lists the keys;
`quadratic.py` beside this file is the command line.
"""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from fedjax_het import algorithms
from fedjax_het.config import base_config, validate
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.data import FederatedData


def default_config() -> ml_collections.ConfigDict:
  """The toy's keys. Lists are per client; K = clients_per_round."""
  c = ml_collections.ConfigDict()
  c.optima = tuple(float(m) for m in range(10))                # E_m
  c.q = tuple(round(0.5 - 0.05 * m, 2) for m in range(10))     # q_m: client 9 most reliable
  c.local_steps = tuple(range(1, 11))                           # T_m: client 9 works most
  c.client_lr = 0.01
  c.rounds = 4000
  c.clients_per_round = 5
  c.methods = algorithms.FEDACS_FAMILY
  c.seed = 0
  c.calibrate = False          # App. I.2 step-length calibration
  c.participation = 'with_replacement'
  c.momentum = 0.0             # heavy-ball local solver
  c.prox_mu = 0.0              # FedProx local solver
  return c


def quadratic_data(optima) -> FederatedData:
  """One example per client, x = E_m ([M, 1, 1]); labels are unused zeros."""
  e = np.asarray(optima, np.float32).reshape(-1, 1, 1)
  m = e.shape[0]
  return FederatedData(x=e, y=np.zeros((m, 1), np.int32),
                       counts=np.ones((m,), np.int32)).to_device()


class QuadraticObjective:
  """Mixin: F_m(X) = ½‖X − E_m‖² as the data loss; logs the iterate X_r.

  Put it first among the bases (`quadratic_algorithm`), so the method's own
  loss terms (FedProx's proximal term) apply on top of it.
  """

  def data_loss(self, params, x, y, plan, ctx):
    del y, plan, ctx
    return 0.5 * jnp.mean(jnp.sum(jnp.square(params['x'] - x), axis=-1))

  def round_metrics(self, state, plans, outputs):
    metrics = super().round_metrics(state, plans, outputs)
    metrics['iterate'] = state.params['x']
    return metrics


def algorithm_config(config: ml_collections.ConfigDict,
                     method: str) -> ml_collections.ConfigDict:
  """The engine config of `method` on the toy (static systems, ω = 1/M)."""
  sizes = {len(config.optima), len(config.q), len(config.local_steps)}
  if len(sizes) != 1:
    raise ValueError('optima, q and local_steps need one value per client, '
                     f'got {len(config.optima)}, {len(config.q)} and '
                     f'{len(config.local_steps)} values.')
  c = base_config()
  c.algorithm = method
  c.seed = config.seed
  c.num_clients = len(config.optima)
  c.clients_per_round = config.clients_per_round
  c.local_steps = max(1, max(config.local_steps))
  c.batch_size = 1
  c.client_lr = config.client_lr
  c.client_momentum = config.momentum
  c.rounds = config.rounds
  c.aggregation_weights = 'uniform'
  c.systems.model = 'static'
  c.systems.q = tuple(config.q)
  c.systems.local_work = tuple(config.local_steps)
  c.fedacs.calibrate = config.calibrate
  c.fedacs.participation = config.participation
  c.fedacs.prox_mu = config.prox_mu
  validate(c)
  return c


def quadratic_algorithm(config: ml_collections.ConfigDict, data):
  """The registered method `config.algorithm` with the quadratic objective."""
  if config.algorithm not in algorithms.ALGORITHMS:
    raise ValueError(f'unknown method {config.algorithm!r}; choose from '
                     f'{", ".join(algorithms.FEDACS_FAMILY)}.')
  cls = algorithms.ALGORITHMS[config.algorithm]
  toy = type(f'Quadratic{cls.__name__}', (QuadraticObjective, cls), {})
  return toy(config, None, data)


def contraction(steps: np.ndarray, lr: float, momentum: float = 0.0,
                prox_mu: float = 0.0) -> np.ndarray:
  """c_m with U_m = c_m (E_m − X) after `steps` deterministic local steps.

  SGD: 1 − (1 − η)^T. FedProx: [1 − (1 − η(1 + μ))^T]/(1 + μ). Heavy-ball
  momentum (v ← ρv + g, x ← x − ηv): 1 − (A^T)₀₀ with the recursion matrix
  A = [[1 − η, −ηρ], [1, ρ]] on (x − E, v).
  """
  steps = np.asarray(steps)
  if prox_mu:
    return (1 - (1 - lr * (1 + prox_mu))**steps) / (1 + prox_mu)
  a = np.array([[1 - lr, -lr * momentum], [1.0, momentum]])
  return np.array([1 - np.linalg.matrix_power(a, int(t))[0, 0]
                   for t in steps])


def analytic_fixed_point(algorithm, state, optima) -> np.ndarray:
  """X̃* = Σ e_m c_m E_m / Σ e_m c_m from the method's own E[update] weights."""
  rnd = algorithm.round_systems(state)
  weights = np.asarray(algorithm.expected_weights(state, rnd), np.float64)
  lr = float(algorithm.client_lr(rnd))
  c = contraction(np.asarray(rnd.steps), lr, algorithm.config.client_momentum,
                  algorithm.options.prox_mu)
  w = weights * c
  return np.asarray(optima, np.float64) @ w / np.sum(w)


def run_method(config: ml_collections.ConfigDict, method: str) -> dict:
  """One method on the toy: time-averaged iterate, X̃* and X*."""
  engine_config = algorithm_config(config, method)
  data = quadratic_data(config.optima)
  algorithm = quadratic_algorithm(engine_config, data)
  state = algorithm.init({'x': jnp.zeros((1,), jnp.float32)},
                         jax.random.PRNGKey(config.seed))
  fixed_point = analytic_fixed_point(algorithm, state, config.optima)
  _, metrics = RoundRunner(algorithm, 'vmap').run(state, data, config.rounds)
  iterates = np.asarray(metrics['iterate'][:, 0], np.float64)
  return {
      'time_avg_iterate': float(iterates[config.rounds // 2:].mean()),
      'analytic_fixed_point': float(fixed_point),
      'true_optimum': float(np.mean(config.optima)),
  }


def run(config: ml_collections.ConfigDict) -> dict:
  """{method: {time_avg_iterate, analytic_fixed_point, true_optimum}}."""
  if config.rounds < 2:
    raise ValueError(f'rounds must be at least 2, got {config.rounds!r}.')
  return {method: run_method(config, method) for method in config.methods}
