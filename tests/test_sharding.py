"""The data mesh: host batches become global arrays split over every device."""

import numpy as np
import pytest

from transformer.training import sharding


def test_global_batch_is_split_over_the_data_axis(devices):
  mesh = sharding.make_mesh()
  assert mesh.axis_names == ("data",) and mesh.devices.size == 8
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


def test_single_process_needs_no_distributed_init():
  sharding.initialize_distributed()  # no flags, no cluster: a no-op
