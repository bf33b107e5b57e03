"""Metrics out: `metrics.jsonl` (one JSON object per line) and TensorBoard event files; the
window of train metrics between two log steps (`MetricWindow`).

Only process 0 writes. TensorBoard files come from tensorboardX, so no TensorFlow is needed;
`tensorboard --logdir WORKDIR` reads them.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
import threading
import time
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import numpy as np

from absl import logging

from transformer import storage
from transformer.errors import RunError
from transformer.training import losses, sharding

METRICS_FILE = "metrics.jsonl"
# The fields of a train record that time the loop rather than describe the model: a resumed
# run repeats every other field exactly.
TIMING_FIELDS = ("tokens_per_sec", "steps_per_sec", "host_ms_per_step", "input_ms_per_step")


def _number(v: Any) -> Optional[float]:
  v = float(v)
  return v if math.isfinite(v) else None  # JSON has no NaN; None marks a non-finite value


def finite_json(value: Any) -> Any:
  """`value` (dicts, lists, numbers, ...) with every non-finite float as None: what JSON can
  hold (json.dumps would write NaN and Infinity, which no JSON reader takes)."""
  if isinstance(value, dict):
    return {k: finite_json(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [finite_json(v) for v in value]
  if isinstance(value, (float, np.floating)):
    return _number(value)
  return value


class MetricWindow:
  """The train metrics of the steps since the last log step: they stay on the device until
  `summary`, which sums them on the host into the logged means, the window's worst step and
  its throughput. A non-finite loss in it calls `on_nonfinite(step, 'loss', value)`, and a
  non-finite param norm (the params after that step's update, which no train loss measures at
  the last step) `on_nonfinite(step, 'param_norm', value)`; it raises.

  Beside the throughput, the loop's own time: `host_ms_per_step`, the host's time inside a
  step's call (its batch, placing it, dispatching the step; a diagnostics step's work too),
  and `input_ms_per_step`, the part of it spent waiting for the batch. Where the host keeps
  ahead of the chip, steps_per_sec is the chip's pace and input_ms_per_step is near 0."""

  def __init__(self, on_nonfinite: Callable[[int, str, float], None]):
    self._pending: list[Any] = []
    self._on_nonfinite = on_nonfinite
    self._restart()

  def _restart(self) -> None:
    self._timer, self._paused = time.perf_counter(), 0.0
    self._host_seconds = self._input_seconds = 0.0

  @contextlib.contextmanager
  def paused(self) -> Iterator[None]:
    """The block's time is not training time (an evaluation): throughput leaves it out, and
    the steps already in the window keep theirs."""
    start = time.perf_counter()
    try:
      yield
    finally:
      self._paused += time.perf_counter() - start

  def first_step(self, step: int) -> int:
    """The first step of the window ending at `step`: the record of `summary(step)` covers
    first_step..step (shorter than log_every_steps after a resume inside a window)."""
    return step - len(self._pending) + 1

  def add(self, metrics: Mapping[str, Any], *, host_seconds: float = 0.0,
          input_seconds: float = 0.0) -> None:
    self._pending.append(metrics)
    self._host_seconds += host_seconds
    self._input_seconds += input_seconds

  def __len__(self) -> int:
    return len(self._pending)

  def check(self, step: int) -> None:
    """Fetches the window ending at `step` to the host and checks its losses and param norms
    (a non-finite one calls `on_nonfinite`), keeping it: a checkpoint between two log steps
    does not cut the next record short."""
    self._pending = sharding.to_host(self._pending)
    for i, m in enumerate(self._pending):
      for name in ("loss_sum", "param_norm"):  # the params before, then after, the update
        if name in m and not np.isfinite(m[name]):
          self._on_nonfinite(step - len(self._pending) + i + 1, name.removesuffix("_sum"),
                             float(m[name]))

  def summary(self, step: int) -> dict[str, float]:
    """The window ending at `step`, summarized (and emptied)."""
    self.check(step)
    fetched, self._pending = self._pending, []
    elapsed = time.perf_counter() - self._timer - self._paused
    total = losses.LossOutput.total(fetched, dtype=np.float64)
    out = {k: float(v) for k, v in losses.summarize(total).items() if k != "weight_sum"}
    for k in ("learning_rate", "grad_norm", "param_norm"):
      out[k] = float(fetched[-1][k])
    # The worst single step of the window: loss and gradient-norm spikes show here even
    # when the window's mean hides them.
    out["loss_step_max"] = max(float(m["loss_sum"]) / max(float(m["weight_sum"]), 1.0)
                               for m in fetched)
    out["grad_norm_step_max"] = max(float(m["grad_norm"]) for m in fetched)
    out["tokens_per_sec"] = float(total.weight_sum) / max(elapsed, 1e-9)
    out["steps_per_sec"] = len(fetched) / max(elapsed, 1e-9)
    out["host_ms_per_step"] = 1e3 * self._host_seconds / max(len(fetched), 1)
    out["input_ms_per_step"] = 1e3 * self._input_seconds / max(len(fetched), 1)
    self._restart()
    return out


class MetricWriter:
  """write(step, split, {name: scalar}) -> a jsonl line and TensorBoard scalars 'split/name'."""

  def __init__(self, workdir: str, enabled: bool = True, resume_step: int = 0,
               rerun_splits: Sequence[str] = ()):
    """`rerun_splits`: splits whose records at `resume_step` itself the resumed run writes
    again (those done after the checkpoint was saved)."""
    self.enabled = enabled
    self.path = storage.join(workdir, METRICS_FILE)
    self._tb = None
    self._staging: Optional[str] = None
    if not enabled:
      return
    _drop_after(self.path, resume_step, rerun_splits)  # what comes after will be run again
    from tensorboardX import SummaryWriter  # deferred: a heavy import
    events_dir = storage.join(workdir, "tensorboard")
    if not storage.is_local(workdir):
      # An object store has no append: the event files are written in a local temporary
      # directory and each is copied whole to WORKDIR/tensorboard at every flush (each
      # checkpoint) and at close.
      self._staging, self._events_dir = tempfile.mkdtemp(prefix="tensorboard-"), events_dir
      events_dir = self._staging
    # An unbounded queue: tensorboardX's thread writes the events, and where it dies (a full
    # disk) a bounded queue would block the loop in `add_scalar` for good, deaf to SIGTERM.
    # `write` asks the thread first, and says its end in one line.
    self._tb = SummaryWriter(events_dir, purge_step=resume_step + 1, max_queue=2**30)
    _quiet_event_threads()

  def write(self, step: int, split: str, metrics: Mapping[str, Any], **steps: int) -> None:
    """One record of `metrics` at `step`; `steps` ({'first_step': N}) are written with it as
    integers, beside 'step', and are not metrics (no TensorBoard scalar)."""
    if not self.enabled:
      return
    record = {"step": int(step), "split": split, **{k: int(v) for k, v in steps.items()}}
    record.update({k: _number(v) for k, v in metrics.items()})
    storage.append_line(self.path, json.dumps(record) + "\n")
    self._check_events()
    for k, v in metrics.items():
      self._tb.add_scalar(f"{split}/{k}", float(v), int(step))

  def write_text(self, step: int, tag: str, text: str) -> None:
    if self.enabled:
      self._check_events()
      self._tb.add_text(tag, text, int(step))

  def _check_events(self) -> None:
    """The OSError that ended a TensorBoard event file's writer thread (a full disk), raised
    here, in the loop's thread; nothing while they run."""
    for f in (self._tb.all_writers or {}).values():
      failed = _EVENT_THREAD_ERRORS.get(id(f.event_writer._worker))
      if failed is not None:
        raise failed

  def flush(self) -> None:
    if self._tb is not None:
      self._tb.flush()
      self._upload()

  def close(self) -> None:
    if self._tb is None:
      return
    tb, self._tb = self._tb, None
    files = list((tb.all_writers or {}).values())
    try:
      tb.close()
    except OSError:
      for f in files:
        _abandon(f.event_writer)
      raise
    self._upload()
    if self._staging:
      shutil.rmtree(self._staging, ignore_errors=True)

  def _upload(self) -> None:
    """Copies the staged event files whole to the object store (nothing where local)."""
    if self._staging:
      for name in os.listdir(self._staging):
        with open(os.path.join(self._staging, name), "rb") as f:
          storage.write_atomically(storage.join(self._events_dir, name), f.read())


def _abandon(events: Any) -> None:
  """Gives up a tensorboardX event file whose last flush failed (a full disk): the events not
  yet written are lost either way, but tensorboardX would flush again at exit and its worker
  thread would fail on its closed queue, each printing a traceback under the run's one-line
  message. So it is marked closed and its worker, if it still runs, stopped (tensorboardX has
  no public way)."""
  events._closed = True
  if events._worker is not None and events._worker.is_alive():
    with contextlib.suppress(Exception):
      events._worker.stop()


# id(thread) -> the OSError that ended a tensorboardX event writer thread.
_EVENT_THREAD_ERRORS: dict[int, OSError] = {}


def _quiet_event_threads() -> None:
  """An OSError that ends a tensorboardX event writer thread is kept for `MetricWriter` to
  raise in the loop's thread (one line there), instead of a traceback printed from the thread;
  every other thread's error goes to the hook there was."""
  if getattr(threading.excepthook, "keeps_event_errors", False):
    return
  previous = threading.excepthook

  def hook(args: threading.ExceptHookArgs) -> None:
    if type(args.thread).__name__ == "_EventLoggerThread" and isinstance(args.exc_value, OSError):
      _EVENT_THREAD_ERRORS[id(args.thread)] = args.exc_value
    else:
      previous(args)

  hook.keeps_event_errors = True  # type: ignore[attr-defined]
  threading.excepthook = hook


def _read_records(path: str) -> tuple[list[tuple[str, dict[str, Any]]], Optional[str]]:
  """([(line, record)], torn): the records of metrics.jsonl with their lines, and its last
  line when a crash or a full disk cut it off mid-write (it is then left out).

  Any other line that is not a record is an error naming the file and the line. No file (a
  run that has written no record yet) is no records.
  """
  if not storage.as_path(path).exists():
    return [], None
  raw = storage.as_path(path).read_bytes().decode("utf-8", errors="replace")
  lines = raw.split("\n")
  out, torn = [], None
  for n, line in enumerate(lines, 1):
    if not line.strip():
      continue
    last = n == len(lines)  # no line break after it: the write may have been cut off
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      if last:
        torn = line
        continue
      raise RunError(f"{path} line {n} is not JSON ({e.msg}); remove or repair that line "
                     "(each line is one record written by training).") from None
    if not (isinstance(record, dict) and isinstance(record.get("step"), int)
            and isinstance(record.get("split"), str)):
      raise RunError(f"{path} line {n} is not a metrics record (it needs an integer 'step' and "
                     "a 'split'); remove that line.")
    out.append((line, record))
  if torn is not None:
    logging.warning("%s: its last line was cut off mid-write (a crash or a full disk) and is "
                    "left out: %r", path, torn[:80])
  return out, torn


def _drop_after(path: str, step: int, rerun_splits: Sequence[str] = ()) -> None:
  """Keeps the records of steps <= `step`, less those of `rerun_splits` at `step` (a resumed
  run rewrites them), and drops a cut-off last line; the file is replaced atomically."""
  if not storage.as_path(path).exists():
    return  # nothing to keep, and no empty file to make
  records, _ = _read_records(path)
  storage.write_atomically(path, "".join(
      line + "\n" for line, r in records
      if r["step"] < step or (r["step"] == step and r["split"] not in rerun_splits)))


def last_step(workdir: str) -> int:
  """The largest step in WORKDIR/metrics.jsonl; 0 when there is none."""
  records, _ = _read_records(storage.join(workdir, METRICS_FILE))
  return max((r["step"] for _, r in records), default=0)


def read_metrics(workdir: str, split: Optional[str] = None) -> list[dict[str, Any]]:
  """The records of metrics.jsonl, optionally of one split ('train' or 'eval'); a last line
  cut off mid-write is left out with a warning; [] where the run has written none."""
  records, _ = _read_records(storage.join(workdir, METRICS_FILE))
  return [r for _, r in records if split is None or r["split"] == split]
