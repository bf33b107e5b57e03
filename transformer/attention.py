"""Scaled dot-product attention (Section 3.2), its masks, and multi-head attention with a KV cache.

The attention knobs act here and nowhere else:
  attention_scale    'inv_sqrt_dk' (the paper, Eq. 1), 'inv_dk' (muP), 'none', a float, or
                     'learned' (one temperature per head, initialised at d_k^-0.5)
  qk_norm            normalise q and k per head before the scale ('layernorm', 'rmsnorm', 'l2')
  attn_logit_softcap logits -> cap * tanh(logits / cap) (Gemma 2)
  attention_impl     the kernel: 'auto' picks per chip (`resolve_implementation`)
Arrays use the layout of `jax.nn.dot_product_attention`: [batch, length, heads, head_dim].
Masks are boolean, True = may attend, broadcastable to [batch, heads, q_len, kv_len], or a
`SegmentMask` (the same mask kept as its factors, which the fused kernels take instead).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import PartitionSpec

from transformer import positional
from transformer.config import MODES, ModelConfig
from transformer.decode_cache import step_matmul, store_step_kernel
from transformer.dropout import apply_dropout
from transformer.errors import ConfigError


# ---- masks (the only mask code of the project) ----
def make_attention_mask(q_valid: jax.Array, kv_valid: jax.Array, *, causal: bool = False,
                        q_segmentation: Optional[jax.Array] = None,
                        kv_segmentation: Optional[jax.Array] = None) -> jax.Array:
  """Padding (+ causal, + same-segment) mask: bool[B, 1, Lq, Lk] from q_valid bool[B, Lq],
  kv_valid bool[B, Lk]."""
  mask = q_valid[:, :, None] & kv_valid[:, None, :]
  if causal:
    lq, lk = q_valid.shape[-1], kv_valid.shape[-1]
    mask = mask & (jnp.arange(lq)[:, None] >= jnp.arange(lk)[None, :])
  if q_segmentation is not None and kv_segmentation is not None:
    # Packed rows: a token attends only within its own segment.
    mask = mask & (q_segmentation[:, :, None] == kv_segmentation[:, None, :])
  return mask[:, None, :, :]


@struct.dataclass
class SegmentMask:
  """A batch's attention mask kept as its factors: query i may attend key j iff
  q_segments[i] == kv_segments[j] != 0 (and i >= j when causal).

  Segment 0 is padding; an unpacked row is segment 1 where it holds tokens. A fused kernel
  takes these ([B, L] ids, a flag) instead of a [B, 1, Lq, Lk] array; `dense` is that array.
  packed: rows may hold several segments, numbered from 1. Unpacked rows are tokens, then
  padding (as every pipeline here makes them): cuDNN reads them as lengths.
  """
  q_segments: jax.Array  # int32[B, Lq]
  kv_segments: jax.Array  # int32[B, Lk]
  causal: bool = struct.field(pytree_node=False, default=False)
  packed: bool = struct.field(pytree_node=False, default=False)

  def dense(self) -> jax.Array:
    """bool[B, 1, Lq, Lk], as `make_attention_mask` makes it."""
    return make_attention_mask(self.q_segments > 0, self.kv_segments > 0, causal=self.causal,
                               q_segmentation=self.q_segments, kv_segmentation=self.kv_segments)


def segment_mask(q_valid: jax.Array, kv_valid: jax.Array, *, causal: bool = False,
                 q_segmentation: Optional[jax.Array] = None,
                 kv_segmentation: Optional[jax.Array] = None) -> SegmentMask:
  """The `SegmentMask` of `make_attention_mask`'s arguments (same meaning, same mask)."""
  packed = q_segmentation is not None and kv_segmentation is not None
  if packed:
    q_ids, kv_ids = (jnp.where(v, s, 0).astype(jnp.int32)
                     for v, s in ((q_valid, q_segmentation), (kv_valid, kv_segmentation)))
  else:
    q_ids, kv_ids = q_valid.astype(jnp.int32), kv_valid.astype(jnp.int32)
  return SegmentMask(q_ids, kv_ids, causal=causal, packed=packed)


Mask = Union[jax.Array, SegmentMask]


def dense_mask(mask: Optional[Mask]) -> Optional[jax.Array]:
  """A mask as the boolean array [B|1, H|1, Lq, Lk] the einsum path reads."""
  return mask.dense() if isinstance(mask, SegmentMask) else mask


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
  # The product in the operands' dtype (accumulated in float32 by the chip's matmul unit),
  # then float32 for the softmax: asking the einsum for a float32 result would make both
  # backward matmuls float32 x float32 in a bfloat16 step (half the bf16 rate on a GPU).
  logits = jnp.einsum("nqd,nkd->nqk", _heads_flat(query), k).astype(jnp.float32)
  logits = logits.reshape(batch, heads, q_len, k.shape[1]) * scale
  if softcap is not None:
    logits = softcap * jnp.tanh(logits / softcap)
  return logits


IMPLEMENTATIONS = MODES["attention_impl"]
# ModelConfig.qkv_init -> the q/k/v kernel initialiser (fans of the flattened d x (heads*d_k)
# kernel).
_QKV_INIT = {"xavier": nn.initializers.xavier_uniform(), "lecun": nn.initializers.lecun_normal()}
_HALF = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))


def target_platform() -> str:
  """The platform the program being traced runs on: that of the mesh in context (the train
  step's, `steps.OnMesh`, which may be a TPU slice compiled for from a CPU host), else JAX's
  default backend. 'cpu', 'gpu' (NVIDIA), 'tpu', or another backend's name ('rocm')."""
  mesh = jax.sharding.get_abstract_mesh()
  platform = jax.default_backend() if mesh.empty else mesh.abstract_device.platform
  return "gpu" if platform == "cuda" else platform


def _runs_per_device() -> bool:
  """Whether a kernel XLA cannot partition (splash) can run here: a mesh in context to
  `shard_map` it over, or a single device."""
  return not jax.sharding.get_abstract_mesh().empty or jax.device_count() == 1


Shaped = Union[jax.Array, jax.ShapeDtypeStruct]  # what the kernel choice reads: shape, dtype


def _compute_capability() -> Optional[tuple[int, int]]:
  """The attached NVIDIA GPU's compute capability, (9, 0) on a Hopper; None without one. JAX
  reads it to lower cuDNN's kernel, so a program compiled for an absent GPU (the compile
  report's H100 and H200 rows) cannot hold that kernel."""
  try:
    device = jax.devices("gpu")[0]
  except RuntimeError:  # no GPU attached
    return None
  major, _, minor = str(getattr(device, "compute_capability", "0")).partition(".")
  return int(major), int(minor or 0)


def _cudnn_refusal(query: Shaped, key: Shaped) -> Optional[str]:
  """Why cuDNN's fused attention cannot take query [B, Lq, H, D] and key [B, Lk, H, D] here,
  as the end of a sentence that starts "attention_impl='cudnn' "; None where it can.

  The refusals of JAX's cuDNN lowering (`check_layout` and `check_is_flash_attention` in
  jax/_src/cudnn/fused_attention_stablehlo.py) that a project config or batch reaches. Odd
  lengths are refused outside training too: the kernel is chosen when the attention is
  traced, before anything says whether a gradient will be taken (and JAX always passes the
  kernel a bias, which under grad needs even lengths). Not reached: packed layouts with
  offsets (packed rows reach cuDNN as a mask), keys of another head dim than values, fp8.
  Not checked: cuDNN older than 9.11 on compute capability 10.3 (a machine's, not a config's).
  """
  dtype = jnp.dtype(query.dtype)
  if dtype not in _HALF:
    return (f"computes in bfloat16 or float16, and this model computes in {dtype.name}; set "
            "--config.model.dtype=bfloat16 or use attention_impl='auto'.")
  capability = _compute_capability()
  if capability is None or capability < (8, 0):
    return ("needs an attached NVIDIA GPU of compute capability 8.0 or newer (JAX reads it to "
            "compile the kernel); use 'auto'.")
  head_dim, most = query.shape[-1], 256 if capability >= (9, 0) else 128
  if head_dim % 8 or head_dim > most:
    return (f"takes a head dim that is a multiple of 8 and at most {most} on a GPU of compute "
            f"capability {capability[0]}.{capability[1]}, and this model's is {head_dim}; use "
            "'auto' or another head_dim.")
  if query.shape[1] % 2 or key.shape[1] % 2:
    return (f"takes even lengths only here, in evaluation too (JAX's lowering refuses odd ones "
            f"under grad), and these are {query.shape[1]} queries and {key.shape[1]} keys; use "
            "'auto' or an even max_len.")
  return None


def resolve_implementation(implementation: str, query: Shaped, key: Shaped) -> str:
  """The attention kernel that runs for query [B, Lq, H, D] and key [B, Lk, H, D] (arrays or
  shapes) on `target_platform()`.

  'auto': Pallas splash attention on a TPU (with a mesh in context, or on one chip: the
  kernel runs per device), cuDNN's fused attention on an NVIDIA GPU where JAX's lowering
  takes these inputs (`_cudnn_refusal`: half precision, compute capability 8.0 or newer, its
  head dims, even lengths), the einsum path elsewhere (a CPU, float32, an older or
  non-NVIDIA GPU, a GPU compiled for but not attached, a multi-chip TPU with no mesh in
  context). An explicit choice is kept, and refused in one line where it cannot run.
  """
  if implementation not in IMPLEMENTATIONS:
    raise ConfigError(f"attention_impl={implementation!r} is not one of {list(IMPLEMENTATIONS)}.")
  platform = target_platform()
  if implementation == "auto":
    if platform == "tpu" and _runs_per_device():
      return "splash"
    return "cudnn" if platform == "gpu" and _cudnn_refusal(query, key) is None else "einsum"
  if implementation == "cudnn" and platform != "gpu":
    raise ConfigError(f"attention_impl='cudnn' needs NVIDIA GPUs, and JAX runs on "
                      f"{platform}; use 'auto', 'xla' or 'einsum'.")
  refusal = _cudnn_refusal(query, key) if implementation == "cudnn" else None
  if refusal:
    raise ConfigError(f"attention_impl='cudnn' {refusal}")
  if implementation == "splash" and platform not in ("tpu", "cpu"):
    raise ConfigError(f"attention_impl='splash' is the TPU's kernel (interpreted on a CPU, for "
                      f"tests), and JAX runs on {platform}; use 'auto'.")
  return implementation


def step_kernel(config: ModelConfig, length: int) -> str:
  """The kernel a training step of `config` on rows of `length` tokens (inputs and targets)
  runs in its attentions: `resolve_implementation`, then the einsum path where the fused
  kernel cannot serve (`_fused_serves`)."""
  rows = jax.ShapeDtypeStruct((1, length, config.num_heads, config.qk_dim), config.compute_dtype)
  kernel = resolve_implementation(config.attention_impl, rows, rows)
  dropout = config.attention_dropout_rate > 0.0
  return kernel if _fused_serves(kernel, dropout, config.attn_logit_softcap, None) else "einsum"


def _fused_serves(kernel: str, dropout: bool, softcap: Optional[float],
                  mask: Optional[Mask], kv_heads_flat: bool = False) -> bool:
  """Whether `kernel` (not einsum) can compute this attention: no attention dropout and no
  cache layout for any of them; splash takes a SegmentMask (not a dense one) and a soft cap,
  the jax.nn kernels no soft cap."""
  if kernel == "einsum" or dropout or kv_heads_flat:
    return False
  if kernel == "splash":
    return not isinstance(mask, (jax.Array, np.ndarray))
  return softcap is None


def _einsum_attention(query, key, value, mask, scale, softcap, dropout_rate, dropout_rng,
                      kv_heads_flat):
  """softmax(logits) v with the [B, H, Lq, Lk] weights in float32 (any mask, dropout)."""
  logits = attention_logits(query, key, scale=scale, softcap=softcap,
                            kv_heads_flat=kv_heads_flat)
  if mask is not None:
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
  weights = jax.nn.softmax(logits, axis=-1)
  if dropout_rng is not None:
    weights = apply_dropout(weights, dropout_rate, dropout_rng)
  batch, heads, q_len, k_len = weights.shape
  value = value if kv_heads_flat else _heads_flat(value)
  out = jnp.einsum("nqk,nkd->nqd", weights.astype(value.dtype).reshape(-1, q_len, k_len), value)
  return jnp.swapaxes(out.reshape(batch, heads, q_len, -1), 1, 2)


def _jax_nn_attention(query, key, value, mask, scale, implementation):
  """`jax.nn.dot_product_attention`; an unpacked `SegmentMask` goes in as causal-ness and
  lengths (rows are tokens, then padding), which cuDNN reads without a [B, 1, L, L] mask."""
  if isinstance(mask, SegmentMask) and not mask.packed:
    # At least one of each: a row of padding only (an eval batch's filler) attends key 0,
    # not nothing (NaN in a kernel); its output is zeroed by the caller.
    lengths = lambda ids: jnp.maximum(jnp.sum(ids > 0, -1, dtype=jnp.int32), 1)  # noqa: E731
    kwargs = dict(is_causal=mask.causal, query_seq_lengths=lengths(mask.q_segments),
                  key_value_seq_lengths=lengths(mask.kv_segments))
  else:
    kwargs = dict(mask=dense_mask(mask))
  return jax.nn.dot_product_attention(query, key, value, scale=scale,
                                      implementation=implementation, **kwargs)


_SPLASH_BLOCK = 128  # the TPU's lane count: splash's blocks are multiples of it


def _splash_attention(query, key, value, mask, scale, softcap):
  """Pallas splash attention (the TPU's flash attention), one kernel call per device.

  Lengths are padded to a multiple of the block with segment 0. A padding query (segment 0)
  is given key 0's segment so that no row of the kernel is empty; its output is zeroed by
  the caller. A Mosaic kernel is not partitioned by XLA, so under a mesh it runs inside a
  `shard_map` over the batch, split over every mesh axis (as training lays batches out).
  Off a TPU it runs in Pallas's interpret mode (slow; for tests).
  """
  from jax.experimental.pallas.ops.tpu.splash_attention import (  # TPU-only kernels, lazily
      splash_attention_kernel as splash, splash_attention_mask as splash_mask)
  batch, q_len, heads, head_dim = query.shape
  k_len = key.shape[1]
  if mask is None:
    mask = SegmentMask(jnp.ones((batch, q_len), jnp.int32), jnp.ones((batch, k_len), jnp.int32))
  pad = lambda n: -(-n // _SPLASH_BLOCK) * _SPLASH_BLOCK - n  # noqa: E731
  pq, pk = pad(q_len), pad(k_len)
  def heads_first(x, p):  # [B, L, H, D] -> [B, H, L + p, D]
    return jnp.pad(jnp.swapaxes(x, 1, 2), ((0, 0), (0, 0), (0, p), (0, 0)))

  q = heads_first(query * jnp.asarray(scale, query.dtype), pq)
  k, v = heads_first(key, pk), heads_first(value, pk)
  kv_ids = jnp.pad(mask.kv_segments, ((0, 0), (0, pk)))
  q_ids = jnp.pad(jnp.where(mask.q_segments > 0, mask.q_segments, kv_ids[:, :1]), ((0, 0), (0, pq)))
  shape = (q_len + pq, k_len + pk)
  one = splash_mask.CausalMask(shape) if mask.causal else splash_mask.FullMask(shape)
  sizes = {name: _SPLASH_BLOCK for name in (
      "block_q", "block_kv", "block_kv_compute", "block_q_dkv", "block_kv_dkv",
      "block_kv_dkv_compute", "block_q_dq", "block_kv_dq")}
  kernel = splash.make_splash_mha(
      splash_mask.MultiHeadMask([one] * heads), block_sizes=splash.BlockSizes(**sizes),
      head_shards=1, q_seq_shards=1, attn_logits_soft_cap=softcap,
      interpret=target_platform() != "tpu")

  def rows(q, k, v, q_ids, kv_ids):
    return jax.vmap(lambda *a: kernel(*a[:3], segment_ids=splash.SegmentIds(*a[3:])))(
        q, k, v, q_ids, kv_ids)

  mesh = jax.sharding.get_abstract_mesh()
  if not mesh.empty:
    # The batch's rows split over every mesh axis; a batch that does not split (the one row
    # that fixes the params' shapes at init) runs whole on every device.
    split = PartitionSpec(mesh.axis_names) if batch % mesh.size == 0 else PartitionSpec()
    rows = jax.shard_map(rows, mesh=mesh, in_specs=(split,) * 5, out_specs=split,
                         check_vma=False)
  out = rows(q, k, v, q_ids, kv_ids)[:, :, :q_len]
  return jnp.swapaxes(out, 1, 2)


def dot_product_attention(query: jax.Array, key: jax.Array, value: jax.Array, *,
                          mask: Optional[Mask] = None, scale: Optional[float] = None,
                          softcap: Optional[float] = None, dropout_rate: float = 0.0,
                          dropout_rng: Optional[jax.Array] = None,
                          implementation: str = "einsum",
                          kv_heads_flat: bool = False) -> jax.Array:
  """softmax(scale * q k^T) v: query [B, Lq, H, D], key/value [B, Lk, H, D] -> [B, Lq, H, D].

  kv_heads_flat: key/value are [B * H, Lk, D] (the decoding cache's layout).

  scale None means 1/sqrt(D) (the paper). A query row whose mask is all False returns zeros
  (never NaN). implementation (`resolve_implementation`): 'einsum' (plain XLA einsums; any
  mask, soft cap or attention dropout), 'xla' / 'cudnn' through `jax.nn.dot_product_attention`
  ('cudnn' is cuDNN's fused flash attention on GPU), 'splash' (Pallas, TPU), or 'auto'. A
  fused kernel never builds the [B, H, Lq, Lk] weights; where it cannot serve (attention
  dropout, a soft cap outside splash, a dense mask for splash, the cache's layout) the einsum
  path runs.
  """
  implementation = resolve_implementation(implementation, query, key)
  if scale is None:
    scale = 1.0 / math.sqrt(query.shape[-1])
  dropout = dropout_rate > 0.0 and dropout_rng is not None
  if not _fused_serves(implementation, dropout, softcap, mask, kv_heads_flat):
    implementation = "einsum"
  if implementation == "splash":
    out = _splash_attention(query, key, value, mask, scale, softcap)
  elif implementation in ("xla", "cudnn"):
    out = _jax_nn_attention(query, key, value, mask, scale, implementation)
  else:
    out = _einsum_attention(query, key, value, dense_mask(mask), scale, softcap, dropout_rate,
                            dropout_rng if dropout else None, kv_heads_flat)
  if mask is not None:
    # Softmax over an all-masked row is uniform (or, in a kernel, undefined); such rows must
    # contribute nothing.
    out = jnp.where(jnp.moveaxis(has_key(mask), -1, -2)[..., None], out, 0)
  return out


def has_key(mask: Mask) -> jax.Array:
  """bool[B|1, H|1, Lq]: whether each query may attend any key.

  An unpacked `SegmentMask` answers from its factors, [B, L] work instead of the [B, Lq, Lk]
  of the dense mask: a valid query has a key if its row holds any (causal: any at or before
  its own position, a running `any` over the keys).
  """
  if isinstance(mask, SegmentMask) and not mask.packed:
    kv_valid = mask.kv_segments > 0
    if mask.causal:  # query i sees keys 0..i (`make_attention_mask`'s causal mask)
      q_len, kv_len = mask.q_segments.shape[-1], kv_valid.shape[-1]
      seen = jax.lax.cummax(kv_valid.astype(jnp.int32), axis=1) > 0
      seen = seen[:, jnp.minimum(jnp.arange(q_len), kv_len - 1)]
    else:
      seen = jnp.any(kv_valid, axis=-1, keepdims=True)
    return ((mask.q_segments > 0) & seen)[:, None, :]
  return jnp.any(dense_mask(mask), axis=-1)


def attention_scale_value(config: ModelConfig) -> float:
  """The fixed multiplier of q.k (the learned mode starts from d_k^-0.5)."""
  mode = "inv_sqrt_dk" if config.attention_scale == "learned" else config.attention_scale
  if not isinstance(mode, str):
    return float(mode)
  return {"none": 1.0, "inv_sqrt_dk": 1.0 / math.sqrt(config.qk_dim),
          "inv_dk": 1.0 / config.qk_dim}[mode]


def _qk_normalize(config: ModelConfig, x: jax.Array, name: str) -> jax.Array:
  """Per-head normalisation of q or k over head_dim (QK-norm, Dehghani et al. 2023)."""
  if config.qk_norm == "none":
    return x
  if config.qk_norm == "l2":
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.sum(x32 * x32, -1, keepdims=True) + 1e-12)).astype(x.dtype)
  cls = nn.LayerNorm if config.qk_norm == "layernorm" else nn.RMSNorm
  return cls(epsilon=config.norm_epsilon, dtype=config.compute_dtype,
             param_dtype=config.storage_dtype, name=name)(x)


class SownAttention(NamedTuple):
  """What one attention records for transformer.diagnostics (`MultiHeadAttention`)."""
  q: jax.Array  # float[B, Lq, H, Dh]
  k: jax.Array  # float[B, Lk, H, Dh]
  scale: jax.Array  # float32[H]: the factor on q.k (per head when learned)
  mask: Optional[jax.Array]  # bool[B, 1 or H, Lq, Lk], True = attend; None without a mask


def read_sown_attention(tree: Any) -> SownAttention:
  """The `SownAttention` of one attention's 'intermediates' subtree."""
  return SownAttention(tree["q"][0], tree["k"][0], tree["scale"][0],
                       tree["mask"][0] if "mask" in tree else None)


class MultiHeadAttention(nn.Module):
  """Multi-head attention (Section 3.2.2). Self-attention may cache keys/values for decoding."""

  config: ModelConfig
  self_attention: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, kv: jax.Array, mask: Optional[Mask], *,
               q_positions: Optional[jax.Array] = None,
               kv_positions: Optional[jax.Array] = None,
               deterministic: bool = True, decode: bool = False) -> jax.Array:
    """x float[B, Lq, d], kv float[B, Lk, d], mask (bool[B, 1, Lq, Lk] or a `SegmentMask`)
    -> float[B, Lq, d].

    With decode=True (self-attention, Lq = 1) keys and values go into the 'cache' collection
    and the query attends to every cached position up to its own; cross-attention projects
    the encoder output to keys and values once, when the cache is created
    (a model's `start_decoding`), and reads them back at every step (`_phase` names the cases).
    """
    cfg = self.config
    phase = self._phase(decode)
    query, key, value = self._project(phase, x, kv)
    if cfg.posemb == "rope" and self.self_attention:
      query = positional.apply_rope(query, q_positions, cfg.max_timescale)
      key = positional.apply_rope(key, kv_positions, cfg.max_timescale)
    kv_heads_flat = phase == "cross_step"
    implementation = cfg.attention_impl
    if decode:  # one query row a step: a matrix-vector product no fused kernel speeds up
      mask, implementation = dense_mask(mask), "einsum"
    if decode and self.self_attention:
      key, value, mask, kv_heads_flat = self._update_cache(key, value, mask)
    query, scale = self._scaled_query(query, key, mask)
    dropout_rng = None
    if not deterministic and cfg.attention_dropout_rate > 0.0:
      dropout_rng = self.make_rng("dropout")
    out = dot_product_attention(query, key, value, mask=mask, scale=scale,
                                softcap=cfg.attn_logit_softcap,
                                dropout_rate=cfg.attention_dropout_rate, dropout_rng=dropout_rng,
                                implementation=implementation, kv_heads_flat=kv_heads_flat)
    return nn.DenseGeneral(cfg.d_model, axis=(-2, -1), use_bias=cfg.use_bias,
                           dtype=cfg.compute_dtype, param_dtype=cfg.storage_dtype,
                           kernel_init=nn.initializers.xavier_uniform(), name="out")(out)

  def _phase(self, decode: bool) -> str:
    """'full' (training, scoring: every position at once); when decoding, 'create_cache' (the
    pass `start_decoding` makes: projections as in 'full', their results stored), then at
    each step 'step' (self-attention: q, k, v of one token from the stacked kernel) or
    'cross_step' (cross-attention: keys and values of the encoder output read back)."""
    if not decode:
      return "full"
    name = "qkv_kernel" if self.self_attention else "cross_key"
    if not self.has_variable("cache", name):
      return "create_cache"
    return "step" if self.self_attention else "cross_step"

  def _project(self, phase: str, x: jax.Array, kv: jax.Array):
    """(query, key, value), each [B, L, H, D] (a cross step's keys and values [B * H, Ls, D],
    as the einsums read them), normalised where QK-norm is on."""
    cfg = self.config
    heads, head_dim = cfg.num_heads, cfg.qk_dim
    if phase == "step":  # q, k and v in one matrix-vector product, from `_stack_qkv`'s copy
      qkv = step_matmul(self, "qkv", x).reshape(*x.shape[:-1], 3, heads, head_dim)
      query, key, value = qkv[..., 0, :, :], qkv[..., 1, :, :], qkv[..., 2, :, :]
      return (_qk_normalize(cfg, query, "query_norm"), _qk_normalize(cfg, key, "key_norm"),
              value)
    dense = lambda name: nn.DenseGeneral(  # noqa: E731
        (heads, head_dim), use_bias=cfg.use_bias, dtype=cfg.compute_dtype,
        param_dtype=cfg.storage_dtype, kernel_init=_QKV_INIT[cfg.qkv_init], name=name)
    query = _qk_normalize(cfg, dense("query")(x), "query_norm")
    if phase == "cross_step":
      return (query, self.get_variable("cache", "cross_key"),
              self.get_variable("cache", "cross_value"))
    key = _qk_normalize(cfg, dense("key")(kv), "key_norm")
    value = dense("value")(kv)
    if phase == "create_cache" and self.self_attention:
      self._stack_qkv()
    elif phase == "create_cache":  # the encoder output's keys and values, once
      self.put_variable("cache", "cross_key", _heads_flat(key))
      self.put_variable("cache", "cross_value", _heads_flat(value))
    return query, key, value

  def _scaled_query(self, query: jax.Array, key: jax.Array,
                    mask: Optional[Mask]) -> tuple[jax.Array, float]:
    """(query, the scale left for the kernel): a learned per-head temperature is folded into
    the query, (t_h q).k = t_h (q.k). Records q, k, the mask and the per-head scale for
    transformer.diagnostics (`sow` is a no-op unless apply(..., mutable=['intermediates']))."""
    cfg = self.config
    self.sow("intermediates", "q", query)
    self.sow("intermediates", "k", key)
    if mask is not None:
      self.sow("intermediates", "mask", dense_mask(mask))
    scale = attention_scale_value(cfg)
    if cfg.attention_scale != "learned":
      self.sow("intermediates", "scale", jnp.full((cfg.num_heads,), scale, jnp.float32))
      return query, scale
    temperature = self.param("temperature", nn.initializers.constant(scale), (cfg.num_heads,),
                             cfg.storage_dtype)
    self.sow("intermediates", "scale", temperature.astype(jnp.float32))
    return query * temperature.astype(query.dtype)[:, None], 1.0

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
