"""FedACS's toy quadratic: where each method's iterate settles (Example 1-2, App. C).

M clients hold F_m(X) = ½‖X − E_m‖² (E_m scalars or vectors of one length,
equal importance ω_m = 1/M) with deterministic gradients: client m's only
example is E_m. Upload failure probabilities q_m and local work T_m come from
the engine's systems model (`config.systems`: static lists, per-round
dynamic draws, ...). The methods are the real `fedjax_het.methods`
classes with this objective mixed in, run through the round engine.

A client that runs its solver from X returns U_m = c_m (E_m − X), with the
contraction c_m = 1 − (1 − η)^{T_m} for SGD (every solver's, from its
deterministic recursion, in `contraction`). Any method whose expected update
is Σ_m e_m U_m (`expected_weights`) therefore has its iterate's stationary
mean at (App. C Eq. (39))

    X̃* = Σ_m w_m E_m / Σ_m w_m,   w_m = E_r[e_m c_m],

the average over the rounds' systems draws (constant for static systems),
e.g. FedAvg: w_m = (1/M)(1 − q_m)(1 − (1 − η)^{T_m}), biased toward
reliable, hard-working clients; FedACS: w_m ∝ (1 − (1 − η)^{T_m})/T_m → 1/M
as η → 0, the true optimum X* = Σ_m E_m / M up to O(ηT).

`run(config)` returns, per method, the iterate averaged over the second half
of the rounds, the analytic X̃*, X* and their distances to X* (the paper's
Fig. 4 and Fig. 7 plot ‖X_r − X*‖). `default_config()` lists the keys;
`quadratic.py` beside this file is the command line, and `fig4.py`,
`fig7.py` hold the paper's settings.
"""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from fedjax_het import methods
from fedjax_het.config import base_config, validate
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.data import FederatedData


def default_config() -> ml_collections.ConfigDict:
  """The toy's keys. K = clients_per_round; `systems` is the engine's section."""
  c = ml_collections.ConfigDict()
  c.optima = tuple(float(m) for m in range(10))                # E_m
  c.systems = base_config().systems
  c.systems.q = tuple(round(0.5 - 0.05 * m, 2) for m in range(10))  # q_m: client 9 most reliable
  c.systems.local_work = tuple(range(1, 11))                   # T_m: client 9 works most
  c.client_lr = 0.01
  c.rounds = 4000
  c.clients_per_round = 5
  c.methods = methods.FEDACS_FAMILY
  c.seed = 0
  c.calibrate = False          # App. I.2 step-length calibration
  c.participation = 'with_replacement'
  c.momentum = 0.0             # heavy-ball local solver
  c.prox_mu = 0.0              # FedProx local solver
  c.lr_decay = 0.0             # decayed-lr local solver: step t at η(1 − d)^t
  return c


def gaussian_optima(num_clients: int, dimension: int,
                    seed: int = 0) -> tuple:
  """E_m ~ N(0, I_dimension) for m < num_clients (numpy's default_rng(seed)),
  as a config value: a tuple of `num_clients` tuples of floats."""
  draws = np.random.default_rng(seed).normal(size=(num_clients, dimension))
  return tuple(tuple(float(v) for v in row) for row in draws)


def paper_config(num_clients: int, clients_per_round: int, client_lr: float,
                 systems: dict, **keys) -> ml_collections.ConfigDict:
  """The toy as the paper's Fig. 4 and Fig. 7 set it: E_m ~ N(0, I_10) for
  `num_clients` clients, K = `clients_per_round`, lr η, the engine's systems
  keys `systems`, then any other toy `keys`."""
  c = default_config()
  c.optima = gaussian_optima(num_clients, 10)
  c.clients_per_round = clients_per_round
  c.client_lr = client_lr
  c.systems = base_config().systems
  c.systems.update(systems)
  c.update(keys)
  return c


def optima_array(optima) -> np.ndarray:
  """E as float64 [M, D] (scalar optima: D = 1)."""
  e = np.asarray(optima, np.float64)
  return e.reshape(e.shape[0], -1)


def quadratic_data(optima) -> FederatedData:
  """One example per client, x = E_m ([M, 1, D]); labels are unused zeros."""
  e = optima_array(optima).astype(np.float32)[:, None, :]
  m = e.shape[0]
  return FederatedData(x=e, y=np.zeros((m, 1), np.int32),
                       counts=np.ones((m,), np.int32)).to_device()


class QuadraticObjective:
  """Mixin: F_m(X) = ½‖X − E_m‖² as the data loss; logs X_r and the systems.

  Put it first among the bases (`quadratic_algorithm`), so the method's own
  loss terms (FedProx's proximal term) apply on top of it.
  """

  def data_loss(self, params, x, y, plan, ctx):
    del y, plan, ctx
    return 0.5 * jnp.mean(jnp.sum(jnp.square(params['x'] - x), axis=-1))

  def systems_metrics(self, state) -> dict:
    """What X̃* needs of a round: the E[update] weights e [M], the local
    steps [M] and the clients' lr (a scalar)."""
    rnd = self.systems(state)
    return {'expected_weights': self.expected_weights(state, rnd),
            'steps': rnd.steps, 'lr': self.client_lr(rnd)}

  def round_metrics(self, state, plans, outputs):
    metrics = super().round_metrics(state, plans, outputs)
    metrics['iterate'] = state.params['x']
    metrics.update(self.systems_metrics(state))
    return metrics


def algorithm_config(config: ml_collections.ConfigDict,
                     method: str) -> ml_collections.ConfigDict:
  """The engine config of `method` on the toy (ω = 1/M); the systems model
  checks the per-client lists when the method is built."""
  c = base_config()
  c.algorithm = method
  c.seed = config.seed
  c.num_clients = len(config.optima)
  c.clients_per_round = config.clients_per_round
  c.batch_size = 1
  c.client_lr = config.client_lr
  c.client_momentum = config.momentum
  c.rounds = config.rounds
  c.aggregation_weights = 'uniform'
  c.systems.update(config.systems)
  c.fedacs.calibrate = config.calibrate
  c.fedacs.participation = config.participation
  c.fedacs.prox_mu = config.prox_mu
  c.fedacs.lr_decay = config.lr_decay
  validate(c)
  return c


def quadratic_algorithm(config: ml_collections.ConfigDict, data):
  """The registered method `config.algorithm` with the quadratic objective."""
  if config.algorithm not in methods.ALGORITHMS:
    raise ValueError(f'unknown method {config.algorithm!r}; choose from '
                     f'{", ".join(methods.FEDACS_FAMILY)}.')
  cls = methods.ALGORITHMS[config.algorithm]
  toy = type(f'Quadratic{cls.__name__}', (QuadraticObjective, cls), {})
  return toy(config, None, data)


def contraction(steps, lr, momentum: float = 0.0, prox_mu: float = 0.0,
                lr_decay: float = 0.0) -> np.ndarray:
  """c with U_m = c (E_m − X) after `steps` deterministic local steps.

  The local solver on ½‖x − E_m‖² + ½μ‖x − X‖² in u = (x − E_m)/(X − E_m),
  u₀ = 1: for t < S, g = u + μ(u − 1), v ← ρv + g, u ← u − η(1 − d)^t v;
  c = 1 − u_S. SGD: 1 − (1 − η)^S; FedProx: [1 − (1 − η(1 + μ))^S]/(1 + μ);
  decayed lr: 1 − Π_{t<S} (1 − η(1 − d)^t).

  Args:
    steps: int array of local steps S.
    lr: the clients' lr η, broadcast against `steps`.
    momentum, prox_mu, lr_decay: the solver's ρ, μ and d.

  Returns:
    float64, shaped like steps and lr broadcast.
  """
  steps = np.asarray(steps)
  lr = np.asarray(lr, np.float64)
  u = np.ones(np.broadcast_shapes(steps.shape, lr.shape))
  v = np.zeros_like(u)
  for t in range(int(steps.max(initial=0))):
    v_next = momentum * v + u + prox_mu * (u - 1)
    u_next = u - lr * (1 - lr_decay)**t * v_next
    active = t < steps
    u, v = np.where(active, u_next, u), np.where(active, v_next, v)
  return 1 - u


def analytic_fixed_point(algorithm, metrics: dict, optima) -> np.ndarray:
  """X̃* = Σ w_m E_m / Σ w_m, w_m = e_m c_m averaged over the rounds of
  `metrics` (`systems_metrics`, one round [M] or stacked [R, M]). [D]."""
  e = optima_array(optima)
  m = e.shape[0]
  weights = np.asarray(metrics['expected_weights'], np.float64).reshape(-1, m)
  steps = np.asarray(metrics['steps']).reshape(-1, m)
  lr = np.asarray(metrics['lr'], np.float64).reshape(-1, 1)
  c = contraction(steps, lr, algorithm.config.client_momentum,
                  algorithm.options.prox_mu, algorithm.options.lr_decay)
  w = np.mean(weights * c, axis=0)
  return w @ e / np.sum(w)


def run_method(config: ml_collections.ConfigDict, method: str) -> dict:
  """One method on the toy: time-averaged iterate, X̃*, X* and distances."""
  engine_config = algorithm_config(config, method)
  data = quadratic_data(config.optima)
  algorithm = quadratic_algorithm(engine_config, data)
  e = optima_array(config.optima)
  state = algorithm.init({'x': jnp.zeros((e.shape[1],), jnp.float32)},
                         jax.random.PRNGKey(config.seed))
  _, metrics = RoundRunner(algorithm, 'vmap').run(state, data, config.rounds)
  metrics = jax.device_get(metrics)
  optimum = e.mean(axis=0)
  tail = np.asarray(metrics['iterate'], np.float64)[config.rounds // 2:]
  time_avg = tail.mean(axis=0)
  fixed_point = analytic_fixed_point(algorithm, metrics, config.optima)
  distance = lambda x: float(np.linalg.norm(x - optimum, axis=-1).mean())
  return {
      'time_avg_iterate': time_avg.tolist(),
      'analytic_fixed_point': fixed_point.tolist(),
      'true_optimum': optimum.tolist(),
      'distance_time_avg': distance(time_avg),       # ‖X̄ − X*‖
      'distance_fixed_point': distance(fixed_point),  # ‖X̃* − X*‖
      'mean_distance': distance(tail),  # mean_r ‖X_r − X*‖, Fig. 4/7's tail
  }


def run(config: ml_collections.ConfigDict) -> dict:
  """{method: run_method's row}."""
  if config.rounds < 2:
    raise ValueError(f'rounds must be at least 2, got {config.rounds!r}.')
  return {method: run_method(config, method) for method in config.methods}
