"""setup.py: the Python it asks for is the one the installed stack needs."""

import importlib.metadata
import re

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from conftest import REPO

STACK = ("jax", "jaxlib", "flax", "orbax-checkpoint", "grain")


def python_requires() -> SpecifierSet:
  text = (REPO / "setup.py").read_text()
  return SpecifierSet(re.search(r'python_requires="([^"]+)"', text).group(1))


def _lowest_python(specifier: SpecifierSet) -> Version:
  """The lowest 3.x.0 the specifier admits."""
  return next(v for v in (Version(f"3.{minor}") for minor in range(6, 30)) if v in specifier)


def test_python_requires_is_at_least_what_the_installed_stack_requires():
  ours = _lowest_python(python_requires())
  for dist in STACK:
    theirs = importlib.metadata.metadata(dist).get("Requires-Python")
    if theirs:
      assert ours >= _lowest_python(SpecifierSet(theirs)), (
          f"{dist} {importlib.metadata.version(dist)} requires Python {theirs}; "
          f"setup.py's python_requires admits {ours}")
