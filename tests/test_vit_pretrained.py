"""Tests of fedjax_het.models.vit_pretrained on small fake checkpoints in the real key layout."""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het import config as config_lib
from fedjax_het import models, run
from fedjax_het.models import vit_pretrained

D, H, E, M, P, C = 8, 2, 4, 16, 4, 5     # hidden, heads, head dim, MLP, patch, classes
IMAGE = (8, 8, 3)                        # a 2 × 2 patch grid: T = 5 tokens
ORIGINAL = ('LayerNorm_0', 'MultiHeadDotProductAttention_1', 'LayerNorm_2', 'MlpBlock_3')
BIG_VISION = ('LayerNorm_0', 'MultiHeadDotProductAttention_0', 'LayerNorm_1', 'MlpBlock_0')


def fake_checkpoint(depth=2, grid=2, classes=C, seed=0, names=ORIGINAL):
  """{key: array} as google-research/vision_transformer writes them, random values."""
  rng = np.random.default_rng(seed)
  normal = lambda *shape: rng.normal(0, 0.3, shape).astype(np.float32)
  ln1, mha, ln2, mlp = names
  ckpt = {'embedding/kernel': normal(P, P, 3, D), 'embedding/bias': normal(D),
          'cls': normal(1, 1, D),
          'Transformer/posembed_input/pos_embedding': normal(1, 1 + grid * grid, D),
          'Transformer/encoder_norm/scale': 1 + normal(D),
          'Transformer/encoder_norm/bias': normal(D),
          'head/kernel': normal(D, classes), 'head/bias': normal(classes)}
  for i in range(depth):
    b = f'Transformer/encoderblock_{i}/'
    for ln in (ln1, ln2):
      ckpt[f'{b}{ln}/scale'], ckpt[f'{b}{ln}/bias'] = 1 + normal(D), normal(D)
    for name in ('query', 'key', 'value'):
      ckpt[f'{b}{mha}/{name}/kernel'], ckpt[f'{b}{mha}/{name}/bias'] = normal(D, H, E), normal(H, E)
    ckpt[f'{b}{mha}/out/kernel'], ckpt[f'{b}{mha}/out/bias'] = normal(H, E, D), normal(D)
    ckpt[f'{b}{mlp}/Dense_0/kernel'], ckpt[f'{b}{mlp}/Dense_0/bias'] = normal(D, M), normal(M)
    ckpt[f'{b}{mlp}/Dense_1/kernel'], ckpt[f'{b}{mlp}/Dense_1/bias'] = normal(M, D), normal(D)
  return ckpt


def _saved(ckpt, directory) -> str:
  """ckpt written to `directory`/ckpt.npz."""
  path = os.path.join(directory, 'ckpt.npz')
  np.savez(path, **ckpt)
  return path


def vit_and_params(depth=2, classes=C, image=IMAGE, seed=1):
  model = models.create_model('vit', classes, depth=depth, hidden=D, mlp=M, heads=H, patch=P)
  return model, models.init_params(model, jax.random.PRNGKey(seed), image)


def layer_norm(x, scale, bias):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean)**2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + 1e-6) * scale + bias


def reference_forward(ckpt, images, names=ORIGINAL):
  """The ViT written directly from the checkpoint's own layout (separate q, k, v; conv patch
  kernel), with the exact GELU of models.vit; returns the head's logits [B, C]."""
  ln1, mha, ln2, mlp = names
  kernel = ckpt['embedding/kernel']
  p = kernel.shape[0]
  b, height, width, _ = images.shape
  gh, gw = height // p, width // p
  patches = images.reshape(b, gh, p, gw, p, 3).transpose(0, 1, 3, 2, 4, 5)   # [B, gh, gw, p, p, c]
  tokens = np.einsum('bghijc,ijcd->bghd', patches, kernel).reshape(b, gh * gw, -1)
  tokens = tokens + ckpt['embedding/bias']
  cls = np.broadcast_to(ckpt['cls'].reshape(1, 1, -1), (b, 1, tokens.shape[-1]))
  x = np.concatenate([cls, tokens], 1) + ckpt['Transformer/posembed_input/pos_embedding'][0]
  i = 0
  while f'Transformer/encoderblock_{i}/{ln1}/scale' in ckpt:
    w = lambda key, i=i: ckpt[f'Transformer/encoderblock_{i}/{key}']
    h = layer_norm(x, w(f'{ln1}/scale'), w(f'{ln1}/bias'))
    q, k, v = (np.einsum('btd,dhe->bthe', h, w(f'{mha}/{n}/kernel')) + w(f'{mha}/{n}/bias')
               for n in ('query', 'key', 'value'))
    scores = np.einsum('bqhe,bkhe->bhqk', q, k) / np.sqrt(q.shape[-1])
    attn = np.exp(scores - scores.max(-1, keepdims=True))
    attn /= attn.sum(-1, keepdims=True)
    out = np.einsum('bhqk,bkhe->bqhe', attn, v)
    x = x + np.einsum('bqhe,hed->bqd', out, w(f'{mha}/out/kernel')) + w(f'{mha}/out/bias')
    h = layer_norm(x, w(f'{ln2}/scale'), w(f'{ln2}/bias'))
    h = h @ w(f'{mlp}/Dense_0/kernel') + w(f'{mlp}/Dense_0/bias')
    h = np.asarray(jax.nn.gelu(jnp.asarray(h), approximate=False))
    x = x + h @ w(f'{mlp}/Dense_1/kernel') + w(f'{mlp}/Dense_1/bias')
    i += 1
  cls_out = layer_norm(x[:, 0], ckpt['Transformer/encoder_norm/scale'],
                       ckpt['Transformer/encoder_norm/bias'])
  return cls_out @ ckpt['head/kernel'] + ckpt['head/bias']


def test_every_leaf_kind_lands_where_it_belongs():
  ckpt = fake_checkpoint()
  mha, mlp = 'MultiHeadDotProductAttention_1', 'MlpBlock_3'
  b1 = 'Transformer/encoderblock_1/'
  marks = [  # (checkpoint key, index there, our leaf path, index here)
      ('embedding/kernel', (2, 3, 1, 5), ('embed', 'kernel'), ((2 * P + 3) * 3 + 1, 5)),
      ('embedding/bias', (4,), ('embed', 'bias'), (4,)),
      ('cls', (0, 0, 6), ('cls',), (6,)),
      ('Transformer/posembed_input/pos_embedding', (0, 3, 2), ('pos',), (3, 2)),
      (b1 + 'LayerNorm_0/scale', (1,), ('blocks_ln1_scale',), (1, 1)),
      (b1 + 'LayerNorm_0/bias', (2,), ('blocks_ln1_bias',), (1, 2)),
      (b1 + 'LayerNorm_2/scale', (3,), ('blocks_ln2_scale',), (1, 3)),
      (b1 + 'LayerNorm_2/bias', (4,), ('blocks_ln2_bias',), (1, 4)),
      (b1 + f'{mha}/query/kernel', (3, 1, 2), ('blocks_qkv_kernel',), (1, 3, 0, 1, 2)),
      (b1 + f'{mha}/key/kernel', (3, 1, 2), ('blocks_qkv_kernel',), (1, 3, 1, 1, 2)),
      (b1 + f'{mha}/value/kernel', (3, 1, 2), ('blocks_qkv_kernel',), (1, 3, 2, 1, 2)),
      (b1 + f'{mha}/key/bias', (1, 3), ('blocks_qkv_bias',), (1, 1, 1, 3)),
      (b1 + f'{mha}/out/kernel', (1, 2, 7), ('blocks_proj_kernel',), (1, 1, 2, 7)),
      (b1 + f'{mha}/out/bias', (7,), ('blocks_proj_bias',), (1, 7)),
      (b1 + f'{mlp}/Dense_0/kernel', (5, 9), ('blocks_fc1_kernel',), (1, 5, 9)),
      (b1 + f'{mlp}/Dense_0/bias', (9,), ('blocks_fc1_bias',), (1, 9)),
      (b1 + f'{mlp}/Dense_1/kernel', (9, 5), ('blocks_fc2_kernel',), (1, 9, 5)),
      (b1 + f'{mlp}/Dense_1/bias', (5,), ('blocks_fc2_bias',), (1, 5)),
  ]
  for n, (key, index, _, _) in enumerate(marks):
    ckpt[key][index] = 100.0 + n
  ckpt['Transformer/encoder_norm/scale'][6] = 77.0
  ckpt['head/kernel'][3, 4] = 55.0
  _, params = vit_and_params()
  loaded = vit_pretrained.map_checkpoint(ckpt, params)
  for n, (key, _, path, index) in enumerate(marks):
    leaf = loaded
    for name in path:
      leaf = leaf[name]
    assert float(np.asarray(leaf)[index]) == 100.0 + n, key
  # encoder_norm and the head go into every exit; block 0 is untouched by the block-1 marks.
  assert np.all(np.asarray(loaded['exits_norm_scale'])[:, 6] == 77.0)
  assert np.all(np.asarray(loaded['exits_dense_kernel'])[:, 3, 4] == 55.0)
  assert float(loaded['blocks_qkv_kernel'][0, 3, 1, 1, 2]) != 101.0
  assert jax.tree.map(lambda x: (x.shape, x.dtype), loaded) == jax.tree.map(
      lambda x: (x.shape, x.dtype), params)


def test_forward_equals_a_reference_written_from_the_checkpoint():
  ckpt = fake_checkpoint(depth=3)
  model, params = vit_and_params(depth=3)
  loaded = vit_pretrained.map_checkpoint(ckpt, params)
  images = np.random.default_rng(2).normal(size=(4, *IMAGE)).astype(np.float32)
  ours = model.apply({'params': loaded}, images)
  np.testing.assert_allclose(ours, reference_forward(ckpt, images), rtol=2e-4, atol=2e-4)


def test_big_vision_layout_reads_the_same(tmp_path):
  """big_vision's module names, 'params/' prefix, patch-only `pos_embedding` (the CLS
  position is 0) and scanned blocks give the same params as the original layout."""
  original = fake_checkpoint()
  pos = original.pop('Transformer/posembed_input/pos_embedding')
  pos[0, 0] = 0.0
  _, params = vit_and_params()
  expected = vit_pretrained.map_checkpoint(
      {**original, 'Transformer/posembed_input/pos_embedding': pos}, params)
  renamed = {'params/pos_embedding': pos[:, 1:]}
  for key, value in original.items():
    for old, new in zip(ORIGINAL, BIG_VISION):
      key = key.replace(f'/{old}/', f'/{new}/')
    renamed['params/' + key] = value
  np.savez(tmp_path / 'bv.npz', **renamed)
  ckpt = vit_pretrained.read_checkpoint(str(tmp_path / 'bv.npz'))
  assert 'pos_embedding' in ckpt and 'Transformer/encoderblock_0/MlpBlock_0/Dense_0/bias' in ckpt
  scanned = {k: v for k, v in ckpt.items() if 'encoderblock_' not in k}
  for key in [k for k in ckpt if k.startswith('Transformer/encoderblock_0/')]:
    tail = key[len('Transformer/encoderblock_0/'):]
    scanned['Transformer/encoderblock/' + tail] = np.stack(
        [ckpt[f'Transformer/encoderblock_{i}/{tail}'] for i in range(2)])
  for variant in (ckpt, scanned):
    got = vit_pretrained.map_checkpoint(variant, params)
    jax.tree.map(np.testing.assert_array_equal, got, expected)
  del ckpt['cls']
  with pytest.raises(ValueError, match='no cls token'):
    vit_pretrained.map_checkpoint(ckpt, params)


def test_head_kept_at_init_when_classes_differ_or_pre_logits_exist():
  _, params = vit_and_params(classes=7)
  loaded = vit_pretrained.map_checkpoint(fake_checkpoint(classes=C), params)
  np.testing.assert_array_equal(loaded['exits_dense_kernel'], params['exits_dense_kernel'])
  np.testing.assert_array_equal(loaded['exits_dense_bias'], params['exits_dense_bias'])
  assert not np.array_equal(loaded['exits_norm_bias'], params['exits_norm_bias'])
  ckpt = fake_checkpoint()
  ckpt['pre_logits/kernel'] = np.eye(D, dtype=np.float32)
  _, params = vit_and_params()
  loaded = vit_pretrained.map_checkpoint(ckpt, params)
  np.testing.assert_array_equal(loaded['exits_dense_kernel'], params['exits_dense_kernel'])


def test_positions_resized_with_the_cls_position_kept(tmp_path):
  ckpt = fake_checkpoint(grid=2)
  pos = ckpt['Transformer/posembed_input/pos_embedding']
  pos[0, 1:] = np.arange(D, dtype=np.float32)         # a constant grid stays constant
  model, params = vit_and_params(image=(12, 16, 3))    # a 3 × 4 grid: 13 tokens
  loaded = vit_pretrained.load_pretrained(model, params, _saved(ckpt, tmp_path),
                                          image_shape=(12, 16, 3))
  assert loaded['pos'].shape == (13, D)
  np.testing.assert_array_equal(loaded['pos'][0], pos[0, 0])
  np.testing.assert_allclose(loaded['pos'][1:], np.broadcast_to(np.arange(D), (12, D)),
                             atol=1e-5)
  ramp = vit_pretrained.resize_positions(
      np.concatenate([np.zeros((1, 1)), np.array([[0.], [1.], [0.], [1.]])]), (2, 4))
  assert np.all(np.diff(ramp[1:5, 0]) >= 0) and ramp[1, 0] < ramp[4, 0]   # left-to-right ramp


def test_extra_blocks_repeat_the_last_pretrained_ones():
  """E3: a 16-block model from a 12-block checkpoint gets blocks 9–12 again as 13–16; here
  5 blocks from 3 (default k = 2: 2, 3 → 4, 5) and k = 1 (3 → 4, 5)."""
  ckpt = fake_checkpoint(depth=3)
  _, params = vit_and_params(depth=5)
  loaded = vit_pretrained.map_checkpoint(ckpt, params)
  for leaf in ('blocks_qkv_kernel', 'blocks_fc2_bias', 'blocks_ln1_scale'):
    got = np.asarray(loaded[leaf])
    np.testing.assert_array_equal(got[3], got[1])
    np.testing.assert_array_equal(got[4], got[2])
    assert not np.array_equal(got[0], got[1])
  loaded = vit_pretrained.map_checkpoint(ckpt, params, repeat_last=1)
  got = np.asarray(loaded['blocks_fc1_kernel'])
  np.testing.assert_array_equal(got[3], got[2])
  np.testing.assert_array_equal(got[4], got[2])
  assert loaded['exits_norm_scale'].shape == (5, D)
  with pytest.raises(ValueError, match='repeat_last'):
    vit_pretrained.map_checkpoint(ckpt, params, repeat_last=4)


def test_errors_name_the_problem(tmp_path):
  model, params = vit_and_params()
  with pytest.raises(ValueError, match='does not exist.*--config.init_params_file'):
    vit_pretrained.load_pretrained(model, params, str(tmp_path / 'missing.npz'))
  (tmp_path / 'junk.npz').write_text('not a zip')
  with pytest.raises(ValueError, match='not a readable .npz'):
    vit_pretrained.read_checkpoint(str(tmp_path / 'junk.npz'))
  np.savez(tmp_path / 'other.npz', w=np.zeros(3))
  with pytest.raises(ValueError, match='not a ViT checkpoint'):
    vit_pretrained.read_checkpoint(str(tmp_path / 'other.npz'))
  wide = {k: v for k, v in fake_checkpoint().items()}
  wide['Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel'] = np.zeros((D, 2 * M), np.float32)
  with pytest.raises(ValueError, match='encoderblock_1/MlpBlock_3/Dense_0/kernel has shape'):
    vit_pretrained.map_checkpoint(wide, params)
  with pytest.raises(ValueError, match='embedding/kernel has shape'):
    vit_pretrained.map_checkpoint(fake_checkpoint(), vit_and_params(image=IMAGE)[1] | {
        'embed': {'kernel': np.zeros((3 * 8 * 8, D)), 'bias': np.zeros(D)}})
  with pytest.raises(ValueError, match='3 blocks but the model only 2'):
    vit_pretrained.map_checkpoint(fake_checkpoint(depth=3), params)
  del wide['Transformer/encoderblock_1/MlpBlock_3/Dense_0/bias']
  with pytest.raises(ValueError, match='lacks'):
    vit_pretrained.map_checkpoint(wide, params)
  mlp = models.create_model('mlp', C, hidden=(4,))
  with pytest.raises(ValueError, match='ViT checkpoints'):
    vit_pretrained.load_pretrained(mlp, {}, _saved(fake_checkpoint(), tmp_path))


def vit_config(**overrides):
  config = config_lib.base_config()
  config.update(dict(dataset='synthetic', model='vit', num_clients=2, clients_per_round=2,
                     rounds=1, local_steps=1, partition='iid', progress=False))
  config.dataset_options = {'num_train': 40, 'num_test': 8, 'shape': IMAGE,
                            'num_classes': C}
  config.model_options = {'depth': 2, 'hidden': D, 'mlp': M, 'heads': H, 'patch': P}
  config.update(overrides)
  return config


def test_build_experiment_loads_the_file_after_init(tmp_path):
  ckpt = fake_checkpoint()
  config = vit_config(init_params_file=_saved(ckpt, tmp_path))
  config_lib.validate(config)
  _, model, params, _ = run.build_experiment(config)
  np.testing.assert_array_equal(params['cls'], ckpt['cls'].reshape(-1))
  np.testing.assert_array_equal(params['exits_dense_bias'][1], ckpt['head/bias'])
  images = np.random.default_rng(0).normal(size=(2, *IMAGE)).astype(np.float32)
  np.testing.assert_allclose(model.apply({'params': params}, images),
                             reference_forward(ckpt, images), rtol=2e-4, atol=2e-4)


def test_build_experiment_refuses_before_loading_data(monkeypatch, tmp_path):
  def no_data(*args, **kwargs):
    raise AssertionError('the dataset was loaded before the checkpoint was checked')

  monkeypatch.setattr(run.data_lib, 'load_dataset', no_data)
  with pytest.raises(config_lib.ConfigError, match='does not exist'):
    run.build_experiment(vit_config(init_params_file=str(tmp_path / 'ViT-B_16.npz')))
  with pytest.raises(config_lib.ConfigError, match="model is 'mlp'"):
    run.build_experiment(vit_config(model='mlp',
                                    init_params_file=_saved(fake_checkpoint(), tmp_path)))
