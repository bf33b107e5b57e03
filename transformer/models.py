"""The paper's encoder-decoder `Transformer` and a decoder-only language model, `DecoderOnly`.

Both predict `targets` at every position: logits[:, t] is the distribution of targets[:, t]
given targets[:, :t] (the decoder input is `shift_right(targets)`, with 0 as the start token).
Packed batches pass `*_segmentation` (segment id per token, 0 = pad) and `*_position`
(position within the segment); attention never crosses segments.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer import positional
from transformer.attention import segment_mask
from transformer.config import ModelConfig
from transformer.embeddings import InputEmbedding, OutputLogits, TokenEmbedding
from transformer.errors import ConfigError
from transformer.layers import BlockStack
from transformer.norms import make_norm
from transformer.token_ids import PAD_ID


def shift_right(tokens: jax.Array, segmentation: Optional[jax.Array] = None) -> jax.Array:
  """Decoder input: int[B, L] -> int[B, L] with PAD_ID (start) first, and at each segment start."""
  shifted = jnp.pad(tokens, ((0, 0), (1, 0)))[:, :-1]
  if segmentation is not None:
    shifted = shifted * (segmentation == jnp.pad(segmentation, ((0, 0), (1, 0)))[:, :-1])
  return shifted


class Encoder(nn.Module):
  """Input embedding, then num_encoder_layers blocks (then a final norm when pre-LN)."""

  config: ModelConfig
  token_embedding: TokenEmbedding

  @nn.compact
  def __call__(self, inputs: jax.Array, *, segmentation: Optional[jax.Array] = None,
               positions: Optional[jax.Array] = None, deterministic: bool = True) -> jax.Array:
    """inputs int[B, L] -> encoded float[B, L, d]."""
    cfg = self.config
    positions = positional.default_positions(inputs) if positions is None else positions
    x = InputEmbedding(cfg, self.token_embedding, name="input_embedding")(
        inputs, positions, deterministic=deterministic)
    valid = inputs != PAD_ID
    mask = segment_mask(valid, valid, q_segmentation=segmentation,
                               kv_segmentation=segmentation)
    x = BlockStack(cfg, cfg.num_encoder_layers, name="blocks")(
        x, mask, positions, deterministic=deterministic)
    if cfg.norm_position == "pre":
      x = make_norm(cfg, name="final_norm")(x)
    return x


class Decoder(nn.Module):
  """Input embedding, then num_decoder_layers blocks (then a final norm when pre-LN)."""

  config: ModelConfig
  token_embedding: TokenEmbedding
  cross_attention: bool = True

  @nn.compact
  def __call__(self, decoder_inputs: jax.Array, self_mask: Optional[jax.Array],
               positions: Optional[jax.Array], encoded: Optional[jax.Array] = None,
               cross_mask: Optional[jax.Array] = None, *, deterministic: bool = True,
               decode: bool = False) -> jax.Array:
    """decoder_inputs int[B, Lt] -> hidden float[B, Lt, d] (before the output projection)."""
    cfg = self.config
    if positions is None:
      positions = positional.default_positions(decoder_inputs)
    if decode:  # incremental decoding: the position is the number of tokens fed so far
      cached = self.has_variable("cache", "position")
      position = self.variable("cache", "position", lambda: jnp.zeros((), jnp.int32))
      if cached:
        positions = jnp.full(decoder_inputs.shape, position.value, jnp.int32)
        position.value = position.value + decoder_inputs.shape[1]
    x = InputEmbedding(cfg, self.token_embedding, name="input_embedding")(
        decoder_inputs, positions, deterministic=deterministic)
    x = BlockStack(cfg, cfg.num_decoder_layers, cross_attention=self.cross_attention,
                   name="blocks")(x, self_mask, positions, encoded, cross_mask,
                                  deterministic=deterministic, decode=decode)
    if cfg.norm_position == "pre":
      x = make_norm(cfg, name="final_norm")(x)
    return x


class Transformer(nn.Module):
  """Encoder-decoder Transformer: apply(variables, inputs, targets) -> logits float[B, Lt, V]."""

  config: ModelConfig
  # Batches of both models hold 'targets'; a model with an encoder also reads 'inputs' (its
  # source). The functions below the classes are the one interface callers use for both.
  has_encoder: ClassVar[bool] = True
  batch_keys: ClassVar[tuple[str, ...]] = ("inputs", "targets")

  def setup(self):
    cfg = self.config
    if cfg.share_embeddings:  # one [vocab, d] matrix for source, target (and output if tied)
      self.embedding = TokenEmbedding(cfg, cfg.vocab_size)
      source, target = self.embedding, self.embedding
    else:
      self.source_embedding = TokenEmbedding(cfg, cfg.vocab_size)
      self.target_embedding = TokenEmbedding(cfg, cfg.output_vocab_size)
      source, target = self.source_embedding, self.target_embedding
    self.encoder = Encoder(cfg, source)
    self.decoder = Decoder(cfg, target)
    self.output_logits = OutputLogits(cfg, cfg.output_vocab_size,
                                      target if cfg.logits_via_embedding else None)

  def encode(self, inputs: jax.Array, *, inputs_segmentation: Optional[jax.Array] = None,
             inputs_position: Optional[jax.Array] = None,
             deterministic: bool = True) -> jax.Array:
    """inputs int[B, Ls] -> encoded float[B, Ls, d]."""
    return self.encoder(inputs, segmentation=inputs_segmentation, positions=inputs_position,
                        deterministic=deterministic)

  def decode(self, encoded: jax.Array, inputs: jax.Array, targets: jax.Array, *,
             inputs_segmentation: Optional[jax.Array] = None,
             targets_segmentation: Optional[jax.Array] = None,
             targets_position: Optional[jax.Array] = None, deterministic: bool = True,
             decode: bool = False, return_hidden: bool = False) -> jax.Array:
    """encoded float[B, Ls, d], inputs int[B, Ls], targets int[B, Lt] -> logits float[B, Lt, V].

    return_hidden=True returns the final hidden states float[B, Lt, d] instead (`project`
    turns them into logits; the chunked loss does so a slice at a time).

    With decode=True, `targets` is the previous token [B, 1] (fed as is, not shifted) and
    self-attention keys/values accumulate in the 'cache' collection.
    """
    if decode:
      decoder_inputs, self_mask = targets, None  # the cache masks future positions
      q_valid, q_segmentation = jnp.ones(targets.shape, bool), None
    else:
      decoder_inputs = shift_right(targets, targets_segmentation)
      q_valid, q_segmentation = targets != PAD_ID, targets_segmentation
      self_mask = segment_mask(q_valid, q_valid, causal=True,
                                      q_segmentation=q_segmentation,
                                      kv_segmentation=q_segmentation)
    cross_mask = segment_mask(q_valid, inputs != PAD_ID, q_segmentation=q_segmentation,
                                     kv_segmentation=inputs_segmentation)
    h = self.decoder(decoder_inputs, self_mask, targets_position, encoded, cross_mask,
                     deterministic=deterministic, decode=decode)
    return h if return_hidden else self.output_logits(h, decode=decode)

  def project(self, hidden: jax.Array) -> jax.Array:
    """Final hidden states float[B, L, d] -> logits float[B, L, V]."""
    return self.output_logits(hidden)

  def __call__(self, inputs: jax.Array, targets: jax.Array, *,
               inputs_segmentation: Optional[jax.Array] = None,
               targets_segmentation: Optional[jax.Array] = None,
               inputs_position: Optional[jax.Array] = None,
               targets_position: Optional[jax.Array] = None,
               deterministic: bool = True, return_hidden: bool = False) -> jax.Array:
    """inputs int[B, Ls], targets int[B, Lt] -> logits float[B, Lt, V] (or hidden [B, Lt, d])."""
    encoded = self.encode(inputs, inputs_segmentation=inputs_segmentation,
                          inputs_position=inputs_position, deterministic=deterministic)
    return self.decode(encoded, inputs, targets, inputs_segmentation=inputs_segmentation,
                       targets_segmentation=targets_segmentation,
                       targets_position=targets_position, deterministic=deterministic,
                       return_hidden=return_hidden)


class DecoderOnly(nn.Module):
  """Language model: apply(variables, tokens) -> logits float[B, L, V], logits[:, t] predicting tokens[:, t]."""

  config: ModelConfig
  has_encoder: ClassVar[bool] = False
  batch_keys: ClassVar[tuple[str, ...]] = ("targets",)

  def setup(self):
    cfg = self.config
    self.embedding = TokenEmbedding(cfg, cfg.vocab_size)
    self.decoder = Decoder(cfg, self.embedding, cross_attention=False)
    self.output_logits = OutputLogits(cfg, cfg.vocab_size,
                                      self.embedding if cfg.logits_via_embedding else None)

  def __call__(self, tokens: jax.Array, *, segmentation: Optional[jax.Array] = None,
               position: Optional[jax.Array] = None, deterministic: bool = True,
               decode: bool = False, return_hidden: bool = False) -> jax.Array:
    """tokens int[B, L] -> logits float[B, L, V]; with decode=True, tokens is the previous token [B, 1].

    return_hidden=True returns the final hidden states float[B, L, d] (see `project`)."""
    if decode:
      decoder_inputs, mask = tokens, None
    else:
      decoder_inputs = shift_right(tokens, segmentation)
      valid = tokens != PAD_ID
      mask = segment_mask(valid, valid, causal=True, q_segmentation=segmentation,
                                 kv_segmentation=segmentation)
    h = self.decoder(decoder_inputs, mask, position, deterministic=deterministic, decode=decode)
    return h if return_hidden else self.output_logits(h, decode=decode)

  def project(self, hidden: jax.Array) -> jax.Array:
    """Final hidden states float[B, L, d] -> logits float[B, L, V]."""
    return self.output_logits(hidden)


def init_params(model: nn.Module, rng: jax.Array, batch: Mapping[str, jax.Array]) -> Any:
  """Fresh params of either model; `batch` (int arrays [B, L] under `model.batch_keys`) only
  fixes the shapes."""
  return model.init(rng, *(batch[k] for k in model.batch_keys))["params"]


def encode(model: nn.Module, params: Any, inputs: jax.Array) -> Optional[jax.Array]:
  """The encoder's output float[B, Ls, d] of a source int[B, Ls]; None for a model without
  an encoder (its prompt goes through the decoder instead)."""
  if not model.has_encoder:
    return None
  return model.apply({"params": params}, inputs, method=Transformer.encode)


def decode_step(model: nn.Module, params: Any, cache: Any, token: jax.Array,
                encoded: Optional[jax.Array] = None,
                inputs: Optional[jax.Array] = None) -> tuple[jax.Array, Any]:
  """One decoding step through the cache: the previous token int[N] -> (logits float[N, V]
  of the next position, the updated cache). `encoded` and `inputs` (the source) are those
  of `encode`, for a model with an encoder."""
  variables = {"params": params, "cache": cache}
  if model.has_encoder:
    logits, mutated = model.apply(variables, encoded, inputs, token[:, None], decode=True,
                                  mutable=["cache"], method=Transformer.decode)
  else:
    logits, mutated = model.apply(variables, token[:, None], decode=True, mutable=["cache"])
  return logits[:, 0], mutated["cache"]


def init_cache(model: nn.Module, params: Any, *, batch: int, length: int,
               encoded: Optional[jax.Array] = None, inputs: Optional[jax.Array] = None) -> Any:
  """The 'cache' collection for decoding up to `length` tokens of `batch` rows.

  Self-attention caches start at zero. What a step would otherwise recompute from fixed
  arrays is made here, once: a Transformer's cross-attention keys and values of the encoder
  output (encoded float[batch, Ls, d], inputs int[batch, Ls]), and the weights the steps read
  in a matrix-vector-friendly layout (stacked q/k/v kernels, the transposed tied embedding).
  The cache is made by a decoder pass over `length` zeros: inside jit XLA keeps only what
  feeds the cache; outside jit the whole pass runs.
  """
  if length > model.config.max_len and model.config.has_position_table:
    raise ConfigError(f"A cache of {length} positions exceeds the position table of "
                      f"max_len={model.config.max_len}; decode at most {model.config.max_len}.")
  targets = jnp.zeros((batch, length), jnp.int32)
  if model.has_encoder:
    _, variables = model.apply({"params": params}, encoded, inputs, targets, decode=True,
                               mutable=["cache"], method=Transformer.decode)
  else:
    _, variables = model.apply({"params": params}, targets, decode=True, mutable=["cache"])
  return variables["cache"]


def apply_model(model: nn.Module, params: Any, batch: Mapping[str, jax.Array], *,
                deterministic: bool = True, rng: Optional[jax.Array] = None,
                **kwargs: Any) -> Any:
  """The model's logits float[B, L, V] for a batch dict of int[B, L] arrays ('inputs' for a
  Transformer, 'targets', and the packed keys '*_segmentation', '*_position' when present).

  kwargs go to `apply` (e.g. mutable=[...], return_hidden=True); rng is the dropout key.
  """
  rngs = None if rng is None else {"dropout": rng}
  if not model.has_encoder:
    return model.apply({"params": params}, batch["targets"],
                       segmentation=batch.get("targets_segmentation"),
                       position=batch.get("targets_position"), deterministic=deterministic,
                       rngs=rngs, **kwargs)
  return model.apply({"params": params}, batch["inputs"], batch["targets"],
                     inputs_segmentation=batch.get("inputs_segmentation"),
                     targets_segmentation=batch.get("targets_segmentation"),
                     inputs_position=batch.get("inputs_position"),
                     targets_position=batch.get("targets_position"),
                     deterministic=deterministic, rngs=rngs, **kwargs)


MODEL_TYPES = ("seq2seq", "lm")  # an experiment's model_type: Transformer or DecoderOnly


def model_for(model_type: str, config: ModelConfig) -> nn.Module:
  """Transformer(config) for model_type 'seq2seq', DecoderOnly(config) for 'lm'."""
  if model_type not in MODEL_TYPES:
    raise ConfigError(f"model_type={model_type!r} is not one of {list(MODEL_TYPES)}.")
  return DecoderOnly(config) if model_type == "lm" else Transformer(config)
