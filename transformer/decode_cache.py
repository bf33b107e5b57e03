"""Weights copied into the decoding cache in the layout one-row products read fastest.

A decoding step multiplies one row per sequence by each weight matrix, so its time is the
time to read the weights. `store_step_kernel` copies a kernel [in, out] into the 'cache'
collection when the cache is created (a model's `start_decoding`); `step_matmul` multiplies by it at
every step. Attention stores q, k and v side by side, the tied output layer E^T.
"""

from __future__ import annotations

from typing import Optional

import flax.linen as nn
import jax


def store_step_kernel(module: nn.Module, name: str, kernel: jax.Array,
                      bias: Optional[jax.Array] = None) -> None:
  """Puts a copy of kernel [in, out] (and bias [out]), in the compute dtype, in the 'cache'
  collection, for `step_matmul`. Made once, when the cache is created (a model's `start_decoding`).

  A decoding step multiplies one row per sequence by each weight matrix, so its time is the
  time to read the weights, and on CPU a matrix-vector product reads a wide [in, out] matrix
  faster than several narrow ones or a transposed one: the copies are q, k and v side by
  side, and the tied embedding transposed (scripts/benchmark.py --mode=decode measures it).
  They cost memory while decoding: 3 d^2 per layer and vocab x d (65 MB for the base model).
  """
  dtype = module.config.compute_dtype
  module.put_variable("cache", f"{name}_kernel", kernel.astype(dtype))
  if bias is not None:
    module.put_variable("cache", f"{name}_bias", bias.astype(dtype))


def step_matmul(module: nn.Module, name: str, x: jax.Array) -> jax.Array:
  """x float[..., in] @ kernel [in, out] (+ bias) -> float[..., out], from `store_step_kernel`."""
  kernel = module.get_variable("cache", f"{name}_kernel")
  y = x.astype(kernel.dtype) @ kernel
  if module.has_variable("cache", f"{name}_bias"):
    y = y + module.get_variable("cache", f"{name}_bias")
  return y
