"""Finished steps and the one newest-readable rule that training, load_params and inference use."""

import logging

import pytest
from etils import epath

from transformer.checkpoint import step_dirs


def test_finished_steps_leave_out_unfinished_and_set_aside_steps(tmp_path):
  directory = step_dirs.checkpoint_dir(str(tmp_path))
  assert directory == epath.Path(tmp_path) / "checkpoints"
  assert step_dirs.finished_steps(directory) == []  # no directory yet
  for name in ("10", "2", "3.orbax-checkpoint-tmp-1700000000", "4.corrupt", "5.nonfinite"):
    (directory / name).mkdir(parents=True)
  assert step_dirs.finished_steps(directory) == [2, 10]


def _reader(damaged):
  def read(step):
    if step in damaged:
      raise OSError(f"step {step} is\nunreadable")
    return f"state {step}"
  return read


def test_newest_readable_skips_damaged_newer_steps_naming_each(caplog):
  set_aside = []
  with caplog.at_level(logging.WARNING):
    got = step_dirs.newest_readable([3, 1, 2], _reader({3, 2}), "ckpts",
                                    on_damaged=set_aside.append)
  assert got == ("state 1", 1) and set_aside == [3, 2]
  warnings = [r.getMessage() for r in caplog.records]
  assert len(warnings) == 2 and "ckpts/3 (OSError: step 3 is unreadable)" in warnings[0]


def test_an_incompatible_checkpoint_stops_at_once():
  def read(step):
    raise step_dirs.IncompatibleCheckpointError(f"step {step}: another model")
  with pytest.raises(step_dirs.IncompatibleCheckpointError, match="step 2"):
    step_dirs.newest_readable([1, 2], read, "ckpts")  # never falls back to step 1


def test_when_nothing_reads_one_error_names_the_steps_and_the_fix():
  with pytest.raises(RuntimeError) as e:
    step_dirs.newest_readable([1, 2], _reader({1, 2}), "ckpts")
  message = str(e.value)
  assert "None of the checkpoints [1, 2] in ckpts could be read" in message
  assert "step 1 is unreadable" in message and "move ckpts aside" in message


def test_one_line_folds_and_shortens_messages():
  assert step_dirs.one_line(ValueError("a\n  b\tc")) == "a b c"
  long = step_dirs.one_line(ValueError("x" * 400))
  assert len(long) == 300 and long.endswith("...")


def test_a_relative_workdir_gives_an_absolute_checkpoint_dir(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # orbax refuses relative paths: `--workdir=w` must still save
  assert str(step_dirs.checkpoint_dir("w")) == str(tmp_path / "w" / step_dirs.CHECKPOINT_DIR)
  assert str(step_dirs.checkpoint_dir("gs://b/w")).startswith("gs://b/w")
