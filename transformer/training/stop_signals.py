"""Stopping a run cleanly: SIGTERM (preemption) and SIGINT (Ctrl-C) end it at a step boundary.

The handlers only set a flag; the loop reads it between steps, saves a checkpoint at the step
reached and returns. On several processes the loop stops where any process was signalled.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Optional

import jax
import numpy as np


class StopSignals:
  """SIGTERM and SIGINT (Ctrl-C) set a flag that the loop reads at a step boundary, where it
  saves and returns; a second SIGINT interrupts at once. Restores the old handlers on exit."""

  def __init__(self):
    self.stopped_by: Optional[str] = None
    self._old: dict[int, Any] = {}

  def __enter__(self) -> "StopSignals":
    if threading.current_thread() is threading.main_thread():  # only there can Python trap them
      for sig in (signal.SIGTERM, signal.SIGINT):
        self._old[sig] = signal.signal(sig, self._handle)
    return self

  def _handle(self, signum: int, frame: Any) -> None:
    if signum == signal.SIGINT and self.stopped_by == "SIGINT":
      raise KeyboardInterrupt  # a second Ctrl-C: the user does not want to wait
    self.stopped_by = self.stopped_by or signal.Signals(signum).name

  def __exit__(self, *exc: Any) -> None:
    for sig, handler in self._old.items():
      signal.signal(sig, handler)


def any_process(value: bool) -> bool:
  """True if any process says True (multi-host preemption reaches processes at different steps)."""
  if jax.process_count() == 1:
    return value
  from jax.experimental import multihost_utils
  return bool(np.any(multihost_utils.process_allgather(np.asarray(value))))
