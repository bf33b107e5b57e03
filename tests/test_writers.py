"""metrics.jsonl and TensorBoard files; a resumed run rewrites what came after its checkpoint."""

import math

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
