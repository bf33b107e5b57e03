"""Feed-forward network and encoder/decoder blocks, post-LN (the paper) or pre-LN.

post: x = Norm(x + Dropout(Sublayer(x)))        (Section 3.1 and 5.4)
pre:  x = x + Dropout(Sublayer(Norm(x)))        (Xiong et al. 2020; a final Norm ends the stack)
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import flax.linen as nn
import jax

from transformer.attention import MultiHeadAttention, SownAttention, read_sown_attention
from transformer.config import ModelConfig
from transformer.dropout import Dropout
from transformer.norms import make_norm

_ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu, "geglu": nn.gelu, "swiglu": nn.silu,
}


class FeedForward(nn.Module):
  """FFN(x) = act(x W1 + b1) W2 + b2 (Eq. 2); gated variants multiply act(x W1) by x W3."""

  config: ModelConfig

  @nn.compact
  def __call__(self, x: jax.Array, *, deterministic: bool = True) -> jax.Array:
    """x float[B, L, d] -> float[B, L, d]."""
    cfg = self.config
    dense = lambda features, name: nn.Dense(  # noqa: E731
        features, use_bias=cfg.use_bias, dtype=cfg.compute_dtype, param_dtype=cfg.storage_dtype,
        kernel_init=nn.initializers.xavier_uniform(), name=name)
    h = _ACTIVATIONS[cfg.activation](dense(cfg.d_ff, "wi")(x))
    if cfg.activation in ("geglu", "swiglu"):
      h = h * dense(cfg.d_ff, "wi_gate")(x)
    return dense(cfg.d_model, "wo")(h)


def residual(config: ModelConfig, x: jax.Array, sublayer: Callable[[jax.Array], jax.Array],
             norm: nn.Module, *, deterministic: bool) -> jax.Array:
  """One residual sub-layer with dropout on its output and the configured norm position."""
  drop = Dropout(config.dropout_rate)
  if config.norm_position == "post":
    return norm(x + drop(sublayer(x), deterministic=deterministic))
  return x + drop(sublayer(norm(x)), deterministic=deterministic)


class EncoderBlock(nn.Module):
  """Self-attention then feed-forward, each a residual sub-layer."""

  config: ModelConfig

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, positions: jax.Array, *,
               deterministic: bool = True) -> jax.Array:
    """x float[B, L, d], mask bool[B, 1, L, L], positions int[B, L] -> float[B, L, d]."""
    cfg = self.config
    attn = MultiHeadAttention(cfg, self_attention=True, name="self_attention")
    ffn = FeedForward(cfg, name="ffn")
    x = residual(cfg, x, lambda h: attn(h, h, mask, q_positions=positions, kv_positions=positions,
                                         deterministic=deterministic),
                 make_norm(cfg, name="attention_norm"), deterministic=deterministic)
    x = residual(cfg, x, lambda h: ffn(h, deterministic=deterministic),
                 make_norm(cfg, name="ffn_norm"), deterministic=deterministic)
    self.sow("intermediates", "output", x)  # the residual stream, for transformer.diagnostics
    return x


class DecoderBlock(nn.Module):
  """Masked self-attention, attention over the encoder output, feed-forward."""

  config: ModelConfig
  cross_attention: bool = True  # False: a decoder-only (language model) block

  @nn.compact
  def __call__(self, x: jax.Array, self_mask: Optional[jax.Array], positions: jax.Array,
               encoded: Optional[jax.Array] = None, cross_mask: Optional[jax.Array] = None, *,
               deterministic: bool = True, decode: bool = False) -> jax.Array:
    """x float[B, Lt, d], encoded float[B, Ls, d], masks bool[B, 1, Lt, Lt|Ls] ->
    float[B, Lt, d]."""
    cfg = self.config
    self_attn = MultiHeadAttention(cfg, self_attention=True, name="self_attention")
    x = residual(cfg, x, lambda h: self_attn(h, h, self_mask, q_positions=positions,
                                              kv_positions=positions, deterministic=deterministic,
                                              decode=decode),
                 make_norm(cfg, name="self_attention_norm"), deterministic=deterministic)
    if self.cross_attention:
      cross_attn = MultiHeadAttention(cfg, self_attention=False, name="cross_attention")
      x = residual(cfg, x, lambda h: cross_attn(h, encoded, cross_mask,
                                                 deterministic=deterministic, decode=decode),
                   make_norm(cfg, name="cross_attention_norm"), deterministic=deterministic)
    ffn = FeedForward(cfg, name="ffn")
    x = residual(cfg, x, lambda h: ffn(h, deterministic=deterministic),
                 make_norm(cfg, name="ffn_norm"), deterministic=deterministic)
    self.sow("intermediates", "output", x)  # the residual stream, for transformer.diagnostics
    return x


ATTENTION_SUBLAYERS = ("self_attention", "cross_attention")  # a block's attentions, by name

_REMAT_POLICIES = {
    "full": None,  # save nothing: recompute the whole block in the backward pass
    "dots": jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,  # keep matmul outputs
}


class _Layer(nn.Module):
  """One block with its flags bound, so remat and scan see only array arguments."""

  config: ModelConfig
  cross_attention: Optional[bool]  # None: an encoder block
  deterministic: bool
  decode: bool
  scanned: bool

  @nn.compact
  def __call__(self, x: jax.Array, *args):
    if self.cross_attention is None:
      y = EncoderBlock(self.config, name="block")(x, *args, deterministic=self.deterministic)
    else:
      y = DecoderBlock(self.config, cross_attention=self.cross_attention, name="block")(
          x, *args, deterministic=self.deterministic, decode=self.decode)
    return (y, None) if self.scanned else y


class BlockStack(nn.Module):
  """num_layers blocks: a Python loop, or one `nn.scan` (compiles one block, not L), with
  optional rematerialisation ('full' or 'dots', ModelConfig.remat)."""

  config: ModelConfig
  num_layers: int
  cross_attention: Optional[bool] = None  # None: encoder blocks

  @nn.compact
  def __call__(self, x: jax.Array, *args, deterministic: bool = True,
               decode: bool = False) -> jax.Array:
    """x float[B, L, d] and the blocks' other arguments (masks, positions, encoder output)."""
    cfg = self.config
    layer = _Layer
    if cfg.remat != "none":
      layer = nn.remat(_Layer, prevent_cse=not cfg.scan_layers, policy=_REMAT_POLICIES[cfg.remat])
    if cfg.scan_layers:
      stack = nn.scan(layer, variable_axes={"params": 0, "cache": 0, "intermediates": 0},
                      split_rngs={"params": True, "dropout": True},
                      in_axes=(nn.broadcast,) * len(args), length=self.num_layers)
      x, _ = stack(cfg, self.cross_attention, deterministic, decode, True, name="layers")(x, *args)
      return x
    for i in range(self.num_layers):
      block_cfg = cfg.for_layer(i)
      if cfg.remat != "none":
        x = layer(block_cfg, self.cross_attention, deterministic, decode, False,
                  name=f"layer_{i}")(x, *args)
      elif self.cross_attention is None:
        x = EncoderBlock(block_cfg, name=f"layer_{i}")(x, *args, deterministic=deterministic)
      else:
        x = DecoderBlock(block_cfg, cross_attention=self.cross_attention, name=f"layer_{i}")(
            x, *args, deterministic=deterministic, decode=decode)
    return x


def per_layer(tree: Any) -> list[tuple[int, Any]]:
  """(layer index, that layer's subtree) of a `BlockStack`'s params or intermediates, in layer
  order; a scanned stack (leaves [num_layers, ...]) is sliced into its layers."""
  if "layers" in tree:
    block = tree["layers"]["block"]
    count = jax.tree_util.tree_leaves(block)[0].shape[0]
    return [(i, jax.tree_util.tree_map(lambda x, i=i: x[i], block)) for i in range(count)]
  found = [(int(name[len("layer_"):]), sub.get("block", sub)) for name, sub in tree.items()
           if name.startswith("layer_")]
  return sorted(found, key=lambda t: t[0])


class SownLayer(NamedTuple):
  """What one block records for transformer.diagnostics."""
  index: int
  output: jax.Array  # the residual stream after the block, float[B, L, d]
  attentions: dict[str, SownAttention]  # by sublayer: 'self_attention', 'cross_attention'


def read_sown_layers(tree: Any) -> list[SownLayer]:
  """The `SownLayer`s of a `BlockStack`'s 'intermediates' subtree, in layer order."""
  return [SownLayer(i, block["output"][0],
                    {name: read_sown_attention(block[name])
                     for name in ATTENTION_SUBLAYERS if name in block})
          for i, block in per_layer(tree)]
