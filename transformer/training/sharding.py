"""Data parallelism over every device of every host: one Mesh with a 'data' axis.

The program is pmap's SPMD program written with jit + NamedSharding: params are replicated,
batches are split along their first axis, and the loss is a sum over the *global* batch, so
XLA inserts the gradient all-reduce. One code path serves 1 CPU, 8 GPUs and a multi-host pod.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import jax
import numpy as np
from absl import logging
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from transformer.errors import ConfigError

DATA_AXIS = "data"


def initialize_distributed(coordinator_address: Optional[str] = None,
                           num_processes: Optional[int] = None,
                           process_id: Optional[int] = None) -> None:
  """Starts jax.distributed when running on several hosts; a no-op for one process.

  Explicit flags win; otherwise JAX's own detection runs on a TPU pod slice or under SLURM.
  """
  if coordinator_address:
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes, process_id=process_id)
  elif _on_cluster():
    jax.distributed.initialize()  # auto-detected coordinator (TPU metadata, SLURM env)
  logging.info("process %d of %d, %d local / %d global devices", jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())


def _on_cluster() -> bool:
  import os
  slurm = int(os.environ.get("SLURM_NTASKS", "1")) > 1 and "SLURM_JOB_ID" in os.environ
  tpu_pod = bool(os.environ.get("TPU_WORKER_HOSTNAMES", "").count(","))
  return slurm or tpu_pod


def make_mesh(devices: Optional[Sequence[jax.Device]] = None) -> Mesh:
  """A 1-D mesh over `devices` (default: all devices of all processes)."""
  devices = jax.devices() if devices is None else devices
  return Mesh(np.asarray(devices), (DATA_AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Split the leading (batch) axis over the data axis."""
  return NamedSharding(mesh, P(DATA_AXIS))


def check_batch_size(batch_size: int, mesh: Mesh) -> None:
  """The global batch must split evenly over the devices."""
  n = mesh.devices.size
  if batch_size % n:
    raise ConfigError(f"batch_size={batch_size} is not divisible by the {n} devices; set "
                     f"--config.batch_size to a multiple of {n}.")


def global_batch(batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """Host-local numpy batch (this process's rows) -> global jax arrays sharded over the mesh."""
  sharding = batch_sharding(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}


def to_host(tree: Any) -> Any:
  """Fully replicated (or fully addressable) arrays -> numpy on this host."""
  return jax.tree_util.tree_map(lambda x: np.asarray(jax.device_get(x)), tree)
