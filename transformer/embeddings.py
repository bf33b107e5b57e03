"""Token embeddings (Section 3.4): the sqrt(d_model) multiplier, its target, the init, tied logits.

The three embedding knobs act here and nowhere else:
  embed_scale        s in  x = s * E[token] + PE   ('sqrt_d' = the paper, 'none', a float)
  embed_scale_target 'token' scales E[token] only (the paper); 'sum' scales E[token] + PE
  embed_init_std     E ~ N(0, std^2)               ('inv_sqrt_d' = d^-0.5 as tensor2tensor)
and the output knob `logits_scale` multiplies the pre-softmax logits h.E^T (or h.W when untied).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer import positional
from transformer.config import ModelConfig, Scale
from transformer.decode_cache import step_matmul, store_step_kernel
from transformer.dropout import Dropout
from transformer.norms import make_norm


def _width_scale(value: Scale, d_model: int) -> float:
  """A scale field's multiplier: a number as it is, or its mode, a power of d_model
  (`config.MODES` lists each field's; ModelConfig has checked the value)."""
  if not isinstance(value, str):
    return float(value)
  return {"none": 1.0, "sqrt_d": math.sqrt(d_model), "inv_sqrt_d": 1.0 / math.sqrt(d_model),
          "inv_d": 1.0 / d_model}[value]


def embed_scale_value(config: ModelConfig) -> float:
  """The multiplier s of the token embedding (sqrt(d_model) for the paper)."""
  return _width_scale(config.embed_scale, config.d_model)


def embed_init_std_value(config: ModelConfig) -> float:
  """The standard deviation of the embedding matrix at init (d_model^-0.5 for the paper)."""
  return _width_scale(config.embed_init_std, config.d_model)


def logits_scale_value(config: ModelConfig) -> float:
  """The multiplier of the pre-softmax logits (1 for the paper, d^-0.5 for Flax/T5, 1/d for muP)."""
  return _width_scale(config.logits_scale, config.d_model)


class TokenEmbedding(nn.Module):
  """The embedding matrix E [vocab, d_model]: lookup (`__call__`) and tied logits (`attend`)."""

  config: ModelConfig
  vocab_size: int

  def setup(self):
    cfg = self.config
    self.embedding = self.param("embedding", nn.initializers.normal(embed_init_std_value(cfg)),
                                (self.vocab_size, cfg.d_model), cfg.storage_dtype)

  def __call__(self, tokens: jax.Array) -> jax.Array:
    """tokens int[B, L] -> E[tokens] float[B, L, d] (unscaled)."""
    return jnp.take(self.embedding, tokens, axis=0).astype(self.config.compute_dtype)

  def attend(self, x: jax.Array) -> jax.Array:
    """x float[B, L, d] -> x @ E^T float[B, L, vocab] in the compute dtype (unscaled).

    The matmul unit accumulates in float32 either way; the loss reads these logits in
    float32 (`losses.cross_entropy`). A float32 result here would keep a float32
    [B, L, vocab] array for the backward pass and make its matmuls float32 x float32.
    """
    dtype = self.config.compute_dtype
    return jnp.einsum("bld,vd->blv", x.astype(dtype), self.embedding.astype(dtype))


class InputEmbedding(nn.Module):
  """tokens [B, L] (+ positions [B, L]) -> the first residual-stream input [B, L, d]."""

  config: ModelConfig
  token_embedding: TokenEmbedding

  @nn.compact
  def __call__(self, tokens: jax.Array, positions: jax.Array, *,
               deterministic: bool = True) -> jax.Array:
    cfg = self.config
    scale = embed_scale_value(cfg)
    x = self.token_embedding(tokens)
    pe = positional.PositionEmbedding(cfg, name="posemb")(positions)
    # For transformer.diagnostics: the two terms of the sum, each as added (no-op unless
    # apply(..., mutable=['intermediates'])).
    sum_scale = scale if cfg.embed_scale_target == "sum" else 1.0
    self.sow("intermediates", "token", scale * x)
    if pe is not None:
      self.sow("intermediates", "position", sum_scale * pe)
    if pe is None:
      x = scale * x
    elif cfg.embed_scale_target == "token":  # the paper: scale E[token], then add PE
      x = scale * x + pe
    else:  # 'sum': scale the sum, so PE is scaled too
      x = scale * (x + pe)
    if cfg.embed_norm:
      x = make_norm(cfg, name="embed_norm")(x)
    # Section 5.4: dropout "to the sums of the embeddings and the positional encodings".
    return Dropout(cfg.dropout_rate)(x, deterministic=deterministic)


def read_sown_embedding(tree: Any) -> tuple[jax.Array, Optional[jax.Array]]:
  """(s * E[tokens], the position term as added or None) float[B, L, d], from one
  `InputEmbedding`'s 'intermediates' subtree."""
  return tree["token"][0], tree["position"][0] if "position" in tree else None


class OutputLogits(nn.Module):
  """Pre-softmax projection h [B, L, d] -> logits [B, L, vocab], tied (h.E^T) or untied, times
  logits_scale."""

  config: ModelConfig
  vocab_size: int
  token_embedding: Optional[TokenEmbedding] = None  # set: tied logits

  @nn.compact
  def __call__(self, h: jax.Array, *, decode: bool = False) -> jax.Array:
    """h float[B, L, d] -> logits float[B, L, vocab] (compute dtype). decode=True: tied logits
    of a decoding step read E^T [d, vocab], copied when the cache was created
    (`decode_cache.step_matmul`)."""
    cfg = self.config
    if decode and self.has_variable("cache", "logits_kernel"):  # a decoding step
      logits = step_matmul(self, "logits", h)
    elif self.token_embedding is not None:
      logits = self.token_embedding.attend(h)
      if decode:  # creating the cache
        store_step_kernel(self, "logits", self.token_embedding.embedding.T)
    else:
      logits = nn.Dense(self.vocab_size, use_bias=False, dtype=cfg.compute_dtype,
                        param_dtype=cfg.storage_dtype,
                        kernel_init=nn.initializers.xavier_uniform(), name="kernel")(h)
    scale = logits_scale_value(cfg)
    return logits if scale == 1.0 else logits * scale
