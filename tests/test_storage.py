"""The path layer: atomic writes and appends on a local disk and on a real GCS (the emulator),
and a whole run in a gs:// workdir: trained, killed, resumed, then decoded, evaluated and
analysed there, with nothing written to the local disk."""

import errno
import os
import signal
import subprocess
import time

import jax
import numpy as np
import pytest

import script_starter
from conftest import (STRAIGHT_EVERY, STRAIGHT_STEPS, TRAIN, metric_records, script_env,
                      tiny_train_flags)
from transformer import checkpoint, storage
from transformer.research import analysis
from transformer.trained import evaluate
from transformer.training import writers


def test_a_write_that_fails_leaves_the_file_and_no_temporary_file(tmp_path, monkeypatch):
  path = tmp_path / "metrics.jsonl"
  path.write_text("kept\n")

  def full_disk(src, dst):
    raise OSError(errno.ENOSPC, "No space left on device")

  monkeypatch.setattr(storage.os, "replace", full_disk)
  with pytest.raises(OSError, match="No space left"):
    storage.write_atomically(str(path), "new\n")
  assert path.read_text() == "kept\n" and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_paths_keep_their_scheme_and_only_urls_are_remote(tmp_path):
  assert storage.join("gs://bucket/run", "eval", "3") == "gs://bucket/run/eval/3"
  assert storage.join(str(tmp_path), "a") == str(tmp_path / "a")
  assert not storage.is_local("gs://bucket/run") and storage.is_local(str(tmp_path))


@pytest.mark.parametrize("where", ["local", "gs"])
def test_appends_and_atomic_writes_read_back_on_disk_and_in_a_bucket(gcs, tmp_path, where):
  root = str(tmp_path) if where == "local" else f"gs://{gcs}/appends-{os.getpid()}"
  path = storage.join(root, "lines.txt")
  storage.as_path(root).mkdir(parents=True, exist_ok=True)
  storage.append_line(path, "one\n")
  storage.append_line(path, "two\n")
  assert storage.as_path(path).read_text() == "one\ntwo\n"
  storage.write_atomically(path, b"replaced")
  assert storage.as_path(path).read_bytes() == b"replaced"
  assert sorted(p.name for p in storage.as_path(root).iterdir()) == ["lines.txt"]


STEPS, EVERY = STRAIGHT_STEPS, STRAIGHT_EVERY  # the session's `straight` run is the same run
KILL_AFTER = 20  # a checkpoint step: the resume takes the newest whole checkpoint, 10 or 20


def _train(flags, cwd):
  return script_starter.start(TRAIN, flags, env=script_env(), cwd=cwd, stdout=subprocess.DEVNULL)


def _wait_for_metrics_step(workdir, step, proc, timeout=180):
  path = storage.as_path(storage.join(workdir, writers.METRICS_FILE))
  start = time.time()
  while time.time() - start < timeout and proc.poll() is None:
    if path.exists() and writers.last_step(workdir) >= step:  # objects are never torn
      return
    time.sleep(0.2)
  raise AssertionError(f"the run did not reach step {step}: {proc.poll()}")


@pytest.mark.slow
def test_a_gs_workdir_trains_is_killed_resumes_and_serves_every_reader(gcs, straight, tfds_dir,
                                                                       tmp_path):
  cwd = tmp_path / "cwd"  # the scripts' working directory: must stay empty
  cwd.mkdir()
  workdir = f"gs://{gcs}/run"
  flags = tiny_train_flags(tfds_dir, workdir, steps=STEPS, every=EVERY)
  killed = _train(flags, cwd)
  _wait_for_metrics_step(workdir, KILL_AFTER, killed)
  killed.send_signal(signal.SIGKILL)
  killed.wait(60)
  assert 0 < writers.last_step(workdir) < STEPS  # killed part-way
  resumed = _train(flags, cwd)
  _, err = resumed.communicate(timeout=300)
  assert resumed.returncode == 0, err[-2000:]
  assert "Resumed from step" in err

  # The same params, bit for bit, and the metrics of every step once, as an unbroken run.
  loaded = checkpoint.load_params(workdir)
  assert loaded.step == STEPS
  for a, b in zip(jax.tree_util.tree_leaves(checkpoint.load_params(str(straight)).params),
                  jax.tree_util.tree_leaves(loaded.params)):
    np.testing.assert_array_equal(a, b)
  assert metric_records(workdir) == metric_records(straight)
  events = list(storage.as_path(storage.join(workdir, "tensorboard")).iterdir())
  assert len(events) == 2 and all(e.stat().length > 0 for e in events)  # one file a run

  # The readers read from the bucket and write their outputs there.
  source = storage.join(workdir, "inputs.txt")
  storage.write_atomically(source, "a b c\nd e\n")
  evaluate.decode_file(workdir, source, storage.join(workdir, "outputs.txt"))
  assert len(storage.as_path(storage.join(workdir, "outputs.txt")).read_text().splitlines()) == 2
  results = evaluate.evaluate_workdir(workdir, tfds_data_dir=tfds_dir)
  assert results["results_file"] == f"{workdir}/eval/{STEPS}/results.json"
  assert storage.as_path(results["results_file"]).exists()
  analysed = analysis.analyze(workdir, num_batches=1)
  plots = storage.as_path(storage.join(workdir, "plots"))
  assert {"analysis.json", "analysis.md", *analysed["plots"]} <= {p.name for p in plots.iterdir()}
  assert list(cwd.iterdir()) == []  # nothing landed in a local "gs:" directory


def test_data_files_in_a_bucket_are_found_read_and_fingerprinted_as_local_ones(gcs, tmp_path):
  from transformer.data import corpus_files
  texts = {"a.txt": "first line\n\nsecond paragraph\n", "b.txt": "other text\n"}
  root = f"gs://{gcs}/corpus-{os.getpid()}"
  for name, text in texts.items():
    storage.write_atomically(storage.join(root, name), text)
    (tmp_path / name).write_text(text)
  storage.write_atomically(storage.join(root, ".hidden"), "x")
  want = [f"{root}/a.txt", f"{root}/b.txt"]
  assert corpus_files.resolve_files(f"{root}/*.txt") == want  # a glob
  assert corpus_files.resolve_files(root) == want  # a directory: its files, not the dot file
  assert corpus_files.resolve_files(f"{root}/b.txt,{root}/a.txt") == want[::-1]  # a list
  with pytest.raises(FileNotFoundError, match="No file matches"):
    corpus_files.resolve_files(f"{root}/*.md")
  for name in texts:  # the content's fingerprint, wherever the file is
    assert corpus_files.content_fingerprint(f"{root}/{name}") == \
        corpus_files.content_fingerprint(str(tmp_path / name))
  assert corpus_files.documents(f"{root}/a.txt", "paragraph") == \
      [("first line", f"{root}/a.txt:1"), ("second paragraph", f"{root}/a.txt:3")]
  assert corpus_files.fingerprint(want) != corpus_files.fingerprint(want[:1])


def test_gs_paths_without_gcsfs_are_one_line_wherever_they_appear(tiny_config, tmp_path,
                                                                  monkeypatch):
  """Data files, the TFDS directory, decode's --input/--output and evaluate's --reference:
  an ImportError ('Please install gcsfs') deep in etils or TFDS before, now one line naming
  the flag, before any work (as a gs:// --workdir already was)."""
  from transformer.errors import ConfigError
  from transformer.training import experiment
  monkeypatch.setattr(storage, "_gcsfs_installed", lambda: False)
  said = r"is on GCS, which needs gcsfs: pip install -e '.\[gcs\]'.$"
  for field, value in (("tfds_data_dir", "gs://b/tfds"), ("data_files", "gs://b/*.txt"),
                       ("eval_files", ["a.txt", "gs://b/eval.txt"])):
    config = tiny_config.copy_and_resolve_references()
    config[field] = value
    with pytest.raises(ConfigError, match=rf"^--config.{field}=gs://b/\S+ {said}"):
      experiment.validate(config)
  local = tmp_path / "in.txt"
  local.write_text("a b\n")
  for flags, call in (
      ("--input=gs://b/in.txt", lambda: evaluate.decode_file("w", "gs://b/in.txt", "-")),
      ("--output=gs://b/out.txt", lambda: evaluate.decode_file("w", str(local), "gs://b/out.txt")),
      ("--reference=gs://b/ref.txt", lambda: evaluate.score_file("w", str(local), "gs://b/ref.txt"))):
    with pytest.raises(ConfigError, match=rf"^{flags} {said}"):
      call()


def test_a_data_file_on_gs_has_the_fingerprint_of_its_bytes(gcs, tmp_path):
  """corpus_files.content_fingerprint reads a gs:// object through storage (its local branch,
  os.stat, is never taken there): the same bytes give the local file's fingerprint, other
  bytes of the same length another one."""
  from transformer.data import corpus_files
  local = tmp_path / "a.txt"
  local.write_text("the same text\n")
  remote = f"gs://{gcs}/data/a.txt"
  storage.as_path(remote).write_text("the same text\n")
  assert corpus_files.content_fingerprint(remote) == corpus_files.content_fingerprint(str(local))
  other = f"gs://{gcs}/data/b.txt"
  storage.as_path(other).write_text("another text!\n")
  assert corpus_files.content_fingerprint(other) != corpus_files.content_fingerprint(remote)
