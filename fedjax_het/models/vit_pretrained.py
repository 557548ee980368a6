"""Pretrained ViT weights from a local `.npz` into `models.vit.ViT`'s stacked parameters.

Reads the checkpoints of google-research/vision_transformer (`ViT-B_16.npz`, the
ImageNet-21k one, and `ViT-B_16-224.npz`, fine-tuned on ImageNet-1k; e.g. from
https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz; the AugReg files use the
same names) and of big_vision. Key names, as timm's `_load_weights` reads the same files (an
optional prefix 'opt/target/', 'params/' or 'params/img/' is stripped):

  embedding/kernel [p, p, c, D], embedding/bias [D]    -> embed {kernel [p·p·c, D], bias}
  cls [1, 1, D]                                        -> cls [D]
  Transformer/posembed_input/pos_embedding [1, T, D]   -> pos [T', D] (resized if T' ≠ T)
  Transformer/encoderblock_{i}/
    LayerNorm_0/{scale,bias} [D]                       -> blocks_ln1_* [L, D]
    MultiHeadDotProductAttention_1/{query,key,value}/
      kernel [D, H, hd], bias [H, hd]                  -> blocks_qkv_kernel [L, D, 3, H, hd],
                                                          blocks_qkv_bias [L, 3, H, hd]
    MultiHeadDotProductAttention_1/out/kernel [H, hd, D], bias [D] -> blocks_proj_*
    LayerNorm_2/{scale,bias}                           -> blocks_ln2_*
    MlpBlock_3/Dense_0/{kernel [D, M], bias}           -> blocks_fc1_*
    MlpBlock_3/Dense_1/{kernel [M, D], bias}           -> blocks_fc2_*
  Transformer/encoder_norm/{scale,bias} [D]            -> every exit's exits_norm_* [L, D]
  head/{kernel [D, C], bias [C]}                       -> every exit's exits_dense_* [L, D, C],
                                                          only when C matches and the file has
                                                          no pre_logits layer; else kept at init

big_vision names a block's modules LayerNorm_0, MultiHeadDotProductAttention_0, LayerNorm_1,
MlpBlock_0, its scanned checkpoints stack the blocks in one `Transformer/encoderblock/...`
with a leading [L] axis, and it keeps the positions of the patches only in `pos_embedding`
[1, g², D] (the CLS token is added after them: its position here is 0); all read as well.
Checkpoints without a `cls` token (GAP or MAP pooling) are refused: `models.vit` classifies
from the CLS token. A `pre_logits` layer (the 21k checkpoints' representation layer) has no
place here and is not read.

The patch kernel [p, p, c, D] flattened row-major is our (p1 p2 c) patch order. The file's
attention scale (head_dim^-½) and LayerNorm ε (1e-6) are ours; its MLP uses tanh-GELU where
`models.vit` uses the exact one (a difference below 1e-3 per activation, left as is).

Depth: a model deeper than the checkpoint (L > L0) fills blocks L0 .. L−1 by repeating the
last k pretrained blocks cyclically (`repeat_last`, default k = L − L0): Co-S²P's ViT-Base(Ext.)
(16 blocks) from ViT-B/16 (12) gets blocks 9–12 again as 13–16. A shallower model is an error.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_het.models.vit import ViT

_PREFIXES = ('opt/target/', 'params/img/', 'params/', '')
# (ln1, attention, ln2, mlp) module names inside a block: the original repository's, big_vision's.
_BLOCK_NAMES = (('LayerNorm_0', 'MultiHeadDotProductAttention_1', 'LayerNorm_2', 'MlpBlock_3'),
                ('LayerNorm_0', 'MultiHeadDotProductAttention_0', 'LayerNorm_1', 'MlpBlock_0'))
DOWNLOAD_HINT = ('e.g. https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz '
                 '(ImageNet-21k) or .../imagenet21k+imagenet2012/ViT-B_16-224.npz (fine-tuned '
                 'on ImageNet-1k)')


def read_checkpoint(path: str) -> dict[str, np.ndarray]:
  """{key: array} of an `.npz` checkpoint, with a leading 'opt/target/' or 'params/' stripped.

  Raises:
    ValueError: a missing file, or one that is not an npz archive.
  """
  path = os.path.expandvars(os.path.expanduser(path))
  if not os.path.isfile(path):
    raise ValueError(f'init_params_file {path} does not exist; download a ViT checkpoint '
                     f'({DOWNLOAD_HINT}) and pass --config.init_params_file=PATH.')
  try:
    with np.load(path, allow_pickle=False) as archive:
      arrays = {key: archive[key] for key in archive.files}
  except (OSError, ValueError) as e:
    raise ValueError(f'init_params_file {path} is not a readable .npz checkpoint ({e}).') from e
  for prefix in _PREFIXES:
    if prefix + 'embedding/kernel' in arrays:
      return {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
  raise ValueError(f'init_params_file {path} has no embedding/kernel: not a ViT checkpoint of '
                   'google-research/vision_transformer or big_vision.')


def _blocks(ckpt: dict[str, np.ndarray]) -> list[dict[str, tuple[str, np.ndarray]]]:
  """The checkpoint's encoder blocks, each {'ln1/scale', 'q/kernel', ..., 'fc2/bias'} ->
  (the checkpoint key, its array)."""
  def names_in(get):
    for names in _BLOCK_NAMES:
      if get(f'{names[0]}/scale') is not None and get(f'{names[1]}/query/kernel') is not None:
        return names
    return None

  def block(get, where):
    names = names_in(get)
    if names is None:
      raise ValueError(f'checkpoint block {where} has none of the known module names '
                       f'{[n[:2] for n in _BLOCK_NAMES]}.')
    ln1, mha, ln2, mlp = names
    out = {}
    for ours, theirs in (('ln1', ln1), ('ln2', ln2)):
      for leaf in ('scale', 'bias'):
        key = f'{theirs}/{leaf}'
        if get(key) is None:
          raise ValueError(f'checkpoint block {where} lacks {key}.')
        out[f'{ours}/{leaf}'] = (f'{where}/{key}', get(key))
    for ours, theirs in (('q', 'query'), ('k', 'key'), ('v', 'value'), ('out', 'out'),
                         ('fc1', 'Dense_0'), ('fc2', 'Dense_1')):
      module = mlp if ours.startswith('fc') else mha
      for leaf in ('kernel', 'bias'):
        key = f'{module}/{theirs}/{leaf}'
        if get(key) is None:
          raise ValueError(f'checkpoint block {where} lacks {key}.')
        out[f'{ours}/{leaf}'] = (f'{where}/{key}', get(key))
    return out

  if 'Transformer/encoderblock/LayerNorm_0/scale' in ckpt:   # big_vision, scanned: [L, ...]
    depth = ckpt['Transformer/encoderblock/LayerNorm_0/scale'].shape[0]
    return [block(lambda k, i=i: (None if f'Transformer/encoderblock/{k}' not in ckpt else
                                  ckpt[f'Transformer/encoderblock/{k}'][i]),
                  f'Transformer/encoderblock[{i}]') for i in range(depth)]
  blocks, i = [], 0
  while any(k.startswith(f'Transformer/encoderblock_{i}/') for k in ckpt):
    prefix = f'Transformer/encoderblock_{i}/'
    blocks.append(block(lambda k, p=prefix: ckpt.get(p + k), prefix[:-1]))
    i += 1
  if not blocks:
    raise ValueError('the checkpoint has no Transformer/encoderblock_0: not a ViT checkpoint.')
  return blocks


def resize_positions(pos: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
  """[1 + g·g, D] (CLS first, a square g × g patch grid) -> [1 + gh·gw, D] for grid (gh, gw).

  The CLS position is kept; the grid is resized bilinearly (`jax.image.resize`, half-pixel
  centres, antialiased when shrinking).
  """
  side = int(round(np.sqrt(pos.shape[0] - 1)))
  if side * side != pos.shape[0] - 1:
    raise ValueError(f'the checkpoint\'s {pos.shape[0] - 1} patch positions are not a square '
                     'grid.')
  patches = pos[1:].reshape(side, side, pos.shape[1])
  resized = jax.image.resize(jnp.asarray(patches, jnp.float32), (*grid, pos.shape[1]),
                             'bilinear')
  return np.concatenate([pos[:1], np.asarray(resized).reshape(-1, pos.shape[1])])


def _expect(key: str, value: np.ndarray, shape: tuple) -> np.ndarray:
  if tuple(value.shape) != tuple(shape):
    raise ValueError(f'checkpoint {key} has shape {tuple(value.shape)}, but the model needs '
                     f'{tuple(shape)}; check model_options (hidden, mlp, heads, patch).')
  return value


def map_checkpoint(ckpt: dict[str, np.ndarray], params: dict, *,
                   grid: tuple[int, int] | None = None,
                   repeat_last: int | None = None) -> dict:
  """`params` (a ViT's, for its shapes and the leaves kept at init) with the checkpoint's values.

  Args:
    ckpt: {key: array} as `read_checkpoint` returns.
    params: the model's initial parameters (models.vit.ViT); shapes set what is expected.
    grid: the model's patch grid (H/p, W/p), used when positions are resized; None: square.
    repeat_last: k, the last k pretrained blocks fill the model's extra blocks cyclically
      (None: k = L − L0). Ignored when the depths are equal.

  Returns:
    A new params dict (jax arrays of the init's dtypes) with every leaf loaded except the
    exit heads' dense layer when the class count differs.

  Raises:
    ValueError: a shape mismatch (naming the checkpoint key), a missing key, a shallower model,
      or a bad `repeat_last`.
  """
  depth, hidden = params['blocks_qkv_kernel'].shape[:2]
  heads, head_dim = params['blocks_qkv_kernel'].shape[3:]
  mlp = params['blocks_fc1_kernel'].shape[2]
  num_classes = params['exits_dense_kernel'].shape[2]
  for key in ('embedding/kernel', 'embedding/bias', 'Transformer/encoder_norm/scale',
              'Transformer/encoder_norm/bias'):
    if key not in ckpt:
      raise ValueError(f'the checkpoint lacks {key}.')
  if 'cls' not in ckpt:
    raise ValueError('the checkpoint has no cls token (GAP or MAP pooling); models.vit '
                     'classifies from a CLS token.')
  if 'Transformer/posembed_input/pos_embedding' in ckpt:
    pos_key = 'Transformer/posembed_input/pos_embedding'
    pos = ckpt[pos_key].reshape(ckpt[pos_key].shape[-2:])
  elif 'pos_embedding' in ckpt:                        # big_vision: the patches' positions only
    pos_key = 'pos_embedding'
    pos = ckpt[pos_key].reshape(ckpt[pos_key].shape[-2:])
    pos = np.concatenate([np.zeros_like(pos[:1]), pos])
  else:
    raise ValueError('the checkpoint lacks Transformer/posembed_input/pos_embedding.')
  blocks = _blocks(ckpt)
  if len(blocks) > depth:
    raise ValueError(f'the checkpoint has {len(blocks)} blocks but the model only {depth}; use '
                     f'model_options.depth >= {len(blocks)}.')
  extra = depth - len(blocks)
  k = extra if repeat_last is None else repeat_last
  if extra and not 1 <= k <= len(blocks):
    raise ValueError(f'repeat_last must lie in [1, {len(blocks)}] to fill {extra} extra '
                     f'blocks, got {k}.')
  order = list(range(len(blocks))) + [len(blocks) - k + j % k for j in range(extra)]
  blocks = [blocks[i] for i in order]

  def stack(name: str, shape: tuple) -> np.ndarray:
    return np.stack([_expect(*b[name], shape) for b in blocks])

  d, m, h, e = hidden, mlp, heads, head_dim
  out = dict(jax.tree.map(np.asarray, params))
  patch_kernel = ckpt['embedding/kernel']
  flat = patch_kernel.reshape(-1, patch_kernel.shape[-1])
  if flat.shape != params['embed']['kernel'].shape:
    raise ValueError(f'checkpoint embedding/kernel has shape {patch_kernel.shape} (patch, '
                     f'patch, channels, D), {flat.shape} flattened, but the model needs '
                     f'{params["embed"]["kernel"].shape}; check model_options (patch, hidden) '
                     'and the image channels.')
  out['embed'] = {
      'kernel': flat,
      'bias': _expect('embedding/bias', ckpt['embedding/bias'], (d,))}
  out['cls'] = _expect('cls', ckpt['cls'].reshape(-1), (d,))
  if pos.shape[0] != params['pos'].shape[0]:
    tokens = params['pos'].shape[0] - 1
    if grid is None:
      side = int(round(np.sqrt(tokens)))
      if side * side != tokens:
        raise ValueError(f'the model has {tokens} patches, not a square grid; pass grid.')
      grid = (side, side)
    pos = resize_positions(pos, tuple(grid))
  out['pos'] = _expect(pos_key, pos, params['pos'].shape)
  out['blocks_ln1_scale'] = stack('ln1/scale', (d,))
  out['blocks_ln1_bias'] = stack('ln1/bias', (d,))
  out['blocks_ln2_scale'] = stack('ln2/scale', (d,))
  out['blocks_ln2_bias'] = stack('ln2/bias', (d,))
  out['blocks_qkv_kernel'] = np.stack(
      [stack(f'{x}/kernel', (d, h, e)) for x in 'qkv'], axis=2)       # [L, D, 3, H, hd]
  out['blocks_qkv_bias'] = np.stack(
      [stack(f'{x}/bias', (h, e)) for x in 'qkv'], axis=1)            # [L, 3, H, hd]
  out['blocks_proj_kernel'] = stack('out/kernel', (h, e, d))
  out['blocks_proj_bias'] = stack('out/bias', (d,))
  out['blocks_fc1_kernel'] = stack('fc1/kernel', (d, m))
  out['blocks_fc1_bias'] = stack('fc1/bias', (m,))
  out['blocks_fc2_kernel'] = stack('fc2/kernel', (m, d))
  out['blocks_fc2_bias'] = stack('fc2/bias', (d,))
  for leaf in ('scale', 'bias'):
    norm = _expect(f'Transformer/encoder_norm/{leaf}', ckpt[f'Transformer/encoder_norm/{leaf}'],
                   (d,))
    out[f'exits_norm_{leaf}'] = np.broadcast_to(norm, (depth, d)).copy()
  head = ckpt.get('head/kernel')
  if (head is not None and head.shape == (d, num_classes) and 'pre_logits/kernel' not in ckpt
      and ckpt.get('head/bias', np.empty(0)).shape == (num_classes,)):
    out['exits_dense_kernel'] = np.broadcast_to(head, (depth, d, num_classes)).copy()
    out['exits_dense_bias'] = np.broadcast_to(ckpt['head/bias'], (depth, num_classes)).copy()
  return jax.tree.map(lambda new, old: jnp.asarray(new, jnp.asarray(old).dtype), out,
                      dict(params))


def load_pretrained(model, params: dict, path: str, *,
                    image_shape: tuple[int, ...] | None = None,
                    repeat_last: int | None = None) -> dict:
  """`params` of `model` (a `ViT`) with the checkpoint at `path` loaded (`map_checkpoint`).

  Args:
    model: the ViT the params belong to.
    params: its initial parameters.
    path: the `.npz` file (`~` and $VARIABLES expanded).
    image_shape: (H, W, C) of the model's inputs, for the patch grid of resized positions.
    repeat_last: see `map_checkpoint`.

  Raises:
    ValueError: a model that is not a ViT, a missing or unreadable file, or a mismatch.
  """
  if not isinstance(model, ViT):
    raise ValueError(f'init_params_file loads ViT checkpoints, but the model is a '
                     f'{type(model).__name__}; use model vit, vit_tiny, vit_base or '
                     'vit_base_ext, or init_params_file=\'\'.')
  grid = None
  if image_shape is not None:
    grid = (image_shape[0] // model.patch, image_shape[1] // model.patch)
  return map_checkpoint(read_checkpoint(path), params, grid=grid, repeat_last=repeat_last)
