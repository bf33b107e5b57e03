"""The experiment's sections beside the model's: the data's (declared in the data layer,
transformer.data.fields) and the optimization, loss and loop ones declared here, each field
once with its default, its bounds and its role (transformer.sections). What the rest of the
house knows of a field follows from its declaration:

  experiment.base_config   the defaults of configs/*.py (as a config file holds them)
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

The sections are frozen dataclasses; `build(section, config)` makes one of a config, so that
code reads `exp.optimization.learning_rate` where it reads a typed attribute.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Sequence

from transformer.data.fields import Data, Tokenization  # noqa: F401  (one of SECTIONS)
from transformer.errors import ConfigError
from transformer.sections import Role, build, declare, default, nested  # noqa: F401
from transformer.training import optimizer_settings


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


def declared(sections: Sequence[type] = ()) -> dict[str, dataclasses.Field]:
  """{dotted name: its field} over every section (a nested section's fields as
  'tokenizer.FIELD' beside 'tokenizer' itself)."""
  found: dict[str, dataclasses.Field] = {}
  for section in sections or SECTIONS:
    for f in dataclasses.fields(section):
      found[f.name] = f
      if nested(f) is not None:
        found.update({f"{f.name}.{g.name}": g for g in dataclasses.fields(nested(f))})
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
