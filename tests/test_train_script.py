"""scripts/train.py as a user runs it: one-line errors, SIGKILL and SIGTERM, several processes."""

import os
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from conftest import REPO
from transformer import checkpoint
from transformer.training import writers

TRAIN = str(REPO / "scripts" / "train.py")
DEFAULT = str(REPO / "configs" / "default.py")


def _env(devices=1):
  return {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1",
          "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}


def _tiny_flags(tfds_dir, workdir, steps=40, every=10):
  """The flags that shrink configs/default.py to the conftest's tiny experiment."""
  return [f"--config={DEFAULT}", f"--workdir={workdir}", f"--config.tfds_data_dir={tfds_dir}",
          "--config.model.d_model=32", "--config.model.num_heads=2", "--config.model.d_ff=64",
          "--config.model.num_encoder_layers=1", "--config.model.num_decoder_layers=1",
          "--config.synthetic.vocab_size=8", "--config.synthetic.min_len=2",
          "--config.synthetic.max_len=8", "--config.synthetic.num_train=512",
          "--config.synthetic.num_eval=40", "--config.max_len=9", "--config.batch_size=16",
          f"--config.num_train_steps={steps}", "--config.warmup_steps=5",
          "--config.log_every_steps=1", f"--config.eval_every_steps={steps}",
          f"--config.checkpoint_every_steps={every}"]


def _run(args, devices=1, **kw):
  return subprocess.run([sys.executable, TRAIN, *args], env=_env(devices), cwd=REPO,
                        capture_output=True, text=True, timeout=300, **kw)


def _params(workdir):
  return jax.tree_util.tree_leaves(checkpoint.load_params(str(workdir))[0])


def _wait_for_step(workdir, step, proc, timeout=120):
  path = os.path.join(workdir, writers.METRICS_FILE)
  start = time.time()
  while time.time() - start < timeout and proc.poll() is None:
    if os.path.exists(path):
      with open(path) as f:
        lines = f.read().splitlines()
      if len(lines) >= step:
        return
    time.sleep(0.02)
  raise AssertionError(f"the run did not reach step {step}: {proc.poll()}")


@pytest.mark.parametrize("flag, words", [
    ("--config.batchsize=32", ["error:", "batchsize", "batch_size"]),
    ("--config.dataset=nope", ["error:", "Unknown dataset 'nope'"]),
    ("--config.model.posemb=alibi", ["error:", "posemb", "'rope'"]),
])
def test_mistakes_give_one_line_not_a_traceback(tfds_dir, tmp_path, flag, words):
  result = _run([*_tiny_flags(tfds_dir, tmp_path / "w"), flag])
  assert result.returncode != 0
  assert "Traceback" not in result.stderr
  last = result.stderr.strip().splitlines()[-1]
  for word in words:
    assert word in last, result.stderr[-2000:]


def test_sigkill_then_restart_equals_an_uninterrupted_run(tfds_dir, tmp_path):
  straight, killed = tmp_path / "straight", tmp_path / "killed"
  assert _run(_tiny_flags(tfds_dir, straight, steps=60), devices=2).returncode == 0
  proc = subprocess.Popen([sys.executable, TRAIN, *_tiny_flags(tfds_dir, killed, steps=60)],
                          env=_env(2), cwd=REPO, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
  _wait_for_step(str(killed), 27, proc)  # past the checkpoints of steps 10 and 20
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert max(checkpoint.Checkpointer(str(killed)).all_steps()) < 60
  assert _run(_tiny_flags(tfds_dir, killed, steps=60), devices=2).returncode == 0
  for a, b in zip(_params(straight), _params(killed)):
    np.testing.assert_array_equal(a, b)  # bitwise
  # The same batches: every step's loss is the same as the uninterrupted run's.
  assert ([r["loss"] for r in writers.read_metrics(str(killed), "train")] ==
          [r["loss"] for r in writers.read_metrics(str(straight), "train")])


def test_sigterm_saves_the_step_reached_and_exits_zero(tfds_dir, tmp_path):
  workdir = tmp_path / "w"
  flags = _tiny_flags(tfds_dir, workdir, steps=100000, every=100000)
  proc = subprocess.Popen([sys.executable, TRAIN, *flags], env=_env(), cwd=REPO,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  _wait_for_step(str(workdir), 15, proc)
  proc.send_signal(signal.SIGTERM)
  _, err = proc.communicate(timeout=120)
  assert proc.returncode == 0, err[-2000:]
  steps = checkpoint.Checkpointer(str(workdir)).all_steps()
  assert len(steps) == 1 and steps[0] >= 15
  reached = steps[0]
  flags = _tiny_flags(tfds_dir, workdir, steps=reached + 3, every=100000)
  result = _run(flags)
  assert result.returncode == 0, result.stderr[-2000:]
  assert f"Resumed from step {reached}" in result.stderr
  logged = [r["step"] for r in writers.read_metrics(str(workdir), "train")]
  assert logged == list(range(1, reached + 4))


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_two_processes_train_like_one_process_with_as_many_devices(tfds_dir, tmp_path):
  flags = lambda w: _tiny_flags(tfds_dir, w, steps=5, every=5)  # noqa: E731
  single = _run(flags(tmp_path / "single"), devices=4)
  assert single.returncode == 0, single.stderr[-2000:]
  port = _free_port()
  procs = [subprocess.Popen(
      [sys.executable, TRAIN, *flags(tmp_path / "multi"), f"--coordinator_address=127.0.0.1:{port}",
       "--num_processes=2", f"--process_id={i}"], env=_env(2), cwd=REPO,
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(2)]
  for p in procs:
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]
  np.testing.assert_allclose([r["loss"] for r in writers.read_metrics(str(tmp_path / "multi"), "train")],
                             [r["loss"] for r in writers.read_metrics(str(tmp_path / "single"), "train")],
                             rtol=1e-5)
