"""Over-the-air computation (AirComp) of cell averages, HIST Section V.

In a cell, n_j single-antenna clients send one element k of their updates
δ_i at the same time on the same subcarrier, and the M-antenna edge server
receives the superposition (Eq. (22)):

    y_k = Σ_i h_i α_i (δ_i)_k + z_k,   z_k ~ CN(0, σ0² I_M),   |α_i|² ≤ P.

The transceiver (Eqs. (23)-(25)):
- receive beamformer m = a/ν with ||a|| = 1 and ν = √P·min_i |aᴴh_i|;
- channel-inversion precoders α_i = w_i (mᴴh_i)* / |mᴴh_i|², so that
  mᴴh_i α_i = w_i (w_i: client i's normalised weight, 1/n_j in the paper)
  and |α_i|² = w_i² P g/|aᴴh_i|² ≤ P;
- estimate mᴴy_k = Σ_i w_i (δ_i)_k + (1/ν) aᴴz_k, unbiased, with
  MSE = σ0²/(P·g) = 1/(SNR·g) per element, g = min_i |aᴴh_i|².

The beamformer maximises g (Eq. (33), a non-convex QCQP, re-solved every edge
round). The paper uses the Mirror-Prox-based successive convex approximation
(SCA) of [fang2021over] without details; `max_min_beamformer` is that scheme
as we read it: at the iterate a, |bᴴh_i|² ≥ 2Re{(aᴴh_i)*(bᴴh_i)} − |aᴴh_i|²
(tight at b = a), and the concave max-min of these affine lower bounds over
||b|| ≤ 1 is solved by mirror-prox on its saddle form (entropic steps on the
client weights λ of the simplex, best response b = v/||v|| with
v = 2Σ λ_i (aᴴh_i)* h_i, averaged). It starts from the principal eigenvector
of Σ_i h_i h_iᴴ/||h_i||² and keeps the best iterate, so g never
falls below the initialiser's.

The payload is real, the noise complex. `noise='real'` adds real Gaussian
noise of variance MSE per element, the paper's Eq. (25)/(28) literally;
`noise='complex'` keeps the real part of the complex estimate, whose noise
variance is MSE/2; `noise='none'` is the noiseless channel.
Everything is jit-able; cells are segments of a client axis, so cells of
unequal size work.
"""
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_het.core import aggregation

PyTree = Any
NOISE_KINDS = ('real', 'complex', 'none')


class AirCompStats(NamedTuple):
  """Per-cell facts of one over-the-air aggregation.

  Attributes:
    mse: float [S] per-element estimation MSE 1/(SNR·g), Eq. (25).
    gain: float [S] g = min_i |aᴴh_i|² of the solved beamformer.
    initial_gain: float [S] g of the initialiser (principal eigenvector).
    tx_power: float [C] |α_i|² of every client (≤ P).
  """
  mse: jax.Array
  gain: jax.Array
  initial_gain: jax.Array
  tx_power: jax.Array


def rayleigh_channels(key: jax.Array, num_clients: int,
                      num_antennas: int) -> jax.Array:
  """h_i ~ CN(0, I_M) i.i.d.: complex64 [C, M] with E|h_im|² = 1."""
  return jax.random.normal(key, (num_clients, num_antennas), jnp.complex64)


def _gains(a: jax.Array, h: jax.Array) -> jax.Array:
  """|aᴴh_i|² for every client. [C]."""
  return jnp.abs(h @ jnp.conj(a))**2


def min_gain(a: jax.Array, h: jax.Array, valid: jax.Array) -> jax.Array:
  """min over valid clients of |aᴴh_i|², the g of Eq. (25)."""
  return jnp.min(jnp.where(valid, _gains(a, h), jnp.inf))


def principal_direction(h: jax.Array, valid: jax.Array) -> jax.Array:
  """Unit principal eigenvector of Σ_valid h_i h_iᴴ/||h_i||² (the initialiser)."""
  norms = jnp.sum(jnp.abs(h)**2, axis=-1, keepdims=True)
  directions = jnp.where(valid[:, None], h / jnp.sqrt(norms), 0)
  covariance = directions.T @ jnp.conj(directions)  # Σ h hᴴ / ||h||²
  _, vectors = jnp.linalg.eigh(covariance)
  return vectors[:, -1]


def _sca_step(a: jax.Array, h: jax.Array, valid: jax.Array,
              inner_steps: int, step_size: float) -> jax.Array:
  """One SCA step: maximise min_i of the affine lower bounds around `a`.

  Mirror-prox on max_{||b||≤1} min_{λ∈Δ} Σ_i λ_i ℓ_i(b) with
  ℓ_i(b) = 2Re{u_i* bᴴh_i} − |u_i|², u_i = aᴴh_i. Returns the unit-norm
  average of the best responses at the mirror-prox midpoints.
  """
  u = h @ jnp.conj(a)
  scale = jnp.max(jnp.where(valid, jnp.abs(u)**2, 0.0))
  eta = step_size / jnp.maximum(scale, 1e-30)

  def best_response(lam):
    v = 2.0 * jnp.sum((lam * jnp.conj(u))[:, None] * h, axis=0)
    return v / jnp.maximum(jnp.linalg.norm(v), 1e-30)

  def bounds(b):
    return 2.0 * jnp.real(jnp.conj(u) * (h @ jnp.conj(b))) - jnp.abs(u)**2

  def entropic_step(lam, gradient):
    logits = jnp.where(valid, jnp.log(jnp.maximum(lam, 1e-30)) - eta *
                       gradient, -jnp.inf)
    return jax.nn.softmax(logits)

  def mirror_prox(carry, _):
    lam, total = carry
    middle = entropic_step(lam, bounds(best_response(lam)))
    b_middle = best_response(middle)
    return (entropic_step(lam, bounds(b_middle)), total + b_middle), None

  start = valid / jnp.sum(valid)
  (_, total), _ = jax.lax.scan(mirror_prox, (start, jnp.zeros_like(a)), None,
                               length=inner_steps)
  return total / jnp.maximum(jnp.linalg.norm(total), 1e-30)


def max_min_beamformer(h: jax.Array, valid: jax.Array, *, sca_steps: int = 10,
                       inner_steps: int = 50, step_size: float = 0.5
                       ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Receive beamformer a (||a|| = 1) maximising min_i |aᴴh_i|², Eq. (33).

  Args:
    h: complex [C, M] channels.
    valid: bool [C], the clients of this cell (others are ignored).
    sca_steps: SCA iterations (convex approximations).
    inner_steps: mirror-prox iterations per SCA step.
    step_size: mirror-prox step in units of 1/max_i |aᴴh_i|².

  Returns:
    (a [M], g, g of the initialiser); g ≥ the initialiser's g.
  """
  start = principal_direction(h, valid)
  start_gain = min_gain(start, h, valid)

  def sca(carry, _):
    a, best, best_gain = carry
    a = _sca_step(a, h, valid, inner_steps, step_size)
    gain = min_gain(a, h, valid)
    better = gain > best_gain
    return (a, jnp.where(better, a, best),
            jnp.where(better, gain, best_gain)), None

  (_, best, best_gain), _ = jax.lax.scan(
      sca, (start, start, start_gain), None, length=sca_steps)
  return best, best_gain, start_gain


def check_positive(**values) -> None:
  """Raises ValueError for a concrete value ≤ 0 (traced values pass)."""
  for name, value in values.items():
    if isinstance(value, (int, float)) and not value > 0:
      raise ValueError(f'{name} must be positive, got {value!r}.')


def over_the_air_mean(key: jax.Array, values: PyTree, weights: jax.Array,
                      segment_ids: jax.Array, num_segments: int,
                      channels: jax.Array, masks: PyTree = None, *, snr,
                      power=1.0, noise: str = 'real', sca_steps: int = 10,
                      inner_steps: int = 50
                      ) -> tuple[PyTree, PyTree, AirCompStats]:
  """Per-cell weighted means of client updates received over the air.

  The over-the-air twin of `core.aggregation.masked_segment_mean`, on its
  `segment_sums`: cell s
  estimates Σ_{i∈s} ŵ_i m_ik v_ik / Σ_{i∈s} ŵ_i m_ik (ŵ: weights normalised
  in the cell, m: masks) from the superposition of the precoded signals of
  its clients, plus receiver noise of variance `mse_s` on every coordinate
  any of its clients sends (divided by the coverage, 1 when a cell's clients
  share one mask as in HIST).

  Args:
    key: PRNG key of the receiver noise.
    values: pytree of real [C, ...] client payloads (HIST: δ_i, Eq. (21)).
    weights: float [C] aggregation weights (0 drops a client).
    segment_ids: int [C] cell of each client, in [0, num_segments).
    num_segments: S cells (static).
    channels: complex [C, M] channels h_i of this slot.
    masks: pytree like `values` of 0/1 entries, or None.
    snr: P/σ0² (linear), a scalar or float [S]; must be > 0.
    power: the precoder power budget P > 0 (only scales α_i).
    noise: 'real', 'complex' or 'none' (module docstring).
    sca_steps, inner_steps: beamformer solver iterations.

  Returns:
    (means, coverage, stats): [S, ...] estimates, the Σ ŵ m denominators
    ([S, ...], or [S] per leaf without masks) and `AirCompStats`.
  """
  check_positive(snr=snr, power=power)
  if noise not in NOISE_KINDS:
    raise ValueError(f'unknown AirComp noise {noise!r}; choose one of '
                     f'{", ".join(NOISE_KINDS)}.')
  weights = weights.astype(jnp.float32)
  cell_weight = jax.ops.segment_sum(weights, segment_ids,
                                    num_segments=num_segments)
  normalised = weights / jnp.where(cell_weight > 0, cell_weight,
                                   1.0)[segment_ids]
  cells = jnp.arange(num_segments)
  valid = (segment_ids[None, :] == cells[:, None]) & (weights[None, :] > 0)
  a, gain, initial_gain = jax.vmap(
      lambda v: max_min_beamformer(channels, v, sca_steps=sca_steps,
                                   inner_steps=inner_steps))(valid)
  snr = jnp.broadcast_to(jnp.asarray(snr, jnp.float32), (num_segments,))
  mse = 1.0 / (snr * gain)                                   # Eq. (25)
  nu = jnp.sqrt(power * gain)                                # ν = √P·√g
  received = jnp.sum(jnp.conj(a[segment_ids]) * channels, -1) / nu[segment_ids]
  precoder = normalised * jnp.conj(received) / jnp.abs(received)**2  # Eq. (23)
  effective = jnp.real(received * precoder)                  # = ŵ_i
  noise_std = jnp.sqrt(mse)
  # The superposition sums the effective weights' signals, the coverage
  # the nominal weights (`segment_sums` with its denominator weights).
  superposed, coverage = aggregation.segment_sums(
      values, effective, segment_ids, num_segments, masks,
      denominator_weights=normalised)
  leaves, treedef = jax.tree.flatten(superposed)

  def receive(index, signal):
    if noise == 'none':
      return signal
    leaf_key = jax.random.fold_in(key, index)
    # (1/ν)aᴴz ~ CN(0, MSE): its real part has variance MSE/2.
    draw = (jnp.real(jax.random.normal(leaf_key, signal.shape, jnp.complex64))
            if noise == 'complex' else jax.random.normal(leaf_key, signal.shape))
    return signal + noise_std.reshape((-1,) + (1,) * (signal.ndim - 1)) * draw

  noisy = [receive(i, signal) for i, signal in enumerate(leaves)]
  means = jax.tree.map(
      lambda n, c, v: aggregation.ratio(n, c).astype(v.dtype),
      treedef.unflatten(noisy), coverage, values)
  stats = AirCompStats(mse=mse, gain=gain, initial_gain=initial_gain,
                       tx_power=jnp.abs(precoder)**2)
  return means, coverage, stats
