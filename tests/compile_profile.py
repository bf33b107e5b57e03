"""Where the suite's time goes: a pytest plugin that records, per test, its wall time and jax's
own compile events (tracing, lowering, XLA compiles, persistent-cache hits) in each xdist
worker, and a summary of what every worker recorded. Not loaded unless asked for:

  TRANSFORMER_TESTS_PROFILE=/tmp/profile PYTHONPATH=tests python -m pytest -n 2 tests \
      -p compile_profile
  python tests/compile_profile.py /tmp/profile

Only what runs inside the workers is seen: a script a test starts is another process.
"""

import collections
import json
import os
import pathlib
import sys
import time

import pytest

_COMPILE = ("/jax/core/compile/jaxpr_trace_duration",
            "/jax/core/compile/jaxpr_to_mlir_module_duration",
            "/jax/core/compile/backend_compile_duration")
_HIT = "/jax/compilation_cache/cache_retrieval_time_sec"
_current = {"test": "<outside any test>"}
# test -> {event: its seconds, event + ":n": its count, "wall": seconds}
_seen: dict = collections.defaultdict(collections.Counter)


def _on_duration(event: str, duration: float, **_) -> None:
  seen = _seen[_current["test"]]
  seen[event] += duration
  seen[event + ":n"] += 1


def pytest_configure(config) -> None:
  import jax.monitoring  # noqa: PLC0415  (the workers' jax, after conftest's flags)
  jax.monitoring.register_event_duration_secs_listener(_on_duration)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  _current["test"] = item.nodeid
  start = time.perf_counter()
  yield
  _seen[item.nodeid]["wall"] += time.perf_counter() - start
  _current["test"] = "<outside any test>"


def pytest_unconfigure(config) -> None:
  folder = pathlib.Path(os.environ["TRANSFORMER_TESTS_PROFILE"])
  folder.mkdir(parents=True, exist_ok=True)
  worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
  (folder / f"{worker}.json").write_text(json.dumps({k: dict(v) for k, v in _seen.items()}))


def summary(folder: pathlib.Path, slowest: int = 20) -> str:
  """The lines of what every worker's file in `folder` says: per-worker wall time, in-worker
  compile seconds, compiles and cache hits, and the slowest tests (setup, call and teardown)."""
  lines, tests = [], {}
  for path in sorted(folder.glob("*.json")):
    seen = json.loads(path.read_text())
    tests.update(seen)
    if seen:  # the controller of -n runs none
      wall = sum(v.get("wall", 0) for v in seen.values())
      lines.append(f"{path.stem}: {len(seen)} tests, {wall:.0f} s")
  compile_s = lambda v: sum(v.get(e, 0) for e in _COMPILE)  # noqa: E731
  walls = sorted(((v.get("wall", 0), compile_s(v), k) for k, v in tests.items()), reverse=True)
  lines.append(f"all: {sum(w for w, _, _ in walls):.0f} s of tests, "
               f"{sum(c for _, c, _ in walls):.0f} s tracing, lowering and compiling in workers; "
               f"{sum(v.get(_COMPILE[2] + ':n', 0) for v in tests.values())} compiles, "
               f"{sum(v.get(_HIT + ':n', 0) for v in tests.values())} cache hits")
  for n in (6, 20, 100):
    lines.append(f"the {n} slowest: {sum(w for w, _, _ in walls[:n]):.0f} s, "
                 f"{sum(c for _, c, _ in walls[:n]):.0f} s of it compiling")
  lines += [f"{w:7.1f} s  ({c:5.1f} s compiling)  {k}" for w, c, k in walls[:slowest]]
  return "\n".join(lines)


if __name__ == "__main__":
  print(summary(pathlib.Path(sys.argv[1])))
