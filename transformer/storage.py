"""The files of a run, on a local disk or in an object store (`gs://bucket/run`), through one
path type (etils.epath); checkpoints go through orbax/tensorstore, which take the same paths.

What differs on an object store, decided here once:
- Writes of a whole object are atomic there (a reader sees the old object or the new one), so
  `write_atomically` writes it directly; on a local disk it writes a temporary file and
  renames it over the target.
- There is no append: `append_line` writes the object again with the line added (metrics.jsonl
  is small, a line per logged step), so every line is stored as soon as it is written and
  none is ever torn there.
- There is no file lock: `is_local` tells the callers that take one (see
  training/workdir_checks.py).
"""

from __future__ import annotations

import contextlib
import glob as globlib
import importlib.util
import os
from typing import Optional, Sequence, Union

from etils import epath

from transformer.errors import ConfigError

PathLike = Union[str, os.PathLike]


def is_local(path: PathLike) -> bool:
  """True for a path on this machine's file systems; False for gs:// (and other URLs)."""
  return "://" not in os.fspath(path)


def _gcsfs_installed() -> bool:
  return importlib.util.find_spec("gcsfs") is not None


def check_reachable(path: Optional[PathLike], what: str = "") -> None:
  """A one-line ConfigError for a gs:// path where gcsfs, which serves it, is not installed
  (an ImportError deep in etils or TFDS otherwise); `what` names the flag or field."""
  if path is not None and os.fspath(path).startswith("gs://") and not _gcsfs_installed():
    name = f"{what}={os.fspath(path)}" if what else os.fspath(path)
    raise ConfigError(f"{name} is on GCS, which needs gcsfs: pip install -e '.[gcs]'.")


def check_all_reachable(fields: dict[str, Union[None, PathLike, Sequence[PathLike]]]) -> None:
  """check_reachable of every path of {what: a path, a comma-separated list or a list of them,
  or None}."""
  for what, value in fields.items():
    if isinstance(value, str):
      value = value.split(",")
    for path in [value] if value is None or isinstance(value, os.PathLike) else value:
      check_reachable(path.strip() if isinstance(path, str) else path, what)


def as_path(path: PathLike) -> epath.Path:
  """`path` as an epath.Path: a pathlib-like object for local paths and gs:// alike."""
  check_reachable(path)
  return epath.Path(path)


def join(path: PathLike, *names: str) -> str:
  """`path`/names as a string, a local path or a gs:// one alike (what the writers, the
  checks and the reports name their files with)."""
  return os.fspath(as_path(path).joinpath(*names)) if names else os.fspath(path)


def glob_files(pattern: PathLike) -> list[str]:
  """The files (not directories) a glob pattern matches, sorted; `~` expanded locally. On an
  object store the pattern's wildcards may sit in any part after the bucket."""
  pattern = os.fspath(pattern)
  if is_local(pattern):
    return sorted(p for p in globlib.glob(os.path.expanduser(pattern)) if os.path.isfile(p))
  parts = pattern.split("/")
  fixed = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")), len(parts))
  base = as_path("/".join(parts[:fixed]))
  if fixed == len(parts):  # no wildcard: the file itself, if it is one
    return [pattern] if base.is_file() else []
  return sorted(os.fspath(p) for p in base.glob("/".join(parts[fixed:])) if p.is_file())


def size_and_mtime(path: PathLike) -> tuple[int, int]:
  """(bytes, modification time in ns) of a file; an object store gives whole seconds."""
  if is_local(path):
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns
  st = as_path(path).stat()
  return int(st.length), int(st.mtime) * 10 ** 9


def write_atomically(path: PathLike, data: str | bytes) -> None:
  """Writes `data` to `path` so readers never see it half-written, and a failed write (a full
  disk) leaves neither the file changed nor a temporary file behind."""
  target = as_path(path)
  if not is_local(path):
    _write(target, data)  # one object write: atomic by the store's contract
    return
  tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
  try:
    _write(tmp, data)
    os.replace(tmp, target)
  except BaseException:
    with contextlib.suppress(FileNotFoundError):
      os.remove(tmp)
    raise


def append_line(path: PathLike, line: str) -> None:
  """Adds `line` (ending in its line break) to the end of `path`: a local file is appended to;
  an object is read and written again whole, with the line added."""
  if is_local(path):
    with open(path, "a") as f:
      f.write(line)
    return
  target = as_path(path)
  _write(target, (target.read_text() if target.exists() else "") + line)


def _write(path: epath.Path, data: str | bytes) -> None:
  if isinstance(data, bytes):
    path.write_bytes(data)
  else:
    path.write_text(data)
