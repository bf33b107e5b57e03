"""What training updates and how: the train state, the learning-rate schedules and the
optimizer built from an experiment config (gradient clipping, then the optimizer).

The fields, their defaults and their checks: `fields.Optimization` (which imports no jax, so
the config is checked before jax starts; nothing here checks them again).

Schedules take `learning_rate` as their peak. Steps: optax calls a schedule with the number
of updates already applied, `step` = 0, 1, ... Every schedule here works with s = step + 1
(the paper counts from 1), so the first update already gets a nonzero rate and the peak is
reached at s == warmup_steps. The decaying schedules reach 0 at s == total_steps + 1, one
past the last of the total_steps updates, so no update is wasted with a zero rate.
"""

from typing import Any, Optional, Union

import flax
import jax
import jax.numpy as jnp
import optax

from transformer.training.fields import Optimization


@flax.struct.dataclass
class TrainState:
  """A pure pytree (no callables), so it checkpoints and shards as data. step: int32 scalar;
  params: the model's param tree; opt_state: optax state for them."""

  step: jax.Array
  params: Any
  opt_state: Any


def make_schedule(
    name: str, *, learning_rate: float, warmup_steps: int, total_steps: int
) -> optax.Schedule:
  """A schedule `step -> float32 learning rate` (jit-friendly).

  'rsqrt':    the paper's eq. 3 with its constant folded into the peak:
              lr = learning_rate * min(s / warmup, sqrt(warmup / s)). With learning_rate =
              optimizer_settings.paper_peak_learning_rate(d_model, warmup) this is exactly
              d_model^-0.5 * min(s^-0.5, s * warmup^-1.5). Ignores total_steps.
  'cosine':   linear warmup, then cosine decay to 0 at s == total_steps + 1.
  'constant': linear warmup, then constant. Ignores total_steps.
  'linear':   linear warmup, then linear decay to 0 at s == total_steps + 1.

  Linear warmup is lr * min(1, s / warmup); warmup_steps = 0 means none (not for 'rsqrt').
  """
  warmup = max(warmup_steps, 1)  # A warmup of 0 or 1 both give the peak at s = 1.
  if name == "rsqrt":  # optax has no inverse-square-root schedule of this form
    def rsqrt(step):
      s = jnp.asarray(step, jnp.float32) + 1.0
      return learning_rate * jnp.minimum(s / warmup, jnp.sqrt(warmup / s))
    return rsqrt
  ramp = optax.linear_schedule(0.0, learning_rate, warmup)  # lr * s / warmup up to the peak
  decay_steps = total_steps + 1 - warmup  # From the peak at s = warmup to 0 at total + 1.
  if name == "cosine":  # of peak 1, times the peak: optax's form branches on its peak's value,
    # which a traced peak (the train step's argument) does not have
    unit = optax.warmup_cosine_decay_schedule(0.0, 1.0, warmup, total_steps + 1, end_value=0.0)
    schedule = lambda s: learning_rate * unit(s)  # noqa: E731
  elif name == "linear":
    schedule = optax.join_schedules(
        [ramp, optax.linear_schedule(learning_rate, 0.0, decay_steps)], [warmup])
  else:
    schedule = optax.join_schedules([ramp, optax.constant_schedule(learning_rate)], [warmup])
  return lambda step: schedule(jnp.asarray(step) + 1)  # optax counts s from 0, the paper from 1


# What `at_peak` gives for a peak learning rate: the optimizer and its schedule.
OptimizerAtPeak = tuple[optax.GradientTransformation, optax.Schedule]


def learning_rate_fn(optimization: Optimization,
                     peak: Optional[Union[float, jax.Array]] = None) -> optax.Schedule:
  """The schedule of an experiment (its optimizer fields checked when it was parsed):
  optimizer updates made so far -> the learning rate of the next update (what the optimizer
  steps with and training logs). `peak` stands for optimization.learning_rate where given (a traced
  scalar in the train step)."""
  return make_schedule(
      optimization.schedule,
      learning_rate=optimization.learning_rate if peak is None else peak,
      warmup_steps=optimization.warmup_steps,
      total_steps=optimization.num_train_steps)


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


def at_peak(optimization: Optimization, peak: Union[float, jax.Array]) -> OptimizerAtPeak:
  """(optimizer, schedule) of `optimization` with the peak learning rate `peak`. The train step
  builds them from its learning-rate argument, so that the rate is an input of the compiled
  program, not a constant in it: the points of a sweep that differ only in their rate (or
  seed) run one compiled step. The optimizer state does not depend on the peak."""
  schedule = learning_rate_fn(optimization, peak)
  return make_optimizer(optimization, schedule, peak), schedule


def make_optimizer(optimization: Optimization,
                   schedule: Optional[optax.Schedule] = None,
                   peak: Optional[Union[float, jax.Array]] = None) -> optax.GradientTransformation:
  """The optimizer for `optimization` (fields in the module docstring), on `schedule` when the
  caller has built it (`learning_rate_fn`: one schedule for the updates and the logs), whose
  peak is `peak` (default optimization.learning_rate).

  Order: [clip_by_global_norm] -> optimizer -> [hidden_lr_scale on the blocks' kernels] ->
  [embed_learning_rate / peak on the token embedding]. Gradient accumulation happens before,
  in the train step, so clipping and the update see the gradient of the whole batch. At
  hidden_lr_scale 1 and embed_learning_rate 0 no transform is added, so the optimizer state
  (and every checkpoint of it) is what it was without the fields. Scaling Adam's update by c
  is its rate times c, so the embedding follows the schedule's shape at its own peak.
  """
  lr = learning_rate_fn(optimization) if schedule is None else schedule
  name = optimization.optimizer
  if name == "adam":
    opt = optax.adam(lr, b1=optimization.adam_b1, b2=optimization.adam_b2,
                     eps=optimization.adam_eps)
  elif name == "adamw":
    opt = optax.adamw(
        lr, b1=optimization.adam_b1, b2=optimization.adam_b2, eps=optimization.adam_eps,
        weight_decay=optimization.weight_decay, mask=_decay_mask)
  elif name == "adafactor":
    # optax defaults (factored second moments, update clipping 1.0, relative step size:
    # updates are scaled by the parameter RMS, so useful rates are larger, e.g. 1e-2).
    opt = optax.adafactor(lr)
  else:
    opt = optax.sgd(lr, momentum=optimization.momentum or None)

  if optimization.hidden_lr_scale != 1:
    opt = optax.chain(opt, optax.masked(optax.scale(optimization.hidden_lr_scale), _hidden_mask))
  if optimization.embed_learning_rate:
    peak = optimization.learning_rate if peak is None else peak
    ratio = optimization.embed_learning_rate / peak
    opt = optax.chain(opt, optax.masked(optax.scale(ratio), _embedding_mask))
  if optimization.grad_clip_norm:
    opt = optax.chain(optax.clip_by_global_norm(optimization.grad_clip_norm), opt)
  return opt
