"""When a run that finished with finite losses still failed: stalled, or with a dead layer.

A non-finite loss ends a run at once (NonFiniteLossError, 'diverged'); this rule reads what a
finished run recorded. Every run is judged by one: the loop's summary says so where the run
ends, and the sweep runner records status 'failed' with the reason. A sweep may fix its own
(Sweep.failure, read again whenever its results are read); otherwise each run is judged, once,
by the default `FailureRule()`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from typing import Any, Mapping, Optional


@dataclasses.dataclass(frozen=True)
class FailureRule:
  """The rule, read off a run's train losses and its last per-layer gradient norms:

  stalled     its last train record's loss is not below (1 - min_fall) x the loss of its
              train record at step `stall_step` (it stopped learning after that step); None:
              the run's first train record at or after its warmup_steps. Judged only where
              the last record is at least `min_span` steps later: over fewer steps a loss
              that fell little says nothing (a test's or a smoke run's few steps)
  dead layer  at its last diagnostics record, a layer's gradient norm
              ('grad_norm/decoder/layer_*' and encoder's) is below `dead_ratio` x the largest
              layer's (the layer no longer learns: an attention entropy collapse ends so,
              Zhai et al. 2023)
  """
  stall_step: Optional[int] = None
  min_fall: float = 0.05
  dead_ratio: float = 1e-3
  min_span: int = 100

  def describe(self) -> str:
    at = (f"step {self.stall_step}" if self.stall_step is not None else
          f"its first train record after warmup, {self.min_span} or more steps before")
    return (f"a run failed if its loss diverged (non-finite), if its last train loss is not "
            f"{self.min_fall:.0%} below its train loss at {at} (stalled), or if "
            f"at its last diagnostics a layer's gradient norm is below {self.dead_ratio:g} of "
            "the largest layer's (a dead layer)")

  def judge(self, train_losses: Mapping[int, float], layer_grad_norms: Mapping[str, float],
            warmup_steps: int = 0) -> Optional[str]:
    """Why a finished run failed, in words, or None: `train_losses` {step: loss} of its train
    records, `layer_grad_norms` {'decoder/layer_0': norm} of its last diagnostics record."""
    if self.stall_step is not None:
      stall_step = self.stall_step
    else:
      stall_step = min((s for s in train_losses if s >= warmup_steps), default=None)
    if stall_step in train_losses:
      first, last_step = train_losses[stall_step], max(train_losses)
      last = train_losses[last_step]
      if last_step >= stall_step + self.min_span and not last < (1 - self.min_fall) * first:
        return (f"stalled: train loss {last:.3f} at step {last_step} against {first:.3f} at "
                f"step {stall_step}")
    norms = {k: v for k, v in layer_grad_norms.items() if math.isfinite(v)}
    if norms and max(norms.values()) > 0:
      layer, low = min(norms.items(), key=lambda kv: kv[1])
      if low < self.dead_ratio * max(norms.values()):
        return (f"dead layer: {layer}'s final gradient norm {low:.2g} against the largest "
                f"layer's {max(norms.values()):.2g}")
    return None


def layer_grad_norms(record: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
  """{'decoder/layer_0': norm} of the keys PREFIX + 'grad_norm/STACK/layer_*' of one record
  (a diagnostics record of metrics.jsonl; prefix 'final/' in a sweep's result metrics)."""
  pattern = f"{prefix}grad_norm/*/layer_*"
  return {k.rsplit("/", 2)[-2] + "/" + k.rsplit("/", 1)[-1]: float(v)
          for k, v in record.items() if fnmatch.fnmatchcase(k, pattern)}
