"""The error classes: one-line messages, and the builtins callers expect."""

from transformer import errors


def test_user_errors_are_also_the_builtin_callers_expect():
  assert issubclass(errors.ConfigError, ValueError)
  assert issubclass(errors.MissingFileError, FileNotFoundError)
  assert issubclass(errors.RunError, RuntimeError)
  assert errors.one_line(ValueError("a\n  b")) == "a b"
  assert errors.one_line(ValueError("x" * 50), limit=10) == "xxxxxxx..."
