"""Metrics out: `metrics.jsonl` (one JSON object per line) and TensorBoard event files.

Only process 0 writes. TensorBoard files come from tensorboardX, so no TensorFlow is needed;
`tensorboard --logdir WORKDIR` reads them.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Mapping, Optional

METRICS_FILE = "metrics.jsonl"


def _number(v: Any) -> Optional[float]:
  v = float(v)
  return v if math.isfinite(v) else None  # JSON has no NaN; None marks a non-finite value


class MetricWriter:
  """write(step, split, {name: scalar}) -> a jsonl line and TensorBoard scalars 'split/name'."""

  def __init__(self, workdir: str, enabled: bool = True, resume_step: int = 0):
    self.enabled = enabled
    self.path = os.path.join(workdir, METRICS_FILE)
    self._tb = None
    if not enabled:
      return
    _drop_after(self.path, resume_step)  # steps after the checkpoint will be run again
    from tensorboardX import SummaryWriter  # deferred: a heavy import
    self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"), purge_step=resume_step + 1)

  def write(self, step: int, split: str, metrics: Mapping[str, Any]) -> None:
    if not self.enabled:
      return
    record = {"step": int(step), "split": split}
    record.update({k: _number(v) for k, v in metrics.items()})
    with open(self.path, "a") as f:
      f.write(json.dumps(record) + "\n")
    for k, v in metrics.items():
      self._tb.add_scalar(f"{split}/{k}", float(v), int(step))

  def write_text(self, step: int, tag: str, text: str) -> None:
    if self.enabled:
      self._tb.add_text(tag, text, int(step))

  def flush(self) -> None:
    if self._tb is not None:
      self._tb.flush()

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()
      self._tb = None


def _drop_after(path: str, step: int) -> None:
  """Keeps the lines of steps <= `step` (a resumed run rewrites what came after)."""
  if not os.path.exists(path):
    return
  with open(path) as f:
    lines = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
  with open(path + ".tmp", "w") as f:
    f.writelines(lines)
  os.replace(path + ".tmp", path)


def read_metrics(workdir: str, split: Optional[str] = None) -> list[dict[str, Any]]:
  """The records of metrics.jsonl, optionally of one split ('train' or 'eval')."""
  path = os.path.join(workdir, METRICS_FILE)
  with open(path) as f:
    records = [json.loads(line) for line in f if line.strip()]
  return [r for r in records if split is None or r["split"] == split]
