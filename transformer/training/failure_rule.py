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
              that fell little says nothing (a test's or a smoke run's few steps). With
              `judge_warmup`, a loss already below min_fall x its first record's at
              `stall_step` converged before it (a task learnt during warmup: nothing left to
              fall), and is not stalled
  blew up     with `judge_warmup`, judged alike: its loss rose more than min_fall from its
              first record to `stall_step`, and its last is not below that first record's (it
              did not come back)
  dead layer  at its last diagnostics record, a layer's gradient norm
              ('grad_norm/decoder/layer_*' and encoder's) is below `dead_ratio` x the largest
              layer's (the layer no longer learns: an attention entropy collapse ends so,
              Zhai et al. 2023); with `judge_nonfinite_layers`, also one that is not finite,
              or every layer's 0
  A sweep declared before the two switches existed fixes them False: the rule it declared.
  """
  stall_step: Optional[int] = None
  min_fall: float = 0.05
  dead_ratio: float = 1e-3
  min_span: int = 100
  judge_warmup: bool = True
  judge_nonfinite_layers: bool = True

  def describe(self) -> str:
    at = (f"step {self.stall_step}" if self.stall_step is not None else
          f"its first train record after warmup, {self.min_span} or more steps before")
    warmup = (f" (one already {self.min_fall:g} x its first record's loss there converged "
              f"and is not stalled), if its loss rose more than {self.min_fall:.0%} from its "
              "first record to that step and never came back below it (blew up)"
              if self.judge_warmup else "")
    nonfinite = (", not finite, or every layer's 0" if self.judge_nonfinite_layers else "")
    return (f"a run failed if its loss diverged (non-finite), if its last train loss is not "
            f"{self.min_fall:.0%} below its train loss at {at} (stalled){warmup}, or if "
            f"at its last diagnostics a layer's gradient norm is below {self.dead_ratio:g} of "
            f"the largest layer's{nonfinite} (a dead layer)")

  def judge(self, train_losses: Mapping[int, float], layer_grad_norms: Mapping[str, float],
            warmup_steps: int = 0) -> Optional[str]:
    """Why a finished run failed, in words, or None: `train_losses` {step: loss} of its train
    records, `layer_grad_norms` {'decoder/layer_0': norm} of its last diagnostics record."""
    return self._stalled(train_losses, warmup_steps) or self._dead_layer(layer_grad_norms)

  def _stalled(self, losses: Mapping[int, float], warmup_steps: int) -> Optional[str]:
    """Stalled after `stall_step`, or blown up before it and never back below its first
    record; a loss already at its floor at `stall_step` converged (nothing left to fall)."""
    if self.stall_step is not None:
      stall_step = self.stall_step
    else:
      stall_step = min((s for s in losses if s >= warmup_steps), default=None)
    if stall_step not in losses:
      return None
    first, last_step = losses[stall_step], max(losses)
    last, start_step = losses[last_step], min(losses)
    start = losses[start_step]
    if last_step < stall_step + self.min_span:  # too few steps to say
      return None
    early = self.judge_warmup and start_step < stall_step
    if early and first > (1 + self.min_fall) * start and not last < start:
      return (f"blew up: train loss {last:.3f} at step {last_step} against {start:.3f} at "
              f"step {start_step}, after {first:.3f} at step {stall_step}")
    converged = early and first < self.min_fall * start
    if not converged and not last < (1 - self.min_fall) * first:
      return (f"stalled: train loss {last:.3f} at step {last_step} against {first:.3f} at "
              f"step {stall_step}")
    return None

  def _dead_layer(self, layer_grad_norms: Mapping[str, float]) -> Optional[str]:
    """A layer whose last gradient norm is not finite, or negligible beside the largest
    layer's (every layer's 0: all dead)."""
    bad = sorted(k for k, v in layer_grad_norms.items() if not math.isfinite(v))
    if bad and self.judge_nonfinite_layers:
      return (f"non-finite layer gradient: {bad[0]}'s final gradient norm "
              f"{layer_grad_norms[bad[0]]}")
    norms = {k: v for k, v in layer_grad_norms.items() if math.isfinite(v)}
    if norms and max(norms.values()) <= 0 and self.judge_nonfinite_layers:
      return f"dead layer: every layer's final gradient norm is 0 ({', '.join(sorted(norms))})"
    if norms:
      layer, low = min(norms.items(), key=lambda kv: kv[1])
      if low < self.dead_ratio * max(norms.values()):
        return (f"dead layer: {layer}'s final gradient norm {low:.2g} against the largest "
                f"layer's {max(norms.values()):.2g}")
    return None


def layer_grad_norms(record: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
  """{'decoder/layer_0': norm} of the keys PREFIX + 'grad_norm/STACK/layer_*' of one record
  (a diagnostics record of metrics.jsonl; prefix 'final/' in a sweep's result metrics)."""
  pattern = f"{prefix}grad_norm/*/layer_*"
  # metrics.jsonl writes a non-finite value as null: read back as NaN, which fails the rule.
  return {k.rsplit("/", 2)[-2] + "/" + k.rsplit("/", 1)[-1]: math.nan if v is None else float(v)
          for k, v in record.items() if fnmatch.fnmatchcase(k, pattern)}
