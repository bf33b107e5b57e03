"""The kinds of model an experiment's `model_type` names, and what each one's batches hold.

This table sits on the bottom floor so that the data pipeline (which knows no model) and the
model stack read the same fact. A built-in kind is a row of `KINDS`, whose class the model
stack holds (`transformer.models.model_class`); a kind of one's own is named by its class,
`model_type='package.module:ClassName'`, a flax module taking a ModelConfig that answers
`transformer.models.ModelKind` (its `batch_keys` are its rows). The name is recorded with
every checkpoint, so restoring, decoding and analysis find the class again; nothing is
registered at import. Reading a kind of one's own (`get`) imports its module
(`import_class`), and with it the model stack: its rows are the class's `batch_keys`.
"""

from __future__ import annotations

import dataclasses
import importlib

from transformer.errors import ConfigError

ROWS = ("inputs", "targets")  # what a batch may hold: a source, and the targets scored


@dataclasses.dataclass(frozen=True)
class Kind:
  name: str  # an experiment's model_type
  batch_keys: tuple[str, ...]  # the int[B, L] rows of its batches: 'targets', and 'inputs'

  @property
  def built_in(self) -> bool:
    """A row of KINDS (the model stack's own class), not a class of one's own."""
    return self.name in KINDS

  def check_rows(self, keys: tuple[str, ...], dataset: str) -> None:
    """One line where this kind reads a row that a dataset's rows (`keys`) lack."""
    missing = [k for k in self.batch_keys if k not in keys]
    if missing:
      raise ConfigError(f"Dataset {dataset!r} is a language-modelling corpus (no "
                        f"{', '.join(missing)}), but model_type={self.name!r} reads a source; "
                        "set model_type='lm' (configs/lm.py) or use a translation dataset.")

  def check_one_stream(self, setting: str) -> None:
    """One line where `setting` cuts examples across rows, which only a kind that reads one
    stream (no source) can train on."""
    if ROWS[0] in self.batch_keys:
      raise ConfigError(f"{setting} splits examples across rows, which only a language model "
                        f"can train on (rows ('targets',)), not {self.name!r}; use "
                        "packing='pack' for a seq2seq dataset, or model_type='lm'.")

  def check_has_source(self, setting: str) -> None:
    """One line where `setting` needs rows with a source (BLEU of decoded sources) and this
    kind's rows hold none."""
    if ROWS[0] not in self.batch_keys:
      raise ConfigError(f"{setting} needs model_type='seq2seq' or another kind that reads a "
                        f"source (BLEU scores translations; {self.name!r} continues prompts); "
                        f"set --config.{setting.split('=')[0]}=0.")


KINDS: dict[str, Kind] = {
    "seq2seq": Kind("seq2seq", ROWS),  # the paper's encoder-decoder (models.Transformer)
    "lm": Kind("lm", ROWS[1:]),  # a decoder-only language model (models.DecoderOnly)
}


def get(model_type: str) -> Kind:
  """The kind `model_type` names: a row of KINDS, or a class 'package.module:ClassName'."""
  if model_type in KINDS:
    return KINDS[model_type]
  if ":" not in str(model_type):
    raise ConfigError(f"model_type={model_type!r} is not one of {sorted(KINDS)} or a model "
                      "class 'package.module:ClassName'.")
  keys = tuple(getattr(import_class(model_type), "batch_keys", ()))
  if "targets" not in keys or not set(keys) <= set(ROWS):
    raise ConfigError(f"model_type={model_type!r}: a model's batch_keys hold 'targets' and "
                      f"optionally 'inputs', not {keys!r}.")
  return Kind(model_type, keys)


def import_class(model_type: str) -> type:
  """The flax module class a kind of one's own names, 'package.module:ClassName' (imported
  when first asked for: the data pipeline and the config checks read KINDS without it)."""
  module_name, _, class_name = model_type.partition(":")
  try:
    found = getattr(importlib.import_module(module_name), class_name, None)
  except ImportError as e:
    raise ConfigError(f"model_type={model_type!r}: module {module_name!r} cannot be imported "
                      f"({e}).") from None
  if not isinstance(found, type):
    raise ConfigError(f"model_type={model_type!r}: {module_name} has no class {class_name!r}.")
  return found
