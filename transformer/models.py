"""The paper's encoder-decoder `Transformer` and a decoder-only language model, `DecoderOnly`.

Both predict `targets` at every position: logits[:, t] is the distribution of targets[:, t]
given targets[:, :t] (the decoder input is `shift_right(targets)`, with 0 as the start token).
Packed batches pass `*_segmentation` (segment id per token, 0 = pad) and `*_position`
(position within the segment); attention never crosses segments.

Both answer the same questions, so that training, decoding, diagnostics, checkpoints and the
benchmark never ask which one they hold (`model_kinds` maps an experiment's model_type to the
class): what a batch holds (`batch_keys`), its logits (`logits`), what each stack's input
embedding reads (`stack_inputs`), its FLOPs (`forward_flops`), how its input is read
(`input_limit`, `input_eos`), and how decoding starts and steps (`decoding_lengths`,
`start_decoding`, `init_cache`, `decode_step`; without a cache, `prefix_logits`). They are
plain methods: called on the unbound module with its params, `model.logits(params, batch)`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer import model_kinds, model_summary, positional
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
  batch_keys: ClassVar[tuple[str, ...]] = model_kinds.get("seq2seq").batch_keys

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

  # ---- the interface every kind answers (module docstring); called unbound, with params ----
  def logits(self, params: Any, batch: Mapping[str, jax.Array], *, deterministic: bool = True,
             rng: Optional[jax.Array] = None, **kwargs: Any) -> Any:
    """Logits float[B, Lt, V] of a batch dict (kwargs to `apply`: mutable, return_hidden)."""
    return self.apply({"params": params}, batch["inputs"], batch["targets"],
                      inputs_segmentation=batch.get("inputs_segmentation"),
                      targets_segmentation=batch.get("targets_segmentation"),
                      inputs_position=batch.get("inputs_position"),
                      targets_position=batch.get("targets_position"),
                      deterministic=deterministic, rngs=_rngs(rng), **kwargs)

  def stack_inputs(self, batch: Mapping[str, jax.Array]) -> dict[str, tuple[jax.Array, jax.Array]]:
    """{stack: (the ids its input embedding reads int[B, L], which of them are real)}."""
    inputs, targets = batch["inputs"], batch["targets"]
    return {"encoder": (inputs, inputs != PAD_ID),
            "decoder": (shift_right(targets, batch.get("targets_segmentation")),
                        targets != PAD_ID)}

  def forward_flops(self, source_len: int, target_len: int) -> float:
    """Matmul FLOPs of one sequence's forward pass (`model_summary`)."""
    return model_summary.forward_flops(self.config, source_len, target_len, with_encoder=True)

  @property
  def input_limit(self) -> int:
    """The most input tokens decoding takes: a source as long as the position table."""
    return self.config.max_len

  def input_eos(self, prompt_eos: bool) -> bool:
    """Whether an input line gets EOS appended: a source always does, as in training."""
    del prompt_eos
    return True

  def decoding_lengths(self, inputs: jax.Array, extra_len: int):
    """(steps of the output, room int[B] for each row's output, default output limit int[B]):
    the source's length + extra_len, capped by max_len; an empty source gives no output."""
    length, max_len = inputs.shape[1], self.config.max_len
    if length > max_len:
      raise ConfigError(f"Sources of {length} tokens exceed the model's max_len={max_len} "
                        f"(its position table); truncate them to at most {max_len} tokens.")
    num_steps = min(length + extra_len, max_len)
    count = _num_tokens(inputs)
    return (num_steps, jnp.full((inputs.shape[0],), num_steps, jnp.int32),
            jnp.where(count > 0, count + extra_len, 0))

  def start_decoding(self, params: Any, inputs: jax.Array, copies: int, num_steps: int):
    """(encoded, source, cache, prefix int[B, 1], prefix_len int[B]) for B rows, each repeated
    `copies` times: the source is encoded once and the output starts empty."""
    encoded = self.apply({"params": params}, inputs, method=Transformer.encode)
    # Beams of a row share its source: repeat it once per beam, [B, ...] -> [B * copies, ...].
    encoded, source = (jnp.repeat(x, copies, axis=0) for x in (encoded, inputs))
    cache = self.init_cache(params, batch=inputs.shape[0] * copies, length=num_steps,
                            encoded=encoded, inputs=source)
    batch = inputs.shape[0]
    return (encoded, source, cache, jnp.zeros((batch, 1), jnp.int32),
            jnp.zeros((batch,), jnp.int32))

  def init_cache(self, params: Any, *, batch: int, length: int,
                 encoded: Optional[jax.Array] = None, inputs: Optional[jax.Array] = None) -> Any:
    """`models.init_cache` for this model: the cross-attention keys and values of `encoded`."""
    _check_cache_length(self.config, length)
    targets = jnp.zeros((batch, length), jnp.int32)
    _, variables = self.apply({"params": params}, encoded, inputs, targets, decode=True,
                              mutable=["cache"], method=Transformer.decode)
    return variables["cache"]

  def decode_step(self, params: Any, cache: Any, token: jax.Array,
                  encoded: Optional[jax.Array] = None,
                  inputs: Optional[jax.Array] = None) -> tuple[jax.Array, Any]:
    """`models.decode_step` for this model."""
    logits, mutated = self.apply({"params": params, "cache": cache}, encoded, inputs,
                                 token[:, None], decode=True, mutable=["cache"],
                                 method=Transformer.decode)
    return logits[:, 0], mutated["cache"]

  def prefix_logits(self, params: Any, encoded: jax.Array, inputs: jax.Array,
                    tokens: jax.Array) -> jax.Array:
    """Logits float[B, L, V] at every position of output tokens int[B, L] (each from the
    tokens before it), without a cache: what decoding without one recomputes at each step.
    encoded float[B, Ls, d] and inputs int[B, Ls] as `start_decoding` returns them."""
    return self.apply({"params": params}, encoded, inputs, tokens, method=Transformer.decode)


class DecoderOnly(nn.Module):
  """Language model: apply(variables, tokens) -> logits float[B, L, V], logits[:, t] predicting tokens[:, t]."""

  config: ModelConfig
  batch_keys: ClassVar[tuple[str, ...]] = model_kinds.get("lm").batch_keys

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

  # ---- the interface every kind answers (module docstring); called unbound, with params ----
  # Decoding runs `DecoderOnly.__call__` by name, so a subclass with another __call__ (a
  # prefix LM reading inputs ++ targets) decodes through the same cache.
  def logits(self, params: Any, batch: Mapping[str, jax.Array], *, deterministic: bool = True,
             rng: Optional[jax.Array] = None, **kwargs: Any) -> Any:
    """Logits float[B, L, V] of a batch dict (kwargs to `apply`: mutable, return_hidden)."""
    return self.apply({"params": params}, batch["targets"],
                      segmentation=batch.get("targets_segmentation"),
                      position=batch.get("targets_position"), deterministic=deterministic,
                      rngs=_rngs(rng), **kwargs)

  def stack_inputs(self, batch: Mapping[str, jax.Array]) -> dict[str, tuple[jax.Array, jax.Array]]:
    """{stack: (the ids its input embedding reads int[B, L], which of them are real)}."""
    targets = batch["targets"]
    return {"decoder": (shift_right(targets, batch.get("targets_segmentation")),
                        targets != PAD_ID)}

  def forward_flops(self, source_len: int, target_len: int) -> float:
    """Matmul FLOPs of one sequence's forward pass (`model_summary`); no source."""
    del source_len
    return model_summary.forward_flops(self.config, 0, target_len, with_encoder=False)

  @property
  def input_limit(self) -> int:
    """The most input tokens decoding takes: a prompt one shorter than the position table,
    so that it can be continued."""
    return self.config.max_len - 1

  def input_eos(self, prompt_eos: bool) -> bool:
    """Whether an input line gets EOS appended: a prompt does where its data ended sources
    with one (`lines.prompt_ends_with_eos`)."""
    return prompt_eos

  def decoding_lengths(self, inputs: jax.Array, extra_len: int):
    """(steps of the output, room int[B] for each row's continuation, default output limit
    int[B]): the prompt continued in the same max_len, up to twice its length + extra_len."""
    length, max_len = inputs.shape[1], self.config.max_len
    if length >= max_len:
      raise ConfigError(f"Prompts of {length} tokens leave no room in max_len={max_len}; "
                        f"truncate them to at most {max_len - 1} tokens.")
    num_steps = min(2 * length + extra_len, max_len)
    count = _num_tokens(inputs)
    return num_steps, num_steps - count, count + extra_len

  def start_decoding(self, params: Any, inputs: jax.Array, copies: int, num_steps: int):
    """(encoded None, source None, cache, prefix int[B, P], prefix_len int[B]) for B rows,
    each repeated `copies` times: the prompt is the output's prefix."""
    cache = self.init_cache(params, batch=inputs.shape[0] * copies, length=num_steps)
    return None, None, cache, inputs, _num_tokens(inputs)

  def init_cache(self, params: Any, *, batch: int, length: int,
                 encoded: Optional[jax.Array] = None, inputs: Optional[jax.Array] = None) -> Any:
    """`models.init_cache` for this model (no source: encoded and inputs unused)."""
    del encoded, inputs
    _check_cache_length(self.config, length)
    targets = jnp.zeros((batch, length), jnp.int32)
    _, variables = self.apply({"params": params}, targets, decode=True, mutable=["cache"],
                              method=DecoderOnly.__call__)
    return variables["cache"]

  def decode_step(self, params: Any, cache: Any, token: jax.Array,
                  encoded: Optional[jax.Array] = None,
                  inputs: Optional[jax.Array] = None) -> tuple[jax.Array, Any]:
    """`models.decode_step` for this model."""
    del encoded, inputs
    logits, mutated = self.apply({"params": params, "cache": cache}, token[:, None],
                                 decode=True, mutable=["cache"], method=DecoderOnly.__call__)
    return logits[:, 0], mutated["cache"]

  def prefix_logits(self, params: Any, encoded: Optional[jax.Array],
                    inputs: Optional[jax.Array], tokens: jax.Array) -> jax.Array:
    """`Transformer.prefix_logits` for this model (the prompt is the tokens' start)."""
    del encoded, inputs
    return self.apply({"params": params}, tokens, method=DecoderOnly.__call__)


def _rngs(rng: Optional[jax.Array]) -> Optional[dict[str, jax.Array]]:
  return None if rng is None else {"dropout": rng}


def _num_tokens(tokens: jax.Array) -> jax.Array:
  """Tokens before the padding: int32[B] for int[B, L] 0-padded on the right."""
  return jnp.sum(tokens != PAD_ID, axis=1).astype(jnp.int32)


def _check_cache_length(config: ModelConfig, length: int) -> None:
  if length > config.max_len and config.has_position_table:
    raise ConfigError(f"A cache of {length} positions exceeds the position table of "
                      f"max_len={config.max_len}; decode at most {config.max_len}.")


def init_params(model: nn.Module, rng: jax.Array, batch: Mapping[str, jax.Array]) -> Any:
  """Fresh params of either model; `batch` (int arrays [B, L] under `model.batch_keys`) only
  fixes the shapes."""
  return model.init(rng, *(batch[k] for k in model.batch_keys))["params"]


def decode_step(model: nn.Module, params: Any, cache: Any, token: jax.Array,
                encoded: Optional[jax.Array] = None,
                inputs: Optional[jax.Array] = None) -> tuple[jax.Array, Any]:
  """One decoding step through the cache: the previous token int[N] -> (logits float[N, V]
  of the next position, the updated cache). `encoded` and `inputs` (the source) are those
  `start_decoding` gave, for a model that reads a source."""
  return model.decode_step(params, cache, token, encoded, inputs)


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
  return model.init_cache(params, batch=batch, length=length, encoded=encoded, inputs=inputs)


def apply_model(model: nn.Module, params: Any, batch: Mapping[str, jax.Array], *,
                deterministic: bool = True, rng: Optional[jax.Array] = None,
                **kwargs: Any) -> Any:
  """The model's logits float[B, L, V] for a batch dict of int[B, L] arrays (its
  `batch_keys`, and the packed keys '*_segmentation', '*_position' when present).

  kwargs go to `apply` (e.g. mutable=[...], return_hidden=True); rng is the dropout key.
  """
  return model.logits(params, batch, deterministic=deterministic, rng=rng, **kwargs)


for _name, _cls in (("seq2seq", Transformer), ("lm", DecoderOnly)):
  model_kinds.register(_name, _cls.batch_keys, _cls)


def model_for(model_type: str, config: ModelConfig) -> nn.Module:
  """The model of an experiment's model_type (`model_kinds`): Transformer(config) for
  'seq2seq', DecoderOnly(config) for 'lm', or a registered kind's class."""
  kind = model_kinds.get(model_type)
  if kind.model is None:
    raise ConfigError(f"model_type={model_type!r} has no model class registered.")
  return kind.model(config)
