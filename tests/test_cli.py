"""The scripts' boundary: a user's mistake is one line and exit 1, anything else its traceback;
one log rule; the shared decoding flags."""

import logging
import os
import sys
import types

import pytest
from absl import app

from transformer import cli, errors
from transformer.inference.decode_config import DecodeConfig


def _boundary(main, capsys):
  """Runs main behind run_script as a script would; returns (exit code or None, stderr)."""
  try:
    cli.run_script(main)
  except SystemExit as e:
    code = e.code
    if isinstance(code, str):  # sys.exit("error: ...") prints the text and exits 1
      return 1, code
    return code, capsys.readouterr().err
  return None, capsys.readouterr().err


def test_a_user_error_is_one_line_once(monkeypatch, capsys):
  monkeypatch.setattr("sys.argv", ["prog"])

  def main(argv):
    raise errors.ConfigError("batch_size=3 must be\na multiple of 8; set it to 8.")

  code, err = _boundary(main, capsys)
  assert (code, err) == (1, "error: batch_size=3 must be a multiple of 8; set it to 8.")


@pytest.mark.parametrize("bug", [KeyError("step"), TypeError("unsupported operand"),
                                 ValueError("Expecting value: line 1 column 1"),
                                 FileNotFoundError("/tmp/orbax/x")])
def test_anything_else_raised_in_main_keeps_its_traceback(monkeypatch, capsys, bug):
  monkeypatch.setattr("sys.argv", ["prog"])

  def main(argv):
    raise bug

  with pytest.raises(type(bug)):
    cli.run_script(main)


def test_a_full_disk_anywhere_is_one_line(monkeypatch, capsys):
  """Round 6, item 9: make_corpus.py onto a full disk ended in `OSError ENOSPC`'s traceback."""
  import errno
  monkeypatch.setattr("sys.argv", ["prog"])

  def main(argv):
    raise OSError(errno.ENOSPC, "No space left on device", "/data/catalogs.tsv")

  code, err = _boundary(main, capsys)
  assert (code, err) == (1, "error: No space left on the disk of /data/catalogs.tsv ([Errno 28] "
                            "No space left on device: '/data/catalogs.tsv'); free space and "
                            "rerun the same command.")


def test_mistakes_found_while_the_flags_are_parsed_are_one_line(monkeypatch, capsys):
  monkeypatch.setattr("sys.argv", ["prog", "--config=c.py", "--config.model.dmodel=3"])

  def parse_fails(main, **kwargs):  # what ml_collections raises for an unknown field, before main
    raise AttributeError("'dmodel'\\nDid you mean \"d_model\" instead of \"dmodel\"?")

  monkeypatch.setattr(app, "run", parse_fails)
  code, err = _boundary(lambda argv: None, capsys)
  assert code == 1
  assert err == ("error: bad --config or override: --config.model.dmodel names no field of "
                 "the config (unknown field 'dmodel'); Did you mean \"d_model\" instead of "
                 "\"dmodel\"?")


def test_an_unknown_section_of_an_override_is_named_with_its_flag(monkeypatch, capsys):
  """--config.nope.x=1 said only "override: nope"."""
  monkeypatch.setattr("sys.argv", ["prog", "--config=c.py", "--config.nope.x=1"])

  def parse_fails(main, **kwargs):  # ml_collections' KeyError for the unknown section
    raise KeyError("'nope'")

  monkeypatch.setattr(app, "run", parse_fails)
  code, err = _boundary(lambda argv: None, capsys)
  assert (code, err) == (1, "error: bad --config or override: --config.nope.x names no field of "
                            "the config (unknown field 'nope'); check its spelling against the "
                            "config file")


def test_an_empty_workdir_is_refused_before_anything_is_written(tmp_path):
  """`--workdir=$RUN` with RUN unset trained into the current directory."""
  import script_starter
  from conftest import DEFAULT, TRAIN, script_env
  for workdir in ("", " "):
    run = script_starter.run(TRAIN, [f"--config={DEFAULT}", f"--workdir={workdir}"],
                             env=script_env(), cwd=tmp_path)
    assert run.returncode == 1
    assert run.stderr.strip().endswith(
        "error: --workdir is empty (an unset shell variable?); pass the run's directory, e.g. "
        "--workdir=/tmp/run.")
    assert list(tmp_path.iterdir()) == []


def test_a_gcs_workdir_without_gcsfs_names_the_extra(tmp_path):
  """It was a 63-line ImportError at the first file operation."""
  import subprocess
  from conftest import DEFAULT, TRAIN, script_env
  without_gcsfs = (
      "import importlib.util, runpy, sys\n"
      "find = importlib.util.find_spec\n"
      "importlib.util.find_spec = lambda name, *a: None if name == 'gcsfs' else find(name, *a)\n"
      f"sys.argv = [{TRAIN!r}, '--config={DEFAULT}', '--workdir=gs://bucket/run']\n"
      f"runpy.run_path({TRAIN!r}, run_name='__main__')\n")
  run = subprocess.run([sys.executable, "-c", without_gcsfs], cwd=tmp_path, env=script_env(),
                       capture_output=True, text=True, timeout=120)
  assert run.returncode == 1
  assert run.stderr.strip().endswith("error: --workdir=gs://bucket/run is on GCS, which needs "
                                     "gcsfs: pip install -e '.[gcs]'.")


@pytest.mark.parametrize("text, argument, message", [
    ("def get_config(:\n  return 5\n", "",
     "error: --config file {path} does not parse: invalid syntax at line 1; fix it."),
    ("def get_config():\n  return 5\n", "",
     "error: --config={path}: get_config() must return an ml_collections.ConfigDict, not int."),
    # Exit 3 and no output before:
    ("import sys\nsys.exit(3)\n", "",
     "error: a --config file called sys.exit(3) while it was loaded; a config file defines "
     "get_config() and returns the config."),
    # absl's whole traceback squashed into the line before:
    ("def get_config():\n  return None\n", ":x",
     "error: --config={path}:x: get_config failed: TypeError: get_config() takes 0 positional "
     "arguments but 1 was given (the text after ':' in a --config value is passed to "
     "get_config)"),
])
def test_a_config_file_that_does_not_parse_or_give_a_config_is_one_line(tmp_path, text, argument,
                                                                       message):
  """A syntax error printed absl's 54-line traceback; a get_config() returning 5 an
  AttributeError at its first use."""
  import script_starter
  from conftest import TRAIN, script_env
  path = tmp_path / "bad.py"
  path.write_text(text)
  run = script_starter.run(TRAIN, [f"--config={path}{argument}", f"--workdir={tmp_path / 'w'}"],
                           env=script_env(), cwd=os.getcwd())
  assert run.returncode == 1
  assert run.stderr.strip().splitlines() == [message.format(path=path)]
  assert not (tmp_path / "w").exists()


def test_help_still_exits_as_absl_makes_it():
  """Only a config file's sys.exit is taken for a mistake: --help's is absl's own."""
  import script_starter
  from conftest import TRAIN, script_env
  run = script_starter.run(TRAIN, ["--helpshort"], env=script_env(), cwd=os.getcwd())
  assert run.returncode == 1 and "--workdir" in run.stdout and "error:" not in run.stderr  # absl's


_SLOW_MAIN = """
import sys, time
from transformer import cli
def main(argv):
  print("preparing", flush=True)
  time.sleep(60)
cli.run_script(main)
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_before_training_is_one_line_and_the_shells_code(tmp_path, sig):
  """SIGTERM or SIGHUP (an ssh drop) while a script prepares data ended it with exit 143 or 129
  and no line; now one line, the same code, and no traceback."""
  import signal
  import subprocess
  from conftest import script_env
  if signal.getsignal(getattr(signal, sig)) is signal.SIG_IGN:  # the child would inherit it
    pytest.skip(f"{sig} is ignored here (nohup): a script keeps it ignored")
  child = subprocess.Popen([sys.executable, "-c", _SLOW_MAIN], env=script_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  assert child.stdout.readline() == "preparing\n"
  child.send_signal(getattr(signal, sig))
  _, err = child.communicate(timeout=60)
  assert child.returncode == 128 + getattr(signal, sig)
  assert err.strip().splitlines() == [
      f"error: stopped by {sig}; rerun the same command to go on (a training run resumes from "
      "its newest checkpoint)."]


def test_a_user_error_raised_by_a_config_files_get_config_is_one_line(monkeypatch, capsys,
                                                                     tmp_path):
  from absl import flags
  from ml_collections import config_flags
  if "errors_test_config" not in flags.FLAGS:
    config_flags.DEFINE_config_file("errors_test_config", None, "")
  path = tmp_path / "recipes.py"
  path.write_text("from transformer.errors import ConfigError\n"
                  "def get_config(recipe):\n"
                  "  raise ConfigError(f'{recipe} is not a recipe; use paper.')\n")
  monkeypatch.setattr("sys.argv", ["prog", f"--errors_test_config={path}:bogus"])
  code, err = _boundary(lambda argv: None, capsys)
  assert (code, err) == (1, "error: bogus is not a recipe; use paper.")
  # Any other flag error is absl's message on one line (and exit status 1).
  monkeypatch.setattr("sys.argv", ["prog", "--errors_test_no_such_flag=1"])
  code, err = _boundary(lambda argv: None, capsys)
  assert code == 1 and err.startswith("error: Unknown command line flag "
                                      "'errors_test_no_such_flag'") and "\n" not in err


def test_an_interrupt_outside_the_loop_exits_130_without_a_traceback(monkeypatch, capsys):
  monkeypatch.setattr("sys.argv", ["prog"])

  def main(argv):
    raise KeyboardInterrupt

  code, err = _boundary(main, capsys)
  assert code == cli.EXIT_INTERRUPTED and err == "Interrupted.\n"


def test_orbax_leftovers_after_a_failed_read_do_not_bury_the_message(monkeypatch, capsys):
  monkeypatch.setattr("sys.argv", ["prog"])
  seen = []
  monkeypatch.setattr("sys.unraisablehook", seen.append)
  asyncio_log = logging.getLogger("asyncio")
  monkeypatch.setattr(asyncio_log, "filters", [])
  _boundary(lambda argv: None, capsys)  # installs both, as every script does
  for e in (RuntimeError("Event loop is closed"), RuntimeError("something else")):
    sys.unraisablehook(types.SimpleNamespace(exc_value=e))
  assert [str(u.exc_value) for u in seen] == ["something else"]
  record = lambda msg: logging.LogRecord("asyncio", logging.ERROR, __file__, 1, msg, (), None)  # noqa: E731
  assert asyncio_log.filter(record("Task was destroyed but it is pending!"))
  assert not asyncio_log.filter(record("Task exception was never retrieved"))


def test_libraries_info_logging_is_dropped_and_their_warnings_kept():
  def record(level, path, error=None):
    exc_info = (type(error), error, None) if error else None
    return logging.LogRecord("absl", level, path, 1, "msg", None, exc_info)
  site = os.path.join(os.sep, "venv", "lib", "site-packages")
  orbax = os.path.join(site, "orbax", "checkpoint", "checkpoint.py")
  assert not cli.library_log_filter(record(logging.INFO, orbax))
  assert not cli.library_log_filter(record(logging.INFO, os.path.join(site, "grain", "x.py")))
  assert cli.library_log_filter(record(logging.WARNING, orbax))
  assert cli.library_log_filter(record(logging.INFO, os.path.join(os.sep, "repo", "transformer",
                                                                  "loop.py")))
  # A save on a full disk: orbax's threads log its traceback several times (hundreds of lines)
  # before the run reports the same error in one line; any other error of orbax still shows.
  full = ValueError("RESOURCE_EXHAUSTED: Failed to write: No space left on device [28]")
  assert not cli.library_log_filter(record(logging.ERROR, orbax, full))
  # So does a checkpoint directory made read-only during the run (4 tracebacks printed before).
  read_only = ValueError('PERMISSION_DENIED: Error writing local file "c/300/_sharding": '
                         "Read-only file system [os_error_code='30']")
  assert not cli.library_log_filter(record(logging.ERROR, orbax, read_only))
  assert cli.library_log_filter(record(logging.ERROR, orbax, ValueError("bad shape")))
  assert cli.library_log_filter(record(logging.ERROR, orbax))


def test_the_decoding_flags_build_a_decode_config():
  from absl import flags
  values = flags.FlagValues()  # a registry of its own: the scripts' FLAGS stay untouched
  build = cli.define_decode_flags(default_method="greedy", flag_values=values)
  values(["prog", "--beam_size=3", "--alpha=0.2"])
  assert build() == DecodeConfig(method="greedy", beam_size=3, alpha=0.2)


def test_tfds_chatter_about_the_packages_own_configs_is_dropped_and_nothing_else():
  from transformer.data import LocalTextConfig, SyntheticConfig

  def record(msg, *args):
    return logging.LogRecord("absl", logging.WARNING, "tfds.py", 1, msg, args, None)
  for config in (SyntheticConfig(name="s"), LocalTextConfig(name="t")):
    assert not cli.known_tfds_chatter(record("Using custom data configuration: %s", config))
  assert cli.known_tfds_chatter(record("Using custom data configuration: %s", "someone's"))
  assert not cli.known_tfds_chatter(record("Variant folder %s has no dataset_info.json", "/d"))
  assert cli.known_tfds_chatter(record("Downloading %s", "x"))


def test_importing_the_data_package_changes_no_logger_and_the_scripts_filter_its_chatter(
    monkeypatch, capsys):
  """An import with no global side effect: the absl logger's filters before and after
  `import transformer.data` are the same (a fresh process: this one has imported it);
  run_script, where every script starts, installs the filter."""
  import subprocess
  check = ("import logging\n"
           "before = list(logging.getLogger('absl').filters)\n"
           "import transformer.data\n"
           "after = logging.getLogger('absl').filters\n"
           "assert after == before, after\n")
  run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
  assert run.returncode == 0, run.stderr
  monkeypatch.setattr("sys.argv", ["prog"])
  absl_logger = logging.getLogger("absl")
  monkeypatch.setattr(absl_logger, "filters", list(absl_logger.filters))  # restored after
  _boundary(lambda argv: None, capsys)
  assert cli.known_tfds_chatter in absl_logger.filters
