"""scripts/train.py as a user runs it: one-line errors, SIGKILL and SIGTERM, several processes."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import jax
import numpy as np
import pytest

import script_starter
from conftest import (REPO, STRAIGHT_EVERY as EVERY, STRAIGHT_STEPS as STEPS, TRAIN, made_once,
                      metric_records as _records, script_env as _env,
                      tiny_train_flags as _tiny_flags)
from transformer import checkpoint
from transformer.training import writers

def _run(args, devices=1):
  return script_starter.run(TRAIN, args, env=_env(devices), cwd=REPO)


def _params(workdir):
  return jax.tree_util.tree_leaves(checkpoint.load_params(str(workdir))[0])


def _wait_for_step(workdir, step, proc, timeout=120):
  """Waits until this run has logged `step` (a complete line of metrics.jsonl says so). Lines
  an earlier, killed run left do not count: a rerun first writes the file anew (a new file
  replaces it, after its signal handlers are set), so only lines of the new file count."""
  path = os.path.join(workdir, writers.METRICS_FILE)
  before = os.stat(path).st_ino if os.path.exists(path) else None
  start = time.time()
  while time.time() - start < timeout and proc.poll() is None:
    if os.path.exists(path) and os.stat(path).st_ino != before:
      with open(path) as f:
        lines = f.read().split("\n")[:-1]  # the last piece may be a line being written
      if lines and json.loads(lines[-1])["step"] >= step:
        return
    time.sleep(0.02)
  raise AssertionError(f"the run did not reach step {step}: {proc.poll()}")


@pytest.mark.parametrize("flag, words", [
    ("--config.batchsize=32", ["error:", "batchsize", "batch_size"]),
    ("--config.dataset=nope", ["error:", "Unknown dataset 'nope'"]),
    ("--config.model.posemb=alibi", ["error:", "posemb", "'rope'"]),
    # ml_collections' own cause, not "The flag 'config.batch_size' is defined twice".
    ("--config.batch_size=abc", ["error:", "--config.batch_size=abc",
                                 "invalid literal for int() with base 10: 'abc'"]),
])
def test_mistakes_give_one_line_not_a_traceback(tfds_dir, tmp_path, flag, words):
  result = _run([*_tiny_flags(tfds_dir, tmp_path / "w"), flag])
  assert result.returncode != 0
  assert "Traceback" not in result.stderr and result.stderr.count("error:") == 1  # said once
  last = result.stderr.strip().splitlines()[-1]
  for word in words:
    assert word in last, result.stderr[-2000:]
  assert not (tmp_path / "w").exists()  # nothing written before the mistake was found


def test_a_missing_config_file_is_one_line_and_leaves_no_workdir(tmp_path):
  result = _run(["--config=configs/nope.py", f"--workdir={tmp_path / 'w'}"])
  assert result.returncode == 1 and "Traceback" not in result.stderr
  assert result.stderr.strip().splitlines()[-1] == (
      "error: --config=configs/nope.py does not exist; pass an existing config file such as "
      "configs/default.py.")
  assert not (tmp_path / "w").exists()


def _signal_while_stopped(procs, targets, sig):
  """Sends `sig` to `targets` while every one of `procs` is stopped (SIGSTOP, then SIGCONT):
  a run on a busy machine cannot step on between the test's look at its step and the
  signal, or finish before the signal arrives."""
  for p in procs:
    p.send_signal(signal.SIGSTOP)
  try:
    for p in targets:
      p.send_signal(sig)
  finally:
    for p in procs:
      if p.poll() is None:
        p.send_signal(signal.SIGCONT)


# Interruptions in turn (how, at the step reached), each followed by the same command again:
# every kind twice: before any checkpoint, before the first periodic one, between them.
INTERRUPTIONS = [("SIGKILL", 3), ("SIGINT", 6), ("torn", 0), ("SIGTERM", 13), ("SIGINT", 17),
                 ("SIGKILL", 26), ("torn", 0), ("SIGTERM", 33)]
EXIT_CODES = {"SIGINT": 130, "SIGTERM": 0, "SIGKILL": -9}


def test_interrupted_anywhere_and_rerun_equals_an_uninterrupted_run(straight, tfds_dir,
                                                                   tmp_path):
  workdir = tmp_path / "w"
  flags = _tiny_flags(tfds_dir, workdir, steps=STEPS, every=EVERY)
  for how, at in INTERRUPTIONS:
    if how == "torn":  # a kill or a full disk in the middle of appending a line
      with open(workdir / writers.METRICS_FILE, "a") as f:
        f.write('{"step": 99, "split": "tra')
      continue
    proc = script_starter.start(TRAIN, flags, env=_env(), cwd=REPO, stdout=subprocess.DEVNULL)
    _wait_for_step(str(workdir), at, proc)
    _signal_while_stopped([proc], [proc], getattr(signal, how))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == EXIT_CODES[how], err[-2000:]
    if how != "SIGKILL":  # saved at the step reached, said once, no traceback
      assert err.count(f"{how}: saved a checkpoint at step") == 1 and "Traceback" not in err
      assert max(checkpoint.Checkpointer(str(workdir)).all_steps()) >= at
  result = _run(flags)
  assert result.returncode == 0, result.stderr[-2000:]
  for a, b in zip(_params(straight), _params(workdir)):
    np.testing.assert_array_equal(a, b)  # bitwise
  assert _records(workdir) == _records(straight)  # every loss and accuracy, train and eval


def test_when_every_checkpoint_is_damaged_the_message_is_one_line(straight, tfds_dir, tmp_path):
  workdir = tmp_path / "w"
  shutil.copytree(straight, workdir)
  for step_dir in (workdir / "checkpoints").iterdir():
    (step_dir / "state" / "manifest.ocdbt").unlink()
  result = _run(_tiny_flags(tfds_dir, workdir, steps=STEPS, every=EVERY))
  assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("error: None of the checkpoints [20, 30, 40] in ") and (  # keep 3
      "move " in last), last


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _two_processes(flags, logs):
  """Starts scripts/train.py as processes 0 and 1 of one run, 2 CPU devices each; process I
  writes its stderr to logs/process_I.log (proc.log)."""
  logs.mkdir(parents=True, exist_ok=True)
  port = _free_port()
  procs = []
  for i in range(2):
    log = logs / f"process_{i}.log"
    log.write_text("")
    procs.append(script_starter.start(
        TRAIN, [*flags, f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
                f"--process_id={i}"], env=_env(2), cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=log))
    procs[-1].log = log
  return procs


def _finish(procs, timeout=300):
  """Waits up to `timeout` seconds in all for every process; each must exit 0. Returns their
  stderr; kills any left running."""
  deadline = time.monotonic() + timeout
  try:
    for i, p in enumerate(procs):
      try:
        p.wait(timeout=max(deadline - time.monotonic(), 0.1))
      except subprocess.TimeoutExpired:
        raise AssertionError(f"process {i} did not exit within {timeout} s; its log ends: "
                             f"{p.log.read_text()[-1500:]}") from None
      assert p.returncode == 0, p.log.read_text()[-3000:]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  return [p.log.read_text() for p in procs]


@pytest.mark.slow
def test_a_process_whose_peers_never_come_says_whom_it_waits_for_and_gives_up(tfds_dir,
                                                                               tmp_path):
  """Process 0 of 2 alone: it said nothing for 307 s, then aborted with a C++ stack."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  start = time.time()
  result = _run(_tiny_flags(tfds_dir, tmp_path / "w") + [
      f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2", "--process_id=0",
      "--distributed_timeout=3"])
  assert result.returncode == 1 and time.time() - start < 90
  assert f"Process 0 of 2: waiting up to 3 s for all 2 processes to join at 127.0.0.1:{port}" \
      in result.stderr
  assert result.stderr.strip().splitlines()[-1] == (
      f"error: process 0 of 2 waited 3 s at 127.0.0.1:{port} and not every process joined; "
      "start every process with the same --coordinator_address and --num_processes, each with "
      "its own --process_id.")
  assert not (tmp_path / "w").exists()


# The processes agree on the stop step through JAX's coordination service, whose notice has
# been seen to take 31 steps to arrive on a loaded machine (4 on 2026-11-28): each run has over
# twice that to stop in. Two processes on 2 cores train about 2 steps/s, so every step of the
# uninterrupted run and of the last resumed one counts (200 steps: 262 s; 80: about 150 s).
POD_STEPS = 80
# Which process a preemption reaches, run after run: the other one must stop at the same step
# (both reached at once is the easier case of the same agreement).
SIGNALLED = [(1,), (0,)]
# The uninterrupted run's mean loss over every 8 steps (a host sync across both processes at
# each log step, so not every step).
POD_LOG_EVERY = 8


def _pod_flags(tfds_dir, workdir, log_every=POD_STEPS + 1):
  """The two-process runs' flags: no log step and no checkpoint before the end by default."""
  return _tiny_flags(tfds_dir, workdir, steps=POD_STEPS, every=POD_STEPS, log_every=log_every)


@pytest.fixture(scope="session")
def pod_straight(tfds_dir, tmp_path_factory, worker_id):
  """Processes 0 and 1 of one run trained uninterrupted, its loss logged every POD_LOG_EVERY
  steps: what one process with as many devices must equal, and where a preempted run must
  end."""
  return made_once(tmp_path_factory, worker_id, "pod_straight", lambda path: _finish(
      _two_processes(_pod_flags(tfds_dir, path, log_every=POD_LOG_EVERY),
                     path.parent / "pod_straight_logs")))


def test_two_processes_train_like_one_process_with_as_many_devices(pod_straight, tfds_dir,
                                                                  tmp_path):
  single = _run(_pod_flags(tfds_dir, tmp_path / "single", log_every=POD_LOG_EVERY), devices=4)
  assert single.returncode == 0, single.stderr[-2000:]
  multi = [r["loss"] for r in writers.read_metrics(pod_straight, "train")]
  assert len(multi) == POD_STEPS // POD_LOG_EVERY
  np.testing.assert_allclose(
      multi, [r["loss"] for r in writers.read_metrics(str(tmp_path / "single"), "train")],
      rtol=1e-5)


def _wait_for_progress(proc, step, procs, timeout=120):
  """Waits until `proc`'s progress bar (tqdm, on its stderr) shows `step`: no log step, no
  periodic checkpoint needed."""
  start = time.time()
  while max(map(int, re.findall(r"\| *(\d+)/\d+ \[", proc.log.read_text())), default=0) < step:
    assert all(p.poll() is None for p in procs) and time.time() - start < timeout, \
        f"the run did not reach step {step}"
    time.sleep(0.05)


@pytest.mark.slow
def test_a_sigterm_to_any_process_stops_both_at_one_step_and_the_rerun_resumes(
    pod_straight, tfds_dir, tmp_path):
  """A pod's preemption: SIGTERM to process 1, then to process 0; no log step and no
  checkpoint in between (both are past the end). Each time both save the same step and exit 0;
  the runs resume one after the other and end where an uninterrupted run ends."""
  flags = lambda w: _pod_flags(tfds_dir, w)  # noqa: E731
  workdir = tmp_path / "w"
  saved = 0
  for run, signalled in enumerate(SIGNALLED):
    procs = _two_processes(flags(workdir), tmp_path / f"logs_{run}")
    _wait_for_progress(procs[0], saved + 2, procs)
    _signal_while_stopped(procs, [procs[i] for i in signalled], signal.SIGTERM)
    errs = _finish(procs, timeout=300)
    said = [re.search(r"SIGTERM: saved a checkpoint at step (\d+)", e) for e in errs]
    for i, found in enumerate(said):
      assert found, (f"run {run}: process {i} exited 0 without saying it saved at a SIGTERM "
                     f"(signalled: {signalled}); its log ends: {errs[i][-1500:]}")
    steps = {int(found.group(1)) for found in said}
    assert len(steps) == 1, f"run {run}: the processes stopped at different steps {steps}"
    step = steps.pop()
    assert saved < step < POD_STEPS and step in checkpoint.finished_steps(
        checkpoint.checkpoint_dir(str(workdir))), (step, saved)
    saved = step
  _finish(_two_processes(flags(workdir), tmp_path / "logs_end"))
  for a, b in zip(_params(pod_straight), _params(workdir)):
    np.testing.assert_array_equal(a, b)
