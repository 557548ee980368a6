"""Option groups: a config section declared as a dataclass next to the code that reads it.

Each group is a frozen dataclass whose fields are `option(default, doc,
check=...)`: the default, a one-line description (`fedjax-het --show-config`)
and a check of the value. The core keys every run has are one group
(`fedjax_het.config.CoreOptions`, top level); an algorithm family declares its
own (`submodel`, `systems`, `fedacs`, `hierarchy`) and lists it in its class's
`option_groups`, and `fedjax_het.config.base_config()` assembles them all:

    @dataclasses.dataclass(frozen=True)
    class MyOptions(OptionGroup):
      key = 'my_method'
      temperature: float = option(3.0, 'softmax temperature T', check=positive)

    opts = MyOptions.from_config(config)   # checked; opts.temperature

A bad value stops with one sentence naming the dotted key
(`ConfigError`, a ValueError).
"""
import dataclasses
import math
from typing import Any, Callable, ClassVar

import ml_collections


class ConfigError(ValueError):
  """An invalid configuration; the message is one sentence for the user."""


# check(dotted_key, value) -> None, raising ConfigError.
Check = Callable[[str, Any], None]


def option(default, doc: str, *, check: Check | None = None,
           choices: tuple | None = None) -> Any:
  """A dataclass field with its default, description and check.

  Args:
    default: the default value (its type is the key's type; tuples for lists,
      a dict for an open section whose keys its component checks).
    doc: one line describing the key.
    check: `check(key, value)` raising ConfigError.
    choices: the allowed values (checked before `check`).
  """
  kwargs = ({'default_factory': lambda: dict(default)}
            if isinstance(default, dict) else {'default': default})
  return dataclasses.field(metadata={'doc': doc, 'check': check,
                                     'choices': choices}, **kwargs)


# ---- checks -------------------------------------------------------------------
def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def positive_int(key: str, value) -> None:
  if not _is_int(value) or value < 1:
    raise ConfigError(f'{key} must be a positive integer, got {value!r}.')


def non_negative_int(key: str, value) -> None:
  if not _is_int(value) or value < 0:
    raise ConfigError(f'{key} must be a non-negative integer, got {value!r}.')


def positive(key: str, value) -> None:
  if not _is_number(value) or not value > 0:
    raise ConfigError(f'{key} must be positive, got {value!r}.')


def non_negative(key: str, value) -> None:
  if not _is_number(value) or not value >= 0:
    raise ConfigError(f'{key} must be ≥ 0, got {value!r}.')


def finite(key: str, value) -> None:
  if not _is_number(value) or not math.isfinite(value):
    raise ConfigError(f'{key} must be a finite number, got {value!r}.')


def in_range(low: float, high: float, *, closed_low: bool = True,
             closed_high: bool = True) -> Check:
  """A check that the value lies in [low, high], or the interval with an
  open end where `closed_low` / `closed_high` is False."""
  left, right = '[' if closed_low else '(', ']' if closed_high else ')'

  def check(key: str, value) -> None:
    ok = _is_number(value) and (low <= value if closed_low else low < value) \
        and (value <= high if closed_high else value < high)
    if not ok:
      raise ConfigError(f'{key} must be in {left}{low:g}, {high:g}{right}, got '
                        f'{value!r}.')

  return check


def each(check: Check) -> Check:
  """`check` applied to every entry of a tuple value."""

  def check_all(key: str, value) -> None:
    if not isinstance(value, (tuple, list)):
      raise ConfigError(f'{key} must be a list, got {value!r}.')
    for entry in value:
      check(key, entry)

  return check_all


def subset_of(allowed: tuple, *, non_empty: bool = False) -> Check:
  """A tuple value whose entries all lie in `allowed` (and, with
  `non_empty`, at least one entry)."""
  what = 'a non-empty subset' if non_empty else 'a subset'

  def check(key: str, value) -> None:
    if (not isinstance(value, (tuple, list)) or not set(value) <= set(allowed)
        or (non_empty and not value)):
      raise ConfigError(f'{key} must be {what} of {allowed}, got {value!r}.')

  return check


def is_bool(key: str, value) -> None:
  if not isinstance(value, bool):
    raise ConfigError(f'{key} must be True or False, got {value!r}.')


# (kind of a default, what a value of that kind is, the test of a value).
_KINDS = ((bool, 'True or False', lambda v: isinstance(v, bool)),
          (int, 'an integer', _is_int),
          (float, 'a number', _is_number),
          (str, 'a string', lambda v: isinstance(v, str)),
          (tuple, 'a list', lambda v: isinstance(v, (tuple, list))))


def check_like_defaults(section: str, values, defaults: dict) -> None:
  """Each entry of an open section (`model_options`, `dataset_options`)
  checked to be of its default's kind (True/False, an integer, a number, a
  string, a list); keys without a default, or whose default is None, are
  left to the component. Raises ConfigError naming the key."""
  for key, value in values.items():
    default = defaults.get(key)
    for kind, what, test in _KINDS:
      if isinstance(default, kind):
        if not test(value):
          raise ConfigError(f'{section}.{key} must be {what}, got {value!r}.')
        break


def same_value(a, b) -> bool:
  """Whether two config values are equal, lists and tuples alike (nested
  ones too) and a ConfigDict as its dict."""
  return _plain(a) == _plain(b)


def _plain(value):
  """`value` with ConfigDicts as dicts and lists as tuples, nested too."""
  if isinstance(value, ml_collections.ConfigDict):
    value = value.to_dict()
  if isinstance(value, dict):
    return {k: _plain(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return tuple(_plain(v) for v in value)
  return value


def changed_key(section, defaults) -> str | None:
  """The first key of a config section whose value is not its default in
  `defaults` (`same_value`), or None."""
  for key, default in defaults.items():
    if not same_value(section[key], default):
      return key
  return None


# ---- groups -------------------------------------------------------------------
def _coerce(default, value):
  """`value` in the default's type where that is lossless (list → tuple,
  int → float); anything else is left for the check."""
  if isinstance(default, tuple) and isinstance(value, list):
    return tuple(value)
  if isinstance(default, float) and _is_int(value):
    return float(value)
  if isinstance(default, dict) and isinstance(value,
                                              ml_collections.ConfigDict):
    return value.to_dict()
  return value


@dataclasses.dataclass(frozen=True)
class OptionGroup:
  """Base of option groups; `key` is the config section ('' = top level)."""

  key: ClassVar[str] = ''

  @classmethod
  def _fields(cls):
    return dataclasses.fields(cls)

  @classmethod
  def dotted(cls, name: str) -> str:
    return f'{cls.key}.{name}' if cls.key else name

  @classmethod
  def defaults(cls) -> ml_collections.ConfigDict:
    """The section's keys with their defaults."""
    section = ml_collections.ConfigDict()
    for field in cls._fields():
      default = (field.default_factory() if field.default is dataclasses.MISSING
                 else field.default)
      section[field.name] = (ml_collections.ConfigDict(default)
                             if isinstance(default, dict) else default)
    return section

  @classmethod
  def describe(cls) -> dict[str, str]:
    """dotted key → its one-line description."""
    return {cls.dotted(f.name): f.metadata['doc'] for f in cls._fields()}

  @classmethod
  def section(cls, config: ml_collections.ConfigDict):
    return config[cls.key] if cls.key else config

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> 'OptionGroup':
    """The group's values in `config`, each checked; then `validate()`."""
    return cls.from_section(cls.section(config))

  @classmethod
  def from_section(cls, section) -> 'OptionGroup':
    """The group from its own section (a ConfigDict or mapping), checked."""
    values = {}
    for field in cls._fields():
      default = (field.default_factory() if field.default is dataclasses.MISSING
                 else field.default)
      value = _coerce(default, section[field.name])
      key = cls.dotted(field.name)
      choices = field.metadata['choices']
      if choices is not None and value not in choices:
        raise ConfigError(f'{key} must be one of '
                          f'{", ".join(map(str, choices))}, got {value!r}.')
      if field.metadata['check'] is not None:
        field.metadata['check'](key, value)
      values[field.name] = value
    group = cls(**values)
    group.validate()
    return group

  def refuse_set_while_off(self, switch: str, hint: str = '') -> None:
    """ConfigError (one line) naming the first key of the group set to a
    non-default value while `switch`, the key that turns its part on, is at
    its default (the part off); `hint` follows the advice to set `switch`."""
    key = changed_key(dataclasses.asdict(self), type(self).defaults())
    if key is not None:
      raise ConfigError(
          f'{self.dotted(key)} is set, but {self.dotted(switch)} = '
          f'{getattr(self, switch):g} leaves the {self.key} part off; set '
          f'{self.dotted(switch)}{hint}.')

  def validate(self) -> None:
    """Checks across keys of the group; raises ConfigError."""
