"""Starting scripts/*.py as a user does, at the cost of a fork: one interpreter per test worker
imports the package once (jax, flax, orbax, TFDS: about 5 s of every start on 2 cores) and
forks a child for each start. The child takes the start's environment, working directory and
output files, runs the script as __main__ and ends as the interpreter ends (its exit code, its
traceback, its atexit handlers and threads), so its exit status, output and signals are those
of `python script`. XLA reads XLA_FLAGS (the device count) when the child first asks for a
device: nothing is initialised before the fork.

`start` is `subprocess.Popen` for the tests that signal a run part-way; `run` is
`subprocess.run(..., capture_output=True, text=True)`.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# The server: reads one JSON request a line on stdin, answers the child's pid on stdout, and
# writes each child's exit status (as Popen's returncode) to its status file once reaped. It
# starts no thread, so forking it is safe. A worker sends its next request only after the
# answer to the last, so no second line waits in stdin's buffer unseen by select.
_SERVER = r"""
import json, os, select, sys
import transformer.cli, transformer.trained.evaluate, transformer.training.loop  # the scripts' own
import absl.app, ml_collections.config_flags
statuses = {}
while True:
  ready = select.select([sys.stdin], [], [], 0.02)[0]
  while statuses:
    pid, status = os.waitpid(-1, os.WNOHANG)
    if not pid:
      break
    path = statuses.pop(pid)
    with open(path + ".tmp", "w") as f:
      f.write(str(os.waitstatus_to_exitcode(status)))
    os.replace(path + ".tmp", path)
  if not ready:
    continue
  line = sys.stdin.readline()
  if not line:
    break
  request = json.loads(line)
  sys.stdout.flush(); sys.stderr.flush()
  pid = os.fork()
  if pid == 0:
    os.dup2(os.open(request["stdin"], os.O_RDONLY), 0)
    sys.stdin = open(0, closefd=False)  # not the server's reader of requests
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
      os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = request["argv"]
    sys.path[0] = os.path.dirname(os.path.abspath(request["argv"][0]))
    import runpy
    runpy.run_path(request["argv"][0], run_name="__main__")
    raise SystemExit(0)  # and every other ending of the script's own, as `python script` ends
  statuses[pid] = request["status"]
  print(pid, flush=True)
"""
_server = None


def _server_process() -> subprocess.Popen:
  global _server
  if _server is None or _server.poll() is not None:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    _server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, env=env, text=True)
  return _server


class Started:
  """A started script, read as a `subprocess.Popen` of it is: pid, poll, wait, send_signal,
  kill, communicate (its stdout and stderr text, or None where they went to a file or
  nowhere) and returncode."""

  def __init__(self, args, pid, status, stdout, stderr, read):
    self.args, self.pid, self.returncode = args, pid, None
    self._status, self._stdout, self._stderr, self._read = status, stdout, stderr, read

  def poll(self):
    if self.returncode is None and os.path.exists(self._status):
      with open(self._status) as f:
        self.returncode = int(f.read())
      if not self._read:  # nothing left to read back: its folder goes
        shutil.rmtree(os.path.dirname(self._status), ignore_errors=True)
    return self.returncode

  def wait(self, timeout=None):
    deadline = None if timeout is None else time.monotonic() + timeout
    while self.poll() is None:
      if deadline is not None and time.monotonic() > deadline:
        raise subprocess.TimeoutExpired(self.args, timeout)
      time.sleep(0.02)
    return self.returncode

  def send_signal(self, sig):
    if self.poll() is None:
      try:
        os.kill(self.pid, sig)
      except ProcessLookupError:  # it ended between the look and the signal
        pass

  def kill(self):
    self.send_signal(signal.SIGKILL)

  def communicate(self, timeout=None):
    self.wait(timeout)
    outputs = tuple(open(path).read() if path in self._read else None
                    for path in (self._stdout, self._stderr))
    shutil.rmtree(os.path.dirname(self._status), ignore_errors=True)
    self._read = []
    return outputs


def start(script, args, env, cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
          stdin: str = "") -> Started:
  """`script` (a path) with `args`, like subprocess.Popen([python, script, *args], env=env,
  cwd=cwd, stdout=stdout, stderr=stderr, text=True) given `stdin` as its input. stdout and
  stderr: PIPE (read back by communicate), DEVNULL, or a path the output goes to."""
  folder = tempfile.mkdtemp(prefix="script-")
  with open(os.path.join(folder, "stdin"), "w") as f:
    f.write(stdin)
  read, paths = [], []
  for name, where in (("stdout", stdout), ("stderr", stderr)):
    path = os.devnull if where == subprocess.DEVNULL else (
        os.path.join(folder, name) if where == subprocess.PIPE else str(where))
    if where == subprocess.PIPE:
      open(path, "w").close()
      read.append(path)
    paths.append(path)
  status = os.path.join(folder, "status")
  request = {"argv": [str(script), *map(str, args)], "env": dict(env), "cwd": str(cwd),
             "stdin": os.path.join(folder, "stdin"), "stdout": paths[0], "stderr": paths[1],
             "status": status}
  server = _server_process()
  server.stdin.write(json.dumps(request) + "\n")
  server.stdin.flush()
  return Started(request["argv"], int(server.stdout.readline()), status, *paths, read)


def run(script, args, env, cwd, timeout=300, stdin: str = "") -> subprocess.CompletedProcess:
  """`script` with `args` to its end, like subprocess.run([python, script, *args], env=env,
  cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout)."""
  started = start(script, args, env, cwd, stdin=stdin)
  try:
    out, err = started.communicate(timeout)
  except subprocess.TimeoutExpired:
    started.kill()
    raise
  return subprocess.CompletedProcess(started.args, started.returncode, out, err)


def run_code(code: str, args=(), **kwargs) -> subprocess.CompletedProcess:
  """Python source `code` to its end, as `run` runs a script (kwargs: env, cwd, timeout)."""
  with tempfile.TemporaryDirectory(prefix="code-") as folder:
    path = os.path.join(folder, "code.py")
    with open(path, "w") as f:
      f.write(code)
    return run(path, args, **kwargs)
