"""Positional encodings (Section 3.5): sinusoidal (two column layouts), learned, rotary, none.

Absolute encodings (sinusoidal, learned) are added to the token embedding by
`transformer.embeddings.InputEmbedding`; rotary encodings rotate q and k inside attention.
Positions are explicit int arrays [B, L], so packed rows restart at 0 in every segment.
"""

from __future__ import annotations

from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer.config import ModelConfig
from transformer.errors import ConfigError


def sinusoidal_table(length: int, d_model: int, layout: str = "interleaved",
                     max_timescale: float = 10000.0) -> np.ndarray:
  """The paper's PE as a float32 numpy constant [length, d_model].

  PE(pos, 2i) = sin(pos / max_timescale^(2i/d)), PE(pos, 2i+1) = cos(same) for layout
  'interleaved' (the paper's formula). 'concat' puts the d/2 sines first and the d/2 cosines
  after (tensor2tensor, fairseq, Flax): the same columns, moved.
  """
  if d_model % 2:
    raise ConfigError(f"sinusoidal_table needs an even d_model, got {d_model}.")
  if layout not in ("interleaved", "concat"):
    raise ConfigError(f"sinusoidal_table layout={layout!r} is not one of "
                      "['interleaved', 'concat'].")
  pos = np.arange(length, dtype=np.float64)[:, None]
  inv_freq = max_timescale ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)  # [d/2]
  angles = pos * inv_freq  # [length, d/2]
  if layout == "concat":
    table = np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)
  else:
    table = np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(length, d_model)
  return table.astype(np.float32)


def default_positions(tokens: jax.Array) -> jax.Array:
  """0..L-1 for every row: int32 [B, L] for tokens [B, L]."""
  return jnp.broadcast_to(jnp.arange(tokens.shape[-1], dtype=jnp.int32), tokens.shape)


class PositionEmbedding(nn.Module):
  """Absolute position encoding, times `posemb_scale`: [B, L] int -> [B, L, d] (None if not
  additive)."""

  config: ModelConfig

  @nn.compact
  def __call__(self, positions: jax.Array) -> Optional[jax.Array]:
    cfg = self.config
    if cfg.posemb == "sinusoidal":
      table = jnp.asarray(
          sinusoidal_table(cfg.max_len, cfg.d_model, cfg.sinusoid_layout, cfg.max_timescale))
    elif cfg.posemb == "learned":
      table = self.param("pos_embedding", nn.initializers.normal(cfg.learned_posemb_init_std),
                         (cfg.max_len, cfg.d_model), cfg.storage_dtype)
    else:  # 'rope' acts on q and k; 'none' adds nothing
      return None
    if positions.shape[-1] > cfg.max_len:  # past the table, jnp.take would repeat its last row
      raise ConfigError(f"Rows of {positions.shape[-1]} positions exceed the position table of "
                        f"max_len={cfg.max_len}; shorten the rows or raise model.max_len.")
    pe = jnp.take(table, positions, axis=0, mode="clip")  # positions < max_len: no clipping
    return (cfg.posemb_scale * pe).astype(cfg.compute_dtype)


def apply_rope(x: jax.Array, positions: jax.Array, max_timescale: float = 10000.0) -> jax.Array:
  """Rotary position embedding (Su et al. 2021): x [B, L, H, D], positions [B, L] -> [B, L, H, D].

  Pairs column j with j + D/2 (the half-split layout of GPT-NeoX and Gemma) and rotates each
  pair by pos * max_timescale^(-2j/D), so q.k depends on positions only through their offset.
  """
  half = x.shape[-1] // 2
  inv_freq = max_timescale ** (-jnp.arange(half, dtype=jnp.float32) * 2 / x.shape[-1])
  angles = positions[..., None].astype(jnp.float32) * inv_freq  # [B, L, D/2]
  sin, cos = jnp.sin(angles)[:, :, None, :], jnp.cos(angles)[:, :, None, :]
  x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x.dtype)
