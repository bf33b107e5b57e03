"""The paper's encoder-decoder `Transformer` and a decoder-only language model, `DecoderOnly`.

Both predict `targets` at every position: logits[:, t] is the distribution of targets[:, t]
given targets[:, :t] (the decoder input is `shift_right(targets)`, with 0 as the start token).
Packed batches pass `*_segmentation` (segment id per token, 0 = pad) and `*_position`
(position within the segment); attention never crosses segments.

Both answer the questions of `ModelKind` (at the end of this file), so that training,
decoding, diagnostics, checkpoints and the benchmark never ask which one they hold: what a
batch holds (`batch_keys`), its logits, its FLOPs from a batch's shapes, its stacks and
parameter groups for the diagnostics, how its input is read, and decoding as an opaque state
(`start_decoding`, `decode_step`; without a cache, `prefix_logits`). `model_kinds` names the
class of an experiment's model_type.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, Mapping, NamedTuple, Optional, Protocol, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer import embeddings, model_kinds, model_summary, positional
from transformer.attention import segment_mask
from transformer.config import ModelConfig
from transformer.embeddings import InputEmbedding, OutputLogits, TokenEmbedding
from transformer.errors import ConfigError
from transformer.layers import BlockStack, SownLayer, per_layer, read_sown_layers
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
  batch_keys: ClassVar[tuple[str, ...]] = model_kinds.KINDS["seq2seq"].batch_keys

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

  # ---- the interface every kind answers (`ModelKind`); called unbound, with params ----
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

  def stacks(self, intermediates: Any, batch: Mapping[str, jax.Array]) -> dict[str, Stack]:
    """{stack: what it recorded} from `logits(..., mutable=['intermediates'])`'s collection."""
    return read_stacks(intermediates, self.stack_inputs(batch))

  def parameter_groups(self, tree: Any) -> dict[str, list[jax.Array]]:
    """`models.parameter_groups` of this model's params (or a tree shaped like them)."""
    return parameter_groups(tree)

  def forward_flops(self, shapes: Mapping[str, Sequence[int]]) -> float:
    """Matmul FLOPs of the forward pass over a batch of these shapes ({key: (B, L)})."""
    (batch, source_len), target_len = shapes["inputs"], shapes["targets"][1]
    return batch * model_summary.forward_flops(self.config, source_len, target_len,
                                               with_encoder=True)

  def decoding_source(self, batch: Mapping[str, jax.Array]) -> Optional[jax.Array]:
    """What decoding a batch's rows starts from, its outputs scored against batch['targets']:
    the source int[B, Ls]."""
    return batch["inputs"]

  def input_len(self, train_len: int) -> int:
    """Input tokens a line may have by default (EOS included): the training rows' length,
    within the position table."""
    return min(train_len, self.input_limit)

  @property
  def input_limit(self) -> int:
    """The most input tokens decoding takes: a source as long as the position table."""
    return self.config.max_len

  def input_eos(self, prompt_eos: bool) -> bool:
    """Whether an input line gets EOS appended: a source always does, as in training."""
    del prompt_eos
    return True

  def decoding_lengths(self, inputs: jax.Array,
                       extra_len: int) -> tuple[int, jax.Array, jax.Array]:
    """(steps of the output, room int[B] for each row's output, default output limit int[B]):
    the source's length + extra_len, capped by max_len; an empty source gives no output."""
    length, max_len = inputs.shape[1], self.config.max_len
    if length > max_len:
      raise ConfigError(f"Sources of {length} tokens exceed the model's max_len={max_len} "
                        f"(its position table); truncate them to at most {max_len} tokens.")
    num_steps = min(length + extra_len, max_len)
    count = num_tokens(inputs)
    return (num_steps, jnp.full((inputs.shape[0],), num_steps, jnp.int32),
            jnp.where(count > 0, count + extra_len, 0))

  def start_decoding(self, params: Any, inputs: jax.Array, copies: int,
                     num_steps: int) -> tuple[Any, jax.Array, jax.Array]:
    """(state, prefix int[B, 1], prefix_len int[B]) for B rows, each repeated `copies` times:
    the source is encoded once, the output starts empty. The state (a pytree whose per-row
    leaves lead with B * copies) holds the cache, which also holds the cross-attention keys
    and values of the source, made once."""
    check_cache_length(self.config, num_steps)
    encoded = self.apply({"params": params}, inputs, method=Transformer.encode)
    # Beams of a row share its source: repeat it once per beam, [B, ...] -> [B * copies, ...].
    encoded, source = (jnp.repeat(x, copies, axis=0) for x in (encoded, inputs))
    targets = jnp.zeros((source.shape[0], num_steps), jnp.int32)
    _, variables = self.apply({"params": params}, encoded, source, targets, decode=True,
                              mutable=["cache"], method=Transformer.decode)
    state = {"cache": variables["cache"], "encoded": encoded, "source": source}
    batch = inputs.shape[0]
    return state, jnp.zeros((batch, 1), jnp.int32), jnp.zeros((batch,), jnp.int32)

  def decode_step(self, params: Any, state: Any, token: jax.Array) -> tuple[jax.Array, Any]:
    """The previous token int[N] -> (logits float[N, V] of the next position, the state)."""
    logits, mutated = self.apply({"params": params, "cache": state["cache"]},
                                 state["encoded"], state["source"], token[:, None],
                                 decode=True, mutable=["cache"], method=Transformer.decode)
    return logits[:, 0], {**state, "cache": mutated["cache"]}

  def prefix_logits(self, params: Any, state: Any, tokens: jax.Array) -> jax.Array:
    """Logits float[B, L, V] at every position of output tokens int[B, L] (each from the
    tokens before it), without a cache: what decoding without one recomputes at each step.
    `state` as `start_decoding` returns it."""
    return self.apply({"params": params}, state["encoded"], state["source"], tokens,
                      method=Transformer.decode)


class DecoderOnly(nn.Module):
  """Language model: apply(variables, tokens) -> logits float[B, L, V], logits[:, t] predicting
  tokens[:, t]."""

  config: ModelConfig
  batch_keys: ClassVar[tuple[str, ...]] = model_kinds.KINDS["lm"].batch_keys

  def setup(self):
    cfg = self.config
    self.embedding = TokenEmbedding(cfg, cfg.vocab_size)
    self.decoder = Decoder(cfg, self.embedding, cross_attention=False)
    self.output_logits = OutputLogits(cfg, cfg.vocab_size,
                                      self.embedding if cfg.logits_via_embedding else None)

  def __call__(self, tokens: jax.Array, *, segmentation: Optional[jax.Array] = None,
               position: Optional[jax.Array] = None, deterministic: bool = True,
               decode: bool = False, return_hidden: bool = False) -> jax.Array:
    """tokens int[B, L] -> logits float[B, L, V]; with decode=True, tokens is the previous
    token [B, 1].

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

  # ---- the interface every kind answers (`ModelKind`); called unbound, with params ----
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

  def stacks(self, intermediates: Any, batch: Mapping[str, jax.Array]) -> dict[str, Stack]:
    """{stack: what it recorded} from `logits(..., mutable=['intermediates'])`'s collection."""
    return read_stacks(intermediates, self.stack_inputs(batch))

  def parameter_groups(self, tree: Any) -> dict[str, list[jax.Array]]:
    """`models.parameter_groups` of this model's params (or a tree shaped like them)."""
    return parameter_groups(tree)

  def forward_flops(self, shapes: Mapping[str, Sequence[int]]) -> float:
    """Matmul FLOPs of the forward pass over a batch of these shapes ({'targets': (B, L)})."""
    batch, length = shapes["targets"]
    return batch * model_summary.forward_flops(self.config, 0, length, with_encoder=False)

  def decoding_source(self, batch: Mapping[str, jax.Array]) -> Optional[jax.Array]:
    """None: an LM's rows hold no source to decode from (its BLEU scores prompts given as
    lines, scripts/evaluate.py --input)."""
    del batch
    return None

  def input_len(self, train_len: int) -> int:
    """Input tokens a prompt may have by default: `input_limit`."""
    del train_len
    return self.input_limit

  @property
  def input_limit(self) -> int:
    """The most input tokens decoding takes: a prompt one shorter than the position table,
    so that it can be continued."""
    return self.config.max_len - 1

  def input_eos(self, prompt_eos: bool) -> bool:
    """Whether an input line gets EOS appended: a prompt does where its data ended sources
    with one (`lines.prompt_ends_with_eos`)."""
    return prompt_eos

  def decoding_lengths(self, inputs: jax.Array,
                       extra_len: int) -> tuple[int, jax.Array, jax.Array]:
    """(steps of the output, room int[B] for each row's continuation, default output limit
    int[B]): the prompt continued in the same max_len, up to twice its length + extra_len."""
    length, max_len = inputs.shape[1], self.config.max_len
    if length >= max_len:
      raise ConfigError(f"Prompts of {length} tokens leave no room in max_len={max_len}; "
                        f"truncate them to at most {max_len - 1} tokens.")
    num_steps = min(2 * length + extra_len, max_len)
    count = num_tokens(inputs)
    return num_steps, num_steps - count, count + extra_len

  def start_decoding(self, params: Any, inputs: jax.Array, copies: int,
                     num_steps: int) -> tuple[Any, jax.Array, jax.Array]:
    """(state, prefix int[B, P], prefix_len int[B]) for B rows, each repeated `copies` times:
    the prompt is the output's prefix; the state holds the cache."""
    check_cache_length(self.config, num_steps)
    zeros = jnp.zeros((inputs.shape[0] * copies, num_steps), jnp.int32)
    # By name, so that a subclass with another __call__ still decodes through this one.
    _, variables = self.apply({"params": params}, zeros, decode=True, mutable=["cache"],
                              method=DecoderOnly.__call__)
    return {"cache": variables["cache"]}, inputs, num_tokens(inputs)

  def decode_step(self, params: Any, state: Any, token: jax.Array) -> tuple[jax.Array, Any]:
    """The previous token int[N] -> (logits float[N, V] of the next position, the state)."""
    logits, mutated = self.apply({"params": params, "cache": state["cache"]}, token[:, None],
                                 decode=True, mutable=["cache"], method=DecoderOnly.__call__)
    return logits[:, 0], {"cache": mutated["cache"]}

  def prefix_logits(self, params: Any, state: Any, tokens: jax.Array) -> jax.Array:
    """`Transformer.prefix_logits` for this model (the prompt is the tokens' start)."""
    del state
    return self.apply({"params": params}, tokens, method=DecoderOnly.__call__)


def _rngs(rng: Optional[jax.Array]) -> Optional[dict[str, jax.Array]]:
  return None if rng is None else {"dropout": rng}


def num_tokens(tokens: jax.Array) -> jax.Array:
  """Tokens before the padding: int32[B] for int[B, L] 0-padded on the right."""
  return jnp.sum(tokens != PAD_ID, axis=1).astype(jnp.int32)


def check_cache_length(config: ModelConfig, length: int) -> None:
  """One line where a decoding cache of `length` positions exceeds the position table."""
  if length > config.max_len and config.has_position_table:
    raise ConfigError(f"A cache of {length} positions exceeds the position table of "
                      f"max_len={config.max_len}; decode at most {config.max_len}.")


def row_flops(model: "ModelKind", length: int) -> float:
  """Matmul FLOPs of one forward pass over a batch of one row of `length` tokens in each of
  the model's batch rows (`forward_flops`): what a training row of max_len costs."""
  return model.forward_flops({k: (1, length) for k in model.batch_keys})


@functools.partial(jax.jit, static_argnums=0)
def init_params(model: nn.Module, rng: jax.Array, batch: Mapping[str, jax.Array]) -> Any:
  """Fresh params of a model; `batch` (int arrays [B, L] under `model.batch_keys`) only
  fixes the shapes. Compiled (the model a static argument): run op by op, a model's init
  compiles each of its hundred-odd operations on its own."""
  return model.init(rng, *(batch[k] for k in model.batch_keys))["params"]


class Stack(NamedTuple):
  """What one stack (an encoder, a decoder) recorded for transformer.diagnostics."""
  tokens: jax.Array  # the ids its input embedding read, int[B, L]
  valid: jax.Array  # which of them are real tokens, bool[B, L]
  token: jax.Array  # the token term of the input embedding as added, float[B, L, d]
  position: Optional[jax.Array]  # the position term as added; None without one
  layers: list[SownLayer]


def read_stacks(intermediates: Any, inputs: Mapping[str, tuple[jax.Array, jax.Array]]
                ) -> dict[str, Stack]:
  """{stack: Stack} of the 'intermediates' of an `Encoder` or `Decoder` named by each key of
  `inputs` ({stack: (ids, valid)}, a model's `stack_inputs`)."""
  return {name: Stack(tokens, valid,
                      *embeddings.read_sown_embedding(intermediates[name]["input_embedding"]),
                      read_sown_layers(intermediates[name]["blocks"]))
          for name, (tokens, valid) in inputs.items()}


def parameter_groups(tree: Any) -> dict[str, list[jax.Array]]:
  """The parameter groups of a model built from this file's modules (its params, or a tree of
  the same structure such as gradients): {group: its arrays}. Groups: each embedding matrix
  by its name, '{stack}/layer_{i}' (a scanned stack split into its layers), the other parts
  of a stack ('{stack}/input_embedding', '{stack}/final_norm'), 'output' (an untied
  projection)."""
  groups: dict[str, list[jax.Array]] = {}
  for name, sub in tree.items():
    if name == "output_logits":
      groups["output"] = jax.tree_util.tree_leaves(sub)
    elif isinstance(sub, Mapping) and "blocks" in sub:  # an Encoder or a Decoder
      for part, value in sub.items():
        if part == "blocks":
          for i, layer in per_layer(value):
            groups[f"{name}/layer_{i}"] = jax.tree_util.tree_leaves(layer)
        else:
          groups[f"{name}/{part}"] = jax.tree_util.tree_leaves(value)
    else:  # a TokenEmbedding: 'embedding', 'source_embedding', 'target_embedding'
      groups[name] = jax.tree_util.tree_leaves(sub)
  return groups


class ModelKind(Protocol):
  """What every model class answers, so that training, decoding, diagnostics, checkpoints and
  the benchmark never ask which kind they hold. Its methods are called on the unbound module
  with its params: `model.logits(params, batch)`."""
  config: ModelConfig
  batch_keys: ClassVar[tuple[str, ...]]  # the int[B, L] rows of its batches (`model_kinds`)

  def logits(self, params: Any, batch: Mapping[str, jax.Array], *, deterministic: bool = True,
             rng: Optional[jax.Array] = None, **kwargs: Any) -> Any: ...
  def project(self, hidden: jax.Array) -> jax.Array: ...
  def stack_inputs(self, batch: Mapping[str, jax.Array]
                   ) -> dict[str, tuple[jax.Array, jax.Array]]: ...
  def stacks(self, intermediates: Any, batch: Mapping[str, jax.Array]) -> dict[str, Stack]: ...
  def parameter_groups(self, tree: Any) -> dict[str, list[jax.Array]]: ...
  def forward_flops(self, shapes: Mapping[str, Sequence[int]]) -> float: ...
  def decoding_source(self, batch: Mapping[str, jax.Array]) -> Optional[jax.Array]: ...
  def input_len(self, train_len: int) -> int: ...
  def input_eos(self, prompt_eos: bool) -> bool: ...
  def decoding_lengths(self, inputs: jax.Array, extra_len: int) -> tuple[int, Any, Any]: ...
  def start_decoding(self, params: Any, inputs: jax.Array, copies: int,
                     num_steps: int) -> tuple[Any, jax.Array, jax.Array]:
    """(state, prefix, prefix_len). The state is a dict: its 'cache' entry is the attention
    cache, whose self-attention 'cached_key' / 'cached_value' [..., N * H, L, D] beam search
    moves with their beams; its other entries (a source, its encoding) are the same for
    every beam of a row, and decoding without a cache (`prefix_logits`) reads only them."""
  def decode_step(self, params: Any, state: Any, token: jax.Array) -> tuple[jax.Array, Any]: ...
  def prefix_logits(self, params: Any, state: Any, tokens: jax.Array) -> jax.Array: ...

  @property
  def input_limit(self) -> int: ...


# The classes of the built-in kinds (`model_kinds.KINDS`).
KIND_CLASSES: dict[str, type] = {"seq2seq": Transformer, "lm": DecoderOnly}


def model_class(model_type: str) -> type:
  """The flax module class of an experiment's model_type: a built-in kind's, or the class a
  kind of one's own names ('package.module:ClassName', `model_kinds.import_class`)."""
  return KIND_CLASSES.get(model_type) or model_kinds.import_class(model_type)


def check_answers(model_class: type, model_type: str) -> None:
  """One line where a model class of one's own (`model_type='package.module:Class'`) lacks a
  question of ModelKind: checked when the experiment names it, before anything is built."""
  asked = ModelKind.__annotations__.keys() | {n for n in vars(ModelKind) if not n.startswith("_")}
  missing = sorted(name for name in asked if name != "config" and not hasattr(model_class, name))
  if missing:
    raise ConfigError(f"model_type={model_type!r} lacks {', '.join(missing)} of "
                      "transformer.models.ModelKind; every model kind answers them all.")
