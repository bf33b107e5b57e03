"""setup.py: the installed stack is inside its pins, and its Python floor is one CI tests; the
version and licence declared once; the core is the model layer's needs and the extras the
rest; every floor is the version CI's Python 3.11 job runs (constraints-py311.txt), and the
fast-moving five have no cap."""

import importlib.metadata
import re
import sys

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from conftest import REPO


def _setup_text() -> str:
  return (REPO / "setup.py").read_text()


def test_every_installed_requirement_is_inside_setup_pys_pins():
  """The suite passing certifies the pins only for versions they admit: each requirement of
  the installed package (extras included, where installed) is met by what is installed."""
  checked = 0
  for line in importlib.metadata.requires("transformer"):
    req = Requirement(line)
    try:
      installed = importlib.metadata.version(req.name)
    except importlib.metadata.PackageNotFoundError:
      assert req.marker is not None, f"{req.name} is required and not installed"
      continue  # an extra that is not installed here
    assert req.specifier.contains(Version(installed), prereleases=True), (
        f"{req.name} {installed} is outside setup.py's {req.specifier}")
    checked += 1
  assert checked >= 18  # the core's and the extras' installed here ([test]: train, analysis)


def test_python_floor_is_the_oldest_python_ci_tests():
  """python_requires admits no Python older than the one .ci/run's first environment uses, and
  this interpreter is one it admits."""
  floor = SpecifierSet(re.search(r'python_requires="([^"]+)"', _setup_text()).group(1))
  assert floor == SpecifierSet(">=3.11")
  assert Version(".".join(map(str, sys.version_info[:2]))) in floor
  ci = (REPO / ".ci" / "run").read_text()
  assert 'fresh_env .venv "$(python_of 3.11)"' in ci and "python_of 3.12" in ci


def test_the_tfds_floor_reads_prepared_datasets_with_todays_protobuf():
  """tensorflow-datasets 4.9.7-4.9.9 fail in dataset_info with protobuf 7 (seen on a GPU
  image: "'FieldDescriptor' object has no attribute 'label'"); the floor leaves them out, and
  the installed pair reads a DatasetInfo proto back (every test that prepares a dataset and
  reads it does the whole of it)."""
  pins = {Requirement(line).name: Requirement(line).specifier
          for line in importlib.metadata.requires("transformer")}
  assert "4.9.9" not in pins["tensorflow-datasets"] and "4.9.10" in pins["tensorflow-datasets"]
  from tensorflow_datasets.core.proto import dataset_info_pb2
  info = dataset_info_pb2.DatasetInfo(name="rows", version="1.0.0")
  info.splits.add(name="train", shard_lengths=[3])
  back = dataset_info_pb2.DatasetInfo.FromString(info.SerializeToString())
  assert back.splits[0].shard_lengths == [3]


# What setup.py declares, read by running it with setuptools.setup replaced (nothing built).
FAST_MOVING = ("jax", "flax", "optax", "orbax-checkpoint", "grain")  # no upper bound


def _declared() -> dict:
  """setup()'s keywords, with a stand-in setuptools: a Python 3.12 venv comes without it."""
  import runpy
  import types
  from unittest import mock
  fake = types.ModuleType("setuptools")
  fake.setup = mock.Mock()
  fake.find_packages = lambda **kwargs: []
  with mock.patch.dict(sys.modules, {"setuptools": fake}):
    runpy.run_path(str(REPO / "setup.py"))
  return fake.setup.call_args.kwargs


def _requirements() -> dict[str, list[Requirement]]:
  """'core' and each extra: its requirements."""
  kwargs = _declared()
  return {"core": [Requirement(r) for r in kwargs["install_requires"]],
          **{extra: [Requirement(r) for r in reqs]
             for extra, reqs in kwargs["extras_require"].items()}}


def _pins() -> dict[str, Version]:
  """constraints-py311.txt: each package's pinned version, by canonical name."""
  from packaging.utils import canonicalize_name
  pins = {}
  for line in (REPO / "constraints-py311.txt").read_text().splitlines():
    if line.strip() and not line.startswith("#"):
      name, _, version = line.partition("==")
      pins[canonicalize_name(name)] = Version(version)
  return pins


def test_the_version_and_licence_are_declared_once_and_installed():
  import transformer
  kwargs = _declared()
  assert kwargs["version"] == transformer.__version__ == "0.2.0"
  assert 'version="' not in _setup_text()  # read from transformer/__init__.py, not repeated
  assert kwargs["license"] == "Apache-2.0"
  assert "License :: OSI Approved :: Apache Software License" in kwargs["classifiers"]
  assert (REPO / "LICENSE").read_text().split()[:3] == ["Apache", "License", "Version"]
  meta = importlib.metadata.metadata("transformer")  # what `pip show transformer` reports
  assert (meta["Version"], meta["License"]) == (transformer.__version__, "Apache-2.0")


def test_the_fast_moving_five_have_no_upper_bound():
  """Only a version known to break may be left out (`!=X`, its comment saying what breaks)."""
  for extra, reqs in _requirements().items():
    for req in reqs:
      if req.name in FAST_MOVING:
        ops = {spec.operator for spec in req.specifier}
        assert ops <= {">=", "!="}, f"{extra}: {req} caps {req.name}"


def test_every_lower_bound_is_the_version_ci_tests_on_python_3_11():
  """Each declared package has a floor, the version constraints-py311.txt pins (the versions
  .ci/run's Python 3.11 job installs and tests)."""
  from packaging.utils import canonicalize_name
  pins = _pins()
  for extra, reqs in _requirements().items():
    for req in reqs:
      name = canonicalize_name(req.name)
      assert name in pins, f"{extra}: {req.name} is not in constraints-py311.txt"
      floors = [Version(s.version) for s in req.specifier if s.operator == ">="]
      assert floors == [pins[name]], f"{extra}: {req} (constraints-py311.txt: {pins[name]})"


def test_the_core_is_the_model_layer_and_the_extras_add_the_rest():
  """The core holds what the model layer (.importlinter: transformer.models and below) imports;
  [test] holds [train] and [analysis] (the README's test command sets everything up); and
  transformer/extras.py knows each package of [train] and [analysis] by its module."""
  import ast
  import configparser
  from transformer import extras
  reqs = {extra: {r.name for r in rs} for extra, rs in _requirements().items()}
  layers = configparser.ConfigParser()
  layers.read(REPO / ".importlinter")
  names = [n.strip() for line in layers["importlinter:contract:layers"]["layers"].split("\n")
           for n in line.split("|") if n.strip()]
  model_layer = names[names.index("transformer.models"):]
  imported = set()
  for module in model_layer:
    tree = ast.parse((REPO / (module.replace(".", "/") + ".py")).read_text())
    imported |= {(a.name if isinstance(node, ast.Import) else node.module).split(".")[0]
                 for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                 for a in node.names if getattr(node, "level", 0) == 0}
  third_party = imported - set(sys.stdlib_module_names) - {"transformer"}
  served = {d for m in third_party for d in importlib.metadata.packages_distributions()[m]}
  assert served == reqs["core"] == {"jax", "flax", "numpy", "etils"}
  assert reqs["train"] | reqs["analysis"] <= reqs["test"]
  assert {e: set(modules) for e, modules in extras.MODULES.items()} == {
      "train": reqs["train"], "analysis": reqs["analysis"]}


def test_ci_tests_the_pinned_floors_on_3_11_and_the_newest_on_3_12():
  ci = (REPO / ".ci" / "run").read_text()
  assert 'fresh_env .venv "$(python_of 3.11)" test,tpu -c constraints-py311.txt\n' in ci
  assert 'in_clone newest fresh_env .venv-newest "$(python_of 3.12)" test > ' in ci
  assert 'in_clone core core_env .venv-core "$(python_of 3.11)" > ' in ci
  # Each built beside the first environment's tests is waited for, then tested.
  assert ci.index('finished "$newest"') < ci.index('.venv-newest/bin/python -m pytest -n 2')
  assert ci.index('finished "$core"') < ci.index("(cd .ci-work/core && core_env_check .venv-core)")
