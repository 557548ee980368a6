"""Training-time augmentation inside the compiled local step.

`crop_flip` is the CIFAR augmentation of FIARSE's code (and of most FL
papers on CIFAR): RandomCrop(32, padding=4) with zero padding, then
RandomHorizontalFlip(p=0.5), drawn independently per image.
"""
import jax
import jax.numpy as jnp

AUGMENTATIONS = ('none', 'crop_flip')


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


def get_augmentation(name: str):
  """`augment(key, images) -> images`, or None for 'none'."""
  if name not in AUGMENTATIONS:
    raise ValueError(f'unknown augmentation {name!r}; choose one of '
                     f'{", ".join(AUGMENTATIONS)}.')
  return crop_flip if name == 'crop_flip' else None
