"""Optimisers beyond optax's: Adan for the clients, FedOpt's rules for the server.

`adan(lr, weight_decay)` is Adan (Xie et al. 2022, Alg. 1) with its proximal
weight decay, the form Co-S²P trains with (timm's `Adan`, `no_prox=False`):

    m_k = (1−β1) m_{k−1} + β1 g_k
    v_k = (1−β2) v_{k−1} + β2 (g_k − g_{k−1})
    n_k = (1−β3) n_{k−1} + β3 [g_k + (1−β2)(g_k − g_{k−1})]²
    θ_{k+1} = (θ_k − η (m̂_k + (1−β2) v̂_k) / (√n̂_k + ε)) / (1 + λη)

(hats: bias-corrected; g_0 − g_{−1} := 0), with the paper's β1, β2, β3 =
0.02, 0.08, 0.01, i.e. optax's decay rates b = 1 − β = 0.98, 0.92, 0.99.
optax.adan's own weight decay is the decoupled θ ← θ − η(u + λθ) instead,
and its `scale_by_adan` (≤ 0.2.8) weighs g_k − g_{k−1} by β2 where Alg. 1 and
timm use 1 − β2 (google-deepmind/optax#1715), so `scale_by_adan` here is ours.

`server_optimizer(config)` is the server's optimiser on the round's
pseudo-gradient g = x − x̄ (the model minus the clients' weighted mean model;
Reddi et al. 2021, "Adaptive Federated Optimization", write Δ = x̄ − x = −g).
`sgd` is x ← x − η_s·g, with heavy-ball momentum `server_momentum` when set
(FedAvgM; the authors' code runs it as sgd with momentum 0.9). `adam`, `yogi`
and `adagrad` are FedAdam, FedYogi and FedAdagrad, Reddi et al.'s Algorithm 2
exactly (`scale_by_fedopt`), from m_{−1} = 0 and v_{−1} = `server_v0`:

    m_t = β1 m_{t−1} + (1 − β1) Δ_t
    v_t = v_{t−1} + Δ_t²                                  (FedAdagrad)
    v_t = v_{t−1} − (1 − β2) Δ_t² sign(v_{t−1} − Δ_t²)    (FedYogi)
    v_t = β2 v_{t−1} + (1 − β2) Δ_t²                      (FedAdam)
    x_{t+1} = x_t + η m_t / (√v_t + τ)

with the paper's β1 = 0.9, β2 = 0.99, τ = 1e-3 (the adaptivity) as defaults
and v_{−1} = 1e-6 = τ² (Algorithm 2 asks v_{−1} ≥ τ²). Algorithm 2 gives
FedAdagrad the momentum β1 too; the authors' code (Keras's Adagrad, x ← x +
η Δ/(√v + τ)) has none: `server_b1=0`. m and the update are
odd in Δ and v even, so running them on g and stepping x − η m/(√v + τ) is
the same update. optax's own differ: optax.adam and optax.yogi divide m and v
by their bias corrections 1 − β^t, which Algorithm 2 does not (optax.yogi also
starts m at its initial accumulator), and optax.adagrad has no momentum and
puts its ε inside the root, Δ/√(v + ε). `server_bias_correction` (adam, yogi)
gives the bias-corrected step that the authors' code ran (Keras's Adam, as
TFF's build_adam and build_yogi document it: η √(1 − β2^t)/(1 − β1^t) ·
m_t/(√v_t + τ)); its settings were β2 = 0.999 and accumulators from 0
(google-research/federated, optimization/docs/hyperparameters.md), as the
natural configs run them (experiments/natural/natural_setup.reddi).
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedjax_het.options import ConfigError


def scale_by_adan(b1: float = 0.98, b2: float = 0.92, b3: float = 0.99,
                  eps: float = 1e-8) -> optax.GradientTransformation:
  """Adan's direction (m̂_k + (1−β2) v̂_k) / (√n̂_k + ε), decay rates b = 1 − β.

  optax.scale_by_adan's state and interface, with Alg. 1's weight b2 = 1 − β2
  on the gradient difference and no ε inside the root (as timm).
  """

  def init(params):
    zeros = lambda: jax.tree.map(jnp.zeros_like, params)
    return optax.ScaleByAdanState(m=zeros(), v=zeros(), n=zeros(), g=zeros(),
                                  t=jnp.zeros([], jnp.int32))

  def update(updates, state, params=None):
    del params
    first = state.t == 0
    diff = jax.tree.map(lambda g, prev: jnp.where(first, jnp.zeros_like(g),
                                                  g - prev), updates, state.g)
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.m, updates)
    v = jax.tree.map(lambda v, d: b2 * v + (1 - b2) * d, state.v, diff)
    n = jax.tree.map(lambda n, g, d: b3 * n + (1 - b3) * jnp.square(g + b2 * d),
                     state.n, updates, diff)
    t = optax.safe_increment(state.t)
    c1, c2, c3 = (1 - b ** t for b in (b1, b2, b3))

    def direction(m, v, n):
      return ((m / c1.astype(m.dtype) + b2 * v / c2.astype(v.dtype)) /
              (jnp.sqrt(n / c3.astype(n.dtype)) + eps))

    return jax.tree.map(direction, m, v, n), optax.ScaleByAdanState(
        m=m, v=v, n=n, g=updates, t=t)

  return optax.GradientTransformation(init, update)


def proximal_weight_decay(lr, weight_decay: float
                          ) -> optax.GradientTransformation:
  """Turns a step −η·u (the incoming updates) into θ' = (θ − η·u)/(1 + λη)."""

  def update(updates, state, params):
    shrink = 1.0 / (1.0 + lr * weight_decay)
    return jax.tree.map(lambda u, p: (p + u) * shrink - p, updates,
                        params), state

  return optax.GradientTransformation(lambda params: optax.EmptyState(),
                                      update)


def adan(lr, weight_decay: float = 0.0) -> optax.GradientTransformation:
  """Adan with proximal weight decay (module docstring)."""
  return optax.chain(scale_by_adan(), optax.scale_by_learning_rate(lr),
                     proximal_weight_decay(lr, weight_decay))


# ---- the server ------------------------------------------------------------
# The server optimisers and the config keys each reads besides `server_lr`.
_ADAPTIVE_KEYS = ('server_b1', 'server_tau', 'server_v0')
SERVER_OPTIMIZER_KEYS = {
    'sgd': ('server_momentum',),
    'adam': _ADAPTIVE_KEYS + ('server_b2', 'server_bias_correction'),
    'yogi': _ADAPTIVE_KEYS + ('server_b2', 'server_bias_correction'),
    'adagrad': _ADAPTIVE_KEYS,
}
SERVER_OPTIMIZERS = tuple(SERVER_OPTIMIZER_KEYS)
# The keys some server optimisers read and others do not, and every key of
# the server optimiser.
SERVER_HYPERPARAMETERS = tuple(dict.fromkeys(
    key for keys in SERVER_OPTIMIZER_KEYS.values() for key in keys))
SERVER_KEYS = ('server_optimizer', 'server_lr') + SERVER_HYPERPARAMETERS


def _second_moment(rule: str, b2: float):
  """v_t from v_{t−1} and g_t² (module docstring), by rule."""
  if rule == 'adagrad':
    return lambda v, g2: v + g2
  if rule == 'yogi':
    return lambda v, g2: v - (1 - b2) * g2 * jnp.sign(v - g2)
  return lambda v, g2: b2 * v + (1 - b2) * g2


class FedOptState(NamedTuple):
  """Algorithm 2's moments (leaves like the params) and the step count t."""
  m: optax.Params
  v: optax.Params
  count: jax.Array


def scale_by_fedopt(rule: str, b1: float, b2: float, tau: float, v0: float,
                    bias_correction: bool = False
                    ) -> optax.GradientTransformation:
  """The direction m_t/(√v_t + τ) of Reddi et al.'s Algorithm 2 on the
  pseudo-gradients g_t (module docstring; `rule`: adam, yogi or adagrad),
  times √(1 − β2^t)/(1 − β1^t) with `bias_correction`."""
  second_moment = _second_moment(rule, b2)

  def init(params):
    return FedOptState(m=jax.tree.map(jnp.zeros_like, params),
                       v=jax.tree.map(lambda p: jnp.full_like(p, v0), params),
                       count=jnp.zeros([], jnp.int32))

  def update(updates, state, params=None):
    del params
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.m, updates)
    v = jax.tree.map(lambda v, g: second_moment(v, jnp.square(g)), state.v,
                     updates)
    count = optax.safe_increment(state.count)
    scale = (jnp.sqrt(1 - b2 ** count) / (1 - b1 ** count) if bias_correction
             else 1.0)
    direction = jax.tree.map(
        lambda m, v: (scale * m / (jnp.sqrt(v) + tau)).astype(m.dtype), m, v)
    return direction, FedOptState(m=m, v=v, count=count)

  return optax.GradientTransformation(init, update)


def server_optimizer(config) -> optax.GradientTransformation:
  """The run's server optimiser on the pseudo-gradient (module docstring)."""
  if config.server_optimizer == 'sgd':
    return optax.sgd(config.server_lr, momentum=config.server_momentum or None)
  return optax.chain(
      scale_by_fedopt(config.server_optimizer, config.server_b1,
                      config.server_b2, config.server_tau, config.server_v0,
                      config.server_bias_correction),
      optax.scale_by_learning_rate(config.server_lr))


def check_server_keys(values, defaults) -> None:
  """ConfigError naming a server key set away from its default that the
  chosen `server_optimizer` does not read (`values`, `defaults`: the core
  keys' values and defaults, by key)."""
  chosen = values['server_optimizer']
  for key in SERVER_HYPERPARAMETERS:
    if key in SERVER_OPTIMIZER_KEYS[chosen] or values[key] == defaults[key]:
      continue
    readers = [name for name, keys in SERVER_OPTIMIZER_KEYS.items()
               if key in keys]
    raise ConfigError(
        f'{key} = {values[key]!r} is set, but server_optimizer={chosen!r} does '
        f'not read it (read by {", ".join(readers)}); leave it unset or choose '
        'one of those.')


def refuse_server_keys(values, defaults, method) -> None:
  """ConfigError where `values` set a server key (away from `defaults`) for a
  method whose server rule is not an optimiser step on the pseudo-gradient
  (`method.own_server_rule`)."""
  if method.own_server_rule is None:
    return
  for key in SERVER_KEYS:
    if values[key] != defaults[key]:
      raise ConfigError(
          f'{key} = {values[key]!r} is set, but {method.name} takes no server '
          f'optimiser step ({method.own_server_rule}); leave the server keys '
          'unset.')
