"""Analytic ViT client costs: parameters, FLOPs, bytes, memory and round time.

Co-S²P windows, FedRolex and FedAvg clients on the paper's Jetson boards, in
host-side integer arithmetic (no JAX), for any pre-norm ViT (`ViTShape`): the
paper's three (Tab. 4, `PAPER_VITS`) and the library's small scaled ones.

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

  T_n(q) = T_down + 1[q < Q̂]·Ê·nb_n·t_mask + E·nb_n·t_step + T_up,
  nb_n = ⌈|D_n^train| / B_n⌉,
  t_step = B_n·(F_fwd(frozen) + 3·F_fwd(trainable sliced + exits)) / S,
  t_mask = B_n·(F_fwd(embedding + frozen) + 2·F_fwd(trainable at full width)) / S,

with comm = bytes·8 / bandwidth (1 Gbit/s) and S the device's effective
training FLOP/s (default 15e12 · TOPS / 275, `DEVICE_TYPES`).
"""
import dataclasses
import math

from fedjax_het.options import (ConfigError, in_range, is_bool,
                                non_negative_int, positive, positive_int)
from fedjax_het.systems import clock

BYTES_PER_FLOAT = 4
OPTIMIZER_COPIES = 6  # parameter, gradient and Adan's four buffers
TRAIN_FRACTION = 0.8  # each client trains on 80% of its data (8:2 split)


def _ceil(x: float) -> int:
  """⌈x⌉ with a 1e-9 tolerance (0.75·512 stays 384 under rounding)."""
  return math.ceil(x - 1e-9)


def _floor(x: float) -> int:
  return math.floor(x + 1e-9)


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


def depth_and_width(budget: float, depth: int,
                    ratio: float = 1.0) -> tuple[int, float]:
  """Co-S²P's split of a budget R_n = R_width·R_depth; (D_n, R_width).

  R_width = √(R·ρ), R_depth = √(R/ρ) with ρ = R_width/R_depth (√R each by
  default); D_n = ⌊L·R_depth⌋ trainable blocks.
  """
  in_range(0, 1, closed_low=False)('budget', budget)
  positive_int('depth', depth)
  positive('width_depth_ratio', ratio)
  width, depth_rate = math.sqrt(budget * ratio), math.sqrt(budget / ratio)
  if width > 1 + 1e-9 or depth_rate > 1 + 1e-9:
    raise ConfigError(f'width_depth_ratio {ratio!r} with budget {budget!r} '
                      f'gives a width rate {width:.3g} and a depth rate '
                      f'{depth_rate:.3g}, not both in (0, 1].')
  blocks = _floor(depth * depth_rate)
  if blocks == 0:
    raise ConfigError(f'budget {budget!r} leaves no trainable block of '
                      f'{depth} (depth rate {depth_rate:.3g}).')
  return blocks, min(width, 1.0)


def cos2p_submodels(shape: ViTShape, budgets: list[float], round_index: int,
                    ratio: float = 1.0) -> list[Submodel]:
  """Every client's Co-S²P window in round q.

  The windows share a rolling offset h(q) = q mod (L − D_max + 1): client n
  trains blocks [h, h + D_n) at width R_width (h frozen below), with an exit
  at the end of every distinct depth D_i ≤ D_n among the clients (Eq. 3's
  self-distillation exits, c_n of them). The embedding stays frozen.
  """
  non_negative_int('round_index', round_index)
  splits = [depth_and_width(budget, shape.depth, ratio) for budget in budgets]
  depths = sorted({blocks for blocks, _ in splits})
  offset = round_index % (shape.depth - depths[-1] + 1)
  return [Submodel(frozen=offset, trainable=blocks, width=Width.uniform(rate),
                   exits=sum(d <= blocks for d in depths), learns_mask=True)
          for blocks, rate in splits]


def fedrolex_submodel(shape: ViTShape, budget: float,
                      width_is_budget: bool = False) -> Submodel:
  """FedRolex's client: all L blocks and the embedding train at width β.

  β = √R_n by default, β = R_n with `width_is_budget`; one exit, no mask.
  """
  in_range(0, 1, closed_low=False)('budget', budget)
  beta = budget if width_is_budget else math.sqrt(budget)
  return Submodel(frozen=0, trainable=shape.depth, width=Width.uniform(beta),
                  train_embedding=True)


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
                  *, train_samples: int, batch: int, epochs: int,
                  mask_epochs: int = 0, bandwidth_bps: float = 1e9) -> float:
  """T_n(q) (module docstring): download, mask phase, E epochs, upload; seconds.

  Args:
    shape, sub: the model and the client's window.
    device_profile: its `speed` is S (FLOP/s).
    train_samples: |D_n^train|.
    batch: B_n.
    epochs: E.
    mask_epochs: Ê in rounds q < Q̂ (0 after; only for `learns_mask`).
    bandwidth_bps: link rate in bit/s, both directions.
  """
  positive_int('train_samples', train_samples)
  non_negative_int('epochs', epochs)
  non_negative_int('mask_epochs', mask_epochs)
  positive('bandwidth_bps', bandwidth_bps)
  if mask_epochs and not sub.learns_mask:
    raise ConfigError(f'mask_epochs {mask_epochs} needs a submodel that learns '
                      f'its mask.')
  cost = client_cost(shape, sub, batch)
  samples = math.ceil(train_samples / batch) * batch  # nb_n · B_n
  flops = samples * (mask_epochs * cost.mask_flops + epochs * cost.step_flops)
  comm = (cost.download_bytes + cost.upload_bytes) * 8 / bandwidth_bps
  return comm + flops / device_profile.speed


# ---- the paper's experiments -------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ClientSpec:
  """One client of Tab. 6/7: device type, dataset size, budget R_n, batch B_n."""
  device: str
  dataset_size: int
  budget: float
  batch: int

  @property
  def train_samples(self) -> int:
    return int(TRAIN_FRACTION * self.dataset_size)


@dataclasses.dataclass(frozen=True)
class PaperExperiment:
  """E1–E3: model, clients, μ, T_clk (s), E, Q̂, Ê, the paper's RU (%, Tab. 1/2)."""
  model: str
  clients: tuple[ClientSpec, ...]
  mu: float
  t_clk: float
  epochs: int
  mask_rounds: int
  mask_epochs: int
  paper_ru: dict[str, float]

  @property
  def shape(self) -> ViTShape:
    return PAPER_VITS[self.model]


def _clients(*groups) -> tuple[ClientSpec, ...]:
  """(device, count, dataset size, budget, batch) groups, expanded."""
  return tuple(ClientSpec(name, size, budget, batch)
               for name, count, size, budget, batch in groups
               for _ in range(count))


PAPER_EXPERIMENTS = {
    'E1': PaperExperiment(
        'vit_tiny', _clients(('nx8', 1, 8277, 0.0625, 8),
                             ('agx32', 3, 24960, 0.5625, 64),
                             ('agx64', 4, 36992, 0.5625, 128)),
        mu=0.5, t_clk=60.0, epochs=5, mask_rounds=20, mask_epochs=5,
        paper_ru={'fedavg': 63.5, 'fedrolex': 72.5, 'cos2p': 87.9,
                  'async': 100.0}),
    'E2': PaperExperiment(
        'vit_base', _clients(('nx8', 1, 6285, 0.0625, 8),
                             ('nx16', 2, 11770, 0.0625, 32),
                             ('agx32', 3, 17502, 0.0625, 64),
                             ('agx64', 10, 28047, 0.5625, 128)),
        mu=0.4, t_clk=100.0, epochs=5, mask_rounds=10, mask_epochs=5,
        paper_ru={'fedavg': 60.0, 'fedrolex': 82.4, 'cos2p': 92.4,
                  'async': 100.0}),
    'E3': PaperExperiment(
        'vit_base_ext', _clients(('nx8', 1, 4737, 0.015625, 8),
                                 ('nx16', 2, 9476, 0.0625, 32),
                                 ('agx32', 3, 18932, 0.25, 64),
                                 ('agx64', 10, 29372, 0.5625, 128)),
        mu=0.4, t_clk=150.0, epochs=5, mask_rounds=10, mask_epochs=5,
        paper_ru={'fedavg': 61.4, 'fedrolex': 78.2, 'cos2p': 90.6,
                  'async': 100.0}),
}


def paper_experiment(name: str) -> PaperExperiment:
  if name not in PAPER_EXPERIMENTS:
    raise ConfigError(f'unknown experiment {name!r}; known experiments are '
                      f'{", ".join(PAPER_EXPERIMENTS)}.')
  return PAPER_EXPERIMENTS[name]


def paper_clients(name: str) -> list[ClientSpec]:
  """The clients of experiment 'E1', 'E2' or 'E3' (Tab. 6/7), grouped by type."""
  return list(paper_experiment(name).clients)


METHODS = ('fedavg', 'fedrolex', 'cos2p', 'async')


def method_submodel(experiment: PaperExperiment, method: str, client: int,
                    round_index: int) -> Submodel:
  """Client `client`'s submodel under `method` when dispatched in round q.

  'fedavg': the full model; 'fedrolex': width √R_n, full depth; 'cos2p' and
  'async': the Co-S²P window (`cos2p_submodels`).
  """
  if method not in METHODS:
    raise ConfigError(f'unknown method {method!r}; choose one of '
                      f'{", ".join(METHODS)}.')
  shape, spec = experiment.shape, experiment.clients[client]
  if method == 'fedavg':
    return fedrolex_submodel(shape, 1.0)
  if method == 'fedrolex':
    return fedrolex_submodel(shape, spec.budget)
  budgets = [c.budget for c in experiment.clients]
  return cos2p_submodels(shape, budgets, round_index)[client]


def method_round_seconds(experiment: PaperExperiment, method: str, client: int,
                         round_index: int,
                         speeds: dict[str, float] | None = None,
                         bandwidth_bps: float = 1e9) -> float:
  """T_n(q) of a client under `method`; Co-S²P learns masks in rounds q < Q̂."""
  spec = experiment.clients[client]
  sub = method_submodel(experiment, method, client, round_index)
  mask_epochs = (experiment.mask_epochs if sub.learns_mask and
                 round_index < experiment.mask_rounds else 0)
  return round_seconds(experiment.shape, sub, device(spec.device, speeds),
                       train_samples=spec.train_samples, batch=spec.batch,
                       epochs=experiment.epochs, mask_epochs=mask_epochs,
                       bandwidth_bps=bandwidth_bps)


def method_durations(experiment: PaperExperiment, method: str,
                     speeds: dict[str, float] | None = None,
                     bandwidth_bps: float = 1e9) -> clock.Duration:
  """`method_round_seconds` as a clock duration (client, dispatch_round, index)."""
  cache = {}

  def duration(client: int, dispatch_round: int, dispatch_index: int) -> float:
    del dispatch_index
    key = (client, dispatch_round)
    if key not in cache:
      cache[key] = method_round_seconds(experiment, method, client,
                                        dispatch_round, speeds, bandwidth_bps)
    return cache[key]

  return duration


def simulate_method(experiment: PaperExperiment, method: str, *, rounds: int,
                    speeds: dict[str, float] | None = None, sigma: float = 0.0,
                    seed: int = 0) -> clock.Schedule:
  """The clock under `method`: FedAvg and FedRolex synchronous (μ = 1,
  T_clk = 0), Co-S²P at the experiment's μ and T_clk, Async at μ = 1/N,
  T_clk = 0; durations jittered by exp(σ·z)."""
  num_clients = len(experiment.clients)
  mu, t_clk = {'cos2p': (experiment.mu, experiment.t_clk),
               'async': (1 / num_clients, 0.0)}.get(method, (1.0, 0.0))
  duration = clock.with_jitter(method_durations(experiment, method, speeds),
                               sigma, seed)
  return clock.simulate(duration, num_clients=num_clients, rounds=rounds,
                        mu=mu, t_clk=t_clk)


def fit_speed_ratio(experiment: PaperExperiment,
                    target_ru: float | None = None, *, low: float = 1e-3,
                    high: float = 1.0, bandwidth_bps: float = 1e9) -> float:
  """The NX/AGX64 speed ratio at which synchronous FedAvg(Full) has RU `target_ru`.

  RU (Eq. 17, %, the paper's FedAvg value by default) of one synchronous
  round without jitter rises with the ratio while the NX boards are the
  slowest; bisection in log space on [low, high] (AGX32/AGX64 = 200/275).
  """
  target = experiment.paper_ru['fedavg'] if target_ru is None else target_ru
  in_range(0, 100, closed_low=False)('target_ru', target)

  def ru(ratio: float) -> float:
    duration = method_durations(experiment, 'fedavg', nx_ratio_speeds(ratio),
                                bandwidth_bps)
    schedule = clock.simulate(duration, num_clients=len(experiment.clients),
                              rounds=1, mu=1.0, t_clk=0.0)
    return 100 * schedule.ru_eq17()

  if not ru(low) <= target <= ru(high):
    raise ConfigError(f'target_ru {target!r} is outside the RU '
                      f'[{ru(low):.1f}, {ru(high):.1f}] reachable with NX/AGX '
                      f'speed ratios in [{low:g}, {high:g}].')
  log_low, log_high = math.log(low), math.log(high)
  for _ in range(60):
    middle = (log_low + log_high) / 2
    if ru(math.exp(middle)) < target:
      log_low = middle
    else:
      log_high = middle
  return math.exp((log_low + log_high) / 2)


@dataclasses.dataclass(frozen=True)
class DeviceComparison:
  """Co-S²P vs FedRolex on one device type (bytes, seconds per round).

  Co-S²P's memory is the largest over the rolling offsets h(q); its time per
  round is the mean over one cycle of offsets after the mask phase
  (`cos2p_seconds`) and the mean over the mask-phase rounds q < Q̂
  (`cos2p_mask_seconds`, NaN if Q̂ = 0).
  """
  device: str
  cos2p_memory: float
  fedrolex_memory: float
  cos2p_seconds: float
  cos2p_mask_seconds: float
  fedrolex_seconds: float

  @property
  def memory_change(self) -> float:
    """Co-S²P's memory relative to FedRolex's, %."""
    return 100 * (self.cos2p_memory / self.fedrolex_memory - 1)

  @property
  def time_change(self) -> float:
    """Co-S²P's time per round after the mask phase relative to FedRolex's, %."""
    return 100 * (self.cos2p_seconds / self.fedrolex_seconds - 1)


def compare_devices(experiment: PaperExperiment,
                    speeds: dict[str, float] | None = None
                    ) -> list[DeviceComparison]:
  """Co-S²P vs FedRolex for the first client of each device type."""
  shape = experiment.shape
  budgets = [c.budget for c in experiment.clients]
  depth_max = max(depth_and_width(b, shape.depth)[0] for b in budgets)
  cycle = shape.depth - depth_max + 1  # the offsets h(q) repeat every cycle
  late = range(experiment.mask_rounds, experiment.mask_rounds + cycle)
  early = range(experiment.mask_rounds)
  firsts = {}
  for index, spec in enumerate(experiment.clients):
    firsts.setdefault(spec.device, index)

  def memory(method, client, q):
    sub = method_submodel(experiment, method, client, q)
    return client_cost(shape, sub, experiment.clients[client].batch
                       ).memory_bytes

  def mean_seconds(method, client, rounds):
    return sum(method_round_seconds(experiment, method, client, q, speeds)
               for q in rounds) / len(rounds)

  return [DeviceComparison(
      device=name,
      cos2p_memory=max(memory('cos2p', n, q) for q in late),
      fedrolex_memory=memory('fedrolex', n, 0),
      cos2p_seconds=mean_seconds('cos2p', n, late),
      cos2p_mask_seconds=(mean_seconds('cos2p', n, early) if early else
                          math.nan),
      fedrolex_seconds=mean_seconds('fedrolex', n, [0]))
          for name, n in firsts.items()]
