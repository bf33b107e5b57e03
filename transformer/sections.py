"""Typed config sections: frozen dataclasses whose fields are declared once, with their
default, their bounds and their role (`declare`). The data layer declares its section
(transformer.data.fields), the training layer the others (transformer.training.fields); what
the house knows of a field (its checks, what a resume may change, a sweep's identity) is read
off these declarations. Written here rather than taken from ml_collections, whose ConfigDicts
carry values but not what a field is for; the command line's ConfigDict is read into a
section (`build`).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Callable, Optional


class Role(enum.Enum):
  """What changing a field does to a run."""
  SOURCE = "the text the data come from, how it is split and tokenized"
  STREAM = "the rest of which examples the stream holds, and their order"
  COMPUTES = "what the run computes otherwise"
  RESUMABLE = "how long it trains, how it is watched, saved and laid out"
  INERT = "nothing the run computes"


def declare(default: Any, role: Role, *, at_least: Optional[int] = None,
            unset: Optional[type] = None, path: bool = False,
            factory: Optional[Callable[[], Any]] = None) -> Any:
  """A section field: `default` (or `factory()` for a mutable one; a section of its own when
  `factory` is a section class), its role, and `at_least`: an integer >= that bound (0: 'off'
  allowed). `unset`: the type of a field whose default is None (an ml_collections placeholder,
  so that --config.FIELD=VALUE is typed). `path`: it names files or a directory the data is
  read from or built in (checked reachable before any work)."""
  metadata = {"role": role, "at_least": at_least, "unset": unset, "path": path}
  if factory is not None:
    return dataclasses.field(default_factory=factory, metadata=metadata)
  return dataclasses.field(default=default, metadata=metadata)


def nested(f: dataclasses.Field) -> Optional[type]:
  """The section a field holds (config.tokenizer), None for a plain field."""
  factory = f.default_factory
  return factory if isinstance(factory, type) and dataclasses.is_dataclass(factory) else None


def default(f: dataclasses.Field) -> Any:
  """A field's declared default."""
  if f.default_factory is not dataclasses.MISSING:
    return f.default_factory()
  return f.default


def build(section: type, config: Any) -> Any:
  """The frozen `section` of a config's fields (a ConfigDict or any mapping; a field it
  lacks at its default); a section is returned as it is."""
  if isinstance(config, section):
    return config
  if not hasattr(config, "get"):
    raise TypeError(f"{section.__name__} is built from a config or a mapping, not "
                    f"{type(config).__name__}.")
  values = {}
  for f in dataclasses.fields(section):
    value = config.get(f.name, default(f))
    inner = nested(f)
    if inner is not None:
      value = build(inner, value or {})
    elif hasattr(value, "to_dict"):  # a sub-config held as a mapping (config.synthetic)
      value = value.to_dict()
    values[f.name] = value
  return section(**values)
