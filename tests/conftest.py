"""Shared test set-up: 8 forced CPU host devices, so data-parallel code runs as on a pod slice.

XLA_FLAGS must be set before jax is first imported, which is why it is set here, at collection.
"""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402  (after XLA_FLAGS)
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def devices():
  assert jax.device_count() == 8, "tests expect 8 forced CPU devices (see conftest.py)"
  return jax.devices()
