"""What the optimizer and schedule fields of an experiment mean and may be, importing no jax
(the config is checked before jax starts). Their defaults and checks are
`training.fields.Optimization`'s; `optimizers` builds the schedule and the optimizer from it.

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
