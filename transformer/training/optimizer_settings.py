"""The optimizer and schedule fields of an experiment config: their defaults and their checks,
importing no jax (the config is checked before jax starts). `optimizers` builds the
schedule and the optimizer from them.

Fields:
  optimizer        'adam' (the paper), 'adamw', 'adafactor', 'sgd' (with momentum)
  learning_rate    the schedule's peak (see optimizers.make_schedule)
  schedule         'rsqrt', 'cosine', 'constant', 'linear'
  warmup_steps     optimizer updates of warmup
  num_train_steps  optimizer updates in the run (the decay horizon)
  weight_decay     decoupled weight decay, 'adamw' only; applied to params with ndim >= 2
  adam_b1, adam_b2, adam_eps   'adam' and 'adamw'
  momentum         'sgd'; 0 = plain SGD
  grad_clip_norm   clip the global gradient norm to this; 0 = off
  hidden_lr_scale  multiplies the updates of the blocks' weight matrices alone (attention and
                   feed-forward kernels; not the embedding, the readout, biases or norms):
                   muP's Adam rule (Yang et al. 2022) with base_d_model / d_model; 1 = off
  embed_learning_rate  the token embedding's own peak rate, on the same schedule (its updates
                   scaled by embed_learning_rate / learning_rate): muP's Adam rule keeps the
                   embedding's rate fixed across widths while the blocks' falls as 1/width; a
                   tied embedding is the readout too; 0 = off (the global rate)
  grad_accum_steps split each batch into this many micro-batches whose gradients are summed
                   before the one update (transformer.training.steps); 1 = off

Steps are counted in optimizer updates: one train_step call is one update on the whole
batch_size, whatever grad_accum_steps is (it only trades memory for time).
"""

from __future__ import annotations

import math
from typing import Any

import ml_collections

from transformer.errors import ConfigError

OPTIMIZERS = ("adam", "adamw", "adafactor", "sgd")
SCHEDULES = ("rsqrt", "cosine", "constant", "linear")
# The schedules that decay to 0 over num_train_steps: another num_train_steps is another
# schedule, so a resume may not change it unasked (training.workdir_checks).
DECAYING_SCHEDULES = ("cosine", "linear")


def paper_peak_learning_rate(d_model: int, warmup_steps: int) -> float:
  """The peak of Vaswani et al. (2017) eq. 3: d_model^-0.5 * warmup^-0.5.

  Base model (512, 4000): 6.99e-4. Pass it as `learning_rate` to 'rsqrt' to reproduce
  the paper's schedule exactly.
  """
  return d_model**-0.5 * warmup_steps**-0.5


def default_optimizer_fields() -> dict[str, Any]:
  """The optimizer fields with the paper's defaults (Adam 0.9/0.98/1e-9, rsqrt, 4000 warmup).

  Use in configs/*.py: `config.update(default_optimizer_fields())`, then override. No field is
  None, so each stays overridable as --config.FIELD=VALUE.
  """
  return dict(
      optimizer="adam",
      learning_rate=paper_peak_learning_rate(512, 4000),  # 6.99e-4, base model.
      schedule="rsqrt",
      warmup_steps=4000,
      num_train_steps=100_000,
      weight_decay=0.1,
      adam_b1=0.9,
      adam_b2=0.98,
      adam_eps=1e-9,
      momentum=0.9,
      grad_clip_norm=0.0,
      grad_accum_steps=1,
      hidden_lr_scale=1.0,
      embed_learning_rate=0.0,
  )


def check_schedule(name: str, warmup_steps: int, total_steps: int) -> None:
  """One line for a schedule its fields cannot make."""
  if name not in SCHEDULES:
    raise ConfigError(f"Unknown schedule {name!r}; use one of {', '.join(SCHEDULES)}.")
  if warmup_steps < 0:
    raise ConfigError(f"warmup_steps must be >= 0, got {warmup_steps}.")
  if name == "rsqrt" and warmup_steps == 0:
    raise ConfigError("The 'rsqrt' schedule needs warmup_steps >= 1 (its peak is at warmup).")
  if name in ("cosine", "linear") and total_steps < warmup_steps:
    raise ConfigError(
        f"The {name!r} schedule needs total_steps >= warmup_steps, got {total_steps} < "
        f"{warmup_steps}.")


def check_fields(config: ml_collections.ConfigDict) -> None:
  """One line for a missing or impossible optimizer or schedule field."""
  missing = [k for k in default_optimizer_fields() if k not in config]
  if missing:
    raise ConfigError(
        f"The config lacks optimizer field(s) {', '.join(missing)}; add them with "
        "config.update(transformer.training.optimizer_settings.default_optimizer_fields()).")
  if config.optimizer not in OPTIMIZERS:
    raise ConfigError(
        f"Unknown optimizer {config.optimizer!r}; use one of {', '.join(OPTIMIZERS)}.")
  if not (isinstance(config.grad_accum_steps, int) and config.grad_accum_steps >= 1):
    raise ConfigError(
        f"grad_accum_steps must be an integer >= 1 (1 = off), got {config.grad_accum_steps!r}.")
  if not (isinstance(config.learning_rate, (int, float)) and math.isfinite(config.learning_rate)
          and config.learning_rate > 0):
    raise ConfigError(f"learning_rate must be a finite number > 0, got {config.learning_rate!r}.")
  if not (isinstance(config.hidden_lr_scale, (int, float))
          and math.isfinite(config.hidden_lr_scale) and config.hidden_lr_scale > 0):
    raise ConfigError(f"hidden_lr_scale must be a finite number > 0 (1 = off), got "
                      f"{config.hidden_lr_scale!r}.")
  if not (isinstance(config.embed_learning_rate, (int, float))
          and math.isfinite(config.embed_learning_rate) and config.embed_learning_rate >= 0):
    raise ConfigError(f"embed_learning_rate must be a finite number >= 0 (0 = off), got "
                      f"{config.embed_learning_rate!r}.")
  if config.grad_clip_norm is not None and config.grad_clip_norm < 0:
    raise ConfigError(f"grad_clip_norm must be >= 0 (0 = off), got {config.grad_clip_norm}.")
  check_schedule(config.schedule, config.warmup_steps, config.num_train_steps)
