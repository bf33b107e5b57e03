"""Speed measured against the machine's own limit: analytic model FLOPs, a matmul peak, step timing.

Model FLOPs per step (the MFU convention of PaLM, Chowdhery et al. 2022: matmul FLOPs of the
model's forward and backward pass, 2 FLOPs per multiply-add, backward = 2 x forward, any
rematerialisation NOT counted), for an encoder-decoder with source length S, target length T,
width d, feed-forward width f, attention width a = heads x head_dim, vocabulary V, per sequence:

  encoder layer   S (8 d a + 4 d f) + 4 S^2 a          q,k,v,o projections, FFN, q.k and p.v
  decoder layer   T (8 d a + 4 d f) + 4 T^2 a           self-attention (full T x T scores)
                  + T 4 d a + S 4 d a + 4 T S a         cross-attention: q,o on T; k,v on S
  output          2 T d V                                logits (tied or not)
  step            3 x (sum of the above) x batch

A decoder-only model is the decoder without cross-attention. Gated FFNs count 6 d f instead of
4 d f. Softmax, norms, dropout and the loss are not matmuls and are not counted.
"""

from __future__ import annotations

import functools
import statistics
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from transformer.config import ModelConfig


def forward_flops(cfg: ModelConfig, source_len: int, target_len: int, *,
                  decoder_only: bool = False) -> float:
  """Matmul FLOPs of one sequence's forward pass (module docstring)."""
  d, f, a, V = cfg.d_model, cfg.d_ff, cfg.num_heads * cfg.qk_dim, cfg.output_vocab_size
  ffn = (6 if cfg.activation in ("geglu", "swiglu") else 4) * d * f
  S, T = source_len, target_len
  decoder = T * (8 * d * a + ffn) + 4 * T * T * a
  total = cfg.num_decoder_layers * decoder + 2 * T * d * V
  if not decoder_only:
    encoder = S * (8 * d * a + ffn) + 4 * S * S * a
    cross = T * 4 * d * a + S * 4 * d * a + 4 * T * S * a
    total += cfg.num_encoder_layers * encoder + cfg.num_decoder_layers * cross
  return float(total)


def train_flops_per_step(cfg: ModelConfig, batch_size: int, source_len: int, target_len: int,
                         *, decoder_only: bool = False) -> float:
  """Forward + backward (3 x forward) over a batch."""
  return 3.0 * batch_size * forward_flops(cfg, source_len, target_len, decoder_only=decoder_only)


def time_call(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> list[float]:
  """Wall seconds of `fn()` (blocked until its outputs are ready), `repeats` times after `warmup`."""
  for _ in range(warmup):
    jax.block_until_ready(fn())
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return times


def matmul_peak(dtype: str = "float32", n: int = 2048, repeats: int = 5,
                devices: Any = None) -> float:
  """Measured FLOP/s of a large square matmul on `devices` (all local devices, data-parallel).

  The denominator of MFU: what this machine, in this run, reaches on the op the model is
  made of, rather than a datasheet number.
  """
  devices = jax.local_devices() if devices is None else devices
  mesh = jax.sharding.Mesh(np.asarray(devices), ("data",))
  sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
  k = len(devices)
  x = jax.device_put(jnp.ones((k, n, n), dtype), sharding)
  y = jax.device_put(jnp.ones((k, n, n), dtype), sharding)
  # Several chained products per call hide the dispatch cost.
  chain = 4

  @functools.partial(jax.jit, out_shardings=sharding)
  def f(x, y):
    for _ in range(chain):
      x = jnp.einsum("kij,kjl->kil", x, y, preferred_element_type=jnp.float32).astype(dtype) * 1e-3
    return x

  seconds = statistics.median(time_call(lambda: f(x, y), repeats))
  return chain * k * 2.0 * n ** 3 / seconds
