"""The mesh: a 'data' axis and an 'fsdp' axis over every device of every host.

Batches are split along their first axis over both axes (every device gets its own rows). On
the 'data' axis alone (fsdp=1, the default) params and optimizer state are replicated: pmap's
SPMD program written with jit + NamedSharding, XLA all-reducing the gradient. With fsdp=N each
weight is also split N ways along its largest dimension that N divides (`param_spec`), and so
are its gradient and optimizer state; XLA gathers a weight where a layer needs it and
reduce-scatters its gradient. The loss is a sum over the *global* batch, so the update is the
same on 1 device or 256, whatever the mesh. One code path serves 1 CPU, 8 GPUs and a pod.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
import threading
from typing import Any, Iterator, Optional, Sequence

import jax
import numpy as np
from absl import logging
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from transformer.errors import ConfigError

DATA_AXIS = "data"
FSDP_AXIS = "fsdp"


def check_process_flags(coordinator_address: Optional[str], num_processes: Optional[int],
                        process_id: Optional[int]) -> None:
  """The explicit multi-process flags: all three or none, consistent, the coordinator a
  host:port this machine can resolve. Checked before anything starts."""
  given = {"--coordinator_address": coordinator_address, "--num_processes": num_processes,
           "--process_id": process_id}
  missing = [name for name, value in given.items() if value is None]
  if len(missing) == 3:
    return
  if missing:
    raise ConfigError(f"{', '.join(missing)} missing: a multi-process run needs "
                      "--coordinator_address, --num_processes and --process_id together (none "
                      "for one process, or where a TPU pod or SLURM is detected).")
  if num_processes < 1 or not 0 <= process_id < num_processes:
    raise ConfigError(f"--process_id={process_id} with --num_processes={num_processes}: the "
                      "count must be >= 1 and the id in [0, count).")
  host, _, port = coordinator_address.rpartition(":")
  if not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise ConfigError(f"--coordinator_address={coordinator_address} is not host:port (e.g. "
                      "10.0.0.2:12345, process 0's address).")
  try:
    socket.getaddrinfo(host.strip("[]"), int(port))
  except socket.gaierror as e:
    raise ConfigError(f"--coordinator_address={coordinator_address}: host {host!r} does not "
                      f"resolve here ({e.strerror}).") from None


def initialize_distributed(coordinator_address: Optional[str] = None,
                           num_processes: Optional[int] = None,
                           process_id: Optional[int] = None, timeout_s: int = 300) -> None:
  """Starts jax.distributed when running on several hosts; a no-op for one process.

  Explicit flags win (checked by check_process_flags); otherwise JAX's own detection runs on a
  TPU pod slice or under SLURM. The wait for the other processes is said, and after
  `timeout_s` ends the process with one line naming who was waited for, where.
  """
  check_process_flags(coordinator_address, num_processes, process_id)
  if coordinator_address:
    logging.warning("Process %d of %d: waiting up to %d s for all %d processes to join at %s.",
                    process_id, num_processes, timeout_s, num_processes, coordinator_address)
    giving_up = (f"error: process {process_id} of {num_processes} waited {timeout_s} s at "
                 f"{coordinator_address} and not every process joined; start every process "
                 "with the same --coordinator_address and --num_processes, each with its own "
                 "--process_id.")
    with _ends_after(timeout_s, giving_up):
      # JAX's own limit is later: past it, its runtime aborts with a C++ stack instead.
      jax.distributed.initialize(coordinator_address=coordinator_address,
                                 num_processes=num_processes, process_id=process_id,
                                 initialization_timeout=timeout_s + 60)
  elif _on_cluster():
    jax.distributed.initialize()  # auto-detected coordinator (TPU metadata, SLURM env)
  logging.info("process %d of %d, %d local / %d global devices", jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())


@contextlib.contextmanager
def _ends_after(seconds: float, message: str) -> Iterator[None]:
  """Ends the process with `message` and exit status 1 if the block runs past `seconds` (the
  block is blocked inside the runtime, where no exception can reach it)."""
  def give_up() -> None:
    print(message, file=sys.stderr, flush=True)
    os._exit(1)

  timer = threading.Timer(seconds, give_up)
  timer.daemon = True
  timer.start()
  try:
    yield
  finally:
    timer.cancel()


def _on_cluster() -> bool:
  slurm = int(os.environ.get("SLURM_NTASKS", "1")) > 1 and "SLURM_JOB_ID" in os.environ
  tpu_pod = bool(os.environ.get("TPU_WORKER_HOSTNAMES", "").count(","))
  return slurm or tpu_pod


def make_mesh(devices: Optional[Sequence[Any]] = None, fsdp: int = 1) -> Mesh:
  """A (data, fsdp) mesh over `devices` (default: all devices of all processes).

  fsdp: the size of the 'fsdp' axis (1 = all-data; -1 = every device); it must divide the
  device count. `devices` may be those of a target that is not attached (a TPU topology).
  Devices keep their order (each process's devices next to each other, so its batch rows
  are one block), the fsdp axis innermost: a weight is gathered between neighbours.
  """
  devices = jax.devices() if devices is None else list(devices)
  n = len(devices)
  fsdp = fsdp_axis(fsdp, n)
  return Mesh(np.asarray(devices, dtype=object).reshape(n // fsdp, fsdp), (DATA_AXIS, FSDP_AXIS))


def fsdp_axis(fsdp: int, num_devices: int) -> int:
  """The fsdp axis size that config.fsdp asks for on `num_devices`; one line if it cannot."""
  size = num_devices if fsdp == -1 else fsdp
  if not isinstance(size, int) or size < 1 or num_devices % size:
    raise ConfigError(f"fsdp={fsdp} must be -1 (every device) or an integer >= 1 that divides "
                      f"the {num_devices} devices; set --config.fsdp accordingly.")
  return size


def batch_axes(mesh: Mesh) -> tuple[str, ...]:
  """The mesh axes a batch's rows are split over (every axis of a data/fsdp mesh)."""
  return tuple(a for a in (DATA_AXIS, FSDP_AXIS) if a in mesh.axis_names)


def fsdp_size(mesh: Mesh) -> int:
  return dict(mesh.shape).get(FSDP_AXIS, 1)


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Split the leading (batch) axis over every device of the mesh."""
  return NamedSharding(mesh, P(batch_axes(mesh)))


def param_spec(shape: Sequence[int], fsdp: int) -> P:
  """Where an array of `shape` lives on an fsdp-way axis: split along its largest dimension
  that fsdp divides (the first such, on a tie); replicated if none does, or fsdp is 1.

  One rule for params, their gradients and every optimizer-state array: Adam's moments have
  their param's shape and so its layout; scalars (the step count) stay replicated.
  """
  if fsdp == 1:
    return P()
  fits = [i for i, size in enumerate(shape) if size % fsdp == 0]
  if not fits:
    return P()
  axis = max(fits, key=lambda i: (shape[i], -i))
  return P(*([None] * axis + [FSDP_AXIS]))


def tree_shardings(tree: Any, mesh: Mesh) -> Any:
  """NamedSharding of every array leaf of `tree` (arrays or ShapeDtypeStructs), by `param_spec`."""
  fsdp = fsdp_size(mesh)
  return jax.tree_util.tree_map(lambda x: NamedSharding(mesh, param_spec(x.shape, fsdp)), tree)


def replicated_bytes(tree: Any, mesh: Mesh) -> int:
  """Bytes of the leaves that `tree_shardings` leaves whole on every device (with fsdp > 1,
  arrays no dimension of which the fsdp size divides)."""
  fsdp = fsdp_size(mesh)
  return sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize
             for x in jax.tree_util.tree_leaves(tree)
             if fsdp > 1 and x.shape and param_spec(x.shape, fsdp) == P())


def check_batch_size(batch_size: int, devices: int) -> None:
  """The global batch must split evenly over the devices (a count, or a mesh's)."""
  n = devices.devices.size if isinstance(devices, Mesh) else devices
  if batch_size % n:
    raise ConfigError(f"batch_size={batch_size} is not divisible by the {n} devices; set "
                     f"--config.batch_size to a multiple of {n}.")


def global_batch(batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """Host-local numpy batch (this process's rows) -> global jax arrays sharded over the mesh."""
  sharding = batch_sharding(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}


def to_host(tree: Any) -> Any:
  """Arrays -> numpy on this host (sharded over several processes: gathered first)."""
  def fetch(x):
    if isinstance(x, jax.Array) and not (x.is_fully_addressable or x.is_fully_replicated):
      from jax.experimental import multihost_utils
      return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(jax.device_get(x))
  return jax.tree_util.tree_map(fetch, tree)
