"""What a workdir must hold for a run to go on in it, checked before training starts.

A run continues only with its own model and data stream; it does not restart from step 0
over the history of a run whose checkpoints were removed; a full disk is said as such.
"""

from __future__ import annotations

import errno
import os
from typing import Any

import ml_collections
from absl import logging

from transformer import checkpoint
from transformer.config import ModelConfig
from transformer.errors import TrainingError, one_line
from transformer.training import writers


def check_workdir(workdir: str) -> bool:
  """Makes the workdir if needed and checks that it is writable; True if it was made here."""
  created = not os.path.exists(workdir)
  try:
    os.makedirs(workdir, exist_ok=True)
    probe = os.path.join(workdir, f".write-test-{os.getpid()}")
    with open(probe, "w") as f:
      f.write("ok")
    os.remove(probe)
  except OSError as e:
    raise TrainingError(f"Workdir {workdir} is not writable ({e.strerror}); pass a --workdir "
                        "you can write to.") from None
  return created


# Fields whose change would make the saved data-iterator position mean other examples.
_DATA_STREAM_FIELDS = ("dataset", "batch_size", "packing", "eval_fraction", "test_fraction")


def check_resumable(workdir: str, config: ml_collections.ConfigDict,
                     model_config: ModelConfig, has_checkpoints: bool) -> None:
  """A workdir's run continues only with its own model and, once it has checkpoints, its own
  data stream; config.json tells what they were."""
  path = os.path.join(workdir, checkpoint.CONFIG_FILE)
  if not os.path.exists(path):
    return
  saved_config = checkpoint.read_config(workdir)
  saved = saved_config.get("model", {})
  new = model_config.to_dict()
  changed = sorted(k for k in set(saved) | set(new)
                   if k in new and _normal(saved.get(k)) != _normal(new.get(k)))
  if changed and not config.allow_model_change:
    raise TrainingError(
        f"Workdir {workdir} holds a run of a different model (changed: "
        f"{', '.join(f'{k} {saved.get(k)!r} -> {new.get(k)!r}' for k in changed)}); use a new "
        "--workdir, or pass --config.allow_model_change=True to resume it anyway.")
  experiment_before = saved_config.get("experiment", {})
  stream = [f"{k} {experiment_before[k]!r} -> {config.get(k)!r}" for k in _DATA_STREAM_FIELDS
            if k in experiment_before and experiment_before[k] != config.get(k)]
  if stream and has_checkpoints:
    raise TrainingError(
        f"Workdir {workdir} was trained with another data stream ({', '.join(stream)}); its "
        "saved position in the data would point elsewhere; resume with the same settings or "
        "use a new --workdir.")


def check_history(workdir: str, config: ml_collections.ConfigDict) -> None:
  """Refuses to start from step 0 over the metrics of a run whose checkpoints are gone.

  A run killed before its first checkpoint committed restarts (its metrics are rewritten
  alike); a save waits for the one before, so records past twice checkpoint_every_steps
  mean that a checkpoint existed and was removed.
  """
  logged = writers.last_step(workdir)
  directory = os.path.join(workdir, checkpoint.CHECKPOINT_DIR)
  set_aside = os.path.isdir(directory) and any(
      name.endswith((".corrupt", ".nonfinite")) for name in os.listdir(directory))
  if logged > 2 * config.checkpoint_every_steps and not set_aside:
    raise TrainingError(
        f"Workdir {workdir} holds metrics up to step {logged} but no checkpoint (was "
        f"{directory} emptied?); training from step 0 would overwrite that history: move "
        f"{os.path.join(workdir, writers.METRICS_FILE)} aside, or use a new --workdir.")
  if logged:
    logging.warning("No checkpoint in %s: training from step 0; the metrics logged up to step "
                    "%d are written again.", workdir, logged)


def _normal(v: Any) -> Any:
  return list(v) if isinstance(v, tuple) else v


def disk_full(e: BaseException) -> bool:
  """Whether e, or an error behind it, says the disk (or the quota) is full."""
  seen = set()
  while e is not None and id(e) not in seen:
    seen.add(id(e))
    if (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)) or \
        "No space left on device" in str(e):
      return True
    e = e.__cause__ or e.__context__
  return False


def disk_full_error(workdir: str, e: BaseException) -> TrainingError:
  return TrainingError(f"No space left on the disk of {workdir} ({one_line(e, 160)}); free "
                       "space and rerun the same command: it resumes from the newest readable "
                       "checkpoint.")
