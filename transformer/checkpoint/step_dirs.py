"""Finished checkpoint steps, and the one rule for reading the newest readable one.

A step directory `<step>/` is finished when orbax renamed it from `<step>.orbax-checkpoint-tmp`
(a save killed half way is never listed); `<step>.corrupt` and `<step>.nonfinite` are steps
set aside. Training, `load_params` and inference all take a checkpoint through
`newest_readable`: the newest step that reads without error, each damaged newer one skipped
with a warning naming it; an explicit step is never substituted.
"""

from __future__ import annotations

import logging
import os
from typing import Callable, Iterable, Optional, TypeVar

from etils import epath
import orbax.checkpoint as ocp

from transformer.errors import ConfigError, RunError, one_line

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"
T = TypeVar("T")


class IncompatibleCheckpointError(ConfigError):
  """A readable checkpoint this job cannot use (other model, optimizer or process count).

  Raised at once: `newest_readable` falls back to older checkpoints only for damaged ones.
  """


def checkpoint_dir(workdir: str) -> epath.Path:
  """WORKDIR/checkpoints; a relative local workdir made absolute (orbax refuses relative paths)."""
  path = os.fspath(workdir)
  if "://" not in path:
    path = os.path.abspath(path)
  return epath.Path(path) / CHECKPOINT_DIR


def finished_steps(directory: epath.Path) -> list[int]:
  """Finished steps under `directory`, ascending, as orbax lists them."""
  if not directory.exists():
    return []
  return sorted(m.step for m in ocp.step.standard_name_format().find_all(directory))


def newest_readable(steps: Iterable[int], read: Callable[[int], T], where: str, *,
                    on_damaged: Optional[Callable[[int], None]] = None) -> tuple[T, int]:
  """(read(step), step) for the newest of `steps` that `read` returns without an error.

  A step whose read raises is damaged: a warning names it and the next older one is tried
  (on_damaged(step) is called first); an IncompatibleCheckpointError is raised at once.
  When none can be read, a RunError names them, the last error and the fix.
  """
  steps = sorted(steps)
  last_error: Optional[BaseException] = None
  for step in reversed(steps):
    try:
      return read(step), step
    except IncompatibleCheckpointError:
      raise
    except Exception as e:  # noqa: BLE001  (any read failure means: damaged, fall back)
      last_error = e
      if on_damaged is not None:
        on_damaged(step)
      log.warning("Skipping damaged checkpoint %s/%d (%s: %s); falling back to an older one.",
                  where, step, type(e).__name__, one_line(e))
  raise RunError(
      f"None of the checkpoints {steps} in {where} could be read (the last error: "
      f"{type(last_error).__name__}: {one_line(last_error)}); move {where} aside to start "
      "afresh, or fix the storage they live on.") from last_error
