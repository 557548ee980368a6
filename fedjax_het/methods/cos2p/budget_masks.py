"""Unit masks trained against a width budget: Co-S²P's Eq. 2, the loss of
its mask phase (`cos2p.Cos2p`) and of FedPM's score training (`fedpm`).

One logit I per unit (MSA head, output row of the attention projection, fc1
and fc2 of every block; `models.vit`) of the kinds in `cos2p.learned_units`,
{kind: [L, U]} in `client_state['logits']`; the weights stay fixed. A step
samples M ~ Bern(σ(I)) with a straight-through estimator (`ste`:
'identity' ∂M/∂P = 1, the paper; 'probability' ∂M/∂P = P, the authors'
Bern) and minimises

    CE(deepest exit) + λ1·|Σ M̂ / Σ size(M̂) − R_w|

(λ1 = `lambda_budget`): the kept fraction counts the trainable blocks'
masked weight entries, rows weighted by their inputs; the kinds not learned
keep the round's fixed units.
"""
import jax
import jax.numpy as jnp
import optax

from fedjax_het.core import program
from fedjax_het.methods.cos2p.vit_engine import ENGINE_KEYS, VitOnClock


def straight_through(logits: jax.Array, key: jax.Array, ste: str) -> jax.Array:
  """M ~ Bern(σ(I)) whose gradient flows to I (Eq. 2).

  Forward: the Bernoulli draw. Backward: ∂M/∂P = 1 ('identity') or P
  ('probability'), times σ'(I) from P = σ(I).
  """
  p = jax.nn.sigmoid(logits)
  draw = jax.random.bernoulli(key, jax.lax.stop_gradient(p)).astype(p.dtype)
  surrogate = p if ste == 'identity' else 0.5 * p * p
  return draw + surrogate - jax.lax.stop_gradient(surrogate)


class BudgetMasks(VitOnClock):
  """The ViT engine with Eq. 2's mask loss (module docstring); it changes
  none of the engine's behaviour."""

  reads_keys = ENGINE_KEYS | {'learned_units', 'ste', 'lambda_budget'}

  def kept_fraction(self, units: dict, window: dict) -> jax.Array:
    """Σ M̂ / Σ size(M̂) over the trainable blocks' learned masks (Eq. 2):
    a unit counts its kernel entries (rows weighted by their inputs)."""
    m = self.model
    entries = {'heads': 3 * m.hidden * m.head_dim, 'proj': m.hidden,
               'fc1': m.hidden, 'fc2': m.mlp}
    trained = (window['run'] & ~window['frozen']).astype(jnp.float32)
    kept = total = 0.0
    for kind in self.options.learned_units:
      kept += entries[kind] * jnp.sum(trained @ units[kind])
      total += entries[kind] * units[kind].shape[1] * jnp.sum(trained)
    return kept / total

  def mask_loss(self, local: program.LocalModel, x, y, plan, ctx):
    """Eq. 2: CE of the deepest exit + λ1·|kept fraction − R_w|."""
    window = plan.extras
    sampled = {k: straight_through(local.client_state['logits'][k],
                                   jax.random.fold_in(ctx.key, i),
                                   self.options.ste)
               for i, k in enumerate(self.options.learned_units)}
    units = {**window['units'], **sampled}
    logits = self.exits_logits(local.params, x, units, window)
    ce = optax.softmax_cross_entropy_with_integer_labels(
        logits[window['teacher']], y).mean()
    gap = jnp.abs(self.kept_fraction(units, window) - window['width'])
    return ce + self.options.lambda_budget * gap
