"""Scaled dot-product attention (Section 3.2), its masks, and multi-head attention with a KV cache.

The attention knobs act here and nowhere else:
  attention_scale    'inv_sqrt_dk' (the paper, Eq. 1), 'inv_dk' (muP), 'none', a float, or
                     'learned' (one temperature per head, initialised at d_k^-0.5)
  qk_norm            normalise q and k per head before the scale ('layernorm', 'rmsnorm', 'l2')
  attn_logit_softcap logits -> cap * tanh(logits / cap) (Gemma 2)
Arrays use the layout of `jax.nn.dot_product_attention`: [batch, length, heads, head_dim].
Masks are boolean, True = may attend, broadcastable to [batch, heads, q_len, kv_len].
"""

from __future__ import annotations

import math
from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer import positional
from transformer.config import MODES, ModelConfig, resolve_scale
from transformer.decode_cache import step_matmul, store_step_kernel
from transformer.errors import ConfigError


# ---- masks (the only mask code of the project) ----
def make_attention_mask(q_valid: jax.Array, kv_valid: jax.Array, *, causal: bool = False,
                        q_segmentation: Optional[jax.Array] = None,
                        kv_segmentation: Optional[jax.Array] = None) -> jax.Array:
  """Padding (+ causal, + same-segment) mask: bool[B, 1, Lq, Lk] from q_valid bool[B, Lq], kv_valid bool[B, Lk]."""
  mask = q_valid[:, :, None] & kv_valid[:, None, :]
  if causal:
    lq, lk = q_valid.shape[-1], kv_valid.shape[-1]
    mask = mask & (jnp.arange(lq)[:, None] >= jnp.arange(lk)[None, :])
  if q_segmentation is not None and kv_segmentation is not None:
    # Packed rows: a token attends only within its own segment.
    mask = mask & (q_segmentation[:, :, None] == kv_segmentation[:, None, :])
  return mask[:, None, :, :]


# ---- scaled dot-product attention ----
def _heads_flat(x: jax.Array) -> jax.Array:
  """[B, L, H, D] -> [B * H, L, D], the decoding cache's layout."""
  batch, length, heads, dim = x.shape
  return jnp.swapaxes(x, 1, 2).reshape(batch * heads, length, dim)


def attention_logits(query: jax.Array, key: jax.Array, *, scale: float,
                     softcap: Optional[float] = None, kv_heads_flat: bool = False) -> jax.Array:
  """scale * q.k^T (then soft-capped) in float32: [B, Lq, H, D] x [B, Lk, H, D] -> [B, H, Lq, Lk].

  kv_heads_flat: key is [B * H, Lk, D] (the decoding cache's layout).
  """
  # Heads-first operands: XLA:CPU runs these batched matmuls ~1.7x faster (fwd+bwd) than
  # with the head axis in the middle.
  batch, q_len, heads, _ = query.shape
  k = key if kv_heads_flat else _heads_flat(key)
  logits = jnp.einsum("nqd,nkd->nqk", _heads_flat(query), k, preferred_element_type=jnp.float32)
  logits = logits.reshape(batch, heads, q_len, k.shape[1]) * scale
  if softcap is not None:
    logits = softcap * jnp.tanh(logits / softcap)
  return logits


IMPLEMENTATIONS = MODES["attention_impl"]
# ModelConfig.qkv_init -> the q/k/v kernel initialiser (fans of the flattened d x (heads*d_k) kernel).
_QKV_INIT = {"xavier": nn.initializers.xavier_uniform(), "lecun": nn.initializers.lecun_normal()}


def dot_product_attention(query: jax.Array, key: jax.Array, value: jax.Array, *,
                          mask: Optional[jax.Array] = None, scale: Optional[float] = None,
                          softcap: Optional[float] = None, dropout_rate: float = 0.0,
                          dropout_rng: Optional[jax.Array] = None,
                          implementation: str = "einsum",
                          kv_heads_flat: bool = False) -> jax.Array:
  """softmax(scale * q k^T) v: query [B, Lq, H, D], key/value [B, Lk, H, D] -> [B, Lq, H, D].

  kv_heads_flat: key/value are [B * H, Lk, D] (the decoding cache's layout).

  scale None means 1/sqrt(D) (the paper). A query row whose mask is all False returns zeros
  (never NaN). implementation: 'einsum' (plain XLA einsums; any soft cap or attention
  dropout), or 'xla' / 'cudnn' through `jax.nn.dot_product_attention` ('cudnn' is cuDNN's
  fused flash attention on GPU); those two fall back to 'einsum' for a soft cap or dropout.
  """
  if implementation not in IMPLEMENTATIONS:
    raise ConfigError(f"implementation={implementation!r} is not one of {list(IMPLEMENTATIONS)}.")
  if implementation == "cudnn" and jax.default_backend() != "gpu":
    raise ConfigError(f"attention_impl='cudnn' needs NVIDIA GPUs, and JAX runs on "
                      f"{jax.default_backend()}; use 'xla' or 'einsum'.")
  if scale is None:
    scale = 1.0 / math.sqrt(query.shape[-1])
  dropout = dropout_rate > 0.0 and dropout_rng is not None
  if implementation != "einsum" and softcap is None and not dropout:
    if kv_heads_flat:
      key, value = (jnp.swapaxes(x.reshape(query.shape[0], -1, *x.shape[1:]), 1, 2)
                    for x in (key, value))
    out = jax.nn.dot_product_attention(query, key, value, mask=mask, scale=scale,
                                       implementation=implementation)
  else:
    logits = attention_logits(query, key, scale=scale, softcap=softcap,
                              kv_heads_flat=kv_heads_flat)
    if mask is not None:
      logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    weights = jax.nn.softmax(logits, axis=-1)
    if dropout:
      keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, weights.shape)
      weights = jnp.where(keep, weights / (1.0 - dropout_rate), 0.0)
    batch, heads, q_len, k_len = weights.shape
    value = value if kv_heads_flat else _heads_flat(value)
    out = jnp.einsum("nqk,nkd->nqd", weights.astype(value.dtype).reshape(-1, q_len, k_len), value)
    out = jnp.swapaxes(out.reshape(batch, heads, q_len, -1), 1, 2)
  if mask is not None:
    # Softmax over an all-masked row is uniform; such rows must contribute nothing.
    has_key = jnp.any(mask, axis=-1)  # [B|1, H|1, Lq]
    out = out * jnp.moveaxis(has_key, -1, -2)[..., None].astype(out.dtype)
  return out


def attention_scale_value(config: ModelConfig) -> float:
  """The fixed multiplier of q.k (the learned mode starts from d_k^-0.5)."""
  mode = "inv_sqrt_dk" if config.attention_scale == "learned" else config.attention_scale
  return resolve_scale(mode, config.qk_dim, "attention_scale")


def _qk_normalize(config: ModelConfig, x: jax.Array, name: str) -> jax.Array:
  """Per-head normalisation of q or k over head_dim (QK-norm, Dehghani et al. 2023)."""
  if config.qk_norm == "none":
    return x
  if config.qk_norm == "l2":
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.sum(x32 * x32, -1, keepdims=True) + 1e-12)).astype(x.dtype)
  cls = nn.LayerNorm if config.qk_norm == "layernorm" else nn.RMSNorm
  return cls(epsilon=config.norm_epsilon, dtype=config.compute_dtype,
             param_dtype=config.params_dtype, name=name)(x)


class MultiHeadAttention(nn.Module):
  """Multi-head attention (Section 3.2.2). Self-attention may cache keys/values for decoding."""

  config: ModelConfig
  self_attention: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, kv: jax.Array, mask: Optional[jax.Array], *,
               q_positions: Optional[jax.Array] = None,
               kv_positions: Optional[jax.Array] = None,
               deterministic: bool = True, decode: bool = False) -> jax.Array:
    """x float[B, Lq, d], kv float[B, Lk, d], mask bool[B, 1, Lq, Lk] -> float[B, Lq, d].

    With decode=True (self-attention, Lq = 1) keys and values go into the 'cache' collection
    and the query attends to every cached position up to its own; cross-attention projects
    the encoder output to keys and values once, when the cache is created
    (`models.init_cache`), and reads them back at every step.
    """
    cfg = self.config
    heads, head_dim = cfg.num_heads, cfg.qk_dim
    dense = lambda name: nn.DenseGeneral(  # noqa: E731
        (heads, head_dim), use_bias=cfg.use_bias, dtype=cfg.compute_dtype,
        param_dtype=cfg.params_dtype, kernel_init=_QKV_INIT[cfg.qkv_init], name=name)
    # A self-attention decoding step (decode=True once the cache exists) computes q, k and v
    # in one matrix-vector product, from the stacked copy `_stack_qkv` put in the cache.
    stepping = decode and self.self_attention and self.has_variable("cache", "qkv_kernel")
    if stepping:
      qkv = step_matmul(self, "qkv", x).reshape(*x.shape[:-1], 3, heads, head_dim)
      query, key, value = qkv[..., 0, :, :], qkv[..., 1, :, :], qkv[..., 2, :, :]
      key = _qk_normalize(cfg, key, "key_norm")
    else:
      query = dense("query")(x)
    query = _qk_normalize(cfg, query, "query_norm")
    cross_cached = decode and not self.self_attention and self.has_variable("cache", "cross_key")
    if cross_cached:  # [B * H, Ls, D], as the attention einsums read them
      key, value = self.get_variable("cache", "cross_key"), self.get_variable("cache", "cross_value")
    elif not stepping:
      key = _qk_normalize(cfg, dense("key")(kv), "key_norm")
      value = dense("value")(kv)
      if decode and not self.self_attention:  # the encoder output's keys/values, once
        self.put_variable("cache", "cross_key", _heads_flat(key))
        self.put_variable("cache", "cross_value", _heads_flat(value))
      if decode and self.self_attention:  # creating the cache
        self._stack_qkv()
    if cfg.posemb == "rope" and self.self_attention:
      query = positional.apply_rope(query, q_positions, cfg.max_timescale)
      key = positional.apply_rope(key, kv_positions, cfg.max_timescale)

    kv_heads_flat = cross_cached
    if decode and self.self_attention:
      key, value, mask, kv_heads_flat = self._update_cache(key, value, mask)

    # For transformer.diagnostics: q and k before the scale, the mask, the per-head scale.
    # sow is a no-op unless apply(..., mutable=['intermediates']): training is unchanged.
    self.sow("intermediates", "q", query)
    self.sow("intermediates", "k", key)
    if mask is not None:
      self.sow("intermediates", "mask", mask)
    scale = attention_scale_value(cfg)
    if cfg.attention_scale == "learned":
      # One temperature per head, folded into q: (t_h q).k = t_h (q.k).
      temperature = self.param("temperature", nn.initializers.constant(scale), (heads,),
                               cfg.params_dtype)
      self.sow("intermediates", "scale", temperature.astype(jnp.float32))
      query = query * temperature.astype(query.dtype)[:, None]
      scale = 1.0
    else:
      self.sow("intermediates", "scale", jnp.full((heads,), scale, jnp.float32))
    dropout_rng = None
    if not deterministic and cfg.attention_dropout_rate > 0.0:
      dropout_rng = self.make_rng("dropout")
    out = dot_product_attention(query, key, value, mask=mask, scale=scale,
                                softcap=cfg.attn_logit_softcap,
                                dropout_rate=cfg.attention_dropout_rate, dropout_rng=dropout_rng,
                                implementation=cfg.attention_impl, kv_heads_flat=kv_heads_flat)
    return nn.DenseGeneral(cfg.d_model, axis=(-2, -1), use_bias=cfg.use_bias,
                           dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
                           kernel_init=nn.initializers.xavier_uniform(), name="out")(out)

  def _stack_qkv(self) -> None:
    """The query, key and value kernels [d, H, D] side by side, [d, 3 H D], for the steps."""
    params, d = self.variables["params"], self.config.d_model
    names = ("query", "key", "value")
    kernel = jnp.concatenate([params[n]["kernel"].reshape(d, -1) for n in names], axis=1)
    bias = None
    if self.config.use_bias:
      bias = jnp.concatenate([params[n]["bias"].reshape(-1) for n in names])
    store_step_kernel(self, "qkv", kernel, bias)

  def _update_cache(self, key: jax.Array, value: jax.Array, mask: Optional[jax.Array]):
    """Writes the new key/value [B, 1, H, D] at the cache index: (keys, values, mask,
    heads_flat). The first call only allocates the cache and returns its inputs.

    The cache is stored [B * H, L, D], the shape in which the attention einsums read it, so a
    step updates it in place and reads it where it lies. Stored [B, L, H, D], every step
    copied it heads-first; stored in a shape the einsums reshape, XLA:CPU fused the update
    into both readers (the next step and the einsum) and copied the cache for each.
    """
    initialized = self.has_variable("cache", "cached_key")
    batch, _, heads, head_dim = key.shape
    shape = (batch * heads, key.shape[1], head_dim)
    cached_key = self.variable("cache", "cached_key", jnp.zeros, shape, key.dtype)
    cached_value = self.variable("cache", "cached_value", jnp.zeros, shape, value.dtype)
    index = self.variable("cache", "index", lambda: jnp.zeros((), jnp.int32))
    if not initialized:
      return key, value, mask, False
    if key.shape[1] != 1:
      raise ValueError(f"decode=True feeds one token at a time, got length {key.shape[1]}.")
    i = index.value
    for cached, new in ((cached_key, key), (cached_value, value)):
      # [B, 1, H, D] -> [B * H, 1, D] is a reshape: the length axis has size 1.
      cached.value = jax.lax.dynamic_update_slice_in_dim(
          cached.value, new.reshape(batch * heads, 1, head_dim), i, axis=1)
    index.value = i + 1
    cache_mask = (jnp.arange(cached_key.value.shape[1]) <= i)[None, None, None, :]  # [1, 1, 1, L]
    mask = cache_mask if mask is None else mask & cache_mask
    return cached_key.value, cached_value.value, mask, True
