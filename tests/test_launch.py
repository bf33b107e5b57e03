"""The launch scripts: syntax, and what they run, with stub programs in place of the real ones.

local_multiprocess.sh really starts several JAX processes (a stub train script that joins them
with jax.distributed and runs a cross-process sum); tpu_vm.sh runs against a fake `gcloud` that
executes the workers' commands locally; slurm_gpu.sbatch runs against a fake `srun`.
Every subprocess gets its own environment: the XLA_FLAGS that conftest.py sets for pytest
itself must not leak into them unchecked.
"""

import json
import os
import pathlib
import re
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
LAUNCH = REPO / "launch"
SCRIPTS = [LAUNCH / "tpu_vm.sh", LAUNCH / "slurm_gpu.sbatch", LAUNCH / "local_multiprocess.sh"]
TIMEOUT = 120  # a safety net against hangs, not a performance assertion

STUB_TRAIN = '''
import argparse, os, sys, time

parser = argparse.ArgumentParser()
parser.add_argument("--coordinator_address")
parser.add_argument("--num_processes", type=int)
parser.add_argument("--process_id", type=int)
parser.add_argument("--workdir")
parser.add_argument("--fail_process", type=int, default=-1)
args, rest = parser.parse_known_args()
print("forwarded=" + "|".join(rest), flush=True)

if args.fail_process >= 0:  # failure mode: one process fails, the others wait forever
  if args.process_id == args.fail_process:
    time.sleep(0.5)
    print("stub: failing on purpose", flush=True)
    sys.exit(3)
  with open(os.path.join(args.workdir, f"pid_{args.process_id}"), "w") as f:
    f.write(str(os.getpid()))
  time.sleep(600)
  sys.exit(0)

import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

jax.distributed.initialize(coordinator_address=args.coordinator_address,
                           num_processes=args.num_processes, process_id=args.process_id)
mesh = Mesh(np.array(jax.devices()), ("data",))
local = np.arange(jax.local_device_count(), dtype=np.float32) + 10.0 * jax.process_index()
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), local)
total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(x)
print(f"process_index={jax.process_index()} process_count={jax.process_count()} "
      f"device_count={jax.device_count()} sum={float(total)}", flush=True)
'''


def _env(**overrides):
  env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "JAX_", "XLA_"))}
  env.update(overrides)
  return env


def _executable(path, text):
  path.write_text(textwrap.dedent(text).lstrip())
  path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
  return path


def _alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  # A zombie still answers kill(0); it has finished all the same.
  try:
    return pathlib.Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
  except OSError:
    return True


# --------------------------------------------------------------------------- syntax

@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bash_syntax(script):
  subprocess.run(["bash", "-n", str(script)], check=True, timeout=TIMEOUT)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_shellcheck():
  result = subprocess.run(["shellcheck", "--shell=bash", *map(str, SCRIPTS)],
                          capture_output=True, text=True, timeout=TIMEOUT)
  assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("argv", [
    ["launch/tpu_vm.sh", "--help"],
    ["launch/slurm_gpu.sbatch", "--help"],
    ["launch/local_multiprocess.sh", "-h"],
], ids=lambda a: a[0])
def test_usage(argv):
  result = subprocess.run(["bash", *argv], cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=TIMEOUT)
  assert result.returncode == 0, result.stderr
  assert result.stdout.startswith("Usage:")


# --------------------------------------------------------------------------- local_multiprocess.sh

@pytest.fixture
def stub_train(tmp_path):
  path = tmp_path / "stub_train.py"
  path.write_text(STUB_TRAIN)
  return path


def _local(stub, args, **env):
  return ["bash", str(LAUNCH / "local_multiprocess.sh"), *args], _env(
      PYTHON=sys.executable, TRAIN_SCRIPT=str(stub), **env)


def test_local_multiprocess_joins_processes(stub_train, tmp_path):
  workdir = tmp_path / "work"
  cmd, env = _local(stub_train, ["-n", "2", "-d", "2", "--", f"--workdir={workdir}",
                                 "--config.name=a b", "--config.num_train_steps=3"],
                    # As pytest's own: the script must replace this count with -d.
                    XLA_FLAGS="--xla_force_host_platform_device_count=8")
  result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
  logs = [(workdir / "logs" / f"process_{i}.log").read_text() for i in range(2)]
  assert result.returncode == 0, result.stderr + "\n".join(logs)
  sums = set()
  for i, log in enumerate(logs):
    line = next(logged for logged in log.splitlines() if logged.startswith("process_index="))
    fields = dict(kv.split("=") for kv in line.split())
    assert fields["process_index"] == str(i)
    assert fields["process_count"] == "2"
    assert fields["device_count"] == "4"
    sums.add(fields["sum"])
    assert "forwarded=--config.name=a b|--config.num_train_steps=3" in log
  assert sums == {"22.0"}  # (0 + 1) + (10 + 11): every process sees every process's data
  assert "process_index=0 process_count=2" in result.stdout  # process 0 on the terminal
  assert "process_index=1" not in result.stdout


def test_local_multiprocess_failure_stops_the_others(stub_train, tmp_path):
  workdir = tmp_path / "work"
  cmd, env = _local(stub_train, ["-n", "3", "--", f"--workdir={workdir}", "--fail_process=1"],
                    KILL_GRACE="5")
  result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
  assert result.returncode == 3, result.stdout + result.stderr
  assert "process 1 exited with status 3" in result.stderr
  assert "stub: failing on purpose" in (workdir / "logs" / "process_1.log").read_text()
  pids = [int((workdir / f"pid_{i}").read_text()) for i in (0, 2)]
  assert not any(_alive(pid) for pid in pids), "the other processes were left running"


# Runs argv[1:] with SIGINT at its default disposition or ignored (argv[0] = 'default' or
# 'ignore'), by exec, so the pid stays the launcher's. How the launcher inherits SIGINT decides
# whether Ctrl-C can reach it: a test suite started as a background job of a non-interactive
# shell (`pytest ... &` in a script, CI steps) runs with SIGINT ignored (POSIX: asynchronous
# commands ignore SIGINT when job control is off), Python and pytest-xdist keep that, and a
# non-interactive bash cannot trap a signal ignored on entry. That, not a timing race, made
# the interrupt test hang "flakily": it hung exactly when the suite was started that way.
WITH_SIGINT = ("import os, signal, sys; "
               "signal.signal(signal.SIGINT, signal.SIG_DFL if sys.argv[1] == 'default' "
               "else signal.SIG_IGN); os.execvp(sys.argv[2], sys.argv[2:])")


def _start_stubs(stub_train, tmp_path, sigint):
  workdir = tmp_path / "work"
  cmd, env = _local(stub_train, ["-n", "2", "--", f"--workdir={workdir}", "--fail_process=9"])
  proc = subprocess.Popen([sys.executable, "-c", WITH_SIGINT, sigint, *cmd], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  deadline = time.monotonic() + TIMEOUT
  while not all((workdir / f"pid_{i}").exists() for i in range(2)):
    assert proc.poll() is None, proc.communicate()
    assert time.monotonic() < deadline, "the processes never started"
    time.sleep(0.1)
  return proc, [int((workdir / f"pid_{i}").read_text()) for i in range(2)]


def _stop(proc, sig):
  try:
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=TIMEOUT)
    return err.decode()
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()


def test_local_multiprocess_interrupt_stops_all(stub_train, tmp_path):
  """Ctrl-C (SIGINT, at its default disposition, as from a terminal) stops every process."""
  proc, pids = _start_stubs(stub_train, tmp_path, "default")
  err = _stop(proc, signal.SIGINT)
  assert proc.returncode == 130, err
  assert "interrupted, stopping all processes" in err and "SIGINT is ignored" not in err
  assert not any(_alive(pid) for pid in pids)


def test_local_multiprocess_started_with_sigint_ignored_says_so_and_stops_on_sigterm(
    stub_train, tmp_path):
  """The hang's cause, reproduced: started with SIGINT ignored, the launcher cannot trap it.
  It warns at start, and SIGTERM (which no shell ignores for background jobs) stops all."""
  proc, pids = _start_stubs(stub_train, tmp_path, "ignore")
  proc.send_signal(signal.SIGINT)  # ignored, as POSIX asks: the job keeps running
  time.sleep(1.0)
  assert proc.poll() is None and all(_alive(pid) for pid in pids)
  err = _stop(proc, signal.SIGTERM)
  assert proc.returncode == 143, err
  assert "SIGINT is ignored in this shell" in err and f"kill {proc.pid}" in err
  assert not any(_alive(pid) for pid in pids)


def test_local_multiprocess_needs_a_workdir(stub_train):
  cmd, env = _local(stub_train, ["--", "--config=configs/default.py"])
  result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
  assert result.returncode == 2
  assert "--workdir" in result.stderr


# --------------------------------------------------------------------------- tpu_vm.sh

@pytest.fixture
def fake_gcloud(tmp_path):
  """A `gcloud` that records its arguments; scp copies into a fake worker home, ssh runs the
  command there with bash (one worker), where `python3` and `git` are stubs that record
  their arguments."""
  home = tmp_path / "worker_home"
  home.mkdir()
  fakebin = tmp_path / "fakebin"
  fakebin.mkdir()
  recorder = """
      #!/usr/bin/env bash
      printf '%s\\n' "$(printf '[%s]' "$@")" >> "$FAKE_PYTHON_LOG"
      """
  _executable(fakebin / "python3", """
      #!/usr/bin/env bash
      if [ -n "${FAKE_PYTHON_VERSION:-}" ]; then  # an older interpreter: fails the version check
        printf '%s\\n' "old $(printf '[%s]' "$@")" >> "$FAKE_PYTHON_LOG"
        if [ "$1" = -V ]; then echo "Python $FAKE_PYTHON_VERSION"; fi
        if [ -n "${FAKE_UV_WORKS:-}" ] && [ "$1 $2" = "-m pip" ]; then exit 0; fi
        if [ -n "${FAKE_UV_WORKS:-}" ] && [ "$1 $2 $3" = "-m uv venv" ]; then  # a recording venv
          mkdir -p "${!#}/bin" && printf '%s' "$FAKE_RECORDER" > "${!#}/bin/python"
          chmod +x "${!#}/bin/python"; exit 0
        fi
        exit 1
      fi
      printf '%s\\n' "$(printf '[%s]' "$@")" >> "$FAKE_PYTHON_LOG"
      """)
  _executable(fakebin / "git", """
      #!/usr/bin/env bash
      printf '%s\\n' "git $*" >> "$FAKE_PYTHON_LOG"
      if [ "$1" = clone ]; then mkdir -p "${!#}/.git"; fi
      """)
  gcloud = _executable(tmp_path / "gcloud", f"""
      #!{sys.executable}
      import json, os, shutil, subprocess, sys
      args = sys.argv[1:]
      with open(os.environ["FAKE_GCLOUD_LOG"], "a") as f:
        f.write(json.dumps(args) + "\\n")
      if args[:4] == ["compute", "tpus", "tpu-vm", "scp"]:
        shutil.copy(args[4], os.path.join({str(home)!r}, args[5].split(":", 1)[1]))
      elif args[:4] == ["compute", "tpus", "tpu-vm", "ssh"]:
        command = next(a.split("=", 1)[1] for a in args if a.startswith("--command="))
        env = dict(os.environ, HOME={str(home)!r},
                   PATH={str(fakebin)!r} + os.pathsep + os.environ["PATH"])
        sys.exit(subprocess.call(["bash", "-c", command], cwd={str(home)!r}, env=env))
      """)

  def run(*args, **env):
    full_env = _env(**{"GCLOUD": str(gcloud), "FAKE_GCLOUD_LOG": str(tmp_path / "gcloud.log"),
                       "FAKE_PYTHON_LOG": str(tmp_path / "python3.log"), "TPU_NAME": "my-tpu",
                       "FAKE_RECORDER": textwrap.dedent(recorder).lstrip(),
                       **env})
    result = subprocess.run(["bash", str(LAUNCH / "tpu_vm.sh"), *args], env=full_env,
                            capture_output=True, text=True, timeout=TIMEOUT)
    log = tmp_path / "gcloud.log"
    calls = [json.loads(call) for call in log.read_text().splitlines()] if log.exists() else []
    log.unlink(missing_ok=True)
    pylog = tmp_path / "python3.log"
    python_calls = pylog.read_text().splitlines() if pylog.exists() else []
    pylog.unlink(missing_ok=True)
    return result, calls, python_calls

  run.home = home
  return run


def test_tpu_vm_create_and_delete(fake_gcloud):
  result, calls, _ = fake_gcloud("create", ZONE="us-east5-a", PROJECT="proj",
                                 ACCELERATOR_TYPE="v6e-16", SPOT="1")
  assert result.returncode == 0, result.stderr
  assert calls == [["compute", "tpus", "tpu-vm", "create", "my-tpu", "--zone=us-east5-a",
                    "--project=proj", "--accelerator-type=v6e-16",
                    "--version=v2-alpha-tpuv6e", "--spot"]]
  result, calls, _ = fake_gcloud("create", ACCELERATOR_TYPE="v4-32")
  assert calls[0][5:] == ["--zone=europe-west4-b", "--accelerator-type=v4-32",
                          "--version=tpu-ubuntu2204-base"]
  result, calls, _ = fake_gcloud("delete")
  assert result.returncode == 0, result.stderr
  assert calls == [["compute", "tpus", "tpu-vm", "delete", "my-tpu", "--zone=europe-west4-b",
                    "--quiet"]]


def test_tpu_vm_setup_copies_checkout_and_installs(fake_gcloud):
  result, calls, python_calls = fake_gcloud("setup")
  assert result.returncode == 0, result.stderr
  scp, ssh = calls
  assert scp[:4] == ["compute", "tpus", "tpu-vm", "scp"]
  assert scp[5:] == ["my-tpu:transformer-src.tar.gz", "--zone=europe-west4-b", "--worker=all"]
  assert ssh[:5] == ["compute", "tpus", "tpu-vm", "ssh", "my-tpu"] and "--worker=all" in ssh
  checkout = fake_gcloud.home / "transformer"
  assert (checkout / "launch" / "tpu_vm.sh").exists() and (checkout / "setup.py").exists()
  assert not (fake_gcloud.home / "transformer-src.tar.gz").exists()
  assert python_calls[0] == "[-c][import sys; sys.exit(sys.version_info < (3, 11))]"
  assert python_calls[1] == "[-m][pip][install][--upgrade][pip]"
  assert python_calls[2].startswith("[-m][pip][install][-e][.[train,tpu]][-f]")
  assert python_calls[3].startswith("[-c][import jax; jax.distributed.initialize();")


def test_tpu_vm_setup_installs_a_python_3_11_where_the_image_has_an_older_one(fake_gcloud):
  result, _, python_calls = fake_gcloud("setup", FAKE_PYTHON_VERSION="3.10.12", FAKE_UV_WORKS="1")
  assert result.returncode == 0, result.stderr
  venv = fake_gcloud.home / "transformer" / ".venv"
  assert python_calls[:4] == ["old [-c][import sys; sys.exit(sys.version_info < (3, 11))]",
                              "old [-V]", "old [-m][pip][install][--user][--quiet][uv]",
                              f"old [-m][uv][venv][--seed][--python][3.11][{venv}]"]
  assert python_calls[4] == "[-m][pip][install][--upgrade][pip]"  # the venv's Python from here on
  assert python_calls[5].startswith("[-m][pip][install][-e][.[train,tpu]][-f]")
  assert "installing Python 3.11 with uv" in result.stderr
  result, _, python_calls = fake_gcloud("train", WORKDIR="gs://b/r")  # trains with it
  assert result.returncode == 0 and python_calls == ["[scripts/train.py]"
                                                     "[--config=configs/default.py]"
                                                     "[--workdir=gs://b/r]"]


def test_tpu_vm_setup_stops_at_an_old_python_it_cannot_replace_with_one_line(fake_gcloud):
  result, _, _ = fake_gcloud("setup", FAKE_PYTHON_VERSION="3.10.12")
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1].startswith("tpu_vm.sh: worker ")
  assert "Python 3.10.12 is older than Python 3.11, which the package needs, and installing one " \
         "with uv failed" in result.stderr
  assert not (fake_gcloud.home / "transformer" / "setup.py").exists()  # nothing unpacked


def test_tpu_vm_asks_for_the_python_setup_py_asks_for():
  script = (LAUNCH / "tpu_vm.sh").read_text()
  setup = (REPO / "setup.py").read_text()
  minimum = re.search(r"^MIN_PYTHON=(\S+)", script, re.M).group(1)
  assert f'python_requires=">={minimum}"' in setup


def test_tpu_vm_setup_from_git_url(fake_gcloud):
  result, calls, worker_calls = fake_gcloud("setup", REPO_URL="https://example.com/r.git",
                                            REPO_REF="v1")
  assert result.returncode == 0, result.stderr
  assert [c[3] for c in calls] == ["ssh"]  # no scp
  home = fake_gcloud.home
  assert worker_calls[1] == f"git clone --branch v1 https://example.com/r.git {home}/transformer"
  assert worker_calls[3].startswith("[-m][pip][install][-e][.[train,tpu]]")
  result, _, worker_calls = fake_gcloud("setup", REPO_URL="https://example.com/r.git")
  assert worker_calls[1] == f"git -C {home}/transformer pull --ff-only"  # a second setup pulls


def test_tpu_vm_train_runs_on_all_workers(fake_gcloud):
  (fake_gcloud.home / "transformer").mkdir()
  result, calls, python_calls = fake_gcloud(
      "train", "--config.name=a b", "--config.num_train_steps=10",
      WORKDIR="gs://bucket/runs/x", CONFIG="configs/base.py")
  assert result.returncode == 0, result.stderr
  assert len(calls) == 1 and "--worker=all" in calls[0]
  assert python_calls == ["[scripts/train.py][--config=configs/base.py]"
                          "[--workdir=gs://bucket/runs/x][--config.name=a b]"
                          "[--config.num_train_steps=10]"]
  assert "warning" not in result.stderr


def test_tpu_vm_train_detached_and_stop(fake_gcloud):
  (fake_gcloud.home / "transformer").mkdir()
  result, _, _ = fake_gcloud("train", WORKDIR="/tmp/local", DETACH="1")
  assert result.returncode == 0, result.stderr
  assert "gs://" in result.stderr  # a local workdir draws a warning
  assert (fake_gcloud.home / "train.pid").exists()
  assert (fake_gcloud.home / "train.log").exists()
  result, _, _ = fake_gcloud("stop")
  assert result.returncode == 0, result.stderr
  assert not (fake_gcloud.home / "train.pid").exists()


def _dry_run(script, *args, **env):
  result = subprocess.run(["bash", str(LAUNCH / script), *args], cwd=REPO,
                          env=_env(DRY_RUN="1", **env), capture_output=True, text=True,
                          timeout=TIMEOUT)
  assert result.returncode == 0, result.stderr
  return result.stdout.splitlines()


def _per_worker(lines, prefix, count):
  """The commands printed for workers (or tasks) 0..count-1: there must be exactly these."""
  listed = [line for line in lines if re.match(rf"{prefix} \d+: ", line)]
  assert [line.split(":", 1)[0] for line in listed] == [f"{prefix} {i}" for i in range(count)]
  return [line.split(": ", 1)[1] for line in listed]


def test_tpu_vm_dry_run_prints_what_every_worker_of_a_two_worker_slice_runs(tmp_path):
  env = dict(TPU_NAME="my-tpu", WORKERS="2", GCLOUD=str(tmp_path / "no-gcloud"))  # never run
  lines = _dry_run("tpu_vm.sh", "setup", **env)
  assert lines[0].startswith(f"{tmp_path}/no-gcloud compute tpus tpu-vm scp ")
  assert lines[1].startswith(f"{tmp_path}/no-gcloud compute tpus tpu-vm ssh my-tpu ")
  assert "--worker=all" in lines[1]
  setup = _per_worker(lines, "worker", 2)
  assert setup[0] == setup[1] and "sys.version_info < (3, 11)" in setup[0]
  assert r"$PY -m pip install -e .\[train\,tpu\] -f " in setup[0]  # the extras, as bash reads them
  lines = _dry_run("tpu_vm.sh", "train", "--config.num_train_steps=10", WORKDIR="gs://b/run x",
                   **env)
  train = _per_worker(lines, "worker", 2)
  assert train == [r"cd $HOME/transformer && PY=python3; if [ -x .venv/bin/python ]; then "
                   r"PY=.venv/bin/python; fi && $PY scripts/train.py "
                   r"--config=configs/default.py --workdir=gs://b/run\ x "
                   r"--config.num_train_steps=10"] * 2
  assert not list(tmp_path.iterdir())  # nothing was run


@pytest.mark.parametrize("command", ["setup", "train"])
def test_a_remote_dir_of_any_name_is_one_word_on_the_workers(tmp_path, command):
  """Round 6, item 5: REMOTE_DIR='t;touch X;#' made the printed worker command run `touch`,
  and REMOTE_DIR='my runs' broke `cd`. Each worker command is run here by bash, with HOME a
  folder of the test's and stubs for the programs it calls."""
  canary = tmp_path / "ran"
  home = tmp_path / "home"
  (home / "my runs").mkdir(parents=True)
  stubs = tmp_path / "bin"
  stubs.mkdir()
  for program in ("python3", "git", "tar"):  # each records where it ran, then succeeds
    _executable(stubs / program, f"""
        #!/usr/bin/env bash
        pwd >> {tmp_path / 'where'}
        """)
  env = dict(TPU_NAME="my-tpu", GCLOUD=str(tmp_path / "no-gcloud"), WORKDIR="gs://b/run")
  for remote_dir in (f"t;touch {canary};#", "my runs"):
    lines = _dry_run("tpu_vm.sh", command, REMOTE_DIR=remote_dir, **env)
    [worker] = _per_worker(lines, "worker", 1)
    (tmp_path / "where").unlink(missing_ok=True)
    (home / "transformer-src.tar.gz").write_bytes(b"")  # what setup's scp copied, then removes
    subprocess.run(["bash", "-c", worker], env=_env(HOME=str(home), PATH=f"{stubs}:/usr/bin:/bin"),
                   capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path)
    assert not canary.exists(), worker
    if remote_dir == "my runs":  # the last program ran in the folder, as one word
      assert (tmp_path / "where").read_text().splitlines()[-1] == str(home / "my runs"), worker


def test_slurm_dry_run_prints_what_every_task_runs_outside_slurm():
  lines = _dry_run("slurm_gpu.sbatch", "--config.seed=1", WORKDIR="gs://b/run", SLURM_NTASKS="2")
  command = ("python3 scripts/train.py --config=configs/default.py --workdir=gs://b/run "
             "--config.seed=1")
  assert f"srun --kill-on-bad-exit=1 --gpu-bind=none {command}" in lines
  assert _per_worker(lines, "task", 2) == [f"cd {REPO} && {command}"] * 2


@pytest.mark.parametrize("args,env,message", [
    (["train"], {}, "WORKDIR"),
    (["reboot"], {}, "unknown command"),
    (["create"], {"TPU_NAME": ""}, "TPU_NAME"),
    # Any switch value but 0/1 is refused before anything runs (DRY_RUN=yes ran the real
    # gcloud, and `create` would have made a TPU).
    (["create"], {"DRY_RUN": "yes"}, "DRY_RUN=yes must be 0 or 1"),
    (["train"], {"DETACH": "true", "WORKDIR": "gs://b/r"}, "DETACH=true must be 0 or 1"),
    (["create"], {"SPOT": "2"}, "SPOT=2 must be 0 or 1"),
    (["setup"], {"WORKERS": "abc"}, "WORKERS=abc must be a positive integer"),
])
def test_tpu_vm_errors(fake_gcloud, args, env, message):
  result, calls, _ = fake_gcloud(*args, **env)
  assert result.returncode == 2 and message in result.stderr
  assert calls == []


# --------------------------------------------------------------------------- slurm_gpu.sbatch

@pytest.fixture
def fake_slurm(tmp_path):
  repo = tmp_path / "repo"
  (repo / "scripts").mkdir(parents=True)
  (repo / "configs").mkdir()
  (repo / "scripts" / "train.py").write_text("")
  (repo / "configs" / "default.py").write_text("")
  fakebin = tmp_path / "fakebin"
  fakebin.mkdir()
  _executable(fakebin / "srun", """
      #!/usr/bin/env bash
      { printf '[%s]' "$@"; echo; echo "SRUN_CPUS_PER_TASK=${SRUN_CPUS_PER_TASK:-}"; \
        echo "PWD=$PWD"; } > "$FAKE_SRUN_LOG"
      """)

  def run(*args, **env):
    base = dict(SLURM_JOB_ID="4242", SLURM_SUBMIT_DIR=str(repo), SLURM_NTASKS_PER_NODE="8",
                SLURM_GPUS_ON_NODE="8", SLURM_CPUS_PER_TASK="8", SLURM_JOB_NUM_NODES="2",
                SLURM_NTASKS="16", WORKDIR="/shared/runs/x",
                PATH=str(fakebin) + os.pathsep + os.environ["PATH"],
                FAKE_SRUN_LOG=str(tmp_path / "srun.log"))
    base.update(env)
    base = {k: v for k, v in base.items() if v is not None}
    result = subprocess.run(["bash", str(LAUNCH / "slurm_gpu.sbatch"), *args], env=_env(**base),
                            capture_output=True, text=True, timeout=TIMEOUT)
    log = tmp_path / "srun.log"
    return result, (log.read_text().splitlines() if log.exists() else None)

  run.repo = repo
  return run


def test_slurm_runs_one_srun_over_all_tasks(fake_slurm):
  result, srun = fake_slurm("--config.seed=1")
  assert result.returncode == 0, result.stderr
  assert srun == ["[--kill-on-bad-exit=1][--gpu-bind=none][python3][scripts/train.py]"
                  "[--config=configs/default.py][--workdir=/shared/runs/x][--config.seed=1]",
                  "SRUN_CPUS_PER_TASK=8", f"PWD={fake_slurm.repo}"]


@pytest.mark.parametrize("env,message", [
    ({"SLURM_GPUS_ON_NODE": "4"}, "differs from 4 GPUs per node"),
    ({"WORKDIR": None}, "WORKDIR"),
    ({"SLURM_JOB_ID": None}, "sbatch"),
    ({"CONFIG": "configs/missing.py"}, "configs/missing.py"),
    ({"DRY_RUN": "yes"}, "DRY_RUN=yes must be 0 or 1"),
    ({"SLURM_NTASKS": "abc"}, "SLURM_NTASKS=abc must be a positive integer"),
])
def test_slurm_errors(fake_slurm, env, message):
  result, srun = fake_slurm(**env)
  assert result.returncode == 2 and message in result.stderr, result.stderr
  assert srun is None
