"""What a train step would cost on chips that are not attached: compile it for them and read
the compiled program.

With `libtpu` installed (`pip install -e '.[tpu]'`), JAX compiles for a TPU topology it is
not running on (`jax.experimental.topologies`), here on a CPU. `compile_report` builds the
train step exactly as training does (`steps.build_steps`: the same mesh, shardings and state
donation) for the target's devices, compiles it, and reports per device:

  memory       arguments, outputs, temporaries and their total (outputs that alias donated
               arguments counted once), against the chip's HBM;
  flops        XLA's count for the compiled program, against the analytic count of
               `model_summary` (matmuls only, forward + backward) divided over the devices;
  collectives  each kind in the compiled program: how many, and the bytes of their results;
  roofline     step time >= max(flops / peak, bytes accessed / HBM bandwidth, collective
               bytes / ICI bandwidth) from the chip's published figures (`CHIPS`, with their
               source), and the MFU that time would give (analytic flops / time / peak).

The roofline assumes perfect overlap of compute, memory traffic and communication: a lower
bound on step time and an upper bound on MFU, for comparing layouts, not a promise. XLA
counts a loop body once (gradient accumulation, scanned layers): with those, flops and
collectives are one iteration's.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from transformer.errors import ConfigError
from transformer.model_summary import train_flops_per_step
from transformer.training import experiment, sharding, steps

GB, GIB = 1e9, 2 ** 30


@dataclasses.dataclass(frozen=True)
class Chip:
  """A chip's published figures: dense bf16 peak (FLOP/s), HBM (bytes, bytes/s), and the
  bidirectional inter-chip bandwidth (bytes/s; None where its page gives none)."""
  name: str
  bf16_flops: float
  hbm_bytes: float
  hbm_bandwidth: float
  ici_bandwidth: Optional[float]
  source: str


CHIPS = {
    "v4": Chip("TPU v4", 275e12, 32 * GIB, 1200 * GB, None,
               "cloud.google.com/tpu/docs/v4 (275 TFLOPs bf16; 32 GiB, 1200 GBps HBM2)"),
    "v5e": Chip("TPU v5e", 197e12, 16 * GB, 819 * GB, 400 * GB,
                "cloud.google.com/tpu/docs/v5e (197 TFLOPs bf16; 16 GB, 819 GBps; ICI 400 GBps)"),
    "v5p": Chip("TPU v5p", 459e12, 95 * GIB, 2765 * GB, 1200 * GB,
                "cloud.google.com/tpu/docs/v5p (459 TFLOPs bf16; 95 GiB, 2765 GBps; ICI 1200 GBps)"),
    "v6e": Chip("TPU v6e", 918e12, 32 * GB, 1638 * GB, 800 * GB,
                "cloud.google.com/tpu/docs/v6e (918 TFLOPs bf16; 32 GB, 1638 GBps; ICI 800 GBps)"),
    "h100": Chip("NVIDIA H100 SXM", 989e12, 80 * GB, 3350 * GB, 900 * GB,
                 "NVIDIA H100 datasheet (989 TFLOPS dense bf16; 80 GB, 3.35 TB/s HBM3; "
                 "NVLink 900 GB/s)"),
}

# The device description XLA's GPU compiler needs to compile for an H100 that is not attached
# (figures of an H100 SXM 80GB: 132 SMs, 50 MiB L2, 1.98 GHz boost, 3.35 TB/s, compute 9.0).
_H100_DEVICE = {
    "threads_per_block_limit": 1024, "threads_per_warp": 32, "shared_memory_per_block": 49152,
    "shared_memory_per_core": 233472, "threads_per_core_limit": 2048, "core_count": 132,
    "fpus_per_core": 128, "block_dim_limit_x": 2147483647, "block_dim_limit_y": 65535,
    "block_dim_limit_z": 65535, "memory_bandwidth": 3352320000000, "l2_cache_size": 52428800,
    "clock_rate_ghz": 1.98, "device_memory_size": 84978434048,
    "shared_memory_per_block_optin": 232448, "registers_per_core_limit": 65536,
    "registers_per_block_limit": 65536,
}


def _h100_target_config() -> str:
  fields = " ".join(f"{k}: {v}" for k, v in _H100_DEVICE.items())
  return (f"gpu_device_info {{ {fields} cuda_compute_capability {{ major: 9 }} }}\n"
          'platform_name: "CUDA"\ndevice_description_str: "NVIDIA H100 80GB HBM3"\n')


COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
# `%name = SHAPE kind(` or the `-done` half of an async pair (whose shape is the result; the
# `-start` half holds operand and result together, so it is skipped).
_COLLECTIVE = re.compile(r"=\s*(.+?)\s+(" + "|".join(COLLECTIVES) + r")(-done)?\(")
_ARRAY = re.compile(r"\b(pred|s8|u8|s16|u16|f16|bf16|s32|u32|f32|s64|u64|f64)\[([\d,]*)\]")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
          "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}


def target_devices(target: str) -> tuple[list[Any], Chip]:
  """The devices and chip of `target`: a TPU topology 'v5e:4x4' (needs libtpu), or 'h100'
  or 'h100:N' (N GPUs in one host, through jax's CUDA plugin)."""
  kind, _, shape = target.partition(":")
  chip = CHIPS.get(kind.lower())
  if chip is None or not shape and kind.lower() != "h100":
    raise ConfigError(f"Unknown target {target!r}; use one of {sorted(CHIPS)} with a TPU "
                      "topology, e.g. 'v5e:4x4', 'v4:2x2x1', or 'h100:8'.")
  from jax.experimental import topologies
  try:
    if kind.lower() == "h100":
      desc = topologies.get_topology_desc(  # one host of N GPUs
          platform="cuda", topology_name="h100", target_config=_h100_target_config(),
          topology=f"1x1x{int(shape or 1)}")
    else:
      # Compiling touches no chip, so the lock libtpu takes against a second process
      # (another compile, a parallel test worker) is not needed.
      os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
      # v4 and v5p chips hold two TensorCores; "megacore" makes each chip one device, as
      # a real v4/v5p slice presents them (libtpu's v4 default is one device per core, which
      # would set per-chip HBM and peak against half a chip).
      desc = topologies.get_topology_desc(topology_name=f"{kind.lower()}:{shape}",
                                          platform="tpu", **_chip_config(kind.lower()))
  except Exception as e:  # noqa: BLE001  (a missing plugin or an unknown shape)
    extra = "tpu" if kind.lower() != "h100" else "cuda12"
    raise ConfigError(f"Cannot make the devices of {target!r} here ({_first_line(e)}); "
                      f"install the plugin with pip install -e '.[{extra}]'.") from None
  devices = list(desc.devices)
  chips = math.prod(int(n) for n in shape.split("x")) if kind.lower() != "h100" else len(devices)
  if len(devices) != chips:  # the CHIPS figures are per chip: one device must be one chip
    raise ConfigError(f"{target!r} gave {len(devices)} devices for {chips} chips; the report "
                      "needs one device per chip.")
  return devices, chip


def _chip_config(kind: str) -> dict[str, str]:
  return {"chip_config_name": "megacore"} if kind in ("v4", "v5p") else {}


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
    size = sum(_BYTES[t] * math.prod(int(d) for d in dims.split(",") if d)
               for t, dims in _ARRAY.findall(shape))
    entry = found.setdefault(kind, {"count": 0, "bytes": 0})
    entry["count"] += 1
    entry["bytes"] += size
  return found


def compile_train_step(config: ml_collections.ConfigDict, devices: Sequence[Any]) -> tuple:
  """(compiled step, model, abstract state, mesh): the train step of `config` compiled for
  `devices` (attached or not), as training builds it."""
  cfg = experiment.model_config(config, config.model.vocab_size or 32000)
  model = experiment.build_model(config, cfg)
  mesh = sharding.make_mesh(devices, config.fsdp)
  sharding.check_batch_size(config.batch_size, mesh)
  built = steps.build_steps(config, model, mesh)
  state = jax.tree_util.tree_map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
      jax.eval_shape(built.init, jax.random.PRNGKey(0)), built.state_shardings)
  batch = {k: jax.ShapeDtypeStruct((config.batch_size, config.max_len), jnp.int32,
                                   sharding=sharding.batch_sharding(mesh))
           for k in model.batch_keys}
  rng = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=sharding.replicated(mesh))
  return built.train.lower(state, batch, rng).compile(), model, state, mesh


def compile_report(config: ml_collections.ConfigDict, target: str) -> dict[str, Any]:
  """The report of the module docstring for `config` on `target` (see `target_devices`)."""
  experiment.validate(config)
  devices, chip = target_devices(target)
  compiled, model, state, mesh = compile_train_step(config, devices)
  cfg = model.config
  n = len(devices)
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
  analytic = train_flops_per_step(cfg, config.batch_size, config.max_len, config.max_len,
                                  decoder_only=not model.has_encoder) / n
  comms = collectives(compiled.as_text())
  comm_bytes = sum(c["bytes"] for c in comms.values())
  times = {"compute": (xla_flops or analytic) / chip.bf16_flops,
           "memory": bytes_accessed / chip.hbm_bandwidth if bytes_accessed else None,
           "collectives": comm_bytes / chip.ici_bandwidth if chip.ici_bandwidth else None}
  step = max(t for t in times.values() if t is not None)
  state_bytes = sum(_shard_bytes(x) for x in jax.tree_util.tree_leaves(state))
  result = {
      "target": target, "chip": chip.name, "devices": n, "device_kind": devices[0].device_kind,
      "mesh": dict(mesh.shape),
      "batch_size": config.batch_size, "max_len": config.max_len,
      "tokens_per_step": config.batch_size * config.max_len * len(model.batch_keys),
      "dtype": cfg.dtype, "param_dtype": cfg.param_dtype,
      "params": int(sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(state.params))),
      "memory_bytes": mem, "state_bytes_per_device": state_bytes,
      # What the fsdp axis could not split (no dimension it divides): on every device whole.
      "state_bytes_replicated": sharding.replicated_bytes(state, mesh),
      "hbm_bytes": chip.hbm_bytes, "fits": mem["total"] <= chip.hbm_bytes,
      "flops_per_device": {"xla": xla_flops, "analytic": analytic,
                           "xla_over_analytic": xla_flops / analytic if xla_flops else None},
      "bytes_accessed_per_device": bytes_accessed,
      "collectives": comms, "collective_bytes_per_device": comm_bytes,
      "roofline_seconds": times, "step_seconds_estimate": step,
      "mfu_estimate": analytic / step / chip.bf16_flops if step else None,
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
  chip = report["chip_figures"]
  gib = lambda b: f"{b / GIB:.2f} GiB"  # noqa: E731
  ms = lambda t: "n/a" if t is None else f"{t * 1e3:.1f} ms"  # noqa: E731
  lines = [
      f"{report['target']}: {report['devices']} x {report['device_kind']}, mesh data "
      f"{report['mesh']['data']} x fsdp {report['mesh']['fsdp']}, batch {report['batch_size']} "
      f"x {report['max_len']}, {report['params']:,} params, compute {report['dtype']}",
      f"  memory per device: arguments {gib(mem['arguments'])}, outputs {gib(mem['outputs'])} "
      f"({gib(mem['aliased'])} aliased), temporaries {gib(mem['temporaries'])}, total "
      f"{gib(mem['total'])} of {gib(report['hbm_bytes'])} HBM: "
      f"{'fits' if report['fits'] else 'does NOT fit'}",
      f"  FLOPs per device: analytic {flops['analytic']:.3e}, XLA " +
      (f"{flops['xla']:.3e} (ratio {flops['xla_over_analytic']:.3f})" if flops["xla"]
       else "gives no count for this target"),
      "  collectives: " + (", ".join(
          f"{k} x{v['count']} {v['bytes'] / 2 ** 20:.1f} MiB"
          for k, v in sorted(report["collectives"].items())) or "none"),
      f"  roofline: compute {ms(t['compute'])}, memory {ms(t['memory'])}, collectives "
      f"{ms(t['collectives'])} -> step >= {report['step_seconds_estimate'] * 1e3:.1f} ms, MFU <= "
      f"{report['mfu_estimate']:.1%}",
      f"  largest batch that fits: >= {report['batch_size_bound']} (one compile's bound)",
      f"  chip figures: {chip['source']}",
  ]
  return "\n".join(lines)


# The README's table: the paper's two models at the paper's batch on four TPU slices, with
# params replicated (all-data) and split over every chip (FSDP), computing in bfloat16.
TABLE_CONFIGS = ("configs/big.py", "configs/base.py")
# h100:8 needs jax's CUDA plugin (not in any extra: pip install jax-cuda12-plugin
# jax-cuda12-pjrt); without it `scripts/compile.py --table` says so and skips those rows.
TABLE_TARGETS = ("v5e:4x4", "v4:2x2x1", "v5p:2x2x1", "v6e:4x4", "h100:8")
TABLE_LAYOUTS = {"all-data": 1, "fsdp": -1}


def _ratio(value: Optional[float]) -> str:
  return "n/a" if value is None else f"{value:.3f}"


def _mfu_bound(report: dict[str, Any]) -> str:
  # Without XLA's byte count (XLA:GPU gives none) the bound is compute alone: 100%, says nothing.
  if report["roofline_seconds"]["memory"] is None:
    return "n/a (no byte count)"
  return f"{report['mfu_estimate']:.0%}"


def table_row_name(config_path: str, target: str, layout: str) -> str:
  base = config_path.rsplit("/", 1)[-1].removesuffix(".py")
  return f"{base}_{target.replace(':', '-')}_{layout}"


def table_markdown(rows: dict[str, dict[str, Any]]) -> str:
  """The markdown table of `rows` ({name: report}), one line a report, in name order."""
  head = ("| config | target | layout | per-device memory (GiB) | fits | batch that fits | "
          "collective MiB / step | XLA / analytic FLOPs | step >= (ms) | MFU <= |\n"
          "|---|---|---|---|---|---|---|---|---|---|")
  lines = [head]
  for name in sorted(rows):
    r = rows[name]
    config, _, layout = name.partition("_")[0], None, name.rsplit("_", 1)[-1]
    unit = "GPUs" if "NVIDIA" in r["chip"] else "chips"
    lines.append(
        f"| {config} | {r['target']} ({r['devices']} {unit}) | {layout} | "
        f"{r['memory_bytes']['total'] / GIB:.2f} of {r['hbm_bytes'] / GIB:.1f} | "
        f"{'yes' if r['fits'] else 'no'} | >= {r['batch_size_bound']} | "
        f"{r['collective_bytes_per_device'] / 2 ** 20:.0f} | "
        f"{_ratio(r['flops_per_device']['xla_over_analytic'])} | "
        f"{r['step_seconds_estimate'] * 1e3:.0f} | {_mfu_bound(r)} |")
  return "\n".join(lines) + "\n"
