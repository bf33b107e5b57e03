"""The optimizer built from an experiment config: gradient clipping, then the optimizer.

Its fields, their defaults and their checks: `optimizer_settings` (which imports no jax).
"""

import math
from typing import Any, Optional, Union

import jax
import ml_collections
import optax

from transformer.training import schedules
from transformer.training.optimizer_settings import (OPTIMIZERS, check_fields,  # noqa: F401
                                                   default_optimizer_fields)

# What `at_peak` gives for a peak learning rate: the optimizer and its schedule.
OptimizerAtPeak = tuple[optax.GradientTransformation, optax.Schedule]


def learning_rate_fn(config: ml_collections.ConfigDict,
                     peak: Optional[Union[float, jax.Array]] = None) -> optax.Schedule:
  """The schedule, after checking the optimizer fields: optimizer updates made so far -> the
  learning rate of the next update (what the optimizer steps with and training logs).
  `peak` stands for config.learning_rate where given (a traced scalar in the train step)."""
  check_fields(config)
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


def _embedding_mask(params: Any) -> Any:
  # The token embedding table ('embedding' of the models' TokenEmbedding), not the positions'.
  return jax.tree_util.tree_map_with_path(
      lambda path, p: str(getattr(path[-1], "key", getattr(path[-1], "name", ""))) == "embedding",
      params)


def at_peak(config: ml_collections.ConfigDict, peak: Union[float, jax.Array]) -> OptimizerAtPeak:
  """(optimizer, schedule) of `config` with the peak learning rate `peak`. The train step
  builds them from its learning-rate argument, so that the rate is an input of the compiled
  program, not a constant in it: the points of a sweep that differ only in their rate (or
  seed) run one compiled step. The optimizer state does not depend on the peak."""
  schedule = learning_rate_fn(config, peak)
  return make_optimizer(config, schedule, peak), schedule


def make_optimizer(config: ml_collections.ConfigDict,
                   schedule: Optional[optax.Schedule] = None,
                   peak: Optional[Union[float, jax.Array]] = None) -> optax.GradientTransformation:
  """The optimizer for `config` (fields in the module docstring), on `schedule` when the
  caller has built it (`learning_rate_fn`: one schedule for the updates and the logs), whose
  peak is `peak` (default config.learning_rate).

  Order: [clip_by_global_norm] -> optimizer -> [hidden_lr_scale on the blocks' kernels] ->
  [embed_learning_rate / peak on the token embedding]. Gradient accumulation happens before,
  in the train step, so clipping and the update see the gradient of the whole batch. At
  hidden_lr_scale 1 and embed_learning_rate 0 no transform is added, so the optimizer state
  (and every checkpoint of it) is what it was without the fields. Scaling Adam's update by c
  is its rate times c, so the embedding follows the schedule's shape at its own peak.
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
  if config.embed_learning_rate:
    ratio = config.embed_learning_rate / (config.learning_rate if peak is None else peak)
    opt = optax.chain(opt, optax.masked(optax.scale(ratio), _embedding_mask))
  if config.grad_clip_norm:
    opt = optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), opt)
  return opt
