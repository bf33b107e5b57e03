"""The data mesh: host batches become global arrays split over every device."""

import re

import jax
import numpy as np
import pytest

from transformer.errors import ConfigError
from transformer.training import sharding


def test_global_batch_is_split_over_the_data_axis(devices):
  mesh = sharding.make_mesh()
  assert mesh.axis_names == ("data", "fsdp") and dict(mesh.shape) == {"data": 8, "fsdp": 1}
  batch = {"inputs": np.arange(16 * 3, dtype=np.int32).reshape(16, 3)}
  arrays = sharding.global_batch(batch, mesh)
  x = arrays["inputs"]
  assert x.shape == (16, 3) and len(x.addressable_shards) == 8
  assert all(s.data.shape == (2, 3) for s in x.addressable_shards)
  np.testing.assert_array_equal(sharding.to_host(x), batch["inputs"])


def test_batch_size_must_divide(devices):
  sharding.check_batch_size(16, sharding.make_mesh())
  with pytest.raises(ValueError, match="batch_size=12 is not divisible by the 8 devices"):
    sharding.check_batch_size(12, sharding.make_mesh())
  sharding.check_batch_size(12, sharding.make_mesh(devices[:4]))


@pytest.mark.parametrize("coordinator, count, pid, said", [
    (None, 2, 0, "--coordinator_address missing"),  # trained as one process, exit 0
    ("127.0.0.1:23456", None, None, "--num_processes, --process_id missing"),
    ("127.0.0.1:23456", 2, 2, "--process_id=2 with --num_processes=2"),
    ("127.0.0.1:23456", 0, 0, "--process_id=0 with --num_processes=0"),
    ("notahost", 2, 0, "--coordinator_address=notahost is not host:port"),
    ("no-such-host.invalid:23456", 2, 0, "host 'no-such-host.invalid' does not resolve"),
])
def test_inconsistent_process_flags_are_refused_before_anything_starts(coordinator, count, pid,
                                                                       said):
  with pytest.raises(ConfigError, match=re.escape(said)):
    sharding.initialize_distributed(coordinator, count, pid)
  assert jax.process_count() == 1  # nothing was started


def test_one_process_without_flags_starts_nothing():
  sharding.check_process_flags(None, None, None)
  sharding.check_process_flags("localhost:23456", 2, 1)  # consistent: passes
  sharding.initialize_distributed()  # no flags, no cluster
  assert jax.process_count() == 1


def test_param_spec_splits_the_largest_dimension_fsdp_divides():
  P = sharding.P
  assert sharding.param_spec((512, 2048), 8) == P(None, "fsdp")
  assert sharding.param_spec((2048, 512), 8) == P("fsdp")
  assert sharding.param_spec((30, 64, 8), 8) == P(None, "fsdp")  # 30 does not split 8 ways
  assert sharding.param_spec((30,), 8) == P()  # nothing splits: replicated
  assert sharding.param_spec((), 8) == P()  # a step count
  assert sharding.param_spec((512, 2048), 1) == P()  # all-data


def test_an_fsdp_mesh_and_its_mistakes(devices):
  mesh = sharding.make_mesh(devices, 4)
  assert dict(mesh.shape) == {"data": 2, "fsdp": 4}
  assert dict(sharding.make_mesh(devices, -1).shape) == {"data": 1, "fsdp": 8}
  with pytest.raises(ValueError, match="fsdp=3 must be -1 .* divides the 8 devices"):
    sharding.make_mesh(devices, 3)
  x = sharding.global_batch({"t": np.arange(32, dtype=np.int32).reshape(16, 2)}, mesh)["t"]
  assert all(s.data.shape == (2, 2) for s in x.addressable_shards)  # rows over all 8 devices
  tree = {"w": np.zeros((8, 6), np.float32), "b": np.zeros((6,), np.float32)}
  shardings = sharding.tree_shardings(tree, mesh)
  assert shardings["w"].spec == sharding.P("fsdp") and shardings["b"].spec == sharding.P()
  assert sharding.replicated_bytes(tree, mesh) == 6 * 4
