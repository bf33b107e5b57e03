"""Workdir checks: a run goes on only with its own model, data stream and history."""

import errno
import json
import logging

import pytest

from transformer import checkpoint
from transformer.config import ModelConfig
from transformer.errors import TrainingError
from transformer.training import experiment, workdir_checks, writers

MODEL = ModelConfig(vocab_size=16, d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1,
                    num_decoder_layers=1, max_len=8)


def _config(**overrides):
  config = experiment.base_config()
  config.update({"checkpoint_every_steps": 3, "batch_size": 16, **overrides})
  return config


def _metrics(workdir, last_step):
  with open(workdir / writers.METRICS_FILE, "w") as f:
    for step in range(1, last_step + 1):
      f.write(json.dumps({"step": step, "split": "train", "loss": 1.0}) + "\n")


def test_a_history_past_twice_the_checkpoint_interval_without_checkpoints_is_refused(tmp_path,
                                                                                      caplog):
  _metrics(tmp_path, 7)  # a save of step 3 was waited for before step 6's: it existed
  with pytest.raises(TrainingError, match="holds metrics up to step 7 but no checkpoint"):
    workdir_checks.check_history(str(tmp_path), _config())
  _metrics(tmp_path, 6)  # killed before the first checkpoint committed: restart from 0
  with caplog.at_level(logging.WARNING):
    workdir_checks.check_history(str(tmp_path), _config())
  assert "training from step 0; the metrics logged up to step 6 are written again" in caplog.text
  _metrics(tmp_path, 7)
  (tmp_path / checkpoint.CHECKPOINT_DIR / "6.nonfinite").mkdir(parents=True)
  workdir_checks.check_history(str(tmp_path), _config())  # set aside by the run itself


def test_the_data_stream_may_change_only_before_the_first_checkpoint(tmp_path):
  checkpoint.write_config(str(tmp_path), {"experiment": _config().to_dict(), "model": MODEL})
  other = _config(batch_size=32, packing="pack")
  workdir_checks.check_resumable(str(tmp_path), other, MODEL, has_checkpoints=False)
  with pytest.raises(TrainingError, match=r"another data stream \(batch_size 16 -> 32, packing "
                     r"'none' -> 'pack'\)"):
    workdir_checks.check_resumable(str(tmp_path), other, MODEL, has_checkpoints=True)
  wider = ModelConfig(**{**MODEL.to_dict(), "d_model": 64})
  with pytest.raises(TrainingError, match="different model .*d_model 32 -> 64"):
    workdir_checks.check_resumable(str(tmp_path), _config(), wider, has_checkpoints=False)
  workdir_checks.check_resumable(str(tmp_path), _config(allow_model_change=True), wider, True)


def test_a_full_disk_is_recognised_behind_other_errors():
  assert workdir_checks.disk_full(OSError(errno.ENOSPC, "No space left on device"))
  assert workdir_checks.disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
  try:
    try:
      raise OSError(errno.ENOSPC, "No space left on device")
    except OSError as inner:
      raise ValueError("orbax: could not commit step 20") from inner
  except ValueError as outer:
    assert workdir_checks.disk_full(outer)
  assert workdir_checks.disk_full(RuntimeError("tensorstore: No space left on device [28]"))
  assert not workdir_checks.disk_full(OSError(errno.EACCES, "Permission denied"))
  message = str(workdir_checks.disk_full_error("/w", OSError(errno.ENOSPC, "No space")))
  assert message.startswith("No space left on the disk of /w") and "rerun the same command" in (
      message)


def test_an_unwritable_workdir_is_one_line(tmp_path):
  (tmp_path / "afile").write_text("x")
  with pytest.raises(TrainingError, match="is not writable"):
    workdir_checks.check_workdir(str(tmp_path / "afile" / "sub"))
  assert workdir_checks.check_workdir(str(tmp_path / "new")) is True
  assert workdir_checks.check_workdir(str(tmp_path / "new")) is False
