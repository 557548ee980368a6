"""The table of named PRNG key streams: every random draw's derivation.

Derivation rule: every draw of a run derives from (seed, round, stream,
client, step). A key is the seed key with, in turn, *indices* (a round, a
client id, an epoch, a step, a leaf or layer number) and *named streams*
(the constants below) folded in (`jax.random.fold_in`). Two draws may
share a key only by mistake, so the children of one parent key are either
indices, which are small non-negative ints, or named streams, which sit
outside the parent's index range (`Parent.indices`): no index can equal a
named stream folded into the same parent, and no two named streams of a
parent are equal. A named stream that needs indices below it folds them
into its own key (stream first, then index), never beside it.

`jax.random.split(key, n)[i]` equals `fold_in(key, i)` (JAX's partitionable
Threefry, the default): a split's parts count as indices 0..n−1 of `key`.
A sampler consumes indices of the key it is given too (`randint` splits it
into parts 0 and 1; `uniform`'s i-th value hashes index i), so a key with
named streams below 2^30 (the step key) is never given to a sampler: the
draw takes a named stream of it.

Parents (the key a stream or index is folded into):

| parent | the key | its indices |
| --- | --- | --- |
| seed | `ServerState.key`, `PRNGKey(seed)` | round r |
| round | `round_key(state)` = fold_in(seed, r) | 0: sampling, 1: client keys (its split halves) |
| client | a client's round key `ClientPlan.key` = fold_in(fold_in(half 1, client id), occurrence) | epoch e (batch order, `core.batching`); HIST's edge round e (see below) |
| step | a local step's key `StepContext.key` = fold_in(fold_in(client, STEP_KEYS), s) | none beside its named streams (AdaViT's layers and Co-S²P's mask-loss unit kinds are folded in by programs that draw no named step stream) |

The named streams:

| name | int | parent | then | draws |
| --- | --- | --- | --- | --- |
| PRUNEFL_INIT | 2^30 + 1 | seed | — | PruneFL's initial pruning on client 0 (its plan key) |
| SYSTEMS | 0x5e5 | round | split 3 | the systems part: q, T, link outcomes (`parts.links_work.LinksWork.draws`) |
| SELECTION | 0x5e1 | round | — | systems-aware selection draws (`reweighted`) |
| AVAILABILITY | 2^30 + 8 | round | — | who is online (`systems.availability`, `parts.availability.OnlineClients.online`) |
| HIST_SYSTEM | 1_000_003 | round | split 2 | HIST's CPU frequencies, OMA channels |
| HIST_PARTITION | 1_000_033 | round | layer group | HIST's disjoint neuron partitions |
| HIST_AIRCOMP | 1_000_037 | round | edge round, split 2, leaf | HIST's AirComp channels and receiver noise |
| SPLIT_SERVER | 1_000_081 | round | client id, block | split learning's server-step dropout |
| SPLIT_ORDER | 1_000_099 | round | block | split learning's random arrival order |
| FEDPM_EVAL | 2^30 + 2 | round | unit kind | FedPM's evaluated mask drawn from θ |
| DP_NOISE | 2^30 + 9 | round | leaf | DP's Gaussian noise on the cohort sums (`parts.dp.ClipAndNoise.release_sums`) |
| DP_COUNT | 2^30 + 10 | round | — | adaptive clipping's noise on the unclipped count (`parts.dp.ClipAndNoise.finish`) |
| STEP_KEYS | 2^31 − 1 | client | step s | the step keys of a program's (first) phase |
| PHASES | 2^31 − 2 | client | phase i ≥ 1 | the key of a sequence's phase i (`program.phase_key`) |
| ROUND_ROBIN | 2^30 + 6 | client | step s | FSL_OC's step keys |
| FEDPM_UPLOAD | 2^30 + 3 | client | unit kind | FedPM's uploaded mask M ~ Bern(σ(s)) |
| COS2P_MASK_DRAW | 2^30 + 4 | client | unit kind | Co-S²P's mask drawn after its mask phase |
| COS2P_RANDOM_UNITS | 2^30 + 5 | client | unit kind, layer | RAM-Fed's (and Co-S²P's random kinds') unit masks |
| AUGMENT | 1 | step | — | data augmentation of the step's batch |
| DROPOUT | 2 | step | — | the client model's dropout (split learning) |
| SERVER_DROPOUT | 3 | step | — | the server model's dropout (FSL_MC, FSL_OC) |
| FJORD_WIDTH | 2^30 + 7 | step | — | FjORD's width of the step |

Known exceptions, kept so that pinned results stay bit-identical
(`tests/test_streams.py` shows both):
- HIST folds edge round e ≥ 1 into the client key, beside the epochs: edge
  round e's key is edge round 0's batch-order key of epoch e.
- The trainer's model-init key, `split(PRNGKey(seed))[0]`, is round 0's key.
"""
import dataclasses
import enum

import jax

# The table's revision. A run records it beside its config (config.json and its
# checkpoints, `run.run_record`); resuming a run of an earlier revision whose
# draws (or checkpointed state) changed since is refused (`resume_refusal`),
# never continued with other draws.
REVISION = 5
# revision -> (methods that changed in it, {dotted config key: values under
# which a run changed}, how).
CHANGED = {
    2: (('cos2p', 'vit_fedavg', 'vit_fedrolex', 'ram_fed', 'fedpm', 'prunefl',
         'vit_fedavg_platon', 'vit_fedavg_qvit', 'vit_fedavg_adavit', 'fsl_oc',
         'fjord'), {'augment': ('crop24_jitter',)}, 'draws differently'),
    # The ViT baselines on `VitOnClock` no longer keep Co-S²P's client rows
    # (mask logits, masks, personal heads): their draws are unchanged, but an
    # older checkpoint's state has rows the method no longer restores into.
    3: (('vit_fedavg', 'vit_fedrolex', 'ram_fed', 'vit_fedavg_platon',
         'vit_fedavg_qvit'), {}, 'keeps a smaller client state'),
    # The ViT methods read their virtual clock (μ, T_clk, τ_max, client
    # seconds, jitter) from the shared `clock` section, no longer from
    # `cos2p.*`: their draws are unchanged, but an older run's config holds
    # its clock in keys that no longer exist, and is not resumed with others.
    4: (('cos2p', 'vit_fedavg', 'vit_fedrolex', 'ram_fed', 'fedpm', 'prunefl',
         'vit_fedavg_platon', 'vit_fedavg_qvit', 'vit_fedavg_adavit'), {},
        'reads its clock from the clock section'),
    # `sampling.uniform_among` orders the online clients by the permutation
    # `uniform_without_replacement` draws (so that P(online) = 1 is the run
    # without availability): a run with availability draws other cohorts.
    5: ((), {'systems.availability': ('bernoulli', 'diurnal', 'trace')},
        'draws its cohort among the online clients differently'),
}


def _value(config, dotted: str):
  """`config`'s value at a dotted key ('systems.availability')."""
  for name in dotted.split('.'):
    config = config[name]
  return config


def resume_refusal(stored_revision: int, config) -> str | None:
  """Why a run of `config` recorded at `stored_revision` cannot resume
  bit-identically under this revision, or None when its draws are
  unchanged."""
  for revision in range(stored_revision + 1, REVISION + 1):
    changed_methods, changed_options, how = CHANGED[revision]
    if config['algorithm'] in changed_methods:
      what = config['algorithm']
    else:
      what = next((f'{key}={_value(config, key)}' for key, values in
                   changed_options.items() if _value(config, key) in values),
                  None)
    if what:
      return (f'it was trained with key streams revision {stored_revision}, '
              f'and {what} {how} since revision {revision} '
              '(core/key_streams.py)')
  return None


INDEX_LIMIT = 2**30  # indices folded beside named streams stay below this


@dataclasses.dataclass(frozen=True)
class Parent:
  """A kind of key that streams are folded into; `indices` bounds the
  indices folded into it beside them."""
  name: str
  indices: int


SEED = Parent('seed', INDEX_LIMIT)
ROUND = Parent('round', 2)
CLIENT = Parent('client', INDEX_LIMIT)
STEP = Parent('step', 0)


class Stream(enum.Enum):
  """A named stream: (its int, its parent, what it draws)."""

  def __init__(self, value: int, parent: Parent, draws: str):
    self.number = value
    self.parent = parent
    self.draws = draws

  PRUNEFL_INIT = (2**30 + 1, SEED, "PruneFL's initial pruning")
  SYSTEMS = (0x5e5, ROUND, 'the systems part: q, T, link outcomes')
  SELECTION = (0x5e1, ROUND, 'systems-aware client selection')
  AVAILABILITY = (2**30 + 8, ROUND, 'who is online in the round')
  HIST_SYSTEM = (1_000_003, ROUND, "HIST's CPU frequencies and channels")
  HIST_PARTITION = (1_000_033, ROUND, "HIST's neuron partitions")
  HIST_AIRCOMP = (1_000_037, ROUND, "HIST's AirComp channels and noise")
  SPLIT_SERVER = (1_000_081, ROUND, "split learning's server dropout")
  SPLIT_ORDER = (1_000_099, ROUND, "split learning's arrival order")
  FEDPM_EVAL = (2**30 + 2, ROUND, "FedPM's evaluated mask")
  DP_NOISE = (2**30 + 9, ROUND, "DP's noise on the cohort sums")
  DP_COUNT = (2**30 + 10, ROUND, "DP's noise on the unclipped count")
  STEP_KEYS = (2**31 - 1, CLIENT, 'step keys of the first phase')
  PHASES = (2**31 - 2, CLIENT, "keys of a sequence's later phases")
  ROUND_ROBIN = (2**30 + 6, CLIENT, "FSL_OC's step keys")
  FEDPM_UPLOAD = (2**30 + 3, CLIENT, "FedPM's uploaded mask")
  COS2P_MASK_DRAW = (2**30 + 4, CLIENT, "Co-S²P's drawn mask")
  COS2P_RANDOM_UNITS = (2**30 + 5, CLIENT, 'random unit masks')
  AUGMENT = (1, STEP, 'data augmentation')
  DROPOUT = (2, STEP, "the client model's dropout")
  SERVER_DROPOUT = (3, STEP, "the server model's dropout")
  FJORD_WIDTH = (2**30 + 7, STEP, "FjORD's width of the step")


def fold(key: jax.Array, stream: Stream) -> jax.Array:
  """The key of `stream` under `key` (a key of the stream's parent)."""
  return jax.random.fold_in(key, stream.number)
