"""Incremental decoding over the KV cache: greedy, sampling and beam search, jit-compiled.

Every method feeds one token per step through the model's 'cache' collection (decode=True)
inside one `lax.while_loop`, for a whole batch at once, and stops a row at EOS or at its
length limit: the output (target sentence, or an LM's continuation) holds at most
`input length + extra_len` tokens (the paper: + 50), and never more than the model's max_len
positions. The loop ends as soon as every row has stopped.

  greedy       argmax at every step
  sample       temperature, then top-k, then top-p (nucleus) filtering, then a draw
  beam         beam search with the GNMT length penalty lp(n) = ((5 + n) / 6)^alpha (alpha 0.6,
               Wu et al. 2016, as the paper); a hypothesis is scored logP / lp(n), n counting
               its tokens and its EOS. Candidates are ranked by logP; an EOS among the top
               beam_size candidates finishes a hypothesis, and a row stops once beam_size
               hypotheses have finished (fairseq's rule), so beam 1 is exactly greedy.

Any model kind decodes (`models.ModelKind`: its `start_decoding` and `decode_step` over an
opaque state). A `Transformer` decodes a target for each source row (`inputs` int[B, Ls]); a
`DecoderOnly` continues each prompt (`inputs` int[B, P], 0-padded on the right): the prompt
is fed through the cache token by token (forced), then the model generates. Outputs are
int32[B, L]: the generated tokens, EOS included when one was produced, 0 after it. `greedy`,
`sample` and `beam_search` return them; `decode` (any method, a `DecodeConfig`) returns
(tokens, scores).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer.inference.decode_config import DecodeConfig
from transformer.token_ids import PAD_ID

_NEG_INF = -1.0e9  # finite, so that -inf - -inf never makes a NaN in the score arithmetic


def length_penalty(length: jax.Array, alpha: float) -> jax.Array:
  """GNMT's lp(n) = ((5 + n) / 6)^alpha (Wu et al. 2016, Eq. 14), float32 of `length`'s shape."""
  return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


# ---------------------------------------------------------------------------------------
# One decoding step through the cache.
# ---------------------------------------------------------------------------------------
def _prepare(model: nn.Module, params: Any, inputs: jax.Array, copies: int, num_steps: int):
  """(step, state, prefix int[B, P], prefix_len int[B]) for B rows, each repeated `copies`
  times: the model starts its decoding (a source encoded, or a prompt as the prefix) into an
  opaque state; step(state, token int[N]) -> (logits float32[N, V] of the next position,
  state)."""
  state, prefix, prefix_len = model.start_decoding(params, inputs, copies, num_steps)

  def step(state, token):
    logits, state = model.decode_step(params, state, token)
    # Never choose PAD (as fairseq): downstream a 0 means "nothing here".
    return logits.astype(jnp.float32).at[:, PAD_ID].set(_NEG_INF), state

  return step, state, prefix, prefix_len


# ---------------------------------------------------------------------------------------
# Greedy and sampling.
# ---------------------------------------------------------------------------------------
def filter_logits(logits: jax.Array, *, temperature: Any = 1.0, top_k: int = 0,
                  top_p: Optional[Any] = None) -> jax.Array:
  """float[N, V] -> logits / temperature with everything outside top-k and top-p at -inf.

  top_k: a Python int, 0 = off. top_p (None = off; a float or a traced scalar): keep the
  smallest set of most likely tokens whose probability reaches top_p (the most likely token
  always stays).
  """
  logits = logits / temperature
  if top_k:
    kth = jax.lax.top_k(logits, min(top_k, logits.shape[-1]))[0][:, -1:]
    logits = jnp.where(logits < kth, -jnp.inf, logits)
  if top_p is not None:
    ordered = jnp.sort(logits, axis=-1)[:, ::-1]
    probs = jax.nn.softmax(ordered, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs  # probability of the tokens ranked above
    kept = jnp.where(mass_before < top_p, ordered, jnp.inf)
    logits = jnp.where(logits < jnp.min(kept, axis=-1, keepdims=True), -jnp.inf, logits)
  return logits


def first_argmax(logits: jax.Array) -> jax.Array:
  """jnp.argmax over the last axis (the first of equal maxima), int32[N] from float[N, V].

  As a max, then a min over the positions holding it: two plain reductions, which XLA:CPU
  runs several times faster than argmax's paired (value, index) reduction; over a 32000-word
  vocabulary that reduction was a batch-1 decoding step's largest cost after the matmuls.
  """
  top = jnp.max(logits, axis=-1, keepdims=True)
  positions = jnp.arange(logits.shape[-1], dtype=jnp.int32)
  return jnp.min(jnp.where(logits == top, positions, logits.shape[-1]), axis=-1)


class _Knobs(NamedTuple):
  """DecodeConfig's floats, passed traced so that changing one does not recompile."""
  alpha: jax.Array
  temperature: jax.Array
  top_p: jax.Array


def _choose(logits: jax.Array, rng: jax.Array, config: DecodeConfig, knobs: _Knobs) -> jax.Array:
  """The next token int32[N] from logits float32[N, V]."""
  if config.method == "greedy":
    return first_argmax(logits)
  filtered = filter_logits(logits, temperature=knobs.temperature, top_k=config.top_k,
                           top_p=knobs.top_p if config.top_p < 1.0 else None)
  return jax.random.categorical(rng, filtered, axis=-1).astype(jnp.int32)


def _search_one(model, params, inputs, out_limit, rng, config: DecodeConfig, knobs: _Knobs,
                num_steps: int):
  """Greedy or sampling: (positions int32[B, num_steps], log-prob float32[B])."""
  step, cache, prefix, prefix_len = _prepare(model, params, inputs, 1, num_steps)
  batch = inputs.shape[0]
  last = prefix_len + out_limit  # a row stops once position `last - 1` is written

  def body(state):
    i, cache, token, seq, logp, done = state
    logits, cache = step(cache, token)
    chosen = _choose(logits, jax.random.fold_in(rng, i), config, knobs)
    forced = i < prefix_len  # a prompt token, not a choice
    chosen = jnp.where(forced, prefix[:, jnp.minimum(i, prefix.shape[1] - 1)], chosen)
    chosen = jnp.where(done, PAD_ID, chosen)
    # log softmax(logits)[chosen] as logit - logsumexp: no vocabulary-wide log-softmax.
    token_logp = (jnp.take_along_axis(logits, chosen[:, None], axis=1)[:, 0] -
                  jax.nn.logsumexp(logits, axis=-1))
    logp = logp + jnp.where(done | forced, 0.0, token_logp)
    seq = seq.at[:, i].set(chosen)
    done = done | (~forced & (chosen == config.eos_id)) | (i + 1 >= last)
    return i + 1, cache, chosen, seq, logp, done

  state = (jnp.zeros((), jnp.int32), cache, jnp.zeros((batch,), jnp.int32),
           jnp.zeros((batch, num_steps), jnp.int32), jnp.zeros((batch,), jnp.float32),
           last <= 0)
  state = jax.lax.while_loop(lambda s: (s[0] < num_steps) & ~jnp.all(s[5]), body, state)
  return state[3], state[4], prefix_len


# ---------------------------------------------------------------------------------------
# Beam search.
# ---------------------------------------------------------------------------------------
def _gather_beams(x: jax.Array, indices: jax.Array) -> jax.Array:
  """x [B, K, ...], indices int[B, K'] -> x[b, indices[b, k']] as [B, K', ...]."""
  return jax.vmap(lambda row, idx: row[idx])(x, indices)


def _reorder_cache(state: Any, indices: jax.Array) -> Any:
  """Self-attention keys/values [..., B * K * H, L, D] of a decoding state follow their beams
  to int[B, K] parents.

  The leading '...' is the layer axis of a scanned stack. Everything else in the state is
  the same for every beam of a row (the shared source, its cross-attention keys/values,
  weight copies, step counters), so it stays as it is.
  """
  batch, beams = indices.shape
  flat = (indices + beams * jnp.arange(batch)[:, None]).reshape(-1)

  def reorder(path, x):
    if getattr(path[-1], "key", None) not in ("cached_key", "cached_value"):
      return x
    rows = x.reshape(*x.shape[:-3], batch * beams, -1, *x.shape[-2:])  # [..., B * K, H, L, D]
    return jnp.take(rows, flat, axis=x.ndim - 3).reshape(x.shape)

  return jax.tree_util.tree_map_with_path(reorder, state)


def _beam_search(model, params, inputs, out_limit, config: DecodeConfig, knobs: _Knobs,
                 num_steps: int):
  """Beam search: (best positions int32[B, num_steps], its score logP / lp float32[B])."""
  k = config.beam_size
  step, cache, prefix, prefix_len = _prepare(model, params, inputs, k, num_steps)
  batch = inputs.shape[0]
  last = prefix_len + out_limit
  ranks = jnp.arange(2 * k)

  def body(state):
    i, cache, alive_seq, alive_logp, fin_seq, fin_score, fin_count, done = state
    logits, cache = step(cache, alive_seq[:, :, jnp.maximum(i - 1, 0)].reshape(-1) *
                     (i > 0))  # the start token 0 first
    logp = jax.nn.log_softmax(logits).reshape(batch, k, -1)
    vocab = logp.shape[-1]
    forced = i < prefix_len
    forced_token = prefix[:, jnp.minimum(i, prefix.shape[1] - 1)]
    only_forced = jnp.where(jnp.arange(vocab) == forced_token[:, None, None], 0.0, _NEG_INF)
    logp = jnp.where(forced[:, None, None], only_forced, logp)
    # The 2k best continuations hold at least k without EOS (each beam has one EOS).
    cand_logp, flat = jax.lax.top_k((alive_logp[:, :, None] + logp).reshape(batch, -1), 2 * k)
    parent, token = flat // vocab, (flat % vocab).astype(jnp.int32)
    cand_seq = _gather_beams(alive_seq, parent).at[:, :, i].set(token)
    is_eos = (token == config.eos_id) & ~forced[:, None]
    at_limit = (i + 1 >= last)[:, None]  # this token is the last one the row may have
    live = (cand_logp > _NEG_INF / 2) & ~done[:, None]
    finishing = (is_eos | at_limit) & (ranks < k) & live
    score = cand_logp / length_penalty(i + 1 - prefix_len, knobs.alpha)[:, None]
    # Keep the k best finished hypotheses (earlier ones first on ties).
    fin_score, best = jax.lax.top_k(
        jnp.concatenate([fin_score, jnp.where(finishing, score, _NEG_INF)], axis=1), k)
    fin_seq = _gather_beams(jnp.concatenate([fin_seq, cand_seq], axis=1), best)
    fin_count = fin_count + jnp.sum(finishing, axis=1)
    done = done | (fin_count >= k) | at_limit[:, 0]
    # The k best continuations without EOS stay alive.
    alive_logp, keep = jax.lax.top_k(jnp.where(is_eos, _NEG_INF, cand_logp), k)
    alive_logp = jnp.where(done[:, None], _NEG_INF, alive_logp)
    alive_seq = _gather_beams(cand_seq, keep)
    cache = _reorder_cache(cache, _gather_beams(parent, keep))
    return i + 1, cache, alive_seq, alive_logp, fin_seq, fin_score, fin_count, done

  # Only beam 0 is live at first, so the k beams do not start as k copies of one hypothesis.
  alive_logp = jnp.tile(jnp.where(jnp.arange(k) == 0, 0.0, _NEG_INF), (batch, 1))
  seqs = jnp.zeros((batch, k, num_steps), jnp.int32)
  state = (jnp.zeros((), jnp.int32), cache, seqs, alive_logp, seqs,
           jnp.full((batch, k), _NEG_INF), jnp.zeros((batch,), jnp.int32), last <= 0)
  state = jax.lax.while_loop(lambda s: (s[0] < num_steps) & ~jnp.all(s[7]), body, state)
  fin_seq, fin_score = state[4], state[5]
  return fin_seq[:, 0], jnp.where(last > 0, fin_score[:, 0], 0.0), prefix_len


# ---------------------------------------------------------------------------------------
# The entry point.
# ---------------------------------------------------------------------------------------
@functools.partial(jax.jit, static_argnames=("model", "config", "num_steps"))
def _decode_jit(model, params, inputs, out_limit, rng, knobs: _Knobs, *, config: DecodeConfig,
                num_steps: int):
  """config: only its static fields count (method, beam_size, top_k, top_p < 1, eos_id)."""
  if config.method == "beam":
    seq, score, prefix_len = _beam_search(model, params, inputs, out_limit, config, knobs,
                                          num_steps)
  else:
    seq, score, prefix_len = _search_one(model, params, inputs, out_limit, rng, config, knobs,
                                         num_steps)
  # Drop an LM's prompt: shift each row left by its prompt length.
  positions = jnp.arange(num_steps)
  index = jnp.minimum(positions[None, :] + prefix_len[:, None], num_steps - 1)
  out = jnp.take_along_axis(seq, index, axis=1)
  out = jnp.where(positions[None, :] < num_steps - prefix_len[:, None], out, PAD_ID)
  # Nothing after the first EOS (a finished row's later positions are already 0).
  is_eos = out == config.eos_id
  after_eos = jnp.cumsum(is_eos, axis=1) - is_eos > 0
  return jnp.where(after_eos, PAD_ID, out), score


def decode(model: nn.Module, params: Any, inputs: Any, config: DecodeConfig = DecodeConfig(),
           rng: Optional[jax.Array] = None, *,
           out_limit: Optional[Any] = None) -> tuple[jax.Array, jax.Array]:
  """Decodes a batch: (tokens int32[B, L], scores float32[B]).

  model: a `Transformer` (inputs = source ids int[B, Ls], EOS included as in training) or a
  `DecoderOnly` (inputs = prompt ids int[B, P]); 0-padded on the right.
  tokens: the target (or continuation) of each row, EOS included when produced, then 0s;
  L = min(Ls + extra_len, max_len) for a Transformer, min(2 P + extra_len, max_len) for a
  DecoderOnly (a continuation fills at most L - its prompt's length positions). PAD is never
  chosen. scores: beam search's logP / lp(n); greedy and sampling's
  logP of the chosen tokens (unfiltered distribution).
  rng: sampling's key (default PRNGKey(0)). out_limit: int[B] overriding each row's output
  limit, by default its input length + extra_len (0 for an empty source); always capped by L.
  """
  inputs = jnp.asarray(inputs, jnp.int32)
  if inputs.ndim != 2:
    raise ValueError(f"decode needs inputs int[batch, length], got shape {inputs.shape}.")
  # The model's reading of its input: a source (the output starts empty; an empty source, a
  # padding row, gives none) or a prompt (continued within the same max_len).
  num_steps, room, default_limit = model.decoding_lengths(inputs, config.extra_len)
  out_limit = default_limit if out_limit is None else out_limit
  limit = jnp.minimum(jnp.asarray(out_limit, jnp.int32), room)
  rng = jax.random.PRNGKey(0) if rng is None else rng
  knobs, static = _split_config(config)
  return _decode_jit(model, params, inputs, limit, rng, knobs, config=static, num_steps=num_steps)


def _split_config(config: DecodeConfig) -> tuple[_Knobs, DecodeConfig]:
  """(traced floats, the static rest with the floats set to fixed values)."""
  knobs = _Knobs(*(jnp.float32(getattr(config, f)) for f in _Knobs._fields))
  # The compiled program needs only whether nucleus sampling is on (top_p < 1), not the value
  # (traced in knobs): any value below 1 stands for every one, so one compile serves them all.
  static = dataclasses.replace(config, alpha=0.0, temperature=1.0, extra_len=0,
                               top_p=0.5 if config.top_p < 1.0 else 1.0)
  return knobs, static


# The three shorthands return tokens alone, one convention for all; `decode` is the one call
# that returns each row's score too, for every method.
def greedy(model: nn.Module, params: Any, inputs: Any, *, extra_len: int = 50) -> jax.Array:
  """Greedy decoding: tokens int32[B, L] (see `decode`, which also returns their logP)."""
  return decode(model, params, inputs, DecodeConfig(method="greedy", extra_len=extra_len))[0]


def sample(model: nn.Module, params: Any, inputs: Any, rng: jax.Array, *,
           temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           extra_len: int = 50) -> jax.Array:
  """Temperature / top-k / top-p sampling: tokens int32[B, L] (see `decode`, which also
  returns their logP)."""
  config = DecodeConfig(method="sample", temperature=temperature, top_k=top_k, top_p=top_p,
                        extra_len=extra_len)
  return decode(model, params, inputs, config, rng)[0]


def beam_search(model: nn.Module, params: Any, inputs: Any, *, beam_size: int = 4,
                alpha: float = 0.6, extra_len: int = 50) -> jax.Array:
  """Beam search with the GNMT length penalty: the best hypothesis of each row, tokens
  int32[B, L], like `greedy` and `sample`. Its score, logP / lp(n), comes with
  `decode(model, params, inputs, DecodeConfig(method="beam", ...))`, which returns
  (tokens, scores)."""
  config = DecodeConfig(method="beam", beam_size=beam_size, alpha=alpha, extra_len=extra_len)
  return decode(model, params, inputs, config)[0]
