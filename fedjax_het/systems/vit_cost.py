"""Analytic ViT client costs: parameters, FLOPs, bytes, memory and round time.

Co-S²P windows, FedRolex and FedAvg clients on the paper's Jetson boards, in
host-side integer arithmetic (no JAX), for any pre-norm ViT (`ViTShape`): the
paper's three (Tab. 4, `PAPER_VITS`) and the library's small scaled ones.
The windows themselves (depth, width, offset of each client) are the ViT
engine's (`methods/cos2p/vit_engine.py`: `client_windows`, `window_offsets`,
`window_submodel`); this module costs a `Submodel` it is given.

Model. T = (image/patch)² + 1 tokens (with CLS), head dim hd = D/H. A block
is LN1, qkv Dense D→3·H·hd, attention, out-proj H·hd→D, LN2, fc1 D→M, GELU,
fc2 M→D with residual adds; an exit head is LayerNorm + Linear(D→classes) on
the CLS token. Structured units (`Width`): MSA heads (their q, k, v rows),
out-proj output rows, fc1 output rows, fc2 output rows; a rate r keeps
⌈r·K⌉ units of a kind (K = H, D, M, D). Pruned inputs follow the previous
layer's mask (out-proj inputs the heads, fc2 inputs fc1's rows); pruned
out-proj/fc2 rows are zero-padded back into the residual stream, so LN and
the residual width stay D.

FLOPs are 2 per multiply-add, per image, forward: patch embedding
2·(T−1)·C·p²·D, qkv 2·T·D·3·h·hd, QKᵀ and AV 2·T²·hd each per kept head,
out-proj 2·T·h·hd·o, fc1 2·T·D·f, fc2 2·T·f·g, exit head 2·D·classes;
LayerNorm, softmax, GELU and residual adds are not counted. (The usual
"ViT-B/16: 17.6 GFLOPs" counts multiply-adds: 35.1e9 FLOPs here.)

A client's submodel (`Submodel`, Co-S²P's window): h frozen blocks at full
width (forward only, with the embedding unless it trains), D_n trainable
blocks at the width rates, c_n exit heads; blocks above are pruned away.
Per client (`client_cost`):

  download = 4 B × (frozen part + trainable blocks at full width when the
             client learns its mask itself (Co-S²P), else the sliced part),
  upload   = 4 B × sliced trainable params (+ 1 bit per unit of the
             trainable blocks when it learns a mask),
  memory   = 4 B × [P_frozen + 6·P_train] + 4 B × B_n·T·D_n·a(width),
             (1 param + 1 grad + 4 Adan buffers per trainable parameter),
             a(width) = 2D + 3·h·hd + h·T + h·hd + o + 2f + g floats per token
             and block: LN1 and LN2 outputs, q/k/v, attention probabilities,
             attention output (out-proj input), out-proj output, fc1 pre- and
             post-GELU, fc2 output; activations of frozen blocks and the exit
             heads (CLS only) are not kept.

Round time of client n dispatched in round q (`round_seconds`, spec §6, an
inference; the paper measured real Jetsons):

  T_n(q) = T_down + 1[q < Q̂]·Ê·nb_n·t_mask + S_n·t_step + T_up,
  nb_n = ⌈|D_n^train| / B_n⌉, S_n = E·nb_n weight-training steps (E epochs;
  a client of unequal work runs its own S_n, `systems.local_work`),
  t_step = B_n·(F_fwd(frozen) + 3·F_fwd(trainable sliced + exits)) / S,
  t_mask = B_n·(F_fwd(embedding + frozen) + 2·F_fwd(trainable at full width)) / S,

with comm = bytes·8 / bandwidth (1 Gbit/s) and S the device's effective
training FLOP/s (default 15e12 · TOPS / 275, `DEVICE_TYPES`).
"""
import dataclasses
import math

from fedjax_het.options import (ConfigError, in_range, is_bool,
                                non_negative_int, positive, positive_int)

BYTES_PER_FLOAT = 4
OPTIMIZER_COPIES = 6  # parameter, gradient and Adan's four buffers
TRAIN_FRACTION = 0.8  # each client trains on 80% of its data (8:2 split)


def _ceil(x: float) -> int:
  """⌈x⌉ with a 1e-9 tolerance (0.75·512 stays 384 under rounding)."""
  return math.ceil(x - 1e-9)


# ---- shapes ------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ViTShape:
  """A pre-norm ViT: `depth` blocks of width `hidden`, MLP `mlp`, `heads` heads."""
  depth: int
  hidden: int
  mlp: int
  heads: int
  patch: int
  image: int
  channels: int = 3
  num_classes: int = 1000

  def __post_init__(self):
    for name in ('depth', 'hidden', 'mlp', 'heads', 'patch', 'image',
                 'channels', 'num_classes'):
      positive_int(name, getattr(self, name))
    if self.hidden % self.heads:
      raise ConfigError(f'hidden {self.hidden} must be divisible by heads '
                        f'{self.heads}.')
    if self.image % self.patch:
      raise ConfigError(f'image {self.image} must be divisible by patch '
                        f'{self.patch}.')

  @property
  def tokens(self) -> int:
    """T: patches plus the CLS token."""
    return (self.image // self.patch)**2 + 1

  @property
  def head_dim(self) -> int:
    return self.hidden // self.heads


# Tab. 4 (patch 16 at 224×224) with the experiments' heads: E1 trains
# 'vit_tiny' on ImageNet200, E2/E3 the others on ImageNet300.
PAPER_VITS = {
    'vit_tiny': ViTShape(depth=8, hidden=512, mlp=2048, heads=8, patch=16,
                         image=224, num_classes=200),
    'vit_base': ViTShape(depth=12, hidden=768, mlp=3072, heads=12, patch=16,
                         image=224, num_classes=300),
    'vit_base_ext': ViTShape(depth=16, hidden=768, mlp=3072, heads=12,
                             patch=16, image=224, num_classes=300),
}


@dataclasses.dataclass(frozen=True)
class Width:
  """Kept fraction of each structured unit kind of a block, each in (0, 1]."""
  heads: float = 1.0
  attn_out: float = 1.0
  fc1: float = 1.0
  fc2: float = 1.0

  def __post_init__(self):
    for name in ('heads', 'attn_out', 'fc1', 'fc2'):
      in_range(0, 1, closed_low=False)(f'width.{name}', getattr(self, name))

  @classmethod
  def uniform(cls, rate: float) -> 'Width':
    return cls(rate, rate, rate, rate)

  def units(self, shape: ViTShape) -> tuple[int, int, int, int]:
    """Kept (heads h, out-proj rows o, fc1 rows f, fc2 rows g): ⌈rate·K⌉."""
    return (_ceil(self.heads * shape.heads),
            _ceil(self.attn_out * shape.hidden), _ceil(self.fc1 * shape.mlp),
            _ceil(self.fc2 * shape.hidden))


FULL = Width()
# Kept (heads h, out-proj rows o, fc1 rows f, fc2 rows g) of one block: what
# `Width.units` gives, or a realised mask's counts (any may be 0).
BlockUnits = tuple[int, int, int, int]


def _units(shape: ViTShape, width: 'Width | BlockUnits') -> BlockUnits:
  return width.units(shape) if isinstance(width, Width) else tuple(width)


# ---- parameters, FLOPs, activations ------------------------------------------
def embedding_params(shape: ViTShape) -> int:
  """Patch projection (C·p²·D + D), CLS token (D), positions (T·D)."""
  d = shape.hidden
  return shape.channels * shape.patch**2 * d + 2 * d + shape.tokens * d


def block_params(shape: ViTShape, width: Width | BlockUnits = FULL) -> int:
  """One block's parameters (weights, biases, both LayerNorms) at `width`
  (rates, or the kept unit counts)."""
  h, o, f, g = _units(shape, width)
  d, a = shape.hidden, h * shape.head_dim
  return 4 * d + (d + 1) * 3 * a + (a + 1) * o + (d + 1) * f + (f + 1) * g


def head_params(shape: ViTShape) -> int:
  """An exit head: LayerNorm (2D) + Linear D→classes."""
  return 2 * shape.hidden + (shape.hidden + 1) * shape.num_classes


def model_params(shape: ViTShape) -> int:
  """The full model with one head."""
  return (embedding_params(shape) + shape.depth * block_params(shape) +
          head_params(shape))


def embedding_flops(shape: ViTShape) -> int:
  return 2 * (shape.tokens - 1) * shape.channels * shape.patch**2 * shape.hidden


def block_flops(shape: ViTShape, width: Width | BlockUnits = FULL) -> int:
  """Forward FLOPs of one block per image at `width` (module docstring)."""
  h, o, f, g = _units(shape, width)
  t, d, a = shape.tokens, shape.hidden, h * shape.head_dim
  return 2 * t * (d * 3 * a + a * o + d * f + f * g) + 4 * t * t * a


def head_flops(shape: ViTShape) -> int:
  return 2 * shape.hidden * shape.num_classes


def forward_flops(shape: ViTShape) -> int:
  """Forward FLOPs of the full model per image."""
  return (embedding_flops(shape) + shape.depth * block_flops(shape) +
          head_flops(shape))


def block_activations(shape: ViTShape, width: Width | BlockUnits = FULL) -> int:
  """Floats one trainable block keeps per image for backward: T·a(width)."""
  h, o, f, g = _units(shape, width)
  d, a = shape.hidden, h * shape.head_dim
  return shape.tokens * (2 * d + 3 * a + h * shape.tokens + a + o + 2 * f + g)


def block_units(shape: ViTShape) -> int:
  """Structured units of a block (mask bits): H + D + M + D."""
  return shape.heads + 2 * shape.hidden + shape.mlp


# ---- submodels and their costs -----------------------------------------------
@dataclasses.dataclass(frozen=True)
class Submodel:
  """A client's window of the model.

  Attributes:
    frozen: h blocks below the window, full width, forward only.
    trainable: D_n blocks trained at `width`; blocks above are pruned away.
    width: width rates of the trainable blocks.
    exits: exit heads trained on top of the window (c_n).
    train_embedding: the patch/position embedding trains (else it is frozen
      with the blocks below).
    learns_mask: the client downloads its trainable blocks at full width,
      learns the pruning mask itself and uploads it (Co-S²P).
    blocks: the kept units (`BlockUnits`) of each trainable block, bottom
      up, where a realised mask gives them (they replace `width`); () for
      `width` in every block.
  """
  frozen: int
  trainable: int
  width: Width = FULL
  exits: int = 1
  train_embedding: bool = False
  learns_mask: bool = False
  blocks: tuple[BlockUnits, ...] = ()

  def __post_init__(self):
    non_negative_int('frozen', self.frozen)
    positive_int('trainable', self.trainable)
    positive_int('exits', self.exits)
    is_bool('train_embedding', self.train_embedding)
    is_bool('learns_mask', self.learns_mask)
    if self.blocks and len(self.blocks) != self.trainable:
      raise ConfigError(f'blocks lists {len(self.blocks)} blocks, not the '
                        f'{self.trainable} trainable ones.')

  def block_widths(self) -> tuple:
    """The width (`Width` or `BlockUnits`) of each trainable block."""
    return self.blocks or (self.width,) * self.trainable


@dataclasses.dataclass(frozen=True)
class ClientCost:
  """Per-client sizes (parameters, bytes) and per-image FLOPs of a submodel."""
  params_frozen: int
  params_trainable: int
  download_bytes: float
  upload_bytes: float
  frozen_flops: int
  trainable_flops: int
  mask_flops: int
  memory_bytes: float

  @property
  def step_flops(self) -> int:
    """Per image of a training step: F_fwd(frozen) + 3·F_fwd(trainable)."""
    return self.frozen_flops + 3 * self.trainable_flops


def client_cost(shape: ViTShape, sub: Submodel, batch: int) -> ClientCost:
  """Sizes, FLOPs and memory of training `sub` at batch size `batch`."""
  positive_int('batch', batch)
  if sub.frozen + sub.trainable > shape.depth:
    raise ConfigError(f'a window of {sub.frozen} frozen and {sub.trainable} '
                      f'trainable blocks does not fit in depth {shape.depth}.')
  embedding = (0, 0) if sub.train_embedding else (embedding_params(shape),
                                                  embedding_flops(shape))
  params_frozen = embedding[0] + sub.frozen * block_params(shape)
  frozen_flops = embedding[1] + sub.frozen * block_flops(shape)
  widths = sub.block_widths()
  params_trainable = (sum(block_params(shape, w) for w in widths) +
                      sub.exits * head_params(shape) +
                      sub.train_embedding * embedding_params(shape))
  trainable_flops = (sum(block_flops(shape, w) for w in widths) +
                     sub.exits * head_flops(shape) +
                     sub.train_embedding * embedding_flops(shape))
  full_window = (sub.trainable * block_params(shape) +
                 sub.exits * head_params(shape) +
                 sub.train_embedding * embedding_params(shape))
  download = params_frozen + (full_window if sub.learns_mask else
                              params_trainable)
  mask_bits = sub.learns_mask * sub.trainable * block_units(shape)
  activations = batch * sum(block_activations(shape, w) for w in widths)
  return ClientCost(
      params_frozen=params_frozen,
      params_trainable=params_trainable,
      download_bytes=BYTES_PER_FLOAT * download,
      upload_bytes=BYTES_PER_FLOAT * params_trainable + mask_bits / 8,
      frozen_flops=frozen_flops,
      trainable_flops=trainable_flops,
      mask_flops=(embedding_flops(shape) + sub.frozen * block_flops(shape) +
                  2 * sub.trainable * block_flops(shape)),
      memory_bytes=BYTES_PER_FLOAT * (params_frozen + OPTIMIZER_COPIES *
                                      params_trainable + activations))


# ---- devices -----------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class DeviceProfile:
  """A client device: memory (bytes), INT8 TOPS and effective training FLOP/s."""
  name: str
  memory_bytes: float
  tops: float
  speed: float


AGX64_SPEED = 15e12  # effective training FLOP/s of an AGX Orin 64GB (275 TOPS)


def _jetson(name: str, gib: int, tops: float) -> DeviceProfile:
  return DeviceProfile(name, gib * 2**30, tops, AGX64_SPEED * tops / 275)


DEVICE_TYPES = {
    'nx8': _jetson('Jetson Xavier NX 8GB', 8, 21),
    'nx16': _jetson('Jetson Xavier NX 16GB', 16, 21),
    'agx32': _jetson('Jetson AGX Orin 32GB', 32, 200),
    'agx64': _jetson('Jetson AGX Orin 64GB', 64, 275),
}


def device(name: str, speeds: dict[str, float] | None = None) -> DeviceProfile:
  """A device type's profile, its speed replaced by `speeds[name]` if given."""
  for key in [name, *(speeds or {})]:
    if key not in DEVICE_TYPES:
      raise ConfigError(f'unknown device type {key!r}; known types are '
                        f'{", ".join(DEVICE_TYPES)}.')
  profile = DEVICE_TYPES[name]
  if speeds and name in speeds:
    positive(f'speed of {name}', speeds[name])
    profile = dataclasses.replace(profile, speed=speeds[name])
  return profile


def nx_ratio_speeds(nx_ratio: float,
                    agx64_speed: float = AGX64_SPEED) -> dict[str, float]:
  """Speeds with both NX at `nx_ratio`·AGX64 and AGX32/AGX64 = 200/275."""
  positive('nx_ratio', nx_ratio)
  return {'nx8': nx_ratio * agx64_speed, 'nx16': nx_ratio * agx64_speed,
          'agx32': 200 / 275 * agx64_speed, 'agx64': agx64_speed}


def round_seconds(shape: ViTShape, sub: Submodel, device_profile: DeviceProfile,
                  *, train_samples: int, batch: int, steps: int,
                  mask_epochs: int = 0, bandwidth_bps: float = 1e9) -> float:
  """T_n(q) (module docstring): download, mask phase, S_n weight-training
  steps, upload; seconds.

  Args:
    shape, sub: the model and the client's window.
    device_profile: its `speed` is S (FLOP/s).
    train_samples: |D_n^train|.
    batch: B_n.
    steps: S_n, the weight-training steps (E epochs: E·⌈|D_n^train|/B_n⌉).
    mask_epochs: Ê in rounds q < Q̂ (0 after; only for `learns_mask`).
    bandwidth_bps: link rate in bit/s, both directions.
  """
  positive_int('train_samples', train_samples)
  non_negative_int('steps', steps)
  non_negative_int('mask_epochs', mask_epochs)
  positive('bandwidth_bps', bandwidth_bps)
  if mask_epochs and not sub.learns_mask:
    raise ConfigError(f'mask_epochs {mask_epochs} needs a submodel that learns '
                      f'its mask.')
  cost = client_cost(shape, sub, batch)
  mask_steps = mask_epochs * math.ceil(train_samples / batch)   # Ê·nb_n
  flops = batch * (mask_steps * cost.mask_flops + steps * cost.step_flops)
  comm = (cost.download_bytes + cost.upload_bytes) * 8 / bandwidth_bps
  return comm + flops / device_profile.speed
