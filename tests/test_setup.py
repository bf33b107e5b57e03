"""setup.py: the installed stack is inside its pins, and its Python floor is one CI tests."""

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
  assert checked >= 18  # the install_requires list, at least


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
