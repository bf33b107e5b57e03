"""The block norm of a config: LayerNorm (the paper) or RMSNorm, in one place."""

from __future__ import annotations

from typing import Optional

import flax.linen as nn

from transformer.config import ModelConfig


def make_norm(config: ModelConfig, name: Optional[str] = None) -> nn.Module:
  """The block norm of the config (LayerNorm as the paper, or RMSNorm) over the last axis."""
  cls = nn.LayerNorm if config.norm == "layernorm" else nn.RMSNorm
  return cls(epsilon=config.norm_epsilon, dtype=config.compute_dtype,
             param_dtype=config.storage_dtype, name=name)
