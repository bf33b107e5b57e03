"""What each extra of the package serves, and the one line a script ends with when it is missing.

`pip install .` installs the model layer alone (jax, flax, numpy, etils.epath: models,
layers, attention, embeddings, positional encodings, configs). The scripts need more:

  train     the training system, data, decoding, checkpoints, evaluation
  analysis  the figures and the sweeps' statistics (on top of train)

Each script calls `require` before its other imports: absl and ml_collections, which the
scripts import first, are not part of the core either, and a ModuleNotFoundError traceback
would not say which extra to install. This module imports only the standard library, so that
it runs where nothing else of the package does.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import pathlib
import sys
import urllib.parse
from typing import Optional

# The import name of each package an extra installs, package for package as setup.py lists
# them (tests/test_setup.py holds the two to each other).
MODULES: dict[str, dict[str, str]] = {
    "train": {
        "optax": "optax", "orbax-checkpoint": "orbax.checkpoint",
        "tensorflow-datasets": "tensorflow_datasets", "array-record": "array_record",
        "grain": "grain", "ml-collections": "ml_collections", "absl-py": "absl",
        "sentencepiece": "sentencepiece", "sacrebleu": "sacrebleu", "tqdm": "tqdm",
        "filelock": "filelock", "importlib_resources": "importlib_resources", "etils": "etils",
        "tensorboardX": "tensorboardX",
    },
    "analysis": {"matplotlib": "matplotlib", "scipy": "scipy"},
}
WHAT = {"train": "the training stack", "analysis": "the analysis tools"}


def missing(*extras: str) -> list[str]:
  """The modules of `extras` that cannot be imported here, in setup.py's order ([] when every
  one is installed)."""
  return [module for extra in extras for module in MODULES[extra].values()
          if not _importable(module)]


def _importable(module: str) -> bool:
  """Whether `module` is installed, without importing it or its parent package (orbax's: a
  script's --help imports none of the training stack)."""
  if module in sys.modules:  # imported already, or set to None, which makes its import fail
    return sys.modules[module] is not None
  parent, _, child = module.partition(".")
  try:
    spec = importlib.util.find_spec(parent)
  except (ImportError, ValueError):  # a parent set to None, or one without a spec
    return False
  if spec is None or not child:
    return spec is not None
  return importlib.machinery.PathFinder.find_spec(
      child, list(spec.submodule_search_locations or [])) is not None


def require(*extras: str, script: Optional[str] = None) -> None:
  """Ends the script with one line when a module of `extras` is missing: what the script
  needs, the pip command that adds it, and the modules missing. `script` defaults to the
  command line's (sys.argv[0])."""
  lacking = [extra for extra in extras if missing(extra)]
  if lacking:
    needs = " and ".join(WHAT[extra] for extra in lacking)
    sys.exit(f"error: {script or sys.argv[0]} needs {needs}: "
             f"{install_command(lacking)} (missing: {', '.join(missing(*lacking))})")


def install_command(extras: list[str]) -> str:
  """The pip command that adds `extras` to this installation: from the directory it was
  installed from (editable where it was), else by the package's name."""
  source, editable = _installed_from()
  names = ",".join(extras)
  if source is None:
    return f"pip install 'transformer[{names}]'"
  where = "." if os.path.abspath(source) == os.getcwd() else source
  return f"pip install {'-e ' if editable else ''}'{where}[{names}]'"


def _installed_from() -> tuple[Optional[str], bool]:
  """(directory, editable) of this installation: pip's record of its source (direct_url.json,
  PEP 610), else the checkout this file sits in when it is one (not installed, on PYTHONPATH);
  (None, False) for an installation from an index or a wheel."""
  import importlib.metadata  # here: only a script about to end needs it

  try:
    record = importlib.metadata.distribution("transformer").read_text("direct_url.json")
  except importlib.metadata.PackageNotFoundError:
    record = None
  if record:
    url = json.loads(record)
    if "dir_info" not in url or not url.get("url", "").startswith("file://"):
      return None, False
    return (urllib.parse.unquote(urllib.parse.urlparse(url["url"]).path),
            bool(url["dir_info"].get("editable")))
  checkout = pathlib.Path(__file__).resolve().parents[1]
  return (str(checkout), True) if (checkout / "setup.py").is_file() else (None, False)
