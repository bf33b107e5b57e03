"""Learning-rate schedules, all with `learning_rate` as the peak value.

Steps: optax calls a schedule with the number of updates already applied, `step` = 0, 1, ...
Every schedule here works with s = step + 1 (the paper counts from 1), so the first update
already gets a nonzero rate and the peak is reached at s == warmup_steps. The decaying
schedules reach 0 at s == total_steps + 1, one past the last of the total_steps updates,
so no update is wasted with a zero rate.
"""

import jax.numpy as jnp
import optax

from transformer.training.optimizer_settings import (SCHEDULES, check_schedule,  # noqa: F401
                                                   paper_peak_learning_rate)

def make_schedule(
    name: str, *, learning_rate: float, warmup_steps: int, total_steps: int
) -> optax.Schedule:
  """A schedule `step -> float32 learning rate` (jit-friendly).

  'rsqrt':    the paper's eq. 3 with its constant folded into the peak:
              lr = learning_rate * min(s / warmup, sqrt(warmup / s)). With learning_rate =
              paper_peak_learning_rate(d_model, warmup) this is exactly
              d_model^-0.5 * min(s^-0.5, s * warmup^-1.5). Ignores total_steps.
  'cosine':   linear warmup, then cosine decay to 0 at s == total_steps + 1.
  'constant': linear warmup, then constant. Ignores total_steps.
  'linear':   linear warmup, then linear decay to 0 at s == total_steps + 1.

  Linear warmup is lr * min(1, s / warmup); warmup_steps = 0 means none (not for 'rsqrt').
  """
  check_schedule(name, warmup_steps, total_steps)
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
