"""The scripts' boundary: one error rule, one log rule, flag parsing, the shared flags.

Every script runs `main` through `run_script`: a `UserError` (transformer/errors.py) ends with
`error: MESSAGE` and exit 1, anything else keeps its traceback; libraries' INFO chatter is
kept off the terminal (`library_log_filter`, `known_tfds_chatter`). The decoding flags that
decode.py and evaluate.py share are defined here, once. This module sits on top of the
layers, beside research/; nothing in the package imports it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import traceback
from typing import Any, Callable, Iterator, NoReturn, Optional, Sequence

from transformer import errors, storage
from transformer.errors import ConfigError, UserError, disk_full, one_line
from transformer.inference.decode_config import METHODS, DecodeConfig

EXIT_INTERRUPTED = 130  # the shell's code for a run stopped by SIGINT
# Signals that end a script with one line (an ssh drop, a scheduler's stop) wherever they come
# outside the training loop's steps, where the loop saves at the step reached instead.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class StoppedBySignal(BaseException):
  """SIGTERM or SIGHUP outside the training steps; a BaseException, like KeyboardInterrupt, so
  that no `except Exception` takes it for an error of its own and every cleanup runs."""

  def __init__(self, signum: int):
    super().__init__(signal.Signals(signum).name)
    self.signum = signum


def _raise_stopped(signum: int, frame: Any) -> None:
  raise StoppedBySignal(signum)


@contextlib.contextmanager
def _stop_with_one_line() -> Iterator[None]:
  """SIGTERM and SIGHUP raise StoppedBySignal in the block (a signal ignored, as under nohup,
  stays so); the old handlers come back after it."""
  old = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
  main = threading.current_thread() is threading.main_thread()  # only there can Python trap them
  for sig, handler in old.items():
    if main and handler is not signal.SIG_IGN:
      signal.signal(sig, _raise_stopped)
  try:
    yield
  finally:
    for sig, handler in old.items():
      if main and handler is not signal.SIG_IGN:
        signal.signal(sig, handler)


def exit_with(message: str) -> NoReturn:
  """Ends the script with `error: MESSAGE` on stderr (once) and exit status 1."""
  sys.exit(f"error: {' '.join(message.split())}")


def run_script(main: Callable[[Sequence[str]], Any]) -> None:
  """absl's app.run(main) behind the boundary: a UserError ends with one line and exit 1.

  A mistake in the flags, the --config file or an override, found while absl parses them
  before `main` starts, is a user's too. Once `main` runs, anything but a UserError
  (KeyError, TypeError, an orbax error ...) is a bug and is raised with its traceback.
  KeyboardInterrupt outside the training loop (which saves and exits 130 itself) exits 130;
  SIGTERM or SIGHUP there (during data preparation, say) ends with one line and 128 + its
  number.
  """
  from absl import app
  from absl import logging as absl_logging

  sys.unraisablehook = _without_closed_loop_noise(sys.unraisablehook)
  logging.getLogger("asyncio").addFilter(_abandoned_task_filter)
  # On absl's handler, which every logger's records reach: orbax's (through absl) and jax's.
  absl_logging.get_absl_handler().addFilter(library_log_filter)
  # Here, not where transformer.data is imported: an import changes no global logger.
  logging.getLogger("absl").addFilter(known_tfds_chatter)
  started = False

  def wrapped(argv: Sequence[str]) -> Any:
    nonlocal started
    started = True
    return main(argv)

  try:
    with _stop_with_one_line():
      app.run(wrapped, flags_parser=_parse_flags)
  except UserError as e:
    exit_with(str(e))
  except KeyboardInterrupt:
    print("Interrupted.", file=sys.stderr)
    sys.exit(EXIT_INTERRUPTED)
  except StoppedBySignal as e:  # the shell's code for a signal: 128 + its number
    with contextlib.suppress(OSError):  # after an ssh drop the terminal is gone (EIO)
      print(f"error: stopped by {e}; rerun the same command to go on (a training run resumes "
            "from its newest checkpoint).", file=sys.stderr)
    sys.exit(128 + e.signum)
  except SyntaxError as e:  # a config file's, met while absl loads it (a bug in main's own code
    if started:             # is raised as it is)
      raise
    exit_with(f"--config file {e.filename} does not parse: {e.msg} at line {e.lineno}; fix it.")
  except Exception as e:  # noqa: BLE001  (sorted below: a full disk, a flag's mistake, a bug)
    if disk_full(e):  # wherever it happened (make_corpus's output, a cache): the user's to fix
      where = errors.full_file(e)
      exit_with(f"No space left on the disk{f' of {where}' if where else ''} "
                f"({one_line(e, 120)}); free space and rerun the same command.")
    if started or not isinstance(e, (KeyError, AttributeError, ValueError, TypeError, OSError)):
      raise
    exit_with(f"bad --config or override: {config_flag_message(e)}")


def _parse_flags(argv: Sequence[str]) -> list[str]:
  """absl's flag parsing, except that a UserError raised by a config file's get_config (as
  configs/lm.py:NAME does for an unknown recipe) ends as its own one line: config_flags hands
  it to absl as the text of its traceback, whose last line is `transformer.errors.CLASS: MSG`.
  A bad value of a --config override is one line naming the flag, its value and the cause
  (ml_collections' "invalid literal for int()"); any other flag error (an unknown flag, a
  value under a flag's bound) is absl's message on one line."""
  from absl import flags

  try:
    rest = flags.FLAGS(list(argv))
  except SystemExit as e:  # --help's, or a config file's that calls sys.exit while it loads
    if not any(f"{os.sep}config_flags{os.sep}" in frame.filename
               for frame in traceback.extract_tb(e.__traceback__)):
      raise
    exit_with(f"a --config file called sys.exit({e.code!r}) while it was loaded; a config file "
              "defines get_config() and returns the config.")
  except flags.Error as e:
    last = str(e).strip().splitlines()[-1].strip()
    prefix = f"{errors.__name__}."
    name, _, message = last[len(prefix):].partition(": ")
    cls = getattr(errors, name, None) if last.startswith(prefix) else None
    if isinstance(cls, type) and issubclass(cls, UserError):
      exit_with(message)
    text = " ".join(str(e).split())
    if text.startswith("flag --config."):  # IllegalFlagValueError of an override
      exit_with(f"bad --config or override: {text[len('flag '):]}")
    if "Traceback (most recent call last)" in text:  # get_config's own error, as a traceback:
      flag = text.partition(": ")[0].removeprefix("flag ")  # its last line says what it was
      argument = ":" in flag.partition("=")[2].rpartition(".py")[2]
      exit_with(f"{flag}: get_config failed: {last}"
                + (" (the text after ':' in a --config value is passed to get_config)"
                   if argument else ""))
    # absl's own message, without parsing again: a second parse would define the config's
    # override flags twice and report that instead.
    exit_with(f"{text} (--helpshort lists the flags)")
  # An empty --workdir (an unset shell variable: --workdir=$RUN) would be the current
  # directory, and a training run would fill the repository root.
  workdir = flags.FLAGS["workdir"].value if "workdir" in flags.FLAGS else None
  if workdir is not None and not workdir.strip():
    exit_with("--workdir is empty (an unset shell variable?); pass the run's directory, e.g. "
              "--workdir=/tmp/run.")
  try:
    storage.check_reachable(workdir, "--workdir")
  except UserError as e:
    exit_with(str(e))
  return rest


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


def library_log_filter(record: logging.LogRecord) -> bool:
  """The one rule for every script's log: a library's INFO and DEBUG lines are dropped (orbax
  writes one per file it renames, and one per checkpoint read with the checksum of every
  array), and so are the tracebacks orbax's background threads log for a full disk or a
  checkpoint directory made read-only (hundreds of lines for one failed save, which the run
  reports in one line). The package's own INFO lines, and every library's other warnings and
  errors, still show."""
  if f"{os.sep}site-packages{os.sep}" not in record.pathname:
    return True
  if record.levelno < logging.WARNING:
    return False
  return not (f"{os.sep}orbax{os.sep}" in record.pathname and record.exc_info
              and (disk_full(record.exc_info[1]) or errors.not_writable(record.exc_info[1])))


def known_tfds_chatter(record: logging.LogRecord) -> bool:
  """Drops two TFDS warnings that say nothing to act on: "Using custom data configuration"
  for a config of this package's builders (transformer/data makes one per parameter set, by
  design, and TFDS warns for every config its builder class does not list), and "Variant
  folder ... has no dataset_info.json" when it looks for a prepared version of a dataset that
  a first run has not prepared yet (`data.prepared` then prepares it)."""
  message = str(record.msg)
  ours = bool(record.args) and type(record.args[0]).__module__.startswith("transformer.data.")
  return not ((message.startswith("Using custom data configuration") and ours)
              or message.startswith("Variant folder %s has no"))


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
      if field.startswith("--config.") and name in field.split(".")[1:]:
        hint = " ".join(hint.split()) or "check its spelling against the config file"
        return f"{field} names no field of the config (unknown field {name!r}); {hint}"
  return " ".join(raw.split())


def config_of(holder: Any) -> Any:
  """The config of an ml_collections --config flag; a file that could not be loaded (it is
  missing, say) is a ConfigError naming it, not a traceback at its first use."""
  from absl import flags
  from ml_collections import config_flags

  config = holder.value
  path = lambda: config_flags.get_config_filename(flags.FLAGS[holder.name])  # noqa: E731
  try:
    config.keys()  # a config that failed to load raises here
  except OSError as e:
    if not os.path.isfile(path().split(":")[0]):
      raise ConfigError(f"--{holder.name}={path()} does not exist; pass an existing config file "
                        "such as configs/default.py.") from None
    raise ConfigError(f"--{holder.name}={path()} could not be loaded: {one_line(e)}.") from None
  except AttributeError:  # get_config() returned something else than a config
    raise ConfigError(f"--{holder.name}={path()}: get_config() must return an "
                      f"ml_collections.ConfigDict, not {type(config).__name__}.") from None
  return config


def define_decode_flags(default_method: str = "beam",
                        flag_values: Any = None) -> Callable[[], DecodeConfig]:
  """Defines --method, --beam_size, --alpha, --temperature, --top_k, --top_p, --extra_len (in
  absl's FLAGS, or `flag_values`); returns a function that builds the DecodeConfig from their
  values. A script shows them in its --help with `flags.adopt_module_key_flags(cli)`."""
  from absl import flags

  d = DecodeConfig()
  on = {"flag_values": flags.FLAGS if flag_values is None else flag_values}
  defined = dict(
      method=flags.DEFINE_enum("method", default_method, METHODS, "Decoding method.", **on),
      beam_size=flags.DEFINE_integer("beam_size", d.beam_size, "Beam search: beams.", **on),
      alpha=flags.DEFINE_float("alpha", d.alpha,
                               "Beam search: GNMT length penalty exponent.", **on),
      temperature=flags.DEFINE_float("temperature", d.temperature, "Sampling: temperature.", **on),
      top_k=flags.DEFINE_integer("top_k", d.top_k,
                                 "Sampling: keep the k likeliest (0 = all).", **on),
      top_p=flags.DEFINE_float("top_p", d.top_p, "Sampling: nucleus mass (1 = all).", **on),
      extra_len=flags.DEFINE_integer("extra_len", d.extra_len,
                                     "Output tokens allowed beyond the input's length.", **on),
  )
  return lambda: DecodeConfig(**{name: flag.value for name, flag in defined.items()})
