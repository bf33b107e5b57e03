"""Mistakes a user can fix: the error classes every layer raises.

A `UserError` is a mistake in a setting, a file or a workdir; its message is one line that
names the fix. Scripts print it as `error: MESSAGE` and exit 1 (transformer/cli.py). Anything
else is a bug (ours, a library's, the machine's) and keeps its traceback. The subclasses also
derive from the builtin a caller would expect (ValueError, FileNotFoundError, RuntimeError).
"""

from __future__ import annotations

import errno
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


def disk_full(e: Optional[BaseException]) -> bool:
  """Whether e, or an error behind it, says the disk (or the quota) is full."""
  seen = set()
  while e is not None and id(e) not in seen:
    seen.add(id(e))
    if (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)) or \
        "No space left on device" in str(e):
      return True
    e = e.__cause__ or e.__context__
  return False
