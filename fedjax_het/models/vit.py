"""Vision Transformer with stacked blocks, structured unit masks and an exit after every block.

Pre-norm ViT (Dosovitskiy et al. 2021) as Co-S²P trains it (Tab. 4 and the
authors' code): patches → linear embedding, a CLS token and learned positions,
L blocks of x ← x + MSA(LN(x)), x ← x + MLP(LN(x)) (GELU), and an exit head
(LayerNorm + Linear on the CLS token) after every block. There is no final
LayerNorm outside the exit heads, and no dropout (the authors' code has 0.2
after the attention projection and 0.5 after fc1; the paper does not mention
it). The attention scale is head_dim^-½ (the authors' code uses dim^-½).

The L blocks' parameters are stacked (leaves [L, ...]) and run in one
`lax.scan`, so what a client computes is data, never a recompilation:

- `units` (`UNIT_KINDS`, float [L, U], 1 keeps): one value per MSA head
  (its q, k and v rows), per output row of the attention projection, of fc1
  and of fc2. A masked head has q = k = v = 0 and so outputs 0; masked fc1
  rows give GELU(0) = 0 to fc2; masked projection / fc2 rows add 0 to the
  residual stream, which keeps its full width D (Sec. 4.1: "zero-padded").
  Multiplying the activations equals multiplying the weight rows and biases,
  i.e. physically slicing the submodel (tests/test_vit.py checks values and
  gradients); values in (0, 1) relax the mask (Co-S²P's straight-through
  estimator, Eq. 2).
- `window` (`Window`): which blocks run (pruned blocks above a client's
  depth are skipped: x passes through) and which are frozen (forward only;
  frozen blocks form the bottom of a window, so the residual stream after
  them is cut from the gradient, and nothing below — blocks, embedding —
  trains).

`apply(..., all_exits=True)` returns the logits of every exit [L, B, C]
(an exit after a pruned block reads the last block that ran); otherwise the
deepest exit's [B, C].

Built with `decisions=True`, the model also holds AdaViT's decision networks
(Meng et al., CVPR 2022; `fedjax_het.methods.cos2p.adavit`): per block l, linear
maps of the block input's CLS token to one logit per head and one per
sub-layer (MSA, MLP), and of every LayerNorm-ed patch token to one logit.
`apply(..., decide=Decide(...))` turns them into per-input 0/1 gates
(`gumbel_gate`) that multiply a head's q/k/v, a sub-layer's residual update
and a token's updates (a dropped token neither attends nor is attended to,
except by itself), and returns `(logits, gates)`.

Configurations (`VIT_PRESETS`): the paper's "ViT-Tiny" (8 × 512, MLP 2048,
8 heads; not DeiT-Ti), ViT-Base (12 × 768, MLP 3072, 12 heads) and
ViT-Base(Ext.) (16 × 768), patch 16 at 224×224; the defaults are a small
ViT that trains on 8×8 digits or 28×28 images on a CPU.
"""
from typing import Any

import einops
import flax
import jax
import jax.numpy as jnp
from flax import linen as nn

from fedjax_het.submodel.units import UnitSpec

PyTree = Any
# Structured units: MSA heads, attention-projection rows, fc1 rows, fc2 rows.
UNIT_KINDS = ('heads', 'proj', 'fc1', 'fc2')
VIT_PRESETS = {
    'vit_tiny': dict(depth=8, hidden=512, mlp=2048, heads=8, patch=16),
    'vit_base': dict(depth=12, hidden=768, mlp=3072, heads=12, patch=16),
    'vit_base_ext': dict(depth=16, hidden=768, mlp=3072, heads=12, patch=16),
}
_init = nn.initializers.truncated_normal(0.02)


@flax.struct.dataclass
class Window:
  """A depth window: bool [L] each.

  Attributes:
    run: blocks computed (False: pruned, the residual stream passes through).
    frozen: blocks run forward only; they must lie below every trained block.
  """
  run: jax.Array
  frozen: jax.Array


def full_window(depth: int) -> Window:
  return Window(run=jnp.ones((depth,), bool), frozen=jnp.zeros((depth,), bool))


# AdaViT's decisions: which heads, sub-layers (MSA, MLP) and patch tokens run.
DECISION_KINDS = ('heads', 'layers', 'tokens')


@flax.struct.dataclass
class Decide:
  """How a `decisions=True` ViT turns its decision logits into gates.

  Attributes:
    key: PRNG key of the Gumbel noise (training), or None: the gate is the
      hard σ(logit) > threshold (evaluation).
    enabled: bool scalar; False keeps every head, sub-layer and token.
    kinds: the decided kinds (a subset of `DECISION_KINDS`); the others
      keep everything.
    tau: Gumbel-sigmoid temperature.
    threshold, token_threshold: keep when the (noisy) probability exceeds
      it: heads and sub-layers, tokens.
    keep_layers: blocks below it decide no heads or sub-layers (tokens yes).
  """
  key: jax.Array | None
  enabled: jax.Array
  kinds: tuple = flax.struct.field(pytree_node=False, default=DECISION_KINDS)
  tau: float = flax.struct.field(pytree_node=False, default=5.0)
  threshold: float = flax.struct.field(pytree_node=False, default=0.5)
  token_threshold: float = flax.struct.field(pytree_node=False, default=0.6)
  keep_layers: int = flax.struct.field(pytree_node=False, default=1)


def gumbel_gate(logits: jax.Array, key: jax.Array | None, tau: float,
                threshold: float) -> jax.Array:
  """AdaViT's hard Gumbel-sigmoid gate, straight-through.

  Training (key): soft = σ((logit + g1 − g2)/τ) with g1, g2 ~ Gumbel(0, 1)
  (g1 − g2 ~ Logistic(0, 1)); evaluation (None): soft = σ(logit). The
  forward is 1[soft > threshold]; the gradient is soft's.
  """
  if key is None:
    return (jax.nn.sigmoid(logits) > threshold).astype(logits.dtype)
  noise = jax.random.logistic(key, logits.shape, logits.dtype)
  soft = jax.nn.sigmoid((logits + noise) / tau)
  hard = (soft > threshold).astype(logits.dtype)
  return hard + soft - jax.lax.stop_gradient(soft)


class ViT(nn.Module):
  """ViT over NHWC images: see the module docstring.

  Attributes:
    num_classes: outputs of every exit head.
    depth, hidden, mlp, heads: L, D, the MLP width M and H (D % H == 0).
    patch: square patch side (must divide the image sides).
    decisions: hold AdaViT's decision networks (module docstring).
  """
  num_classes: int
  depth: int = 4
  hidden: int = 64
  mlp: int = 128
  heads: int = 4
  patch: int = 4
  decisions: bool = False

  def __post_init__(self):
    for name in ('depth', 'hidden', 'mlp', 'heads', 'patch'):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f'model_options.{name} must be a positive int, got '
                         f'{value!r}.')
    if self.hidden % self.heads:
      raise ValueError(f'model_options.hidden ({self.hidden}) must be '
                       f'divisible by heads ({self.heads}).')
    super().__post_init__()

  @property
  def head_dim(self) -> int:
    return self.hidden // self.heads

  def unit_shapes(self) -> dict[str, tuple[int, int]]:
    """{kind: (L, units)} of the structured masks."""
    units = {'heads': self.heads, 'proj': self.hidden, 'fc1': self.mlp,
             'fc2': self.hidden}
    return {kind: (self.depth, units[kind]) for kind in UNIT_KINDS}

  def _block_params(self) -> dict:
    l, d, m, h, e = (self.depth, self.hidden, self.mlp, self.heads,
                     self.head_dim)
    zeros, ones = nn.initializers.zeros, nn.initializers.ones
    shapes = {
        'ln1': {'scale': ((l, d), ones), 'bias': ((l, d), zeros)},
        'qkv': {'kernel': ((l, d, 3, h, e), _init),
                'bias': ((l, 3, h, e), zeros)},
        'proj': {'kernel': ((l, h, e, d), _init), 'bias': ((l, d), zeros)},
        'ln2': {'scale': ((l, d), ones), 'bias': ((l, d), zeros)},
        'fc1': {'kernel': ((l, d, m), _init), 'bias': ((l, m), zeros)},
        'fc2': {'kernel': ((l, m, d), _init), 'bias': ((l, d), zeros)},
    }
    return {module: {leaf: self.param(f'blocks_{module}_{leaf}', init, shape)
                     for leaf, (shape, init) in leaves.items()}
            for module, leaves in shapes.items()}

  def _decision_params(self) -> dict:
    """{kind: {'kernel': [L, D, outputs], 'bias': [L, outputs]}}: one logit
    per head and per sub-layer from the CLS token, one per patch token
    (AdaViT's init: truncated normal 0.02, zero bias)."""
    outputs = {'heads': self.heads, 'layers': 2, 'tokens': 1}
    return {kind: {
        'kernel': self.param(f'decisions_{kind}_kernel', _init,
                             (self.depth, self.hidden, count)),
        'bias': self.param(f'decisions_{kind}_bias', nn.initializers.zeros,
                           (self.depth, count))}
            for kind, count in outputs.items()}

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False, *,
               units: dict[str, jax.Array] | None = None,
               window: Window | None = None,
               all_exits: bool = False,
               decide: Decide | None = None):
    del train  # No dropout or batch-dependent layers.
    if decide is not None and not self.decisions:
      raise ValueError('decide needs a ViT built with decisions=True.')
    p = self.patch
    if x.shape[1] % p or x.shape[2] % p:
      raise ValueError(f'patch {p} does not divide the image size '
                       f'{x.shape[1]}x{x.shape[2]}.')
    patches = einops.rearrange(x, 'b (h p1) (w p2) c -> b (h w) (p1 p2 c)',
                               p1=p, p2=p)
    tokens = nn.Dense(self.hidden, kernel_init=_init, name='embed')(patches)
    cls = self.param('cls', nn.initializers.zeros, (self.hidden,))
    tokens = jnp.concatenate(
        [jnp.broadcast_to(cls, (tokens.shape[0], 1, self.hidden)), tokens], 1)
    tokens = tokens + self.param('pos', _init, tokens.shape[1:])
    blocks = self._block_params()
    exit_params = {
        'norm': {'scale': self.param('exits_norm_scale', nn.initializers.ones,
                                     (self.depth, self.hidden)),
                 'bias': self.param('exits_norm_bias', nn.initializers.zeros,
                                    (self.depth, self.hidden))},
        'dense': {'kernel': self.param('exits_dense_kernel', _init,
                                       (self.depth, self.hidden,
                                        self.num_classes)),
                  'bias': self.param('exits_dense_bias', nn.initializers.zeros,
                                     (self.depth, self.num_classes))}}
    decision_params = self._decision_params() if self.decisions else None
    if units is None:
      units = {k: jnp.ones(s, tokens.dtype)
               for k, s in self.unit_shapes().items()}
    window = full_window(self.depth) if window is None else window
    out = run_blocks(tokens, blocks, exit_params, units, window,
                     decision_params, decide)
    logits, gates = (out, None) if decide is None else out
    logits = logits if all_exits else logits[-1]
    return logits if decide is None else (logits, gates)


def _layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array) -> jax.Array:
  mean = x.mean(-1, keepdims=True)
  var = jnp.square(x - mean).mean(-1, keepdims=True)
  return (x - mean) * jax.lax.rsqrt(var + 1e-6) * scale + bias


def block(x: jax.Array, params: dict, units: dict,
          gates: dict | None = None) -> jax.Array:
  """One pre-norm block on tokens x [B, T, D] with unit masks of this block
  and, optionally, AdaViT's per-input gates {'heads': [B, H], 'layers':
  [B, 2] (MSA, MLP), 'tokens': [B, T − 1]} (`decision_gates`)."""
  head_dim = params['qkv']['kernel'].shape[-1]
  h = _layer_norm(x, **params['ln1'])
  qkv = jnp.einsum('btd,dshe->sbthe', h, params['qkv']['kernel']) + \
      params['qkv']['bias'][:, None, None]
  if gates is None:
    q, k, v = qkv * units['heads'][:, None]
  else:
    heads = units['heads'] * gates['heads']                      # [B, H]
    q, k, v = qkv * heads[:, None, :, None]
  scores = jnp.einsum('bqhe,bkhe->bhqk', q, k) * head_dim**-0.5
  if gates is not None:
    # Kept tokens attend to kept tokens, every token to itself (AdaViT's
    # pre-softmax policy, detached from the gates).
    token = jnp.pad(gates['tokens'], ((0, 0), (1, 0)), constant_values=1.0)
    pair = jax.lax.stop_gradient(token[:, :, None] * token[:, None, :]) > 0
    allowed = pair | jnp.eye(token.shape[1], dtype=bool)
    scores = jnp.where(allowed[:, None], scores, -jnp.inf)
  attended = jnp.einsum('bhqk,bkhe->bqhe', jax.nn.softmax(scores, -1), v)
  projected = jnp.einsum('bqhe,hed->bqd', attended, params['proj']['kernel'])
  update = (projected + params['proj']['bias']) * units['proj']
  if gates is not None:
    update = update * token[:, :, None] * gates['layers'][:, 0, None, None]
  x = x + update
  h = _layer_norm(x, **params['ln2'])
  hidden = (h @ params['fc1']['kernel'] + params['fc1']['bias']) * units['fc1']
  out = jax.nn.gelu(hidden, approximate=False) @ params['fc2']['kernel']
  update = (out + params['fc2']['bias']) * units['fc2']
  if gates is not None:
    update = update * token[:, :, None] * gates['layers'][:, 1, None, None]
  return x + update


def decision_gates(x: jax.Array, ln1: dict, params: dict, decide: Decide,
                   layer: jax.Array) -> dict:
  """AdaViT's gates of block `layer` for its input x [B, T, D]: heads and
  sub-layers from the CLS token x[:, 0], tokens from LN1(x)[:, 1:] (the
  normalised tokens the attention reads); all ones where not decided."""
  key = None if decide.key is None else jax.random.fold_in(decide.key, layer)
  inputs = {'heads': x[:, 0], 'layers': x[:, 0],
            'tokens': _layer_norm(x[:, 1:], **ln1)}
  decided = {'heads': decide.enabled & (layer >= decide.keep_layers),
             'tokens': decide.enabled}
  decided['layers'] = decided['heads']
  gates = {}
  for i, kind in enumerate(DECISION_KINDS):
    logits = inputs[kind] @ params[kind]['kernel'] + params[kind]['bias']
    if kind == 'tokens':
      logits = logits[..., 0]                                    # [B, T − 1]
    if kind not in decide.kinds:
      gates[kind] = jnp.ones_like(logits)
      continue
    threshold = (decide.token_threshold if kind == 'tokens' else
                 decide.threshold)
    gate = gumbel_gate(logits, None if key is None else
                       jax.random.fold_in(key, i), decide.tau, threshold)
    gates[kind] = jnp.where(decided[kind], gate, 1.0)
  return gates


def exit_logits(x: jax.Array, head: dict) -> jax.Array:
  """An exit head on the CLS token: LN + Linear, [B, T, D] -> [B, C]."""
  cls = _layer_norm(x[:, 0], **head['norm'])
  return cls @ head['dense']['kernel'] + head['dense']['bias']


def run_blocks(tokens: jax.Array, blocks: dict, exits: dict, units: dict,
               window: Window, decisions: dict | None = None,
               decide: Decide | None = None):
  """The stacked blocks as one scan: every exit's logits [L, B, C], and with
  `decide` also AdaViT's gates {kind: [L, B, ...]} (a pruned block's gates
  are its decisions, unused)."""

  def one(x, layer):
    params, head, layer_units, run, frozen, layer_decisions, index = layer
    gates = None if decide is None else decision_gates(
        x, params['ln1'], layer_decisions, decide, index)
    out = jnp.where(run, block(x, params, layer_units, gates), x)
    out = jnp.where(frozen, jax.lax.stop_gradient(out), out)
    return out, (exit_logits(out, head), gates)

  _, (logits, gates) = jax.lax.scan(
      one, tokens, (blocks, exits, units, window.run, window.frozen,
                    decisions, jnp.arange(window.run.shape[0])))
  return logits if decide is None else (logits, gates)


# ---- structure for masking and aggregation -------------------------------------
# (module, leaf) -> the unit kinds indexing it, output unit last: (kind, axis).
_UNIT_AXES = {
    ('qkv', 'kernel'): (('heads', 3),),
    ('qkv', 'bias'): (('heads', 2),),
    ('proj', 'kernel'): (('heads', 1), ('proj', 3)),
    ('proj', 'bias'): (('proj', 1),),
    ('fc1', 'kernel'): (('fc1', 2),),
    ('fc1', 'bias'): (('fc1', 1),),
    ('fc2', 'kernel'): (('fc1', 1), ('fc2', 2)),
    ('fc2', 'bias'): (('fc2', 1),),
}


def _block_leaf(name: str) -> tuple[str, str] | None:
  """('qkv', 'kernel') for the param 'blocks_qkv_kernel', else None."""
  parts = name.split('_')
  return (parts[1], parts[2]) if parts[0] == 'blocks' else None


def segment_specs(params: dict) -> dict:
  """`UnitSpec`s of Co-S²P's segments for a ViT's params (Sec. 4.3, A7).

  A segment is one head's q/k/v rows (with biases), one row (with its bias)
  of the attention projection, fc1 or fc2 ('blocks/heads', 'blocks/proj',
  'blocks/fc1', 'blocks/fc2', shape [L, U]); a block's LayerNorm ('blocks/
  ln1', 'blocks/ln2', [L]); an exit head ('exits', [L]); and the embedding,
  CLS token and positions, one segment each; with decisions, a block's
  decision networks ('decisions', [L]).
  """
  specs = {}
  for name, leaf in params.items():
    shape = tuple(leaf.shape) if not isinstance(leaf, dict) else None
    module = _block_leaf(name)
    if isinstance(leaf, dict):          # 'embed': {'kernel', 'bias'}
      specs[name] = {k: UnitSpec(name, (), tuple(v.shape))
                     for k, v in leaf.items()}
    elif module in _UNIT_AXES:
      kind, axis = _UNIT_AXES[module][-1]
      specs[name] = UnitSpec(f'blocks/{kind}', (0, axis), shape)
    elif module is not None:
      specs[name] = UnitSpec(f'blocks/{module[0]}', (0,), shape)
    elif name.startswith('exits_'):
      specs[name] = UnitSpec('exits', (0,), shape)
    elif name.startswith('decisions_'):
      specs[name] = UnitSpec('decisions', (0,), shape)
    else:
      specs[name] = UnitSpec(name, (), shape)
  return specs


def entry_mask(params: dict, units: dict[str, jax.Array]) -> dict:
  """0/1 per parameter entry of the submodel `units` selects ([L, U] each):
  an entry is kept when its output unit and the unit it reads (the head of
  a projection column, the fc1 row of an fc2 column) are kept; other leaves
  are 1. Multiplying the params by it is physical slicing."""
  def leaf_mask(name, leaf):
    axes = _UNIT_AXES.get(_block_leaf(name), ())
    mask = jnp.ones(leaf.shape, leaf.dtype)
    for kind, axis in axes:
      shape = [1] * leaf.ndim
      shape[0], shape[axis] = units[kind].shape
      mask = mask * units[kind].reshape(shape)
    return mask
  return {name: (jax.tree.map(lambda v: jnp.ones(v.shape, v.dtype), leaf)
                 if isinstance(leaf, dict) else leaf_mask(name, leaf))
          for name, leaf in params.items()}
