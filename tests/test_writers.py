"""metrics.jsonl and TensorBoard files; a resumed run rewrites what came after its checkpoint."""

import errno
import logging
import math

import numpy as np
import pytest

from transformer.errors import RunError
from transformer.training import writers


def test_jsonl_and_tensorboard(tmp_path):
  w = writers.MetricWriter(str(tmp_path))
  for step in (1, 2, 3):
    w.write(step, "train", {"loss": 1.0 / step, "bad": math.nan})
  w.write(3, "eval", {"loss": 0.5})
  w.close()
  records = writers.read_metrics(str(tmp_path))
  assert [r["step"] for r in records] == [1, 2, 3, 3]
  assert records[0]["bad"] is None  # non-finite values are written as null, never NaN
  assert [r["loss"] for r in writers.read_metrics(str(tmp_path), "eval")] == [0.5]
  events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
  assert events and events[0].stat().st_size > 0

  resumed = writers.MetricWriter(str(tmp_path), resume_step=2)
  resumed.write(3, "train", {"loss": 0.25})
  resumed.close()
  assert [(r["step"], r["loss"]) for r in writers.read_metrics(str(tmp_path))] == [
      (1, 1.0), (2, 0.5), (3, 0.25)]


def test_disabled_writer_writes_nothing(tmp_path):
  w = writers.MetricWriter(str(tmp_path), enabled=False)
  w.write(1, "train", {"loss": 1.0})
  w.close()
  assert not list(tmp_path.iterdir())


def _log(tmp_path, steps):
  w = writers.MetricWriter(str(tmp_path))
  for step in steps:
    w.write(step, "train", {"loss": 1.0 / step})
  w.close()
  return tmp_path / writers.METRICS_FILE


def test_a_last_line_cut_off_mid_write_is_left_out_and_dropped_on_resume(tmp_path, caplog):
  path = _log(tmp_path, (1, 2))
  with open(path, "a") as f:
    f.write('{"step": 3, "split": "tra')  # a kill or a full disk in the middle of a write
  with caplog.at_level(logging.WARNING):
    assert [r["step"] for r in writers.read_metrics(str(tmp_path))] == [1, 2]
  assert "last line was cut off mid-write" in caplog.text and str(path) in caplog.text
  assert writers.last_step(str(tmp_path)) == 2
  resumed = writers.MetricWriter(str(tmp_path), resume_step=2)  # rewrites the file whole
  resumed.write(3, "train", {"loss": 0.25})
  resumed.close()
  assert path.read_text().splitlines()[-1] == '{"step": 3, "split": "train", "loss": 0.25}'
  assert not list(tmp_path.glob("*.tmp*"))


@pytest.mark.parametrize("line, message", [
    ('{"step": 2, "spl\n', "line 2 is not JSON"),  # not the last line: not a torn write
    ('{"split": "note"}\n', "line 2 is not a metrics record (it needs an integer 'step'"),
])
def test_other_bad_lines_are_one_clear_error_naming_the_line(tmp_path, line, message):
  path = _log(tmp_path, (1,))
  with open(path, "a") as f:
    f.write(line + '{"step": 3, "split": "train", "loss": 1.0}\n')
  for read in (lambda: writers.read_metrics(str(tmp_path)),
               lambda: writers.MetricWriter(str(tmp_path), resume_step=1)):
    with pytest.raises(RunError) as e:
      read()
    assert str(e.value).startswith(f"{path} {message}") and "\n" not in str(e.value)


def test_a_close_on_a_full_disk_is_not_tried_again_at_exit(tmp_path, monkeypatch):
  """tensorboardX would flush again at exit and its worker fail on a closed queue, each with
  a traceback under the run's one-line 'No space left' message."""
  writer = writers.MetricWriter(str(tmp_path))
  writer.write(1, "train", {"loss": 1.0})
  (events,) = [f.event_writer for f in writer._tb.all_writers.values()]

  def full_disk():
    raise OSError(errno.ENOSPC, "No space left on device")

  monkeypatch.setattr(events._ev_writer, "flush", full_disk)
  with pytest.raises(OSError, match="No space left"):
    writer.close()
  events.close()  # what tensorboardX's exit hook calls: nothing left to do, no error
  assert events._worker is None or not events._worker.is_alive()


def test_a_metric_window_sums_its_steps_and_stops_at_a_non_finite_loss():
  def step(loss_sum, weight, grad_norm):
    return {"loss_sum": np.float32(loss_sum), "nll_sum": np.float32(loss_sum),
            "z_loss_sum": np.float32(0), "correct_sum": np.float32(weight / 2),
            "weight_sum": np.float32(weight), "learning_rate": np.float32(1e-3),
            "grad_norm": np.float32(grad_norm), "param_norm": np.float32(5)}
  stopped = []
  window = writers.MetricWindow(lambda step, name, value: stopped.append((step, name)))
  window.add(step(4.0, 2.0, 1.0))
  window.add(step(12.0, 2.0, 3.0))
  assert window.first_step(2) == 1  # steps 1-2
  summary = window.summary(2)
  assert summary["loss"] == 4.0 and summary["accuracy"] == 0.5  # 16 / 4 tokens, 2 / 4 right
  assert summary["loss_step_max"] == 6.0 and summary["grad_norm_step_max"] == 3.0
  assert summary["grad_norm"] == 3.0 and len(window) == 0 and not stopped  # the last step's
  window.add(step(1.0, 2.0, 1.0))
  window.check(3)  # a checkpoint at step 3, between log steps: the window is kept
  window.add(step(3.0, 2.0, 1.0))
  assert len(window) == 2 and window.first_step(4) == 3
  assert window.summary(4)["loss"] == 1.0  # steps 3-4: (1 + 3) / 4 tokens
  window.add(step(1.0, 2.0, 1.0))
  window.add(step(float("nan"), 2.0, 1.0))
  window.summary(6)
  assert stopped == [(6, "loss")]  # the step whose loss was not finite
  # The params after the last update, which no train loss measured: their norm says so.
  window.add({**step(1.0, 2.0, 1.0), "param_norm": np.float32("inf")})
  window.check(7)
  assert stopped == [(6, "loss"), (7, "param_norm")]


def test_a_full_disk_under_the_event_writer_thread_ends_the_writes_in_one_error(tmp_path,
                                                                              monkeypatch):
  """Round 6, item 7: a disk that filled during training killed tensorboardX's writer thread
  with ENOSPC; its bounded queue then blocked the loop at 0% CPU for good, deaf to SIGTERM.
  Now the thread's error is raised by the next write, in the writer's own thread, and closing
  returns."""
  import errno
  import threading
  import time
  from tensorboardX import event_file_writer

  def full(self, event):
    raise OSError(errno.ENOSPC, "No space left on device")

  writer = writers.MetricWriter(str(tmp_path))
  monkeypatch.setattr(event_file_writer.EventsWriter, "write_event", full)
  raised, start = None, time.monotonic()
  while raised is None and time.monotonic() - start < 10:
    try:
      writer.write(1, "train", {f"m{i}": 1.0 for i in range(20)})  # more than the old queue held
    except OSError as e:
      raised = e
    time.sleep(0.01)
  assert raised is not None and raised.errno == errno.ENOSPC
  def close():
    try:
      writer.close()
    except OSError:  # the events it could not write: said by the error above already
      pass

  closing = threading.Thread(target=close)
  closing.start()
  closing.join(10)
  assert not closing.is_alive()
