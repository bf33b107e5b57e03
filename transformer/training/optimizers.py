"""The optimizer built from an experiment config: gradient clipping, then the optimizer.

Config fields (defaults in `default_optimizer_fields`, the one place they live):
  optimizer        'adam' (the paper), 'adamw', 'adafactor', 'sgd' (with momentum)
  learning_rate    the schedule's peak (see schedules.py)
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
  grad_accum_steps split each batch into this many micro-batches whose gradients are summed
                   before the one update (transformer.training.steps); 1 = off

Steps are counted in optimizer updates: one train_step call is one update on the whole
batch_size, whatever grad_accum_steps is (it only trades memory for time).
"""

import math
from typing import Any, Optional, Union

import jax
import ml_collections
import optax

from transformer.errors import ConfigError
from transformer.training import schedules

OPTIMIZERS = ("adam", "adamw", "adafactor", "sgd")
# What `at_peak` gives for a peak learning rate: the optimizer and its schedule.
OptimizerAtPeak = tuple[optax.GradientTransformation, optax.Schedule]


def default_optimizer_fields() -> dict[str, Any]:
  """The optimizer fields with the paper's defaults (Adam 0.9/0.98/1e-9, rsqrt, 4000 warmup).

  Use in configs/*.py: `config.update(default_optimizer_fields())`, then override. No field is
  None, so each stays overridable as --config.FIELD=VALUE.
  """
  return dict(
      optimizer="adam",
      learning_rate=schedules.paper_peak_learning_rate(512, 4000),  # 6.99e-4, base model.
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
  )


def _check_fields(config: ml_collections.ConfigDict) -> None:
  missing = [k for k in default_optimizer_fields() if k not in config]
  if missing:
    raise ConfigError(
        f"The config lacks optimizer field(s) {', '.join(missing)}; add them with "
        "config.update(transformer.training.optimizers.default_optimizer_fields()).")
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
  if config.grad_clip_norm is not None and config.grad_clip_norm < 0:
    raise ConfigError(f"grad_clip_norm must be >= 0 (0 = off), got {config.grad_clip_norm}.")


def learning_rate_fn(config: ml_collections.ConfigDict,
                     peak: Optional[Union[float, jax.Array]] = None) -> optax.Schedule:
  """The schedule, after checking the optimizer fields: optimizer updates made so far -> the
  learning rate of the next update (what the optimizer steps with and training logs).
  `peak` stands for config.learning_rate where given (a traced scalar in the train step)."""
  _check_fields(config)
  return schedules.make_schedule(
      config.schedule,
      learning_rate=config.learning_rate if peak is None else peak,
      warmup_steps=config.warmup_steps,
      total_steps=config.num_train_steps)


def _decay_mask(params: Any) -> Any:
  # Decay matrices and embeddings, not biases or norm scales (the usual AdamW practice).
  return jax.tree.map(lambda p: p.ndim >= 2, params)


def _hidden_mask(params: Any) -> Any:
  # muP's "matrix-like" parameters, both of whose dimensions grow with the width: the kernels
  # inside the layer stacks ('blocks'); the embedding and readout each have one fixed side.
  def hidden(path, p) -> bool:
    names = [str(getattr(k, "key", getattr(k, "name", ""))) for k in path]
    return p.ndim >= 2 and "blocks" in names and "kernel" in names
  return jax.tree_util.tree_map_with_path(hidden, params)


def at_peak(config: ml_collections.ConfigDict, peak: Union[float, jax.Array]) -> OptimizerAtPeak:
  """(optimizer, schedule) of `config` with the peak learning rate `peak`. The train step
  builds them from its learning-rate argument, so that the rate is an input of the compiled
  program, not a constant in it: the points of a sweep that differ only in their rate (or
  seed) run one compiled step. The optimizer state does not depend on the peak."""
  schedule = learning_rate_fn(config, peak)
  return make_optimizer(config, schedule), schedule


def make_optimizer(config: ml_collections.ConfigDict,
                   schedule: Optional[optax.Schedule] = None) -> optax.GradientTransformation:
  """The optimizer for `config` (fields in the module docstring), on `schedule` when the
  caller has built it (`learning_rate_fn`: one schedule for the updates and the logs).

  Order: [clip_by_global_norm] -> optimizer -> [hidden_lr_scale on the blocks' kernels].
  Gradient accumulation happens before, in the train step, so clipping and the update see the
  gradient of the whole batch. At hidden_lr_scale 1 no transform is added, so the optimizer
  state (and every checkpoint of it) is what it was without the field.
  """
  lr = learning_rate_fn(config) if schedule is None else schedule
  name = config.optimizer
  if name == "adam":
    opt = optax.adam(lr, b1=config.adam_b1, b2=config.adam_b2, eps=config.adam_eps)
  elif name == "adamw":
    opt = optax.adamw(
        lr, b1=config.adam_b1, b2=config.adam_b2, eps=config.adam_eps,
        weight_decay=config.weight_decay, mask=_decay_mask)
  elif name == "adafactor":
    # optax defaults (factored second moments, update clipping 1.0, relative step size:
    # updates are scaled by the parameter RMS, so useful rates are larger, e.g. 1e-2).
    opt = optax.adafactor(lr)
  else:
    opt = optax.sgd(lr, momentum=config.momentum or None)

  if config.hidden_lr_scale != 1:
    opt = optax.chain(opt, optax.masked(optax.scale(config.hidden_lr_scale), _hidden_mask))
  if config.grad_clip_norm:
    opt = optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), opt)
  return opt
