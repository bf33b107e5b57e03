"""The layers of the package (.importlinter): checked here, and shown to fail on a wrong import;
private names stay inside their module; no function runs past sixty lines."""

import ast
import os
import pathlib
import re
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


# What only the Run (transformer/training/run.py) builds, and the modules that define how. A
# checkpoint read for decoding (loading) and the decoding benchmark's bare model take theirs
# from the Run's own builders.
_BUILDERS = {
    "make_mesh": "training/sharding.py", "build_steps": "training/steps.py",
    "model_class": "models.py", "build_model": "trained/loading.py",
    "random_model": "research/benchmarking.py", "init_params": "models.py training/steps.py",
    "init_state": "training/steps.py", "init": "models.py training/steps.py",
    "eval_shape": "training/steps.py",
    "restore": "checkpoint/manager.py checkpoint/params.py",
    "Checkpointer": "checkpoint/manager.py", "TrainState": "training/steps.py",
    "Transformer": "", "DecoderOnly": "",
}
_RUN = "training/run.py"


def _calls(path: pathlib.Path):
  """(line, name) of every call in a file: f(...) and x.f(...) both give f."""
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Call):
      func = node.func
      name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
      if name:
        yield node.lineno, name


def test_only_the_run_builds_a_model_a_mesh_steps_or_a_state():
  outside = []
  for path in list((REPO / "transformer").rglob("*.py")) + list((REPO / "scripts").glob("*.py")):
    where = str(path.relative_to(REPO / "transformer")) \
        if REPO / "transformer" in path.parents else str(path.relative_to(REPO))
    for line, name in _calls(path):
      if name in _BUILDERS and where != _RUN and where not in _BUILDERS[name].split():
        outside.append(f"{where}:{line} {name}(...)")
  assert not outside, f"built outside {_RUN}: {outside}"


def test_no_caller_asks_which_kind_of_model_it_holds():
  """The kind's facts live in the models (each answers `models.ModelKind`) and in the data
  rows' definition (model_kinds.py); diagnostics name no module of the model."""
  own = {"models.py", "model_kinds.py"}
  asked = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in _python_files()
           if p.name not in own
           for n, line in enumerate(p.read_text().splitlines(), 1)
           if any(w in line for w in ("reads_inputs", "reads_source", "\"inputs\" in",
                                      "'inputs' in"))]
  code_names = [f"{p.relative_to(REPO)}:{node.lineno}: {node.id}"
                for p in _python_files() if p.name not in own
                for node in ast.walk(ast.parse(p.read_text()))
                if isinstance(node, ast.Name) and node.id in ("Transformer", "DecoderOnly")]
  assert not asked and not code_names, asked + code_names


def test_diagnostics_name_no_module_of_the_model():
  """Every Flax module name of both models, on the paths their params and 'intermediates'
  take, is absent from transformer/diagnostics.py's code (docstrings aside): the models hand
  the diagnostics what their stacks recorded (`models.ModelKind.stacks`)."""
  import jax
  import jax.numpy as jnp
  from transformer import models
  from transformer.config import ModelConfig
  names = set()
  for cls in (models.Transformer, models.DecoderOnly):
    for scan in (False, True):
      model = cls(ModelConfig(vocab_size=8, d_model=8, num_heads=2, d_ff=8, max_len=4,
                              num_encoder_layers=1, num_decoder_layers=1, scan_layers=scan,
                              share_embeddings=False, logits_via_embedding=False))
      rows = [jnp.ones((1, 4), jnp.int32)] * len(model.batch_keys)
      variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), *rows)
      _, state = jax.eval_shape(lambda v: model.apply(v, *rows, mutable=["intermediates"]),
                                variables)
      # Module names: a param's path less the param, a recorded value's less its name.
      for tree, leaf_parts in ((variables["params"], 1), (state["intermediates"], 2)):
        for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]:
          names.update(str(getattr(p, "key", "")) for p in path[:-leaf_parts])
  tree = ast.parse((REPO / "transformer" / "diagnostics.py").read_text())
  docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                and isinstance(node.body[0], ast.Expr)
                and isinstance(node.body[0].value, ast.Constant)}
  strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
             and isinstance(node.value, str) and id(node) not in docstrings}
  parts = {part for s in strings for part in re.split(r"[^\w]+", s)}
  found = sorted(names & parts)
  assert "self_attention" in names and not found, found


def test_every_script_is_thin():
  """A script parses its flags and calls the library: at most 90 lines each."""
  long = {p.name: n for p in (REPO / "scripts").glob("*.py")
          if (n := len(p.read_text().splitlines())) > 90}
  assert not long, long
