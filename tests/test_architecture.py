"""The layers of the package (.importlinter): checked here, and shown to fail on a wrong import;
private names stay inside their module; no function runs past sixty lines."""

import ast
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
NAMEDTUPLE_API = {"_fields", "_replace", "_asdict", "_make"}  # public despite the underscore
LINT_IMPORTS = shutil.which("lint-imports") or os.path.join(os.path.dirname(sys.executable),
                                                            "lint-imports")


def _lint(root: pathlib.Path) -> subprocess.CompletedProcess:
  env = {**os.environ, "PYTHONPATH": str(root)}
  return subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=root, env=env, capture_output=True,
                        text=True, timeout=120)


def test_the_layer_contract_holds():
  run = _lint(REPO)
  assert run.returncode == 0, run.stdout + run.stderr
  assert "3 kept, 0 broken" in run.stdout


@pytest.mark.parametrize("module, line, broken", [
    # a lower layer importing a higher one
    ("positional.py", "from transformer.training import loop",
     "transformer.positional -> transformer.training.loop"),
    # checkpoint and data are siblings: neither imports the other
    ("checkpoint/params.py", "from transformer.data import packing",
     "transformer.checkpoint.params -> transformer.data.packing"),
    # the data pipeline knows nothing of the model
    ("data/packing.py", "from transformer import layers",
     "transformer.data.packing -> transformer.layers"),
    # the model stays free of absl, orbax and ml_collections
    ("attention.py", "import ml_collections", "transformer.attention -> ml_collections"),
])
def test_each_contract_fails_on_a_wrong_import(tmp_path, module, line, broken):
  shutil.copytree(REPO / "transformer", tmp_path / "transformer",
                  ignore=shutil.ignore_patterns("__pycache__"))
  shutil.copy(REPO / ".importlinter", tmp_path / ".importlinter")
  bad = tmp_path / "transformer" / module
  bad.write_text(bad.read_text() + f"\n{line}  # wrong way\n")
  run = _lint(tmp_path)
  assert run.returncode != 0
  assert "BROKEN" in run.stdout and broken in run.stdout, run.stdout


def _python_files():
  for folder in ("transformer", "scripts", "configs"):
    yield from (REPO / folder).rglob("*.py")


def test_private_names_stay_in_their_module():
  crossings = []
  for path in _python_files():
    tree = ast.parse(path.read_text())
    modules = set()  # names bound to a transformer module by an import
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformer"):
        crossings += [f"{path.name}: from {node.module} import {a.name}" for a in node.names
                      if a.name.startswith("_")]
        modules.update(a.asname or a.name for a in node.names)
      elif isinstance(node, ast.Import):
        modules.update((a.asname or a.name).split(".")[0] for a in node.names
                       if a.name.startswith("transformer"))
    for node in ast.walk(tree):
      if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
          and node.value.id in modules and node.attr.startswith("_")
          and not node.attr.startswith("__") and node.attr not in NAMEDTUPLE_API):
        crossings.append(f"{path.name}:{node.lineno}: {node.value.id}.{node.attr}")
  assert not crossings, crossings


def test_comments_speak_of_the_repository_only():
  outside = ("issue ", "DESIGN", "RESEARCH.md")
  found = [f"{p.relative_to(REPO)}: {word}" for p in _python_files()
           for word in outside if word in p.read_text()]
  assert not found, found


MAX_FUNCTION_LINES = 60  # docstring included: a longer function does more than one job


def test_no_function_in_the_package_is_longer_than_sixty_lines():
  long = [f"{path.relative_to(REPO)}:{node.lineno} {node.name} "
          f"({node.end_lineno - node.lineno + 1} lines)"
          for path in (REPO / "transformer").rglob("*.py")
          for node in ast.walk(ast.parse(path.read_text()))
          if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
          and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
  assert not long, long
