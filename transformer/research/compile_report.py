"""What a train step would cost on chips that are not attached: compile it for them and read
the compiled program.

With `libtpu` installed (`pip install -e '.[tpu]'`), JAX compiles for a TPU topology it is
not running on (`jax.experimental.topologies`), here on a CPU. `compile_report` builds the
train step exactly as training does (`run.abstract`: the same mesh, shardings, state
donation and attention kernel, 'auto' resolved for the target's chip) for the target's
devices, compiles it, and reports per device:

  memory       arguments, outputs, temporaries and their total (outputs that alias donated
               arguments counted once), against the chip's HBM;
  flops        XLA's count for the compiled program, against the analytic count of
               `model_summary` (matmuls only, forward + backward) divided over the devices;
  hbm bytes    XLA's "bytes accessed" (which counts operands that stay on chip, an upper
               estimate) and the traffic read off the optimized HLO (`hbm_traffic`: what
               each top-level op reads from and writes to HBM) and the kernels a step
               launches (`kernel_count`);
  collectives  each kind in the compiled program: how many, and the bytes of their results;
  big buffers  float32 [.., L, L] (attention scores) and [.., L, vocab] (logits) arrays written
               to HBM: the traffic the fused kernels and the lean loss exist to remove
               (a [.., L, L] or [.., L, vocab] shape; one XLA flattened is not seen);
  roofline     two estimates of the step time from the chip's published figures
               (`chips.CHIPS`): the terms compute (the larger of XLA's and the analytic
               FLOPs, over the peak), memory (HLO bytes over the HBM bandwidth) and
               collectives (bytes over the ICI bandwidth) all overlapped (their max) and
               none overlapped (their sum), and the MFU each would give.

Neither estimate is a bound. The HLO byte count is a first-order model of traffic (each
top-level op reads its operands once; a matmul's re-reads of its tiles and the caches are not
modelled), XLA's "bytes accessed" an upper one (it counts operands that memory-space
assignment keeps on chip: 1.0-4.5x the HLO count on the TPU rows of docs/accelerators), and
real kernels reach less than the published peaks. The compute term takes the analytic FLOPs
where XLA counts fewer: it cannot see inside a custom-call kernel (Pallas, cuDNN) and counts a
loop body once (gradient accumulation, scanned layers, FSDP's collective matmuls); bytes and
collectives are then one iteration's too.
"""

from __future__ import annotations

import dataclasses
import glob
import math
import os
import re
from typing import Any, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from transformer import models
from transformer.attention import step_kernel
from transformer.errors import ConfigError
from transformer.model_summary import train_flops
from transformer.research.chips import CHIPS, GIB, GPUS, Chip
from transformer.training import experiment, run, sharding

# The device descriptions XLA's GPU compiler needs to compile for a GPU that is not attached:
# an H100 SXM 80GB and an H200 SXM 141GB (the same GH100 die: 132 SMs, 50 MiB L2, 1.98 GHz
# boost, compute 9.0; HBM3 3.35 TB/s against HBM3e 4.8 TB/s).
_GH100 = {
    "threads_per_block_limit": 1024, "threads_per_warp": 32, "shared_memory_per_block": 49152,
    "shared_memory_per_core": 233472, "threads_per_core_limit": 2048, "core_count": 132,
    "fpus_per_core": 128, "block_dim_limit_x": 2147483647, "block_dim_limit_y": 65535,
    "block_dim_limit_z": 65535, "l2_cache_size": 52428800, "clock_rate_ghz": 1.98,
    "shared_memory_per_block_optin": 232448, "registers_per_core_limit": 65536,
    "registers_per_block_limit": 65536,
}
_GPU_DEVICES = {
    "h100": ("NVIDIA H100 80GB HBM3", {**_GH100, "memory_bandwidth": 3352320000000,
                                       "device_memory_size": 84978434048}),
    "h200": ("NVIDIA H200", {**_GH100, "memory_bandwidth": 4800000000000,
                             "device_memory_size": 150754820096}),
}


def _gpu_target_config(kind: str) -> str:
  name, device = _GPU_DEVICES[kind]
  fields = " ".join(f"{k}: {v}" for k, v in device.items())
  return (f"gpu_device_info {{ {fields} cuda_compute_capability {{ major: 9 }} }}\n"
          f'platform_name: "CUDA"\ndevice_description_str: "{name}"\n')


COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
# `%name = SHAPE kind(` or the `-done` half of an async pair (whose shape is the result; the
# `-start` half holds operand and result together, so it is skipped).
_COLLECTIVE = re.compile(r"=\s*(.+?)\s+(" + "|".join(COLLECTIVES) + r")(-done)?\(")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
          "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}


class _GpuHost:
  """One host of N GPUs of a kind ('h100:8'), through jax's CUDA plugin."""

  extra = "cuda12"

  def __init__(self, kind: str, shape: str):
    self.kind, self.count = kind, int(shape or 1)

  def topology(self, topologies: Any) -> Any:
    return topologies.get_topology_desc(
        platform="cuda", topology_name=self.kind, target_config=_gpu_target_config(self.kind),
        topology=f"1x1x{self.count}")

  def chips(self) -> int:
    return self.count


class _TpuSlice:
  """A TPU topology ('v5e:4x4'), through libtpu."""

  extra = "tpu"

  def __init__(self, kind: str, shape: str):
    self.kind, self.shape = kind, shape

  def topology(self, topologies: Any) -> Any:
    # Compiling touches no chip, so the lock libtpu takes against a second process (another
    # compile, a parallel test worker) is not needed.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    if not _tpu_attached():  # libtpu would look for TPU workers and log an error that
      os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")  # reads as a failure
    # v4 and v5p chips hold two TensorCores; "megacore" makes each chip one device, as a real
    # v4/v5p slice presents them (libtpu's v4 default is one device per core, which would set
    # per-chip HBM and peak against half a chip).
    megacore = {"chip_config_name": "megacore"} if self.kind in ("v4", "v5p") else {}
    return topologies.get_topology_desc(topology_name=f"{self.kind}:{self.shape}",
                                        platform="tpu", **megacore)

  def chips(self) -> int:
    return math.prod(int(n) for n in self.shape.split("x"))


def _target(target: str) -> "_GpuHost | _TpuSlice":
  """The target named 'kind:shape', its shape's numbers checked: one line for 'h100:abc'
  or 'v5e:0x4' rather than a ValueError or advice to install a plugin."""
  kind, _, shape = target.partition(":")
  kind = kind.lower()
  if kind in _GPU_DEVICES:
    if shape and not (shape.isdigit() and int(shape) > 0):
      raise ConfigError(f"Target {target!r} needs a GPU count >= 1 after the colon, e.g. "
                        f"'{kind}:8' (or '{kind}' for one GPU).")
    return _GpuHost(kind, shape)
  if kind in CHIPS and kind not in GPUS and shape:
    if not all(n.isdigit() and int(n) > 0 for n in shape.split("x")):
      raise ConfigError(f"Target {target!r} needs a topology of numbers >= 1 joined by 'x' "
                        f"after the colon, e.g. '{kind}:4x4' or '{kind}:2x2x1'.")
    return _TpuSlice(kind, shape)
  raise ConfigError(f"Unknown target {target!r}; use a TPU topology of one of "
                    f"{sorted(set(CHIPS) - set(GPUS))}, e.g. 'v5e:4x4' or 'v4:2x2x1', or a "
                    f"GPU host of {sorted(_GPU_DEVICES)}, e.g. 'h100:8'.")


def target_devices(target: str) -> tuple[list[Any], Chip]:
  """The devices and chip of `target`: a TPU topology 'v5e:4x4' (needs libtpu), or a GPU
  host 'h100:N' / 'h200:N' (N GPUs, through jax's CUDA plugin; N = 1 when left out)."""
  where = _target(target)
  from jax.experimental import topologies
  try:
    devices = list(where.topology(topologies).devices)
  except Exception as e:  # noqa: BLE001  (a missing plugin or an unknown shape)
    raise ConfigError(f"Cannot make the devices of {target!r} here ({_first_line(e)}); "
                      f"install the plugin with pip install -e '.[{where.extra}]'.") from None
  if len(devices) != where.chips():  # the CHIPS figures are per chip: one device, one chip
    raise ConfigError(f"{target!r} gave {len(devices)} devices for {where.chips()} chips; the "
                      "report needs one device per chip.")
  return devices, CHIPS[where.kind]


def _tpu_attached() -> bool:
  """Whether this machine has TPU chips (a TPU VM's /dev/accel* or /dev/vfio devices)."""
  return bool(glob.glob("/dev/accel*")) or os.path.isdir("/dev/vfio")


def _first_line(e: BaseException) -> str:
  text = str(e).strip().splitlines()
  return (text[0] if text else type(e).__name__)[:200]


def collectives(hlo_text: str) -> dict[str, dict[str, int]]:
  """{kind: {'count', 'bytes'}} of the collectives in an optimized HLO module's text; bytes are
  those of each op's result (a tuple's arrays summed), per device."""
  found: dict[str, dict[str, int]] = {}
  for line in hlo_text.splitlines():
    match = _COLLECTIVE.search(line)
    if not match:
      continue
    shape, kind = match.group(1), match.group(2)
    entry = found.setdefault(kind, {"count": 0, "bytes": 0})
    entry["count"] += 1
    entry["bytes"] += sum(size for size, _ in _arrays(shape))
  return found


# One instruction of an HLO module's text: `%name = SHAPE opcode(operands), attributes`.
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(\S+) = (\(.*?\)|\S+) ([\w-]+)\((.*)$")
_COMPUTATION = re.compile(r"^(?:ENTRY )?%(\S+) ")
# Ops that move no data of their own (views, tuples) or whose bytes the ops they call count.
_NO_TRAFFIC = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all",
               "partition-id", "replica-id", "while", "conditional", "call", "opt-barrier"}
_ON_CHIP = "S(1)"  # the memory space of a TPU's on-chip VMEM in an HLO layout
# Ops that read a part of their operand: (the async one's result is (operand, slice, flag)).
_SLICES = ("slice", "dynamic-slice", "slice-start")


def _arrays(shape: str) -> list[tuple[int, bool]]:
  """(bytes, in HBM) of each array of an HLO shape string ('f32[8,4]{1,0}' or a tuple); an
  array laid out in the TPU's on-chip VMEM (memory space S(1)) is not in HBM."""
  out = []
  for match in re.finditer(r"\b(pred|[sfu]\d+|bf16)\[([\d,]*)\](\{[^}]*\})?", shape):
    dtype, dims, layout = match.groups()
    if dtype in _BYTES:
      size = _BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d)
      out.append((size, _ON_CHIP not in (layout or "")))
  return out


def _array_bytes(shape: str) -> int:
  """Bytes of the arrays of an HLO shape string held in HBM."""
  return sum(size for size, in_hbm in _arrays(shape) if in_hbm)


def _operands(text: str) -> list[str]:
  """The operand names of an instruction, from the text after its opcode's '(' up to the
  matching ')' (operands may be printed with their shapes, whose layouts hold parentheses)."""
  depth = 0
  for i, char in enumerate(text):
    depth += {"(": 1, ")": -1}.get(char, 0)
    if depth < 0:
      return re.findall(r"%([\w.-]+)", text[:i])
  return re.findall(r"%([\w.-]+)", text)


class _Op(NamedTuple):
  """One instruction of an optimized HLO module."""
  name: str
  shape: str  # its result's shape string
  opcode: str
  operands: list[str]  # operand names
  calls: Optional[str]  # the computation a fusion runs, or a custom call's target
  parameter: Optional[int]  # a parameter's number


def _instructions(hlo_text: str) -> dict[str, list[_Op]]:
  """Every computation of an HLO module's text, by name: its instructions in order."""
  computations: dict[str, list[_Op]] = {}
  body: list[_Op] = []
  for line in hlo_text.splitlines():
    head = _COMPUTATION.match(line)
    if head and line.rstrip().endswith("{"):
      body = computations.setdefault(head.group(1), [])
      continue
    match = _INSTRUCTION.match(line)
    if match:
      name, shape, opcode, rest = match.groups()
      calls = re.search(r'\bcalls=%([\w.-]+)|custom_call_target="([^"]+)"', rest)
      number = int(rest.split(")")[0]) if opcode == "parameter" else None
      calls = calls and (calls.group(1) or calls.group(2))
      body.append(_Op(name, shape, opcode, _operands(rest), calls, number))
  return computations


def _top_level(hlo_text: str) -> list[_Op]:
  """The instructions outside fusion bodies and reducers: the ops that each run as a kernel
  and meet HBM at their edges. The body of a `call` (XLA:GPU's command buffers) is top
  level: its ops are kernels."""
  inner = set()
  for line in hlo_text.splitlines():
    match = _INSTRUCTION.match(line)
    if match and match.group(3) != "call":
      inner.update(re.findall(r"(?:calls|to_apply)=%([\w.-]+)", line))
  return [op for name, body in _instructions(hlo_text).items() if name not in inner
          for op in body]


def kernel_count(hlo_text: str) -> int:
  """The kernels a step launches, counted off its optimized HLO: its top-level ops that move
  data (`_top_level`, less views, tuples and control flow, and the second half of an async
  pair; a loop body counts once)."""
  return sum(op.opcode not in _NO_TRAFFIC and not op.opcode.endswith(("-done", "-update"))
             for op in _top_level(hlo_text))


def _gathered_reads(body: list[_Op]) -> dict[int, int]:
  """{parameter number: bytes} for a fusion body's parameters that only gathers read (as the
  array gathered from, directly or through bitcasts): a gather reads its result's rows of
  the array, not the array."""
  reads: dict[int, int] = {}
  for param in (op for op in body if op.opcode == "parameter"):
    views = {param.name}
    for op in body:  # in order: a bitcast follows what it views
      if op.opcode == "bitcast" and op.operands and op.operands[0] in views:
        views.add(op.name)
    users = [op for op in body if op.name not in views and views & set(op.operands)]
    if users and all(op.opcode == "gather" and op.operands[0] in views for op in users):
      reads[param.parameter] = min(sum(_array_bytes(op.shape) for op in users),
                                   _array_bytes(param.shape))
  return reads


_WORKSPACE_CALLS = ("__cublas", "__cudnn")  # custom calls handed back a scratch workspace


def _result_bytes(op: _Op) -> int:
  """HBM bytes an op writes: its result, less the last array of a cuBLAS or cuDNN call's
  result tuple when it is bytes (s8, u8): the scratch workspace the library is handed."""
  arrays = re.findall(r"\b\w+\[[\d,]*\](?:\{[^}]*\})?", op.shape)
  if (op.opcode == "custom-call" and op.shape.startswith("(") and arrays
      and (op.calls or "").startswith(_WORKSPACE_CALLS) and arrays[-1][:3] in ("s8[", "u8[")):
    return _array_bytes(op.shape) - _array_bytes(arrays[-1])
  return _array_bytes(op.shape)


def hbm_traffic(hlo_text: str) -> int:
  """Bytes read from and written to HBM by an optimized HLO module, per device: each
  top-level op (a fusion, a matmul, a custom call, a collective) reads its operands and
  writes its result, counting only arrays that live in HBM. The `-start` half of an async
  pair reads, its `-done` half writes; a slice reads the slice and a gather the rows it
  gathers; a custom call's workspace is not written. A first-order model: a kernel's own
  reuse (caches, the several passes a big matmul makes) is not in it; a loop body counts
  once."""
  computations = _instructions(hlo_text)
  ops = _top_level(hlo_text)
  shapes = {op.name: op.shape for op in ops}
  total = 0
  for op in ops:
    if op.opcode in _NO_TRAFFIC:
      continue
    if op.opcode in _SLICES:  # reads the slice, not the whole operand
      arrays = _arrays(op.shape)
      size, in_hbm = arrays[1] if op.opcode == "slice-start" else arrays[0]
      total += size + (size if in_hbm and op.opcode != "slice-start" else 0)
      continue
    if op.opcode == "dynamic-update-slice":  # in place: reads and writes the update
      total += 2 * _array_bytes(shapes.get(op.operands[1], "")) if len(op.operands) > 1 else 0
      continue
    if op.opcode == "gather":  # reads the rows it gathers (at most the operand)
      gathered = {0: min(_array_bytes(op.shape), _array_bytes(shapes.get(op.operands[0], "")))}
    else:
      gathered = _gathered_reads(computations.get(op.calls, [])) if op.opcode == "fusion" else {}
    if not op.opcode.endswith("-done"):
      total += sum(gathered.get(i, _array_bytes(shapes.get(o, "")))
                   for i, o in enumerate(op.operands))
    if not op.opcode.endswith("-start"):
      total += _result_bytes(op)
  return total


def big_float32_buffers(hlo_text: str, length: int, vocab: int) -> dict[str, int]:
  """{'scores': n, 'logits': n}: float32 arrays [.., length, length] (attention scores or
  weights) and [.., length, vocab] (vocabulary logits) that top-level ops write to HBM."""
  found = {"scores": 0, "logits": 0}
  for op in _top_level(hlo_text):
    shape, opcode = op.shape, op.opcode
    if opcode in _NO_TRAFFIC or opcode.endswith("-start"):
      continue
    for match in re.finditer(r"\bf32\[([\d,]*)\](\{[^}]*\})?", shape):
      dims = [int(d) for d in match.group(1).split(",") if d]
      if _ON_CHIP in (match.group(2) or ""):
        continue
      if len(dims) >= 3 and dims[-2:] == [length, length]:
        found["scores"] += 1
      elif len(dims) >= 3 and dims[-2:] == [length, vocab]:
        found["logits"] += 1
  return found


def compile_train_step(exp: experiment.Experiment,
                       devices: Sequence[Any]) -> tuple[Any, run.Run]:
  """(compiled step, the Run with its abstract state): the train step of `exp` compiled for
  `devices` (attached or not), as training sets it up."""
  r = run.abstract(exp, run.device_mesh(exp, devices))
  batch = {k: jax.ShapeDtypeStruct((exp.data.batch_size, exp.data.max_len), jnp.int32,
                                   sharding=sharding.batch_sharding(r.mesh))
           for k in r.model.batch_keys}
  rng = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=sharding.replicated(r.mesh))
  return r.steps.train.lower(r.state, batch, rng).compile(), r


def compile_report(exp: experiment.Experiment, target: str) -> dict[str, Any]:
  """The report of the module docstring for `exp` on `target` (see `target_devices`)."""
  data, (devices, chip) = exp.data, target_devices(target)
  compiled, r = compile_train_step(exp, devices)
  cfg, model, mesh, state = r.model_config, r.model, r.mesh, r.state
  n = len(devices)
  with jax.set_mesh(mesh):  # 'auto' as the step resolved it, for the target's chips
    kernel = step_kernel(cfg, data.max_len)
  memory = compiled.memory_analysis()
  mem = {"arguments": memory.argument_size_in_bytes, "outputs": memory.output_size_in_bytes,
         "aliased": memory.alias_size_in_bytes, "temporaries": memory.temp_size_in_bytes,
         "code": memory.generated_code_size_in_bytes}
  mem["total"] = mem["arguments"] + mem["outputs"] - mem["aliased"] + mem["temporaries"] + \
      mem["code"]
  cost = compiled.cost_analysis()
  cost = (cost[0] if isinstance(cost, list) else cost) or {}  # None where XLA gives none (GPU)
  xla_flops = float(cost["flops"]) if "flops" in cost else None
  bytes_accessed = float(cost["bytes accessed"]) if "bytes accessed" in cost else None
  analytic = train_flops(models.row_flops(model, data.max_len), data.batch_size) / n
  hlo = compiled.as_text()
  traffic = hbm_traffic(hlo)
  comms = collectives(hlo)
  comm_bytes = sum(c["bytes"] for c in comms.values())
  # XLA cannot see inside a custom-call kernel (Pallas, cuDNN) and counts a loop body once
  # (FSDP's collective matmuls), so its count can fall below the model's matmuls.
  counted = max(xla_flops or 0.0, analytic)
  peak = chip.matmul_flops(cfg.dtype)
  times = {"compute": counted / peak, "memory": traffic / chip.hbm_bandwidth,
           "collectives": comm_bytes / chip.ici_bandwidth if chip.ici_bandwidth else None}
  terms = [t for t in times.values() if t is not None]
  # Two estimates, neither a bound: every term overlapped (the roofline), and none overlapped.
  step = {"overlapped": max(terms), "serial": sum(terms)}
  state_bytes = sum(_shard_bytes(x) for x in jax.tree_util.tree_leaves(state))
  result = {
      "target": target, "chip": chip.name, "devices": n, "device_kind": devices[0].device_kind,
      "mesh": dict(mesh.shape), "attention_kernel": kernel,
      "batch_size": data.batch_size, "max_len": data.max_len,
      "tokens_per_step": data.batch_size * data.max_len * len(model.batch_keys),
      "dtype": cfg.dtype, "param_dtype": cfg.param_dtype,
      "vocab_size": cfg.output_vocab_size, "vocab_from": exp.vocab_from,
      "params": int(sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(state.params))),
      "memory_bytes": mem, "state_bytes_per_device": state_bytes,
      # What the fsdp axis could not split (no dimension it divides): on every device whole.
      "state_bytes_replicated": sharding.replicated_bytes(state, mesh),
      "hbm_bytes": chip.hbm_bytes, "fits": mem["total"] <= chip.hbm_bytes,
      "flops_per_device": {"xla": xla_flops, "analytic": analytic,
                           "xla_over_analytic": xla_flops / analytic if xla_flops else None,
                           "roofline": "analytic" if counted == analytic else "xla"},
      "bytes_accessed_per_device": bytes_accessed, "hbm_traffic_per_device": traffic,
      "kernels": kernel_count(hlo),
      "big_float32_buffers": big_float32_buffers(hlo, data.max_len, cfg.output_vocab_size),
      "collectives": comms, "collective_bytes_per_device": comm_bytes,
      "roofline_seconds": times, "step_seconds_estimate": step,
      "mfu_estimate": {k: analytic / t / peak for k, t in step.items()},
      "chip_figures": dataclasses.asdict(chip),
  }
  result["batch_size_bound"] = batch_bound(result)
  return result


def _shard_bytes(x: jax.ShapeDtypeStruct) -> int:
  """Bytes of one device's shard of `x` under its sharding."""
  shape = x.sharding.shard_shape(x.shape)
  return math.prod(shape) * np.dtype(x.dtype).itemsize


def batch_bound(report: dict[str, Any]) -> int:
  """A lower bound on the largest global batch whose step fits the chip's HBM, from one compile.

  The temporaries grow with the batch as a + b * batch with a >= 0 (gradients, gathered
  weights), so temporaries / batch >= b: rows that fit in the HBM the state leaves at that
  per-row cost also fit at the true one (rounded down to a multiple of the device count).
  """
  mem, n = report["memory_bytes"], report["devices"]
  per_row = mem["temporaries"] / report["batch_size"]
  room = report["hbm_bytes"] - (mem["total"] - mem["temporaries"])
  return max(0, int(room / per_row) // n * n) if per_row else 0


def format_report(report: dict[str, Any]) -> str:
  """A short table of one report for a terminal."""
  mem, flops, t = report["memory_bytes"], report["flops_per_device"], report["roofline_seconds"]
  chip, big = report["chip_figures"], report["big_float32_buffers"]
  step, mfu = report["step_seconds_estimate"], report["mfu_estimate"]
  gib = lambda b: f"{b / GIB:.2f} GiB"  # noqa: E731
  ms = lambda t: "n/a" if t is None else f"{t * 1e3:.1f} ms"  # noqa: E731
  accessed = report["bytes_accessed_per_device"]
  lines = [
      f"{report['target']}: {report['devices']} x {report['device_kind']}, mesh data "
      f"{report['mesh']['data']} x fsdp {report['mesh']['fsdp']}, batch {report['batch_size']} "
      f"x {report['max_len']}, {report['params']:,} params (vocabulary "
      f"{report['vocab_size']:,} from {report['vocab_from']}), compute {report['dtype']}, "
      f"attention {report['attention_kernel']}",
      f"  memory per device: arguments {gib(mem['arguments'])}, outputs {gib(mem['outputs'])} "
      f"({gib(mem['aliased'])} aliased), temporaries {gib(mem['temporaries'])}, total "
      f"{gib(mem['total'])} of {gib(report['hbm_bytes'])} HBM: "
      f"{'fits' if report['fits'] else 'does NOT fit'}",
      f"  FLOPs per device: analytic {flops['analytic']:.3e}, XLA " +
      (f"{flops['xla']:.3e} (ratio {flops['xla_over_analytic']:.3f})" if flops["xla"]
       else "gives no count for this target") +
      f"; the roofline uses the {flops['roofline']} count",
      f"  HBM traffic per device: {report['hbm_traffic_per_device'] / 1e9:.2f} GB read off the "
      f"optimized HLO, {report['kernels']:,} kernels" +
      (f" (XLA's bytes accessed {accessed / 1e9:.2f} GB, an upper estimate)"
                         if accessed else ""),
      f"  float32 arrays written to HBM: {big['scores']} of [.., L, L], {big['logits']} of "
      "[.., vocab]",
      "  collectives: " + (", ".join(
          f"{k} x{v['count']} {v['bytes'] / 2 ** 20:.1f} MiB"
          for k, v in sorted(report["collectives"].items())) or "none"),
      f"  roofline terms: compute {ms(t['compute'])}, memory {ms(t['memory'])}, collectives "
      f"{ms(t['collectives'])} -> step ~ {ms(step['overlapped'])} (overlapped) to "
      f"{ms(step['serial'])} (serial), MFU ~ {mfu['serial']:.1%} to {mfu['overlapped']:.1%} "
      "(estimates, not bounds)",
      f"  largest batch that fits: >= {report['batch_size_bound']} (one compile's bound)",
      f"  chip figures: {chip['source']}",
  ]
  return "\n".join(lines)


# docs/accelerators/table.md: the paper's two models at the paper's batch on four TPU slices
# and two GPU hosts, params replicated (all-data) and split over every chip (FSDP), in bf16.
TABLE_CONFIGS = ("configs/big.py", "configs/base.py")
# The GPU rows need jax's CUDA plugin (not in any extra: pip install 'jax-cuda12-plugin==V'
# 'jax-cuda12-pjrt==V' with V jax's version); without it `scripts/compile.py --table` says so
# and skips those rows.
TABLE_TARGETS = ("v5e:4x4", "v4:2x2x1", "v5p:2x2x1", "v6e:4x4", "h100:8", "h200:8")
TABLE_LAYOUTS = {"all-data": 1, "fsdp": -1}


def _ratio(value: Optional[float]) -> str:
  return "n/a" if value is None else f"{value:.3f}"


def table_row_name(config_path: str, target: str, layout: str) -> str:
  base = config_path.rsplit("/", 1)[-1].removesuffix(".py")
  return f"{base}_{target.replace(':', '-')}_{layout}"


def table_markdown(rows: dict[str, dict[str, Any]]) -> str:
  """The markdown table of `rows` ({name: report}), one line a report, in name order."""
  head = ("| config | target | layout | attention | per-device memory (GiB) | fits | "
          "batch that fits | HBM GB / step (HLO) | collective MiB / step | XLA / analytic "
          "FLOPs | step ~ (ms) | MFU ~ |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|")
  lines = [head]
  for name in sorted(rows):
    r = rows[name]
    step, mfu = r["step_seconds_estimate"], r["mfu_estimate"]
    config, layout = name.partition("_")[0], name.rsplit("_", 1)[-1]
    unit = "GPUs" if "NVIDIA" in r["chip"] else "chips"
    lines.append(
        f"| {config} | {r['target']} ({r['devices']} {unit}) | {layout} | "
        f"{r['attention_kernel']} | "
        f"{r['memory_bytes']['total'] / GIB:.2f} of {r['hbm_bytes'] / GIB:.1f} | "
        f"{'yes' if r['fits'] else 'no'} | >= {r['batch_size_bound']} | "
        f"{r['hbm_traffic_per_device'] / 1e9:.1f} | "
        f"{r['collective_bytes_per_device'] / 2 ** 20:.0f} | "
        f"{_ratio(r['flops_per_device']['xla_over_analytic'])} | "
        f"{step['overlapped'] * 1e3:.0f}-{step['serial'] * 1e3:.0f} | "
        f"{mfu['serial']:.0%}-{mfu['overlapped']:.0%} |")
  return "\n".join(lines) + "\n"
