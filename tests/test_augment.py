"""Crop-and-flip augmentation: every output is one of the allowed transforms."""
import jax
import numpy as np
import pytest

from fedjax_het.data import augment


def test_crop_flip_outputs_are_shifted_and_maybe_flipped_inputs():
  images = np.random.default_rng(0).normal(size=(16, 6, 6, 2)).astype(
      np.float32)
  out = np.asarray(augment.crop_flip(jax.random.PRNGKey(0), images, pad=2))
  padded = np.pad(images, ((0, 0), (2, 2), (2, 2), (0, 0)))
  seen_flip, seen_shift = False, False
  for b in range(16):
    candidates = [(dy, dx, flip) for dy in range(5) for dx in range(5)
                  for flip in (False, True)
                  if np.array_equal(out[b], (lambda c: c[:, ::-1] if flip else c)(
                      padded[b, dy:dy + 6, dx:dx + 6]))]
    assert candidates, f'image {b} is not a crop/flip of its input'
    seen_flip |= any(f for _, _, f in candidates)
    seen_shift |= any((dy, dx) != (2, 2) for dy, dx, _ in candidates)
  assert seen_flip and seen_shift


def test_unknown_augmentation_is_refused():
  assert augment.get_augmentation('none') is None
  with pytest.raises(ValueError, match='augmentation'):
    augment.get_augmentation('mixup')
