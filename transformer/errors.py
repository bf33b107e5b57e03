"""Mistakes a user can fix: the error classes every layer raises.

A `UserError` is a mistake in a setting, a file or a workdir; its message is one line that
names the fix. Scripts print it as `error: MESSAGE` and exit 1 (transformer/cli.py). Anything
else is a bug (ours, a library's, the machine's) and keeps its traceback. The subclasses also
derive from the builtin a caller would expect (ValueError, FileNotFoundError, RuntimeError).
"""

from __future__ import annotations

import errno
import os
import re
from typing import Optional


class UserError(Exception):
  """A mistake the user can fix; the message is one line naming the fix."""


class ConfigError(UserError, ValueError):
  """An invalid setting: a config field, a flag, or data that does not fit them."""


class InferenceError(ConfigError):
  """A mistake in decoding or reading a run (workdir, checkpoint, tokenizer, input lines)."""


class MissingFileError(UserError, FileNotFoundError):
  """A file or directory the user named (or a run should have written) is not there."""


class RunError(UserError, RuntimeError):
  """A run cannot go on as asked (damaged checkpoints, a full disk, a changed workdir)."""


class TrainingError(RunError):
  """Training stopped on something the user can act on (a non-finite loss, a workdir that
  holds another run, a full disk); the message says what to do."""


class NonFiniteLossError(TrainingError):
  """The loss became NaN or inf: the run diverged (for a sweep, a finding, not a failure)."""


def one_line(e: Optional[BaseException], limit: int = 300) -> str:
  """The message of e on one line, at most `limit` characters."""
  text = " ".join(str(e).split())
  return text if len(text) <= limit else text[:limit - 3] + "..."


def _in_chain(e: Optional[BaseException], codes: tuple[int, ...],
              texts: tuple[str, ...]) -> Optional[BaseException]:
  """The first error of e's chain (e, its cause or context, ...) that is an OSError with one of
  `codes` or says one of `texts` (tensorstore's errors, raised by orbax, are ValueErrors)."""
  seen = set()
  while e is not None and id(e) not in seen:
    seen.add(id(e))
    if (isinstance(e, OSError) and e.errno in codes) or any(t in str(e) for t in texts):
      return e
    e = e.__cause__ or e.__context__
  return None


def _disk_full_error(e: Optional[BaseException]) -> Optional[BaseException]:
  return _in_chain(e, (errno.ENOSPC, errno.EDQUOT), ("No space left on device",))


def disk_full(e: Optional[BaseException]) -> bool:
  """Whether e, or an error behind it, says the disk (or the quota) is full."""
  return _disk_full_error(e) is not None


def full_file(e: Optional[BaseException]) -> Optional[str]:
  """The file whose write found the disk full, where e's chain names it: an OSError's filename,
  else the first absolute path its text names (array_record's and tensorstore's errors)."""
  full = _disk_full_error(e)
  name = getattr(full, "filename", None)
  if isinstance(name, (str, os.PathLike)):
    return os.fspath(name)
  paths = re.findall(r"(?<![\w.:/])(/[^\s'\"():;,]+)", str(full)) if full is not None else []
  paths = [p for p in paths if "/site-packages/" not in p and not p.endswith(".py")]
  return paths[0] if paths else None


def not_writable(e: Optional[BaseException]) -> Optional[str]:
  """Why a write was refused, where e or an error behind it says a directory cannot be
  written ('Read-only file system' or 'Permission denied'); None otherwise."""
  refused = _in_chain(e, (errno.EROFS, errno.EACCES, errno.EPERM),
                      ("Read-only file system", "PERMISSION_DENIED", "Permission denied"))
  if refused is None:
    return None
  read_only = (getattr(refused, "errno", None) == errno.EROFS
               or "Read-only file system" in str(refused))
  return "Read-only file system" if read_only else "Permission denied"
