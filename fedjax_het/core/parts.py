"""System parts composed into a method's round, as `optax.chain` composes
gradient transformations.

A part is one model of the world a method runs under: lossy links and unequal
work (`parts.links_work`), client availability (`parts.availability`), the
semi-asynchronous virtual clock (`parts.clock`), cells (`parts.cells`). It is a
`Part`: a few hooks, each the identity by default, that act on the round at
fixed points. The method never reads a part: it calls the composed `Parts` at
those points, and `compose` builds the chain from the part types the method
lists (`FederatedAlgorithm.part_types`), each part deciding from its section
of the config whether it is on (off: it is left out, and the round is the same
program as without it).

The hooks, in the order a round reaches them:

    host      round_inputs(first, count) -> dict | None    host-made inputs
              facts() -> dict                              summary.json facts
    state     init_extras(params, extras) -> extras        the part's state
    shape     segments(count) -> count                     aggregation segments
              sums_in_map(flag) -> flag                    deltas summed in the map
    plans     draws(state) -> PyTree | None                the round's draws
              max_steps(steps) -> steps                    the program's length
              online(state) -> bool [M] | None             who can be sampled
              place(plans) -> plans                        before the method plans
              adjust(state, plans) -> plans                after it
              plan_round(method, state, inputs) -> plans   which work a slot holds *
    local     start_models(state) -> table | None          rows clients start from
              local_phase(run, state, plans, data, clients) *
              upload(method, plan, output) -> output       what one client sends
    server    weigh(method, plan, delta, weight, table, params)  one arrival's term
              release_sums(state, weights, sums) -> sums   the sums before division
              combine(means, coverage) -> pseudo-gradient  *
              finish(before, after, plans, outputs) -> state  after the server step
              metrics(metrics, plans, outputs) -> metrics  its accounting

`upload` acts on one client's `ClientOutput` at the end of its program,
before any sum (DP clips the update there, `parts.dp`), and may record
per-client facts in `output.parts[name]`; `release_sums` acts on the
(numerator, denominator) segment sums (`core.aggregation.segment_sums`) of
the arrivals weighed by `weights` [K] before the method divides them (DP
adds its noise to the numerator); `finish` may read the round's stacked
outputs after the server step (adaptive clipping's next clip norm).

A starred hook takes a round phase over (`takes_over`): at most one part of a
run takes each, and `compose` refuses two that would. Which parts combine with
which is the one table `REFUSED_TOGETHER`, each entry with its reason; which
methods a part runs under is the part's own `check(method, config)`, from
what the method declares (`FederatedAlgorithm`'s class attributes).

A part may host another (`hosts`, by name): where both are on, the host
models the guest itself (`host(guest)`) and the guest leaves the chain. The
virtual clock hosts availability: it dispatches only the clients online in
a round, on the host, so availability's hooks inside the round (the
sampler's online clients, idle offline slots) do not apply.
"""
from typing import Any, Callable, Sequence

import jax

from fedjax_het.core.state import ClientOutput, ClientPlan, ServerState
from fedjax_het.options import ConfigError

PyTree = Any
Metrics = dict[str, jax.Array]

# The round phases a part can take over (the starred hooks above).
PHASES = ('plan_round', 'local_phase', 'combine')


class Part:
  """A system part: override the hooks the part acts through (module docstring).

  Build one with `build(method, config, data)`, which returns None when the
  config leaves the part off for the method.
  """

  name = 'part'
  # The round phases (`PHASES`) the part takes over.
  takes_over: frozenset = frozenset()
  # Whether `weigh` changes an arrival's delta or weight (else the stacked
  # deltas of a method that reads them are not weighed at all).
  weighs = False
  # The names of the parts it models itself where both are on (`host`).
  hosts: frozenset = frozenset()

  @classmethod
  def check(cls, method, config):
    """`config` checked against `method` (a class) before anything is built,
    with what the part writes in (e.g. the method's own defaults of its
    section); ConfigError in one line. Default: `config` as it is."""
    del method
    return config

  @classmethod
  def build(cls, method, config, data) -> 'Part | None':
    """The part `config` sets for `method` (built with `data`), or None: off.
    Raises ConfigError in one line where the method cannot run under it."""
    raise NotImplementedError

  def host(self, guest: 'Part') -> None:
    """Takes `guest` (a part named in `hosts`) in: the part models it from
    now on, and `compose` leaves it out of the chain."""
    raise NotImplementedError

  # ---- host ------------------------------------------------------------------
  def round_inputs(self, first: int, count: int) -> PyTree:
    del first, count
    return None

  def facts(self) -> dict:
    return {}

  # ---- state -----------------------------------------------------------------
  def init_extras(self, params: PyTree, extras: PyTree) -> PyTree:
    del params
    return extras

  # ---- shape of the aggregation ---------------------------------------------
  def segments(self, count: int) -> int:
    return count

  def sums_in_map(self, flag: bool) -> bool:
    return flag

  # ---- plans -----------------------------------------------------------------
  def draws(self, state: ServerState) -> PyTree:
    del state
    return None

  def max_steps(self, steps: int) -> int:
    return steps

  def online(self, state: ServerState) -> jax.Array | None:
    del state
    return None

  def place(self, plans: ClientPlan) -> ClientPlan:
    return plans

  def adjust(self, state: ServerState, plans: ClientPlan) -> ClientPlan:
    del state
    return plans

  def plan_round(self, method, state: ServerState,
                 inputs: PyTree) -> ClientPlan:
    raise NotImplementedError

  # ---- local phase -----------------------------------------------------------
  def start_models(self, state: ServerState) -> PyTree:
    del state
    return None

  def local_phase(self, run_clients: Callable, state: ServerState,
                  plans: ClientPlan, data, clients) -> ClientOutput:
    raise NotImplementedError

  def upload(self, method, plan: ClientPlan,
             output: ClientOutput) -> ClientOutput:
    del method, plan
    return output

  # ---- server ----------------------------------------------------------------
  def weigh(self, method, plan: ClientPlan, delta: PyTree, weight: jax.Array,
            table: PyTree, params: PyTree) -> tuple[PyTree, jax.Array]:
    del method, plan, table, params
    return delta, weight

  def release_sums(self, state: ServerState, weights: jax.Array,
                   sums: tuple[PyTree, PyTree]) -> tuple[PyTree, PyTree]:
    del state, weights
    return sums

  def combine(self, means: PyTree, coverage: PyTree) -> PyTree:
    raise NotImplementedError

  def finish(self, before: ServerState, after: ServerState,
             plans: ClientPlan, outputs: ClientOutput) -> ServerState:
    del before, plans, outputs
    return after

  def metrics(self, metrics: Metrics, plans: ClientPlan,
              outputs: ClientOutput) -> Metrics:
    del plans, outputs
    return metrics


# Pairs of parts that do not run together, with the reason (one table).
REFUSED_TOGETHER = {
    frozenset({'cells', 'clock'}):
        'cells run every sampled client of a cell through its E edge rounds; '
        'the virtual clock is not modelled in cells',
    frozenset({'cells', 'availability'}):
        'cells run every sampled client of a cell through its E edge rounds; '
        'client availability is not modelled in cells',
    frozenset({'dp', 'clock'}):
        'an update trained from a stale model is released rounds after its '
        'dispatch, weighed by its staleness: DP-FedAvg\'s per-round '
        'sampling and sensitivity are not modelled on the clock',
    frozenset({'dp', 'cells'}):
        'cells average edge models over E edge rounds before the cloud sum, '
        'so no per-client sum is released once per round',
    frozenset({'secagg', 'clock'}):
        'the clock weighs an arrival by its staleness after its upload, '
        'which a client cannot encode in its secure-aggregation term',
    frozenset({'secagg', 'cells'}):
        'cells average edge models over E edge rounds before the cloud sum, '
        'so no per-client sum is released once per round',
}

# The config section that turns each part on, for the refusal's line.
SECTIONS = {'clock': 'clock.*', 'availability': 'systems.availability',
            'cells': 'hierarchy.*', 'dp': 'dp.*',
            'secagg': 'secagg.*'}


# (config section, part type): the registered parts, in the order they act.
_REGISTRY: list[tuple[type, type]] = []


def register(section: type, part_type: type) -> None:
  """Makes `part_type` run under every method listing `section` (its
  `OptionGroup`) in `option_groups`, after the parts registered before it."""
  if (section, part_type) not in _REGISTRY:
    _REGISTRY.append((section, part_type))


def registered(option_groups: Sequence[type]) -> tuple[type, ...]:
  """The registered part types whose section is in `option_groups`."""
  return tuple(part for section, part in _REGISTRY if section in option_groups)


class Parts:
  """The parts of a run, composed: each hook applies every part's in order
  (a taken-over phase: its one part's, or None where no part takes it)."""

  def __init__(self, parts: Sequence[Part]):
    self.parts = tuple(parts)
    for phase in PHASES:
      owners = [p.name for p in self.parts if phase in p.takes_over]
      if len(owners) > 1:
        raise ConfigError(f'{" and ".join(owners)} both take over the '
                          f'round\'s {phase}; set one of them.')

  @property
  def names(self) -> tuple[str, ...]:
    return tuple(p.name for p in self.parts)

  def __getitem__(self, name: str) -> Part:
    """The part called `name` (KeyError where it is off); for a method
    defined on a part, as the ViT methods are on the clock, to read the
    part's host side (its schedule)."""
    for part in self.parts:
      if part.name == name:
        return part
    raise KeyError(f'no part {name!r} is on; on: {self.names}')

  def owner(self, phase: str) -> Part | None:
    """The part that takes `phase` over, or None."""
    return next((p for p in self.parts if phase in p.takes_over), None)

  @property
  def weighs(self) -> bool:
    return any(p.weighs for p in self.parts)

  def round_inputs(self, first: int, count: int) -> PyTree:
    inputs = {p.name: p.round_inputs(first, count) for p in self.parts}
    inputs = {k: v for k, v in inputs.items() if v is not None}
    return inputs or None

  def facts(self) -> dict:
    out = {}
    for part in self.parts:
      out.update(part.facts())
    return out

  def init_extras(self, params: PyTree, extras: PyTree) -> PyTree:
    for part in self.parts:
      extras = part.init_extras(params, extras)
    return extras

  def segments(self, count: int) -> int:
    for part in self.parts:
      count = part.segments(count)
    return count

  def sums_in_map(self, flag: bool) -> bool:
    for part in self.parts:
      flag = part.sums_in_map(flag)
    return flag

  def draws(self, state: ServerState) -> dict[str, PyTree]:
    """{part name: its draws of the round} of the parts that draw."""
    draws = {p.name: p.draws(state) for p in self.parts}
    return {k: v for k, v in draws.items() if v is not None}

  def max_steps(self, steps: int) -> int:
    for part in self.parts:
      steps = part.max_steps(steps)
    return steps

  def online(self, state: ServerState) -> jax.Array | None:
    masks = [m for m in (p.online(state) for p in self.parts) if m is not None]
    if not masks:
      return None
    online = masks[0]
    for mask in masks[1:]:
      online = online & mask
    return online

  def place(self, plans: ClientPlan) -> ClientPlan:
    for part in self.parts:
      plans = part.place(plans)
    return plans

  def adjust(self, state: ServerState, plans: ClientPlan) -> ClientPlan:
    for part in self.parts:
      plans = part.adjust(state, plans)
    return plans

  def start_models(self, state: ServerState) -> PyTree:
    tables = [t for t in (p.start_models(state) for p in self.parts)
              if t is not None]
    return tables[0] if tables else None

  def upload(self, method, plan: ClientPlan,
             output: ClientOutput) -> ClientOutput:
    for part in self.parts:
      output = part.upload(method, plan, output)
    return output

  def weigh(self, method, plan: ClientPlan, delta: PyTree, weight: jax.Array,
            table: PyTree, params: PyTree) -> tuple[PyTree, jax.Array]:
    for part in self.parts:
      delta, weight = part.weigh(method, plan, delta, weight, table, params)
    return delta, weight

  def release_sums(self, state: ServerState, weights: jax.Array,
                   sums: tuple[PyTree, PyTree]) -> tuple[PyTree, PyTree]:
    for part in self.parts:
      sums = part.release_sums(state, weights, sums)
    return sums

  def finish(self, before: ServerState, after: ServerState,
             plans: ClientPlan, outputs: ClientOutput) -> ServerState:
    for part in self.parts:
      after = part.finish(before, after, plans, outputs)
    return after

  def metrics(self, metrics: Metrics, plans: ClientPlan,
              outputs: ClientOutput) -> Metrics:
    for part in self.parts:
      metrics = part.metrics(metrics, plans, outputs)
    return metrics


def compose(method, part_types: Sequence[type], config, data) -> Parts:
  """The parts `config` turns on among `part_types` for `method`, checked
  against each other (`REFUSED_TOGETHER`), a hosted part handed to its host
  (`Part.hosts`), chained in the listed order."""
  parts = []
  for part_type in part_types:
    part = part_type.build(method, config, data)
    if part is None:
      continue
    for other in parts:
      reason = REFUSED_TOGETHER.get(frozenset({part.name, other.name}))
      if reason:
        raise ConfigError(
            f'{SECTIONS[other.name]} and {SECTIONS[part.name]} are both set '
            f'for {method.name}, but {reason}: set one of them.')
    parts.append(part)
  hosted = set()
  for host in parts:
    for guest in parts:
      if guest.name in host.hosts:
        host.host(guest)
        hosted.add(guest.name)
  return Parts([p for p in parts if p.name not in hosted])
