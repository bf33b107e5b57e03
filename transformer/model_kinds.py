"""The kinds of model an experiment's `model_type` names: what each one's batches hold, and
the class that builds it.

This table sits on the bottom floor so that the data pipeline (which knows no model) and the
model stack read the same fact. transformer.models registers its two classes against the
built-in kinds; a new kind (a prefix LM, say) is one `register` call beside its class:
training, checkpoints, decoding and the benchmark ask the class, never the kind's name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from transformer.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Kind:
  name: str  # an experiment's model_type
  batch_keys: tuple[str, ...]  # the int[B, L] rows of its batches: 'targets', and 'inputs'
  model: Optional[Any] = None  # its flax module class, ModelClass(ModelConfig)

  @property
  def reads_inputs(self) -> bool:
    """Whether its batches hold a source ('inputs') beside the targets."""
    return "inputs" in self.batch_keys


_KINDS: dict[str, Kind] = {
    "seq2seq": Kind("seq2seq", ("inputs", "targets")),  # an encoder-decoder (the paper's)
    "lm": Kind("lm", ("targets",)),  # a decoder-only language model
}


def register(name: str, batch_keys: tuple[str, ...], model: Any) -> Kind:
  """Adds (or, for a known kind, completes) the kind `name`, built by `model`."""
  if "targets" not in batch_keys or not set(batch_keys) <= {"inputs", "targets"}:
    raise ConfigError(f"A model kind's batches hold 'targets' and optionally 'inputs', not "
                      f"{batch_keys!r}.")
  known = _KINDS.get(name)
  if known is not None and known.batch_keys != tuple(batch_keys):
    raise ConfigError(f"Model kind {name!r} holds {known.batch_keys}; {model} reads "
                      f"{tuple(batch_keys)}.")
  _KINDS[name] = Kind(name, tuple(batch_keys), model)
  return _KINDS[name]


def get(name: str) -> Kind:
  """The kind `name`; one line naming the known ones otherwise."""
  if name not in _KINDS:
    raise ConfigError(f"model_type={name!r} is not one of {sorted(_KINDS)}.")
  return _KINDS[name]


def names() -> list[str]:
  return sorted(_KINDS)
