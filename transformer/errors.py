"""Mistakes a user can fix, and the one error boundary every script runs under.

A `UserError` is a mistake in a setting, a file or a workdir; its message is one line that
names the fix. Scripts print it as `error: MESSAGE` and exit 1. Anything else is a bug (ours,
a library's, the machine's) and keeps its traceback. The subclasses also derive from the
builtin a caller would expect (ValueError, FileNotFoundError, RuntimeError).
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from typing import Any, Callable, NoReturn, Optional, Sequence

EXIT_INTERRUPTED = 130  # the shell's code for a run stopped by SIGINT


class UserError(Exception):
  """A mistake the user can fix; the message is one line naming the fix."""


class ConfigError(UserError, ValueError):
  """An invalid setting: a config field, a flag, or data that does not fit them."""


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


def exit_with(message: str) -> NoReturn:
  """Ends the script with `error: MESSAGE` on stderr (once) and exit status 1."""
  sys.exit(f"error: {' '.join(message.split())}")


def run_script(main: Callable[[Sequence[str]], Any]) -> None:
  """absl's app.run(main) behind the boundary: a UserError ends with one line and exit 1.

  A mistake in the flags, the --config file or an override, found while absl parses them
  before `main` starts, is a user's too. Once `main` runs, anything but a UserError
  (KeyError, TypeError, an orbax error ...) is a bug and is raised with its traceback.
  KeyboardInterrupt outside the training loop (which saves and exits 130 itself) exits 130.
  """
  from absl import app  # deferred: library users of this module need no absl

  sys.unraisablehook = _without_closed_loop_noise(sys.unraisablehook)
  logging.getLogger("asyncio").addFilter(_abandoned_task_filter)
  logging.getLogger("absl").addFilter(_orbax_info_filter)
  started = False

  def wrapped(argv: Sequence[str]) -> Any:
    nonlocal started
    started = True
    return main(argv)

  try:
    app.run(wrapped, flags_parser=_parse_flags)
  except UserError as e:
    exit_with(str(e))
  except KeyboardInterrupt:
    print("Interrupted.", file=sys.stderr)
    sys.exit(EXIT_INTERRUPTED)
  except (KeyError, AttributeError, ValueError, TypeError, OSError) as e:
    if started:
      raise
    exit_with(f"bad --config or override: {config_flag_message(e)}")


def _parse_flags(argv: Sequence[str]) -> list[str]:
  """absl's flag parsing, except that a UserError raised by a config file's get_config (as
  configs/lm.py:NAME does for an unknown recipe) ends as its own one line: config_flags hands
  it to absl as the text of its traceback, whose last line is `transformer.errors.CLASS: MSG`.
  A bad value of a --config override is one line naming the flag, its value and the cause
  (ml_collections' "invalid literal for int()"); any other flag error keeps absl's report."""
  from absl import flags

  try:
    return flags.FLAGS(list(argv))
  except flags.Error as e:
    last = str(e).strip().splitlines()[-1].strip()
    prefix = f"{__name__}."
    name, _, message = last[len(prefix):].partition(": ")
    cls = globals().get(name) if last.startswith(prefix) else None
    if isinstance(cls, type) and issubclass(cls, UserError):
      exit_with(message)
    text = " ".join(str(e).split())
    if text.startswith("flag --config."):  # IllegalFlagValueError of an override
      exit_with(f"bad --config or override: {text[len('flag '):]}")
    # absl's own report (app.parse_flags_with_usage), without parsing again: a second parse
    # would define the config's override flags twice and report that instead.
    sys.stderr.write(f"FATAL Flags parsing error: {text}\n"
                     "Pass --helpshort or --helpfull to see help on flags.\n")
    sys.exit(1)


def _without_closed_loop_noise(hook: Callable[[Any], None]) -> Callable[[Any], None]:
  """The unraisable-exception hook, minus 'Event loop is closed': after a failed checkpoint
  read, orbax leaves tensorstore callbacks for its closed event loop, which otherwise print
  tracebacks under the one-line message when they are collected at exit."""

  def quiet(unraisable: Any) -> None:
    e = unraisable.exc_value
    if isinstance(e, RuntimeError) and "Event loop is closed" in str(e):
      return
    hook(unraisable)

  return quiet


def _abandoned_task_filter(record: logging.LogRecord) -> bool:
  """Drops asyncio's 'exception was never retrieved' reports: after a failed checkpoint read
  orbax abandons its other read tasks, whose errors (the same damage, already reported in
  one line) asyncio would otherwise print with a traceback whenever they are collected."""
  return "exception was never retrieved" not in record.getMessage()


def _orbax_info_filter(record: logging.LogRecord) -> bool:
  """Drops orbax's INFO and DEBUG logging (one line per checkpoint read holds the checksum of
  every array, thousands of characters), and the tracebacks its background threads log for a
  full disk (hundreds of lines for one failed save): orbax hands that error to the run, which
  reports it in one line. Its other warnings and errors still show."""
  if f"{os.sep}orbax{os.sep}" not in record.pathname:
    return True
  if record.levelno < logging.WARNING:
    return False
  return not (record.exc_info and disk_full(record.exc_info[1]))


def config_flag_message(e: BaseException, argv: Optional[Sequence[str]] = None) -> str:
  """What ml_collections' flag parsing means by e, in a user's words: a KeyError or
  AttributeError naming a field of an override on the command line is an unknown field."""
  raw = e.args[0] if e.args and isinstance(e.args[0], str) else str(e)
  # ml_collections nests the repr of a KeyError's message: undo its escapes.
  raw = raw.replace("\\n", "\n").replace("\\'", "'").strip().strip("'\"")
  first, _, hint = raw.partition("\n")
  name = first.strip().strip("'\"")
  argv = sys.argv if argv is None else argv
  if isinstance(e, (KeyError, AttributeError)):
    for arg in argv:
      field = arg.partition("=")[0]
      if field.startswith("--config.") and field.rsplit(".", 1)[-1] == name:
        hint = " ".join(hint.split()) or "check its spelling against the config file"
        return f"{field} names no field of the config (unknown field {name!r}); {hint}"
  return " ".join(raw.split())


def config_of(holder: Any) -> Any:
  """The config of an ml_collections --config flag; a file that could not be loaded (it is
  missing, say) is a ConfigError naming it, not a traceback at its first use."""
  from absl import flags
  from ml_collections import config_flags

  config = holder.value
  try:
    config.keys()  # a config that failed to load raises here
  except OSError as e:
    path = config_flags.get_config_filename(flags.FLAGS[holder.name])
    if not os.path.isfile(path.split(":")[0]):
      raise ConfigError(f"--{holder.name}={path} does not exist; pass an existing config file "
                        "such as configs/default.py.") from None
    raise ConfigError(f"--{holder.name}={path} could not be loaded: {one_line(e)}.") from None
  return config
