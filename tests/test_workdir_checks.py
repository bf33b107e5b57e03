"""Workdir checks: a run goes on only with its own model, data stream and history."""

import errno
import json
import logging
import os
import re
import socket

import pytest

from transformer import checkpoint, storage
from transformer.config import ModelConfig
from transformer.errors import ConfigError, RunError, TrainingError
from transformer.training import experiment, workdir_checks, writers

MODEL = ModelConfig(vocab_size=16, d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1,
                    num_decoder_layers=1, max_len=8)


def _config(**overrides):
  config = experiment.base_config()
  config.update({"checkpoint_every_steps": 3, "batch_size": 16, **overrides})
  return config


def _exp(config, model=MODEL):
  """The Experiment of `config` with `model`, as a checkpoint's record is read (no checks)."""
  return experiment.recorded(config, model)


def _metrics(workdir, last_step):
  with open(workdir / writers.METRICS_FILE, "w") as f:
    for step in range(1, last_step + 1):
      f.write(json.dumps({"step": step, "split": "train", "loss": 1.0}) + "\n")


def test_a_history_past_twice_the_checkpoint_interval_without_checkpoints_is_refused(tmp_path,
                                                                                      caplog):
  _metrics(tmp_path, 7)  # a save of step 3 was waited for before step 6's: it existed
  with pytest.raises(TrainingError, match="holds metrics up to step 7 but no checkpoint"):
    workdir_checks.check_history(str(tmp_path), _exp(_config()).loop)
  _metrics(tmp_path, 6)  # killed before the first checkpoint committed: restart from 0
  with caplog.at_level(logging.WARNING):
    workdir_checks.check_history(str(tmp_path), _exp(_config()).loop)
  assert "training from step 0; the metrics logged up to step 6 are written again" in caplog.text
  _metrics(tmp_path, 7)
  (tmp_path / checkpoint.CHECKPOINT_DIR / "6.nonfinite").mkdir(parents=True)
  workdir_checks.check_history(str(tmp_path), _exp(_config()).loop)  # set aside by the run


def test_the_data_stream_may_change_only_before_the_first_checkpoint(tmp_path):
  checkpoint.write_config(str(tmp_path), {"experiment": _config().to_dict(), "model": MODEL})
  other = _config(batch_size=32, packing="pack")
  workdir_checks.check_resumable(str(tmp_path), _exp(other), has_checkpoints=False)
  with pytest.raises(TrainingError, match=r"another data stream \(batch_size 16 -> 32, packing "
                     r"'none' -> 'pack'\)"):
    workdir_checks.check_resumable(str(tmp_path), _exp(other), has_checkpoints=True)
  wider = ModelConfig(**{**MODEL.to_dict(), "d_model": 64})
  with pytest.raises(TrainingError, match="different model .*d_model 32 -> 64"):
    workdir_checks.check_resumable(str(tmp_path), _exp(_config(), wider), has_checkpoints=False)
  workdir_checks.check_resumable(str(tmp_path), _exp(_config(allow_model_change=True), wider),
                                 True)


def test_a_resume_with_other_settings_is_refused_naming_them(tmp_path, caplog):
  """Round 6, item 1: a copied run resumed at another rate, schedule and label smoothing went
  on without a word, and its metrics.jsonl mixed two loss definitions."""
  checkpoint.write_config(str(tmp_path), {"experiment": _config().to_dict(), "model": MODEL})
  other = _config(num_train_steps=45, learning_rate=0.5, schedule="constant",
                  label_smoothing=0.0, fsdp=2, log_every_steps=7)  # longer, watched otherwise
  with pytest.raises(TrainingError, match=r"^Workdir .* was trained with other settings "
                     r"\(label_smoothing 0.1 -> 0.0, learning_rate .* -> 0.5, schedule 'rsqrt' "
                     r"-> 'constant'\); .*--config.allow_config_change=True"):
    workdir_checks.check_resumable(str(tmp_path), _exp(other), has_checkpoints=True)
  workdir_checks.check_resumable(str(tmp_path), _exp(_config(num_train_steps=45, fsdp=2,
                                                             log_every_steps=7)), True)
  other.allow_config_change = True
  with caplog.at_level(logging.WARNING):
    workdir_checks.check_resumable(str(tmp_path), _exp(other), has_checkpoints=True)
  assert "allow_config_change=True: resuming with this run's" in caplog.text
  # The record of the resumed run names the changes, after those of earlier resumes.
  history = workdir_checks.resume_history(str(tmp_path), _exp(other), 30)
  assert history == [{"step": 30, "changes": ["label_smoothing 0.1 -> 0.0",
                                              f"learning_rate {_config().learning_rate!r} -> 0.5",
                                              "schedule 'rsqrt' -> 'constant'"]}]
  checkpoint.write_config(str(tmp_path), {"experiment": other.to_dict(), "model": MODEL,
                                          workdir_checks.CHANGED_ON_RESUME: history})
  again = _config(num_train_steps=45, learning_rate=0.25, schedule="constant",
                  label_smoothing=0.0)
  assert workdir_checks.resume_history(str(tmp_path), _exp(again), 40) == history + [
      {"step": 40, "changes": ["learning_rate 0.5 -> 0.25"]}]


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
  # The disk of the file that failed, where the error names one: a TFDS shard elsewhere (its
  # text says so), not the workdir's.
  tfds = ValueError('Failed to finalize writing of split "train": write() failed: No space left '
                    "on device; writing /data/tfds/synthetic/1.0.0/train.array_record-00000")
  assert str(workdir_checks.disk_full_error("/w", tfds)).startswith(
      "No space left on the disk of /data/tfds/synthetic/1.0.0/train.array_record-00000 (")


def test_an_unwritable_workdir_is_one_line(tmp_path):
  (tmp_path / "afile").write_text("x")
  with pytest.raises(TrainingError, match="is not writable"):
    workdir_checks.check_workdir(str(tmp_path / "afile" / "sub"))
  assert workdir_checks.check_workdir(str(tmp_path / "new")) is True
  assert workdir_checks.check_workdir(str(tmp_path / "new")) is False


def test_the_probe_file_never_stays_behind_and_a_full_disk_is_said(tmp_path, monkeypatch):
  def full_disk_write(path, text, *args, **kwargs):  # the probe is made, its write fails
    open(path, "w").close()
    raise OSError(errno.ENOSPC, "No space left on device")

  monkeypatch.setattr(type(storage.as_path(str(tmp_path))), "write_text", full_disk_write)
  with pytest.raises(TrainingError, match=f"^No space left on the disk of {tmp_path}"):
    workdir_checks.check_workdir(str(tmp_path))
  assert list(tmp_path.iterdir()) == []  # no .write-test-PID


def test_a_workdir_in_use_is_refused_naming_its_holder(tmp_path):
  workdir = str(tmp_path)
  with workdir_checks.workdir_lock(workdir):
    with pytest.raises(TrainingError, match=rf"^Workdir {workdir} is in use by another run "
                       rf"\(process {os.getpid()} on {socket.gethostname()}, since .*\); wait "
                       "for it to end, or pass another --workdir."):
      with workdir_checks.workdir_lock(workdir):
        pass
  with workdir_checks.workdir_lock(workdir):  # released with the run
    assert {p.name for p in tmp_path.iterdir()} == {"train.lock", "train.lock.holder"}
  assert list(tmp_path.iterdir()) == []  # a run that ended leaves no lock file
  (tmp_path / "kept").write_text("x")
  workdir_checks.remove_if_empty(workdir)
  assert tmp_path.exists()
  (tmp_path / "kept").unlink()
  workdir_checks.remove_if_empty(workdir)
  assert not tmp_path.exists()


def _recorded_run(workdir, config, **identity):
  """config.json of a run of `config` in workdir with its identity (as the loop records it)."""
  recorded = {**workdir_checks.run_identity(_exp(config).data, str(workdir), 1), **identity}
  checkpoint.write_config(str(workdir), {"experiment": config.to_dict(), "model": MODEL,
                                         checkpoint.IDENTITY_KEY: recorded})


def test_other_data_files_a_swapped_tokenizer_or_another_process_count_are_refused(tmp_path):
  data = tmp_path / "d.txt"
  data.write_text("first text\n\nof the run\n")
  workdir = tmp_path / "w"
  workdir.mkdir()
  (workdir / "tokenizer.model").write_bytes(b"run A's pieces")
  config = _config(dataset="text_files", data_files=str(data))
  _recorded_run(workdir, config)

  def check(config=config, processes=1):
    identity = workdir_checks.run_identity(_exp(config).data, str(workdir), processes)
    return workdir_checks.check_resumable(str(workdir), _exp(config), True, identity)

  assert check() is False
  os.utime(data, (1, 1))  # touched: the same text
  assert check() is False
  with pytest.raises(TrainingError, match=r"another data stream \(text_split 'paragraph' -> "
                     r"'line'\).*allow_data_change=True"):
    check(_config(dataset="text_files", data_files=str(data), text_split="line"))
  data.write_text("other text\n\naltogether\n")
  with pytest.raises(TrainingError, match=rf"another data stream \(data_files: {data} changed\)"):
    check()
  assert check(_config(dataset="text_files", data_files=str(data), allow_data_change=True))
  data.write_text("first text\n\nof the run\n")
  (workdir / "tokenizer.model").write_bytes(b"run B's pieces")  # cp runB/tokenizer.model runA/
  with pytest.raises(TrainingError, match=r"the workdir's tokenizer file is not the one it was "
                     r"trained with \(tokenizer.model:\w+ -> tokenizer.model:\w+\)"):
    check()
  (workdir / "tokenizer.model").write_bytes(b"run A's pieces")
  with pytest.raises(TrainingError, match=r"another data stream \(process count 1 -> 2\); .*"
                     "resume with the same settings"):
    check(processes=2)


@pytest.mark.parametrize("config_json", [None, "{}", "{", "[1, 2]", '{"experiment": 5}'])
def test_the_checkpoints_config_is_the_reference_whatever_config_json_holds(tmp_path,
                                                                             config_json):
  """config.json deleted, emptied, damaged or replaced: the checkpoint's stored config, which
  no one edits, still refuses a changed run."""
  import jax.numpy as jnp
  resolved = {"experiment": _config().to_dict(), "model": MODEL}
  with checkpoint.Checkpointer(str(tmp_path), async_save=False) as ckpt:
    ckpt.save(3, {"w": jnp.ones(2)}, config=resolved)
  if config_json is not None:
    (tmp_path / checkpoint.CONFIG_FILE).write_text(config_json)
  with pytest.raises(TrainingError, match=r"another data stream \(batch_size 16 -> 32\)"):
    workdir_checks.check_resumable(str(tmp_path), _exp(_config(batch_size=32)), True)
  wider = ModelConfig(**{**MODEL.to_dict(), "d_model": 64})
  with pytest.raises(TrainingError, match="different model .*d_model 32 -> 64"):
    workdir_checks.check_resumable(str(tmp_path), _exp(_config(), wider), True)


@pytest.mark.parametrize("config_json, said", [
    ("{", "is not valid JSON"), ("[1, 2]", r"is not a config this package wrote \(it holds "
                                           r"list \[1, 2\]\)"),
    ('{"experiment": 5}', r"is not a config this package wrote \(it holds dict"),
    # An emptied model config listed its 35 fields as "None -> ..." changes of the model.
    ('{"experiment": {}, "model": {}}', r"is not a config this package wrote"),
    ('{"experiment": {"model": 5}}', r"is not a config this package wrote")])
def test_before_any_checkpoint_a_damaged_config_json_is_one_line(tmp_path, config_json, said):
  (tmp_path / checkpoint.CONFIG_FILE).write_text(config_json)
  with pytest.raises(RunError, match=said):
    workdir_checks.check_resumable(str(tmp_path), _exp(_config()), False)


@pytest.mark.parametrize("field, value, said", [
    ("seed", 7, "seed 0 -> 7"), ("split_seed", 3, "split_seed None -> 3"),
    ("max_len", 64, "max_len 32 -> 64"), ("synthetic.num_train", 3000,
                                           "synthetic.num_train 20000 -> 3000"),
    ("synthetic.seed", 5, "synthetic.seed 0 -> 5"), ("tokenizer.vocab_size", 400,
                                                      "tokenizer.vocab_size 8000 -> 400")])
def test_a_resume_that_would_read_other_examples_is_refused_naming_the_field(tmp_path, field,
                                                                              value, said):
  """The seed (data order, and a local corpus's split unless split_seed is set), the split
  seed, the row length, the synthetic task's fields, the tokenizer's settings."""
  _recorded_run(tmp_path, _config())
  config = _config()
  config.update_from_flattened_dict({field: value})
  with pytest.raises(TrainingError, match=rf"another data stream \({said}\)"):
    workdir_checks.check_resumable(str(tmp_path), _exp(config), True,
                                   workdir_checks.run_identity(_exp(config).data, str(tmp_path), 1))


def test_a_checkpoint_past_num_train_steps_is_refused(tmp_path):
  steps = lambda n: _exp(_config(num_train_steps=n)).optimization  # noqa: E731
  workdir_checks.check_steps(str(tmp_path), steps(40), [20, 40])
  with pytest.raises(TrainingError, match=r"holds a checkpoint at step 40, past "
                     r"num_train_steps=20; pass --config.num_train_steps=40 or more"):
    workdir_checks.check_steps(str(tmp_path), steps(20), [20, 40])


def test_a_directory_where_a_run_writes_a_file_is_one_line(tmp_path):
  """Round 6, item 10: a directory named metrics.jsonl or config.json in the workdir gave
  IsADirectoryError, and --config.tfds_data_dir=FILE NotADirectoryError."""
  from transformer.data import settings
  for name in (writers.METRICS_FILE, checkpoint.CONFIG_FILE):
    workdir = tmp_path / name.split(".")[0]
    (workdir / name).mkdir(parents=True)
    with pytest.raises(ConfigError, match=rf"{name} is a directory, where the run writes its "
                       rf"{name} file; move it away"):
      workdir_checks.check_workdir(str(workdir))
  (tmp_path / "file").write_text("x")
  with pytest.raises(ConfigError, match=r"^--config.tfds_data_dir=.*file is a file; TFDS keeps"):
    experiment.parse(_config(tfds_data_dir=str(tmp_path / "file")))
  with pytest.raises(ConfigError, match=r"^--tfds_data_dir=.*file is a file"):
    settings.check_tfds_data_dir(str(tmp_path / "file"), "--tfds_data_dir")


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_extending_a_run_whose_schedule_decays_over_its_steps_is_refused(tmp_path, caplog,
                                                                         schedule):
  """Round 7, item 1: a cosine run extended from 20 to 40 steps went from 4.1e-5 at step 20
  back to 5.6e-4 at step 30, unsaid, and its record read as one longer cosine run."""
  _recorded_run(tmp_path, _config(schedule=schedule, num_train_steps=20))
  longer = _config(schedule=schedule, num_train_steps=40)
  with pytest.raises(TrainingError, match=rf"^Workdir .* was trained on the '{schedule}' "
                     r"schedule, which decays over num_train_steps=20: num_train_steps=40 would "
                     r"change its rate .*--config.schedule=constant or rsqrt.*"
                     r"--config.allow_config_change=True .*changed_on_resume\)\.$") as e:
    workdir_checks.check_resumable(str(tmp_path), _exp(longer), has_checkpoints=True)
  assert "\n" not in str(e.value)
  longer.allow_config_change = True
  with caplog.at_level(logging.WARNING):
    workdir_checks.check_resumable(str(tmp_path), _exp(longer), has_checkpoints=True)
  assert "num_train_steps 20 -> 40" in caplog.text
  assert workdir_checks.resume_history(str(tmp_path), _exp(longer), 20) == [
      {"step": 20, "changes": ["num_train_steps 20 -> 40"]}]
  # Fewer steps than its checkpoint: its own length is the way on, not "N or more".
  with pytest.raises(TrainingError, match=r"pass --config.num_train_steps=20 \(the length its "
                     rf"'{schedule}' schedule decays over\) to continue it"):
    shorter = _exp(_config(schedule=schedule, num_train_steps=10)).optimization
    workdir_checks.check_steps(str(tmp_path), shorter, [20])


@pytest.mark.parametrize("schedule", ["rsqrt", "constant"])
def test_a_schedule_that_does_not_decay_extends_as_before(tmp_path, caplog, schedule):
  _recorded_run(tmp_path, _config(schedule=schedule, num_train_steps=20))
  longer = _config(schedule=schedule, num_train_steps=40)
  with caplog.at_level(logging.WARNING):
    assert workdir_checks.check_resumable(str(tmp_path), _exp(longer), True) is False
  assert not caplog.text and workdir_checks.resume_history(str(tmp_path), _exp(longer), 20) == []


def test_every_change_a_resume_accepts_is_warned_once_and_recorded(tmp_path, caplog):
  """Round 7, item 3: a model change under allow_model_change went on unwarned, and neither it
  nor a data change under allow_data_change was in the record (dropout 0.1 -> 0.3 tried); a
  seed change changes the dropout masks too."""
  _recorded_run(tmp_path, _config())
  config = _config(seed=7, learning_rate=0.5, allow_model_change=True,
                   allow_config_change=True, allow_data_change=True)
  dropout = ModelConfig(**{**MODEL.to_dict(), "dropout_rate": 0.3})
  with caplog.at_level(logging.WARNING):
    assert workdir_checks.check_resumable(str(tmp_path), _exp(config, dropout), True) is True
  [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
  for said in ("dropout_rate 0.1 -> 0.3; allow_model_change=True",
               "learning_rate", "seed 0 -> 7", "allow_data_change=True",
               "the seed also draws the dropout masks", "changed_on_resume"):
    assert said in warning, said
  history = workdir_checks.resume_history(str(tmp_path), _exp(config, dropout), 30, {})
  assert history == [{"step": 30, "changes": [
      "model.dropout_rate 0.1 -> 0.3", f"learning_rate {_config().learning_rate!r} -> 0.5",
      "seed 0 -> 7 (the data order and the dropout masks)"]}]


@pytest.mark.parametrize("field, value", [("train_split", "train[:50%]"),
                                          ("source_lang", "fr"), ("target_lang", "de")])
def test_a_field_that_selects_the_streams_examples_is_a_data_stream_field(tmp_path, field, value):
  """Round 7, item 4: under allow_config_change a changed train split or language pair had
  the saved iterator position restored into other examples."""
  _recorded_run(tmp_path, _config())
  config = _config(allow_config_change=True, **{field: value})
  with pytest.raises(TrainingError, match=rf"another data stream \({field} .* -> "
                     rf"{re.escape(repr(value))}\).*allow_data_change=True"):
    workdir_checks.check_resumable(str(tmp_path), _exp(config), True,
                                   workdir_checks.run_identity(_exp(config).data, str(tmp_path), 1))


def test_a_max_len_change_is_refused_once_naming_both_flags(tmp_path):
  """Round 7, item 8: refused as a model change, then, allowed that, as a data change."""
  _recorded_run(tmp_path, _config())
  longer = ModelConfig(**{**MODEL.to_dict(), "max_len": 64})
  config = _config(max_len=64)
  with pytest.raises(TrainingError, match=r"^Workdir .* holds another run: a different model "
                     r"\(max_len 8 -> 64\); another data stream \(max_len 32 -> 64\); .*pass "
                     r"--config.allow_model_change=True and --config.allow_data_change=True "
                     r"to go on") as e:
    workdir_checks.check_resumable(str(tmp_path), _exp(config, longer), True)
  assert "\n" not in str(e.value)
  config.update(allow_model_change=True, allow_data_change=True)
  assert workdir_checks.check_resumable(str(tmp_path), _exp(config, longer), True) is True
