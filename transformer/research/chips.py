"""The published figures of the chips this code runs on or compiles for: one table, read by
the benchmark (MFU of a measured step) and the compile report (the roofline of a compiled one).

Every figure is the vendor's dense (no sparsity) peak, with its source. A float32 matmul at
JAX's default precision runs as TF32 on an NVIDIA GPU and as one bfloat16 pass on a TPU, so
its peak is that of the unit that runs it (`Chip.matmul_flops`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

import jax.numpy as jnp

GB, GIB = 1e9, 2 ** 30


@dataclasses.dataclass(frozen=True)
class Chip:
  """A chip's published figures. FLOP/s are dense matmul peaks; HBM in bytes and bytes/s;
  ici_bandwidth the bidirectional inter-chip bandwidth in bytes/s (None where the page gives
  none). device_kind: a regular expression matched against JAX's `Device.device_kind`."""
  name: str
  bf16_flops: float
  fp32_flops: float  # a float32 matmul at JAX's default precision (TF32 / one bf16 pass)
  hbm_bytes: float
  hbm_bandwidth: float
  ici_bandwidth: Optional[float]
  device_kind: str
  source: str

  def matmul_flops(self, dtype: str) -> float:
    """The peak of a matmul whose operands are `dtype` ('bfloat16', 'float16', 'float32')."""
    return self.fp32_flops if jnp.dtype(dtype) == jnp.float32 else self.bf16_flops


CHIPS = {
    "v4": Chip("TPU v4", 275e12, 275e12, 32 * GIB, 1200 * GB, None, r"TPU v4",
               "cloud.google.com/tpu/docs/v4 (275 TFLOPs bf16; 32 GiB, 1200 GBps HBM2)"),
    "v5e": Chip("TPU v5e", 197e12, 197e12, 16 * GB, 819 * GB, 400 * GB, r"TPU v5( lite|e)",
                "cloud.google.com/tpu/docs/v5e (197 TFLOPs bf16; 16 GB, 819 GBps; ICI 400 GBps)"),
    "v5p": Chip("TPU v5p", 459e12, 459e12, 95 * GIB, 2765 * GB, 1200 * GB, r"TPU v5p?",
                "cloud.google.com/tpu/docs/v5p (459 TFLOPs bf16; 95 GiB, 2765 GBps; "
                "ICI 1200 GBps)"),
    "v6e": Chip("TPU v6e", 918e12, 918e12, 32 * GB, 1638 * GB, 800 * GB, r"TPU v6( lite|e)",
                "cloud.google.com/tpu/docs/v6e (918 TFLOPs bf16; 32 GB, 1638 GBps; ICI 800 GBps)"),
    "a100": Chip("NVIDIA A100 SXM", 312e12, 156e12, 80 * GB, 2039 * GB, 600 * GB,
                 r"NVIDIA A100.*",
                 "NVIDIA A100 datasheet (312 TFLOPS dense bf16, 156 TF32; 80 GB HBM2e, "
                 "2,039 GB/s; NVLink 600 GB/s)"),
    "h100": Chip("NVIDIA H100 SXM", 989e12, 495e12, 80 * GB, 3350 * GB, 900 * GB,
                 r"NVIDIA H100( 80GB HBM3| SXM.*)",
                 "NVIDIA H100 datasheet (989 TFLOPS dense bf16, 495 TF32; 80 GB, 3.35 TB/s HBM3; "
                 "NVLink 900 GB/s)"),
    "h200": Chip("NVIDIA H200 SXM", 989e12, 495e12, 141 * GB, 4800 * GB, 900 * GB,
                 r"NVIDIA H200.*",
                 "NVIDIA H200 datasheet (989 TFLOPS dense bf16, 495 TF32; 141 GB, 4.8 TB/s "
                 "HBM3e; NVLink 900 GB/s)"),
}
GPUS = ("a100", "h100", "h200")  # the table's NVIDIA entries


def chip_of(device_kind: str) -> Optional[Chip]:
  """The table's chip for a JAX device kind ('TPU v5 lite', 'NVIDIA H200'), or None (a CPU,
  or a chip without published figures here)."""
  for chip in CHIPS.values():
    if re.fullmatch(chip.device_kind, device_kind):
      return chip
  return None
