"""What a method declares: to the engine (its config sections, submodels,
exits, labels, round metrics, whether it sums deltas in the client map), to
its parts (`core.parts`: each part reads what it needs of these), and the
options it fixes."""
import ml_collections

from fedjax_het.core import parts as parts_lib
from fedjax_het.parts import cells as cells_lib


class MethodTraits:
  """Class-level declarations of a method (overridden as class attributes)."""

  name = 'base'
  # Whether the method trains submodels of the capacities in config.capacities.
  supports_capacities = False
  # The method's own aggregation segments (a part may make others: cells).
  num_segments = 1
  # Whether the loss and evaluation read a multi-exit model's stacked logits.
  reads_exits = False
  # Whether its losses read next-token targets y [N, L] (PAD left out, through
  # `loss` / `evaluation.cross_entropy`); methods with losses of their own on
  # class labels say False and refuse text data.
  supports_token_labels = True
  # The config sections (`fedjax_het.options.OptionGroup`) the method reads.
  option_groups = ()
  # Whether its schedule reads `rounds` (then a resume may not change it).
  schedule_depends_on_rounds = False
  # Round metrics that are a round's value, not a count to add up: the
  # trainer logs the last round's (summary.json: `last_round`), not a total.
  per_round_metrics = ()
  # Whether the round needs the client deltas only through `aggregate`'s
  # segment sums: they are then summed inside the client map
  # (`Clients.map_sum`, `ClientOutput.delta_sums`) and the cohort's [K, ...]
  # deltas are never stacked, the round's largest memory traffic. A method
  # that reads `outputs.delta` itself keeps False.
  sums_deltas_in_map = False
  # What the method declares to the parts (`core.parts`; each part reads
  # what it needs): whether its own rule reads the links-and-work draws (the
  # FedACS family's sampling and calibration read q and T, so the part is on
  # at its defaults too) and divides by the success probability 1 − q;
  # whether `sample_clients` draws among the clients online in the round;
  # whether it is defined in cells, how its edge servers combine their
  # clients' deltas (`parts.cells.EDGE_RULES`) and its own N and E
  # (`hierarchy.num_cells` / `edge_rounds` left at 0); the parts of the model
  # it averages (None: all of it; a stale arrival is weighed on those).
  # Whether the method is defined on the virtual clock (the part is on at
  # its defaults too: the ViT methods) and whether its default round times
  # (`round_durations` without `clock.client_seconds`) are equal work.
  always_on_clock = False
  round_times_equal_work = True
  # Whether its clients train the model's weights from a start model (FedPM
  # trains masks over fixed weights: the clock keeps no start table).
  trains_weights = True
  reads_draws = False
  divides_by_success = False
  samples_available_clients = True
  always_in_cells = False
  edge_rule = 'mean'
  cell_defaults = cells_lib.FLAT
  averaged_parts = None
  # What a DP run's ε covers (`parts.dp`, summary.json's dp.epsilon_covers):
  # split learning's client part only, where the server trains on smashed
  # activations that are neither clipped nor noised.
  dp_release = 'the released model'
  # {section key: why the method does not read that section}, for the
  # one-line refusal of a value set there (`config.unread_value`).
  unread_sections = {}
  # Its server rule, in a few words, where `aggregate` takes no step of the
  # server optimiser (`server_step`); such a method refuses the server keys
  # (`optim.refuse_server_keys`). None: the server optimiser's step.
  own_server_rule = None

  @classmethod
  def part_types(cls) -> tuple[type, ...]:
    """The parts the method runs under, in the order they act (the parts of
    the config sections it reads)."""
    return parts_lib.registered(cls.option_groups)

  @classmethod
  def fix_options(cls, config: ml_collections.ConfigDict
                  ) -> ml_collections.ConfigDict:
    """`config` with the options the method fixes written in, i.e. what it
    trains with; raises ConfigError where `config` sets one of them to
    another value. Default: the method fixes none; each of its parts checks
    the config against the method (`check`) and writes in the method's own
    defaults of its section."""
    for part_type in cls.part_types():
      config = part_type.check(cls, config)
    return config
