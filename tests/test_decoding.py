"""Decoding over the KV cache: greedy = argmax of the full forward pass, beam 1 = greedy,
beam scores = logP / lp of what they return, sampling filters, rows independent of each other."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from transformer.inference import decoding
from transformer.config import ModelConfig
from transformer.inference.decode_config import DecodeConfig
from transformer.errors import ConfigError
from transformer.models import DecoderOnly, Transformer
from transformer.token_ids import EOS_ID
from transformer.training import steps as train_steps

V = 24


def _config(**overrides) -> ModelConfig:
  fields = dict(vocab_size=V, d_model=32, num_heads=4, d_ff=64, num_encoder_layers=1,
                num_decoder_layers=1, max_len=24, dropout_rate=0.0)
  fields.update(overrides)
  return ModelConfig.from_recipe("vaswani2017", **fields)


def _inputs(seed: int, lengths: list[int], width: int) -> np.ndarray:
  """Rows of random tokens 3..V-1 ending in EOS, 0-padded to `width`."""
  rng = np.random.default_rng(seed)
  out = np.zeros((len(lengths), width), np.int32)
  for r, n in enumerate(lengths):
    out[r, :n - 1] = rng.integers(3, V, n - 1)
    out[r, n - 1] = EOS_ID
  return out


def _reverse_batch(rng: np.random.Generator, rows: int, lm: bool):
  """A reverse-task batch (as the synthetic data): inputs, then targets, each ending in EOS."""
  lengths = rng.integers(2, 7, rows)
  inputs = np.zeros((rows, 7), np.int32)
  targets = np.zeros((rows, 7), np.int32)
  for r, n in enumerate(lengths):
    x = rng.integers(3, V, n)
    inputs[r, :n + 1] = np.append(x, EOS_ID)
    targets[r, :n + 1] = np.append(x[::-1], EOS_ID)
  if lm:  # inputs ++ targets, as ConcatForLM reads a seq2seq source
    joined = [np.concatenate([i[i > 0], t[t > 0]]) for i, t in zip(inputs, targets)]
    out = np.zeros((rows, 14), np.int32)
    for r, j in enumerate(joined):
      out[r, :len(j)] = j
    return {"targets": out}
  return {"inputs": inputs, "targets": targets}


def _trained(model, steps: int = 80):
  """Params after 80 steps of training on reversal: outputs vary and end in EOS at
  different steps (or hit the length limit), unlike a random model's."""
  lm = isinstance(model, DecoderOnly)
  rng = np.random.default_rng(0)
  tx = optax.adam(3e-3)
  state = train_steps.init_state(model, tx, jax.random.PRNGKey(1), _reverse_batch(rng, 2, lm))
  step = jax.jit(train_steps.make_train_step(model, lambda peak: (tx, lambda s: peak)))
  for _ in range(steps):
    state, _ = step(state, _reverse_batch(rng, 32, lm), jax.random.PRNGKey(0), 3e-3)
  return state.params


@pytest.fixture(scope="module")
def seq2seq():
  model = Transformer(_config())
  return model, _trained(model), _inputs(0, [6, 3, 7, 2, 5, 4], 10)


@pytest.fixture(scope="module")
def lm():
  model = DecoderOnly(_config(num_encoder_layers=0, norm_position="pre"))
  return model, _trained(model), _inputs(2, [4, 1, 6, 3], 7)


def _masked_log_probs(logits: jax.Array) -> np.ndarray:
  """As decoding sees them: PAD never chosen."""
  return np.asarray(jax.nn.log_softmax(logits.at[..., 0].set(-1e9), axis=-1))


def _full_forward_greedy(model, params, inputs, steps: int, limits: np.ndarray) -> np.ndarray:
  """Argmax decoding through the full forward pass, one token at a time (no cache)."""
  lm = isinstance(model, DecoderOnly)
  rows = inputs.shape[0]
  prompt_len = (inputs != 0).sum(1) if lm else np.zeros(rows, int)
  seq = np.zeros((rows, steps), np.int32)
  done = np.zeros(rows, bool)
  forward = jax.jit(lambda s: model.apply({"params": params}, s) if lm else
                    model.apply({"params": params}, inputs, s))
  for t in range(steps):
    probe = seq.copy()
    probe[:, t] = EOS_ID  # position t must be a valid (non-pad) position; its value is unused
    chosen = np.argmax(_masked_log_probs(forward(jnp.asarray(probe)))[:, t], axis=-1)
    for r in range(rows):
      if done[r]:
        continue
      seq[r, t] = inputs[r, t] if t < prompt_len[r] else chosen[r]
      done[r] = (t >= prompt_len[r] and seq[r, t] == EOS_ID) or t + 1 >= prompt_len[r] + limits[r]
  out = np.zeros_like(seq)
  for r in range(rows):  # the continuation only
    out[r, :steps - prompt_len[r]] = seq[r, prompt_len[r]:]
  return out


def _logp_of(model, params, inputs, tokens: np.ndarray) -> np.ndarray:
  """A seq2seq model's sum of log p(token) over each row's tokens (EOS included), no cache."""
  logits = jax.jit(model.apply)({"params": params}, inputs, jnp.asarray(tokens))
  logp = _masked_log_probs(logits)
  picked = np.take_along_axis(logp, tokens[..., None], axis=-1)[..., 0]
  return np.sum(np.where(tokens > 0, picked, 0.0), axis=1)


def test_greedy_over_the_cache_equals_argmax_through_the_full_forward_pass(seq2seq, lm):
  for model, params, inputs in (seq2seq, lm):
    tokens, scores = decoding.decode(model, params, inputs, DecodeConfig(method="greedy",
                                                                         extra_len=5))
    tokens = np.asarray(tokens)
    count = (inputs != 0).sum(1)
    limits = count + 5
    if isinstance(model, Transformer):
      limits = np.where(count > 0, limits, 0)
    want = _full_forward_greedy(model, params, inputs, tokens.shape[1], limits)
    np.testing.assert_array_equal(tokens, want)
    assert (tokens == EOS_ID).any() and len({tuple(t) for t in tokens}) > 2  # varied, with EOS


def test_beam_1_equals_greedy(seq2seq, lm):
  for model, params, inputs in (seq2seq, lm):
    greedy, greedy_logp = decoding.decode(model, params, inputs, DecodeConfig(method="greedy"))
    beam, beam_score = decoding.decode(model, params, inputs,
                                       DecodeConfig(method="beam", beam_size=1))
    np.testing.assert_array_equal(beam, greedy)
    length = (np.asarray(greedy) > 0).sum(1)
    np.testing.assert_allclose(beam_score, np.asarray(greedy_logp) /
                               np.asarray(decoding.length_penalty(length, 0.6)), rtol=1e-5)


def _check_beam_scores(model, params, inputs):
  for alpha in (0.0, 0.6, 1.0):
    tokens, scores = decoding.decode(model, params, inputs, DecodeConfig(
        method="beam", beam_size=3, alpha=alpha, extra_len=6))
    tokens = np.asarray(tokens)
    np.testing.assert_array_equal(  # the shorthand: the same tokens, alone
        decoding.beam_search(model, params, inputs, beam_size=3, alpha=alpha, extra_len=6),
        tokens)
    length = (tokens > 0).sum(1)
    want = _logp_of(model, params, inputs, tokens) / np.asarray(
        decoding.length_penalty(length, alpha))
    np.testing.assert_allclose(scores, want, rtol=1e-4, atol=1e-4)
    assert length.min() >= 1


def test_beam_scores_are_the_length_normalised_log_probability_of_the_output(seq2seq):
  _check_beam_scores(*seq2seq)


def test_decoding_a_scanned_layer_stack():
  """Scanned layers stack the cache on a leading layer axis: beams must still follow it."""
  model = Transformer(_config(scan_layers=True))  # random params: the bookkeeping is the point
  inputs = _inputs(0, [6, 3, 7, 2, 5, 4], 10)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), inputs, inputs)["params"]
  _check_beam_scores(model, params, inputs)
  greedy = np.asarray(decoding.greedy(model, params, inputs, extra_len=5))
  np.testing.assert_array_equal(greedy, _full_forward_greedy(
      model, params, inputs, greedy.shape[1], (inputs != 0).sum(1) + 5))


def test_length_penalty_is_gnmt():
  assert float(decoding.length_penalty(1, 0.6)) == pytest.approx(1.0)
  assert float(decoding.length_penalty(10, 0.6)) == pytest.approx((15 / 6) ** 0.6)
  assert float(decoding.length_penalty(7, 0.0)) == 1.0


def test_rows_do_not_influence_each_other(seq2seq):
  model, params, inputs = seq2seq
  for config in (DecodeConfig(method="beam", beam_size=3),):
    together = np.asarray(decoding.decode(model, params, inputs, config)[0])
    for r in range(inputs.shape[0]):
      alone = np.asarray(decoding.decode(model, params, inputs[r:r + 1], config)[0])
      np.testing.assert_array_equal(alone[0], together[r])


def test_empty_rows_and_length_limits(seq2seq):
  model, params, inputs = seq2seq
  rows = np.concatenate([inputs, np.zeros((1, inputs.shape[1]), np.int32)])
  count = (rows != 0).sum(1)
  for config, width in ((DecodeConfig(method="greedy", extra_len=2), 12),  # input width 10 + 2
                        (DecodeConfig(extra_len=50), model.config.max_len)):  # capped: max_len
    tokens = np.asarray(decoding.decode(model, params, rows, config)[0])
    assert tokens.shape == (7, width)
    assert not tokens[-1].any()  # an empty source gives nothing
    assert np.all((tokens > 0).sum(1) <= count + config.extra_len)
    after_eos = np.cumsum(tokens == EOS_ID, axis=1) - (tokens == EOS_ID) > 0
    assert not tokens[after_eos].any() and not (tokens[:, :-1] == 0)[tokens[:, 1:] > 0].any()


def test_inputs_past_the_position_table_are_refused(seq2seq, lm):
  for model, params, _ in (seq2seq, lm):
    too_long = np.ones((1, model.config.max_len + 1), np.int32)
    with pytest.raises(ConfigError, match="max_len=24"):
      decoding.decode(model, params, too_long, DecodeConfig(method="greedy"))
    with pytest.raises(ConfigError, match="A cache of 25 positions exceeds the position table"):
      model.start_decoding(params, too_long[:, :3], 1, 25)


def test_sampling(lm):
  model, params, prompts = lm
  greedy = np.asarray(decoding.greedy(model, params, prompts))
  for kwargs in ({"top_p": 1e-6}, {"temperature": 1e-4, "top_k": 3}):
    out = decoding.sample(model, params, prompts, jax.random.PRNGKey(5), **kwargs)
    np.testing.assert_array_equal(out, greedy)
  # The floats are traced: these reuse the last compilation.
  a = decoding.sample(model, params, prompts, jax.random.PRNGKey(5), temperature=2.0, top_k=3)
  b = decoding.sample(model, params, prompts, jax.random.PRNGKey(5), temperature=2.0, top_k=3)
  c = decoding.sample(model, params, prompts, jax.random.PRNGKey(6), temperature=2.0, top_k=3)
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, c)
  assert not (np.asarray(a) >= V).any()


def test_filter_logits():
  logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))

  def kept(**kwargs) -> list[bool]:
    return np.isfinite(np.asarray(decoding.filter_logits(logits, **kwargs)))[0].tolist()

  assert kept(top_k=2) == [True, True, False, False]
  assert kept(top_p=0.5) == [True, False, False, False]
  assert kept(top_p=0.6) == [True, True, False, False]
  assert kept(top_p=0.9) == [True, True, True, False]
  assert kept(top_k=1, top_p=0.9) == [True, False, False, False]
  np.testing.assert_allclose(decoding.filter_logits(logits, temperature=2.0), logits / 2.0)


def test_bad_settings_are_one_clear_line():
  for kwargs, field in (({"method": "nucleus"}, "method"), ({"beam_size": 0}, "beam_size"),
                        ({"beam_size": 100000}, r"beam_size=100000 must be in \[1, 64\]"),
                        ({"top_p": 0.0}, "top_p"), ({"temperature": 0.0}, "temperature"),
                        ({"top_k": -1}, "top_k"), ({"alpha": -1.0}, "alpha")):
    with pytest.raises(ValueError, match=field):
      DecodeConfig(**kwargs)


def test_first_argmax_is_argmax_ties_included():
  logits = np.random.default_rng(0).normal(size=(6, 50)).astype(np.float32)
  logits[1, [3, 7, 40]] = 9.0  # a three-way tie: the first wins, as in jnp.argmax
  logits[2, :] = 0.0
  logits[3, 49] = np.inf
  for x in (logits, logits.astype(jnp.bfloat16)):
    np.testing.assert_array_equal(decoding.first_argmax(jnp.asarray(x)),
                                  np.argmax(np.asarray(x, np.float32), axis=-1))
