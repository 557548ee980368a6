"""Training-time augmentation inside the compiled local step.

`crop_flip` is the CIFAR augmentation of FIARSE's code (and of most FL
papers on CIFAR): RandomCrop(32, padding=4) with zero padding, then
RandomHorizontalFlip(p=0.5), drawn independently per image.

`crop24_jitter` is CSE-FSL's CIFAR-10 pipeline (the authors' code): a random
24x24 crop without padding, a horizontal flip, ColorJitter(brightness=0.5,
contrast=(0.2, 1.8)); at test time `test_transform` takes the centre 24x24
crop. Images are the loaders' [0, 1] pixels (the authors' final
Normalize(0.5, 0.5) is left out: an affine map of the input, our choice). An augmentation that changes the image size reports it through
`output_shape` (the model is built for it).
"""
import jax
import jax.numpy as jnp

AUGMENTATIONS = ('none', 'crop_flip', 'crop24_jitter')
_CROP24 = 24


def crop_flip(key: jax.Array, images: jax.Array, pad: int = 4) -> jax.Array:
  """[B, H, W, C] -> [B, H, W, C]: random shifted crop of the zero-padded image
  (offsets uniform in [0, 2·pad]) and a horizontal flip with probability ½."""
  batch, height, width, _ = images.shape
  crop_key, flip_key = jax.random.split(key)
  offsets = jax.random.randint(crop_key, (batch, 2), 0, 2 * pad + 1)
  flips = jax.random.bernoulli(flip_key, 0.5, (batch,))
  padded = jnp.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))

  def one(image, offset, flip):
    crop = jax.lax.dynamic_slice(image, (offset[0], offset[1], 0),
                                 (height, width, image.shape[-1]))
    return jnp.where(flip, crop[:, ::-1], crop)

  return jax.vmap(one)(padded, offsets, flips)


def crop24_jitter(key: jax.Array, images: jax.Array) -> jax.Array:
  """[B, H, W, C] -> [B, 24, 24, C]: RandomCrop(24) (offsets uniform in
  [0, H − 24]), a flip with probability ½, brightness factor U(0.5, 1.5) and
  contrast factor U(0.2, 1.8) about the image's grey mean (torchvision's
  ColorJitter order: brightness, then contrast), clipped to [0, 1]."""
  batch, height, width, channels = images.shape
  # Part 4 for the left offsets: a sampler consumes its key's parts 0 and 1
  # (randint splits it), so crop_key's part 1 is not free for them.
  crop_key, flip_key, bright_key, contrast_key, left_key = jax.random.split(
      key, 5)
  top = jax.random.randint(crop_key, (batch,), 0, height - _CROP24 + 1)
  left = jax.random.randint(left_key, (batch,), 0, width - _CROP24 + 1)
  flips = jax.random.bernoulli(flip_key, 0.5, (batch,))
  bright = jax.random.uniform(bright_key, (batch, 1, 1, 1), minval=0.5,
                              maxval=1.5)
  contrast = jax.random.uniform(contrast_key, (batch, 1, 1, 1), minval=0.2,
                                maxval=1.8)

  def crop(image, y, x, flip):
    out = jax.lax.dynamic_slice(image, (y, x, 0), (_CROP24, _CROP24, channels))
    return jnp.where(flip, out[:, ::-1], out)

  x = jax.vmap(crop)(images, top, left, flips)
  x = jnp.clip(x * bright, 0.0, 1.0)
  grey = jnp.mean(x, axis=(1, 2, 3), keepdims=True)
  return jnp.clip(grey + contrast * (x - grey), 0.0, 1.0)


def centre_crop24(images: jax.Array) -> jax.Array:
  """[B, H, W, C] -> [B, 24, 24, C], the centre crop (CenterCrop(24))."""
  top = (images.shape[1] - _CROP24) // 2
  left = (images.shape[2] - _CROP24) // 2
  return images[:, top:top + _CROP24, left:left + _CROP24]


def get_augmentation(name: str):
  """`augment(key, images) -> images`, or None for 'none'."""
  if name not in AUGMENTATIONS:
    raise ValueError(f'unknown augmentation {name!r}; choose one of '
                     f'{", ".join(AUGMENTATIONS)}.')
  return {'crop_flip': crop_flip, 'crop24_jitter': crop24_jitter}.get(name)


def test_transform(name: str):
  """What test images go through for augmentation `name`: `images -> images`
  (identity except for crop24_jitter's centre crop)."""
  return centre_crop24 if name == 'crop24_jitter' else (lambda images: images)


def output_shape(name: str, shape: tuple) -> tuple:
  """The per-example shape the model sees after augmentation `name`."""
  if name == 'crop24_jitter':
    return (_CROP24, _CROP24) + tuple(shape[2:])
  return tuple(shape)
