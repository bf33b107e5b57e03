"""Every experiment field beside the model's, declared once: its default, its bounds and its
role, in the typed section it belongs to. What the rest of the house knows of a field follows
from its declaration here:

  experiment.base_config   the defaults of configs/*.py (the ml_collections form)
  experiment.validate      the integer bounds (`at_least`)
  workdir_checks           what a resume may change: a data-stream field (Role.SOURCE or
                           Role.STREAM) only under allow_data_change, a field that changes what
                           the run computes only under allow_config_change, a resumable one
                           freely; an inert one is never compared
  sweeps.grid.data_inputs  what a sweep's points must share to share a tokenizer and a split
                           (Role.SOURCE)
  sweeps.report.changed_points  a stored point differing only in inert fields is the same
                           point (tests/test_batch_identity.py: inert fields make the same
                           batches)

A field a config adds that no section declares changes what the run computes (Role.COMPUTES):
a resume that changes it is refused, as for any setting not known to be safe.

The sections are frozen dataclasses; `sections(config)` builds them from a config, so that code
reads `exp.optimization.learning_rate` where it reads a typed attribute.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, Callable, Mapping, Optional, Sequence

from transformer.data import settings, synthetic, text
from transformer.errors import ConfigError
from transformer.training import optimizer_settings


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
  """A section field: `default` (or `factory()` for a mutable one), its role, and `at_least`:
  an integer >= that bound (0: 'off' allowed). `unset`: the type of a field whose default is
  None (an ml_collections placeholder, so that --config.FIELD=VALUE is typed). `path`: it names
  files or a directory the data is read from or built in (checked reachable before any work)."""
  metadata = {"role": role, "at_least": at_least, "unset": unset, "path": path}
  if factory is not None:
    return dataclasses.field(default_factory=factory, metadata=metadata)
  return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class Tokenizer:
  """config.tokenizer: how the text becomes ids (transformer.data.tokenizer)."""
  kind: str = declare("sentencepiece", Role.SOURCE)  # or 'bytes' (no training)
  vocab_size: int = declare(8000, Role.SOURCE)
  path: Optional[str] = declare(None, Role.SOURCE, unset=str)  # None: WORKDIR/tokenizer.model
  model_type: str = declare("unigram", Role.SOURCE)  # SentencePiece's algorithm
  character_coverage: float = declare(0.9995, Role.SOURCE)
  train_examples: int = declare(1_000_000, Role.SOURCE, at_least=1)


@dataclasses.dataclass(frozen=True)
class Data:
  """Which examples a run reads, how they are cut into rows and in what order."""
  model_type: str = declare("seq2seq", Role.STREAM)  # the model kind: how it lays out a row
  dataset: str = declare("synthetic", Role.SOURCE)
  synthetic: Mapping[str, Any] = declare(None, Role.STREAM,
                                         factory=lambda: dict(synthetic.DEFAULTS))
  tfds_data_dir: Optional[str] = declare(None, Role.RESUMABLE, unset=str,
                                          path=True)  # None: ~/tensorflow_datasets
  # Text datasets (transformer/data/text.py): text_files, parallel_text, or a TFDS name.
  data_files: Optional[str] = declare(None, Role.SOURCE, unset=str,
                                       path=True)  # files, globs, dirs; comma-separated
  eval_files: Optional[str] = declare(None, Role.SOURCE, unset=str,
                                       path=True)  # None: hold out eval_fraction
  data_help: str = declare("", Role.INERT)  # how to get a config's default data_files
  eval_fraction: float = declare(0.01, Role.SOURCE)
  # > 0: also hold out this fraction of a local corpus as a test split, scored once at the
  # end of training ('test' records): settings chosen on validation are reported on test.
  test_fraction: float = declare(text.SPLIT_DEFAULTS["test_fraction"], Role.SOURCE)
  text_split: str = declare("paragraph", Role.SOURCE)  # documents: 'paragraph' or 'line'
  source_lang: str = declare("de", Role.STREAM)  # translation TFDS datasets (wmtNN_translate/xx-yy)
  target_lang: str = declare("en", Role.STREAM)
  train_split: str = declare(text.SPLIT_DEFAULTS["train_split"], Role.STREAM)
  eval_split: Optional[str] = declare(None, Role.COMPUTES, unset=str)  # None: the held-out split
  packing: str = declare("none", Role.STREAM)  # 'none', 'pack', 'concat' (data.packing)
  tokenizer: Tokenizer = declare(None, Role.SOURCE, factory=Tokenizer)
  data_threads: int = declare(settings.READ_DEFAULTS["data_threads"], Role.INERT, at_least=0)
  data_prefetch: int = declare(settings.READ_DEFAULTS["data_prefetch"], Role.INERT, at_least=0)
  batch_size: int = declare(64, Role.STREAM, at_least=1)  # global, over all devices and hosts
  max_len: int = declare(32, Role.STREAM, at_least=1)  # tokens per row (inputs and targets)
  seed: int = declare(0, Role.STREAM)  # the data order, the initialisation, the dropout masks
  # The seed that draws a local corpus's validation and test splits; None: `seed`. Fixed
  # across a sweep's seeds, every seed is selected and scored on the same held-out text.
  split_seed: Optional[int] = declare(None, Role.SOURCE, unset=int)


def _finite_number(name: str, value: Any, zero_allowed: bool, off: str = "") -> None:
  """One line for a rate or scale that is not a finite number > 0 (>= 0 if zero_allowed)."""
  ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        and (value >= 0 if zero_allowed else value > 0))
  if not ok:
    raise ConfigError(f"{name} must be a finite number {'>= 0' if zero_allowed else '> 0'}{off}, "
                      f"got {value!r}.")


@dataclasses.dataclass(frozen=True)
class Optimization:
  """The optimizer and its schedule (training.optimizer_settings says what each field does);
  the defaults are the paper's (Adam 0.9/0.98/1e-9, rsqrt, 4000 warmup)."""
  optimizer: str = declare("adam", Role.COMPUTES)
  learning_rate: float = declare(  # 6.99e-4: the base model's peak
      optimizer_settings.paper_peak_learning_rate(512, 4000), Role.COMPUTES)
  schedule: str = declare("rsqrt", Role.COMPUTES)
  warmup_steps: int = declare(4000, Role.COMPUTES, at_least=0)
  # Resumable, but for a schedule that decays over it (workdir_checks._kind).
  num_train_steps: int = declare(100_000, Role.RESUMABLE, at_least=1)
  weight_decay: float = declare(0.1, Role.COMPUTES)
  adam_b1: float = declare(0.9, Role.COMPUTES)
  adam_b2: float = declare(0.98, Role.COMPUTES)
  adam_eps: float = declare(1e-9, Role.COMPUTES)
  momentum: float = declare(0.9, Role.COMPUTES)
  grad_clip_norm: float = declare(0.0, Role.COMPUTES)
  # The same update, in micro-batches: a layout.
  grad_accum_steps: int = declare(1, Role.RESUMABLE, at_least=1)
  hidden_lr_scale: float = declare(1.0, Role.COMPUTES)
  embed_learning_rate: float = declare(0.0, Role.COMPUTES)

  def check(self) -> None:
    """One line for an impossible optimizer or schedule field."""
    if self.optimizer not in optimizer_settings.OPTIMIZERS:
      raise ConfigError(f"Unknown optimizer {self.optimizer!r}; use one of "
                        f"{', '.join(optimizer_settings.OPTIMIZERS)}.")
    _finite_number("learning_rate", self.learning_rate, zero_allowed=False)
    _finite_number("hidden_lr_scale", self.hidden_lr_scale, zero_allowed=False, off=" (1 = off)")
    _finite_number("embed_learning_rate", self.embed_learning_rate, zero_allowed=True,
                   off=" (0 = off)")
    _finite_number("grad_clip_norm", self.grad_clip_norm, zero_allowed=True, off=" (0 = off)")
    optimizer_settings.check_schedule(self.schedule, self.warmup_steps, self.num_train_steps)


@dataclasses.dataclass(frozen=True)
class Loss:
  """The training loss (training.losses)."""
  label_smoothing: float = declare(0.1, Role.COMPUTES)  # Section 5.4
  z_loss: float = declare(0.0, Role.COMPUTES)
  # > 0: score the logits this many positions at a time (large vocabularies): the same loss.
  loss_chunk_size: int = declare(0, Role.RESUMABLE, at_least=0)

  def check(self) -> None:
    if not 0.0 <= self.label_smoothing < 1.0:
      raise ConfigError(f"label_smoothing={self.label_smoothing} must be in [0, 1).")
    if self.z_loss < 0:
      raise ConfigError(f"z_loss={self.z_loss} must be >= 0.")


@dataclasses.dataclass(frozen=True)
class Loop:
  """How the run is watched, evaluated, saved, laid out on its devices, and resumed."""
  log_every_steps: int = declare(50, Role.RESUMABLE, at_least=1)
  eval_every_steps: int = declare(500, Role.RESUMABLE, at_least=1)
  diagnostics_every_steps: int = declare(0, Role.RESUMABLE, at_least=0)  # > 0: 'diagnostics'
  diagnostics_batches: int = declare(4, Role.RESUMABLE, at_least=1)  # held-out batches averaged
  bleu_every_steps: int = declare(0, Role.RESUMABLE, at_least=0)  # > 0: BLEU of beam search
  num_decode_examples: int = declare(3, Role.RESUMABLE, at_least=0)  # decoded eval examples shown
  checkpoint_every_steps: int = declare(500, Role.RESUMABLE, at_least=1)
  # "START,COUNT": a jax.profiler trace of steps START+1 .. START+COUNT in WORKDIR/profile
  # (TensorBoard's profile plugin or Perfetto open it); "" = off.
  profile_steps: str = declare("", Role.RESUMABLE)
  keep_checkpoints: Optional[int] = declare(3, Role.RESUMABLE)  # None: keep every one
  async_checkpoints: bool = declare(True, Role.RESUMABLE)
  # The mesh's fsdp axis: 1 = every device a data-parallel replica (params replicated);
  # N = params, gradients and optimizer state split N ways (FSDP); -1 = over every device.
  fsdp: int = declare(1, Role.RESUMABLE)
  allow_model_change: bool = declare(False, Role.RESUMABLE)  # resume another model config
  # True: resume the params of a workdir trained on another data stream (other files, split,
  # batch, tokenizer or process count), its data read from the start.
  allow_data_change: bool = declare(False, Role.RESUMABLE)
  allow_config_change: bool = declare(False, Role.RESUMABLE)  # other settings (recorded)

  def check(self) -> None:
    keep = self.keep_checkpoints
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
      raise ConfigError(f"keep_checkpoints={keep!r} would keep no usable checkpoint; pass an "
                        "integer >= 1 (the newest N are kept), or None to keep every one.")
    fsdp = self.fsdp
    if isinstance(fsdp, bool) or not isinstance(fsdp, int) or not (fsdp == -1 or fsdp >= 1):
      raise ConfigError(f"fsdp={fsdp!r} must be -1 (every device) or an integer >= 1 "
                        "(1 = all-data).")
    self.profile_window()

  def profile_window(self) -> Optional[tuple[int, int]]:
    """(START, COUNT) of profile_steps, None when off; a ConfigError for a malformed one."""
    text = self.profile_steps.strip()
    if not text:
      return None
    parts = text.split(",")
    try:
      start, count = (int(p) for p in parts) if len(parts) == 2 else (None, None)
    except ValueError:
      start = count = None
    if start is None or start < 0 or count < 1:
      raise ConfigError(f"profile_steps={text!r} must be 'START,COUNT' with START >= 0 and "
                        "COUNT >= 1, e.g. '10,5' (steps 11 to 15).")
    return start, count


# The sections of an experiment config, in the order base_config lays them out; a config's
# `model` (ModelConfig's fields and a recipe) is declared by ModelConfig itself.
SECTIONS: tuple[type, ...] = (Data, Optimization, Loss, Loop)
# The sections that are a sub-config of their own (config.tokenizer), not flat fields.
NESTED: dict[str, type] = {"tokenizer": Tokenizer}


def declared(sections: Sequence[type] = ()) -> dict[str, dataclasses.Field]:
  """{dotted name: its field} over every section (a nested section's fields as
  'tokenizer.FIELD' beside 'tokenizer' itself)."""
  found: dict[str, dataclasses.Field] = {}
  for section in sections or SECTIONS:
    for f in dataclasses.fields(section):
      found[f.name] = f
      if f.name in NESTED:
        found.update({f"{f.name}.{g.name}": g for g in dataclasses.fields(NESTED[f.name])})
  return found


def names(*roles: Role, sections: Sequence[type] = ()) -> tuple[str, ...]:
  """The top-level fields whose role is one of `roles` (a nested section counts as one)."""
  return tuple(k for k, f in declared(sections).items()
               if "." not in k and f.metadata["role"] in roles)


def bounds(sections: Sequence[type] = ()) -> dict[str, int]:
  """{dotted name: its least value} for every integer field that has one."""
  return {k: f.metadata["at_least"] for k, f in declared(sections).items()
          if f.metadata["at_least"] is not None}


def paths(sections: Sequence[type] = ()) -> tuple[str, ...]:
  """The top-level fields that name files or directories the data is read from."""
  return tuple(k for k, f in declared(sections).items() if "." not in k and f.metadata["path"])


def default(f: dataclasses.Field) -> Any:
  """A field's declared default."""
  if f.default_factory is not dataclasses.MISSING:
    return f.default_factory()
  return f.default


def build(section: type, fields: Mapping[str, Any]) -> Any:
  """The frozen `section` of a config's fields (a field the config lacks at its default)."""
  values = {}
  for f in dataclasses.fields(section):
    value = fields.get(f.name, default(f)) if hasattr(fields, "get") else default(f)
    if f.name in NESTED and not isinstance(value, NESTED[f.name]):
      value = build(NESTED[f.name], value or {})
    elif hasattr(value, "to_dict"):  # a sub-config held as a mapping (config.synthetic)
      value = value.to_dict()
    values[f.name] = value
  return section(**values)
