"""A core install (no extras) runs no script into a traceback: each script asks first for the
extras it needs (transformer/extras.py) and, where one is missing, ends with one line naming
it, the pip command and the modules missing. A missing module is simulated (sys.modules[name]
= None, which makes its import fail), so no second environment is needed."""

import ast
import json
import subprocess
import sys

import pytest

from conftest import DEFAULT, REPO, script_env
from transformer import extras

# The extras each script asks for.
NEEDS = {"analyze.py": ("train", "analysis"), "benchmark.py": ("train", "analysis"),
         "compile.py": ("train",), "contrasts.py": ("train", "analysis"),
         "decode.py": ("train",), "evaluate.py": ("train",), "make_corpus.py": ("train",),
         "train.py": ("train",), "sweep.py": ("train", "analysis"),
         "findings.py": ("train", "analysis")}
PENDING: set[str] = set()


def _run_without(modules, script, *flags, cwd=REPO):
  code = (f"import runpy, sys\n"
          f"for name in {list(modules)!r}:\n"
          f"  sys.modules[name] = None\n"
          f"sys.argv = ['scripts/{script}', *{list(flags)!r}]\n"
          f"runpy.run_path('scripts/{script}', run_name='__main__')\n")
  return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=script_env(),
                        capture_output=True, text=True, timeout=120)


def test_train_without_the_training_stack_is_one_line_and_writes_nothing(tmp_path):
  workdir = tmp_path / "run"
  run = _run_without(["tensorflow_datasets", "grain"], "train.py", f"--config={DEFAULT}",
                     f"--workdir={workdir}")
  assert run.returncode == 1
  assert run.stderr == ("error: scripts/train.py needs the training stack: pip install -e "
                        "'.[train]' (missing: tensorflow_datasets, grain)\n")
  assert run.stdout == "" and not workdir.exists()


def test_a_script_names_only_the_extras_it_lacks():
  run = _run_without(["matplotlib"], "analyze.py", "--workdir=/nonexistent")
  assert run.returncode == 1
  assert run.stderr == ("error: scripts/analyze.py needs the analysis tools: pip install -e "
                        "'.[analysis]' (missing: matplotlib)\n")
  run = _run_without(["absl", "scipy"], "contrasts.py")
  assert run.stderr == ("error: scripts/contrasts.py needs the training stack and the analysis "
                        "tools: pip install -e '.[train,analysis]' (missing: absl, scipy)\n")


def _first_third_party_import(tree: ast.Module) -> int:
  """The line of the script's first import of neither the standard library nor the package."""
  for node in tree.body:
    names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
             [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
    if any(n.split(".")[0] not in sys.stdlib_module_names | {"transformer"} for n in names):
      return node.lineno
  return sys.maxsize


def _requires(tree: ast.Module) -> tuple[int, tuple[str, ...]]:
  """(line, extras) of the script's module-level extras.require(...) call; (0, ()) if none."""
  for node in tree.body:
    call = node.value if isinstance(node, ast.Expr) else None
    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
        and call.func.attr == "require" and getattr(call.func.value, "id", "") == "extras"):
      return node.lineno, tuple(arg.value for arg in call.args)
  return 0, ()


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO / "scripts").glob("*.py")))
def test_every_script_asks_for_its_extras_before_it_imports_them(script):
  if script in PENDING:
    pytest.skip(f"scripts/{script} is edited elsewhere; it gains the extras.require line there")
  tree = ast.parse((REPO / "scripts" / script).read_text())
  line, asked = _requires(tree)
  assert 0 < line < _first_third_party_import(tree), f"scripts/{script}: require it first"
  assert asked == NEEDS[script]


def test_the_command_installs_from_where_the_package_came_from(monkeypatch, tmp_path):
  """Editable from the current directory: `-e '.[...]'`; from elsewhere: its path; from an
  index or a wheel: by name (pip's record, direct_url.json, says which)."""
  import importlib.metadata
  checkout = tmp_path / "checkout"
  for url, cwd, want in (
      ({"url": checkout.as_uri(), "dir_info": {"editable": True}}, checkout,
       "pip install -e '.[train]'"),
      ({"url": checkout.as_uri(), "dir_info": {}}, tmp_path, f"pip install '{checkout}[train]'"),
      ({"url": "file:///w/transformer-0.2.0-py3-none-any.whl", "archive_info": {}}, tmp_path,
       "pip install 'transformer[train]'")):
    checkout.mkdir(exist_ok=True)
    monkeypatch.chdir(cwd)
    distribution = type("D", (), {"read_text": lambda self, name, u=url: json.dumps(u)})()
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name, d=distribution: d)
    assert extras.install_command(["train"]) == want


def test_what_is_installed_here_is_every_extra():
  assert extras.missing("train", "analysis") == []
