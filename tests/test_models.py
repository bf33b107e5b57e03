"""Whole models: causality, padding, packing, the KV cache, shared embeddings, the two
conventions."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer import models
from transformer.config import ModelConfig
from transformer.models import DecoderOnly, Transformer, shift_right

V = 40


def tiny(**overrides) -> ModelConfig:
  base = dict(vocab_size=V, d_model=32, num_heads=4, d_ff=64, num_encoder_layers=2,
              num_decoder_layers=2, max_len=32, dropout_rate=0.1)
  return ModelConfig(**{**base, **overrides})


VARIANTS = {  # the paper, and the variants whose position handling differs
    "paper": tiny(),
    "rope_pre": tiny(posemb="rope", norm_position="pre", qk_norm="rmsnorm"),
    "learned_untied": tiny(posemb="learned", share_embeddings=False, logits_via_embedding=False,
                           target_vocab_size=V + 5, attention_scale="learned"),
}


def tokens(seed, shape, low=3, high=V):
  return jnp.asarray(np.random.default_rng(seed).integers(low, high, shape), jnp.int32)


@functools.lru_cache(maxsize=None)
def seq2seq(name):
  model = Transformer(VARIANTS[name])
  params = jax.jit(model.init)(jax.random.PRNGKey(0), tokens(0, (1, 6)),
                               tokens(1, (1, 5)))["params"]
  return model, params, jax.jit(lambda p, i, t, **kw: model.apply({"params": p}, i, t, **kw))


@functools.lru_cache(maxsize=None)
def lm(name):
  model = DecoderOnly(VARIANTS[name])
  params = jax.jit(model.init)(jax.random.PRNGKey(0), tokens(0, (1, 6)))["params"]
  return model, params, jax.jit(lambda p, t, **kw: model.apply({"params": p}, t, **kw))


def test_shift_right_restarts_segments():
  t = jnp.array([[5, 6, 7, 8, 9, 0]])
  np.testing.assert_array_equal(shift_right(t), [[0, 5, 6, 7, 8, 9]])
  seg = jnp.array([[1, 1, 1, 2, 2, 0]])
  np.testing.assert_array_equal(shift_right(t, seg), [[0, 5, 6, 0, 8, 0]])


@pytest.mark.parametrize("name", list(VARIANTS))
def test_causality(name):
  _, params, f = seq2seq(name)
  _, lparams, g = lm(name)
  inputs, targets = tokens(2, (2, 7)), tokens(3, (2, 9))
  base, lbase = f(params, inputs, targets), g(lparams, targets)
  for t in (0, 4, 8):
    changed = targets.at[:, t].set((targets[:, t] + 1 - 3) % (V - 3) + 3)
    for before, after in ((base, f(params, inputs, changed)), (lbase, g(lparams, changed))):
      np.testing.assert_allclose(before[:, :t + 1], after[:, :t + 1], atol=1e-5)
      if t < 8:
        assert not np.allclose(before[:, t + 1:], after[:, t + 1:], atol=1e-4)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_padding_never_changes_real_outputs(name):
  _, params, f = seq2seq(name)
  _, lparams, g = lm(name)
  inputs, targets = tokens(4, (2, 6)), tokens(5, (2, 5))
  pad = lambda x, n: jnp.pad(x, ((0, 0), (0, n)))  # noqa: E731
  base = f(params, inputs, targets)
  np.testing.assert_allclose(f(params, pad(inputs, 5), targets), base, atol=1e-5)
  np.testing.assert_allclose(f(params, pad(inputs, 3), pad(targets, 4))[:, :5], base, atol=1e-5)
  np.testing.assert_allclose(g(lparams, pad(targets, 6))[:, :5], g(lparams, targets), atol=1e-5)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_packed_row_gives_each_sequences_own_logits(name):
  _, params, f = seq2seq(name)
  _, lparams, g = lm(name)
  a_in, a_tg, b_in, b_tg = (tokens(6, (1, 4)), tokens(7, (1, 5)),
                            tokens(8, (1, 6)), tokens(9, (1, 3)))

  def pack(a, b, total):
    row = jnp.pad(jnp.concatenate([a, b], 1), ((0, 0), (0, total - a.shape[1] - b.shape[1])))
    seg = np.zeros((1, total), np.int32)
    pos = np.zeros((1, total), np.int32)
    seg[0, :a.shape[1]], seg[0, a.shape[1]:a.shape[1] + b.shape[1]] = 1, 2
    pos[0, :a.shape[1]] = np.arange(a.shape[1])
    pos[0, a.shape[1]:a.shape[1] + b.shape[1]] = np.arange(b.shape[1])
    return row, jnp.asarray(seg), jnp.asarray(pos)

  inputs, in_seg, in_pos = pack(a_in, b_in, 12)
  targets, tg_seg, tg_pos = pack(a_tg, b_tg, 10)
  packed = f(params, inputs, targets, inputs_segmentation=in_seg, targets_segmentation=tg_seg,
             inputs_position=in_pos, targets_position=tg_pos)
  np.testing.assert_allclose(packed[:, :5], f(params, a_in, a_tg), atol=1e-5)
  np.testing.assert_allclose(packed[:, 5:8], f(params, b_in, b_tg), atol=1e-5)

  lpacked = g(lparams, targets, segmentation=tg_seg, position=tg_pos)
  np.testing.assert_allclose(lpacked[:, :5], g(lparams, a_tg), atol=1e-5)
  np.testing.assert_allclose(lpacked[:, 5:8], g(lparams, b_tg), atol=1e-5)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_kv_cache_decoding_equals_the_full_forward_pass(name):
  model, params, f = seq2seq(name)
  inputs, targets = tokens(10, (2, 7)), tokens(11, (2, 8))
  inputs = inputs.at[1, 5:].set(0)  # a padded source row
  full = f(params, inputs, targets)
  # The model's decoding start and step, fed the target tokens (teacher forcing).
  state, _, _ = model.start_decoding(params, inputs, 1, targets.shape[1])
  step = jax.jit(functools.partial(model.decode_step, params))
  previous = shift_right(targets)
  for t in range(targets.shape[1]):
    logits, state = step(state, previous[:, t])
    np.testing.assert_allclose(logits, full[:, t], atol=1e-4)

  lm_model, lparams, g = lm(name)
  lfull = g(lparams, targets)
  state, _, _ = lm_model.start_decoding(lparams, targets[:, :0], 1, targets.shape[1])
  lstep = jax.jit(functools.partial(lm_model.decode_step, lparams))
  for t in range(targets.shape[1]):
    logits, state = lstep(state, previous[:, t])
    np.testing.assert_allclose(logits, lfull[:, t], atol=1e-4)


def _shapes(params):
  return [leaf.shape for leaf in jax.tree_util.tree_leaves(params)]


def test_shared_embeddings_are_one_matrix_that_both_uses_train():
  cfg = tiny(logits_via_embedding=False)  # untied output, so only the two input uses touch E
  model = Transformer(cfg)
  inputs = tokens(12, (2, 6), 3, 10)  # source tokens 3..9
  targets = tokens(13, (2, 5), 20, 30)  # target tokens 20..29
  params = jax.jit(model.init)(jax.random.PRNGKey(0), inputs, targets)["params"]
  assert _shapes(params).count((V, 32)) == 1
  grad = jax.jit(jax.grad(
      lambda p: jnp.sum(model.apply({"params": p}, inputs, targets) ** 2)))(params)
  rows = np.abs(np.asarray(grad["embedding"]["embedding"])).sum(-1)
  assert np.all(rows[np.unique(np.asarray(inputs))] > 0)  # the encoder's use
  assert np.all(rows[np.unique(np.asarray(targets[:, :-1]))] > 0)  # the decoder's use
  assert np.all(rows[30:] == 0)

  tied = Transformer(tiny())
  tied_params = jax.eval_shape(tied.init, jax.random.PRNGKey(0), inputs, targets)["params"]
  assert _shapes(tied_params).count((V, 32)) == 1 and (32, V) not in _shapes(tied_params)
  separate = Transformer(tiny(share_embeddings=False))
  separate_params = jax.eval_shape(separate.init, jax.random.PRNGKey(0), inputs, targets)["params"]
  assert _shapes(separate_params).count((V, 32)) == 2


def _init_scales(cfg, seed):
  model = Transformer(cfg)
  inputs, targets = (tokens(seed, (8, 32), 3, cfg.vocab_size),
                     tokens(seed + 1, (8, 32), 3, cfg.vocab_size))
  variables = jax.jit(model.init)(jax.random.PRNGKey(seed), inputs, targets)
  logits, state = jax.jit(functools.partial(model.apply, capture_intermediates=True))(
      variables, inputs, targets)
  x = state["intermediates"]["encoder"]["input_embedding"]["__call__"][0]
  return float(jnp.sqrt(jnp.mean(x ** 2))), float(jnp.std(logits))


def test_the_two_conventions_have_the_same_scales_at_init():
  # (1) E ~ N(0, 1/d), input sqrt(d) E, logits h.E^T
  # (2) E ~ N(0, 1), input E, logits h.E^T / sqrt(d)
  paper = ModelConfig.from_recipe("vaswani2017", vocab_size=500, d_model=128, num_heads=4,
                                  d_ff=256, num_encoder_layers=1, num_decoder_layers=1,
                                  max_len=32, dropout_rate=0.0)
  flax_style = paper.replace(embed_scale="none", embed_init_std=1.0, logits_scale="inv_sqrt_d")
  seeds = range(3)
  a = np.array([_init_scales(paper, s) for s in seeds])
  b = np.array([_init_scales(flax_style, s) for s in seeds])
  # Input RMS ~ sqrt(1 + 1/2) in both, logits std ~ 1 in both; seed-to-seed spread is ~1-2%.
  np.testing.assert_allclose(a.mean(0), b.mean(0), rtol=0.05)
  assert a[:, 0].mean() == pytest.approx(math.sqrt(1.5), rel=0.05)
  assert a[:, 1].mean() == pytest.approx(1.0, rel=0.1)


def test_dropout_only_in_training():
  _, params, f = seq2seq("paper")
  inputs, targets = tokens(14, (2, 6)), tokens(15, (2, 5))
  model = Transformer(VARIANTS["paper"])
  eval_a = f(params, inputs, targets)
  eval_b = model.apply({"params": params}, inputs, targets, deterministic=True,
                       rngs={"dropout": jax.random.PRNGKey(1)})
  np.testing.assert_allclose(eval_a, eval_b, atol=1e-5)
  train = lambda key: model.apply({"params": params}, inputs, targets, deterministic=False,  # noqa: E731
                                  rngs={"dropout": key})
  assert not np.allclose(train(jax.random.PRNGKey(1)), train(jax.random.PRNGKey(2)))
  np.testing.assert_array_equal(train(jax.random.PRNGKey(1)), train(jax.random.PRNGKey(1)))


def test_bf16_compute_keeps_float32_params():
  cfg = tiny(dtype="bfloat16")
  model = Transformer(cfg)
  variables = model.init(jax.random.PRNGKey(0), tokens(0, (1, 6)), tokens(1, (1, 5)))
  assert all(p.dtype == jnp.float32 for p in jax.tree_util.tree_leaves(variables))
  logits = model.apply(variables, tokens(0, (1, 6)), tokens(1, (1, 5)))
  # The logits stay in the compute dtype (the loss reads them in float32, without a copy).
  assert logits.dtype == jnp.bfloat16 and np.all(np.isfinite(np.asarray(logits, np.float32)))


def test_post_ln_input_scale_acts_only_as_the_first_attention_temperature():
  """findings.md's 2 x 2 reading of E1: in a bias-free post-LN model, multiplying the whole
  input by c = 8 (the paper's sqrt(d).E + PE against pe_down's E + PE/8, same E) equals
  multiplying the first attention's logits by c^2 = 64. With one head of d_k = 64,
  attention_scale 'inv_dk' (1/64) on the paper's input gives the logits that 'none' gives on
  pe_down's, and every later layer sees LN-normalised inputs: the outputs agree. (Both layers
  use the same attention_scale, so the second layer would differ: one layer here.)"""
  d = 64
  base = ModelConfig.from_recipe("vaswani2017", vocab_size=V, d_model=d, num_heads=1, d_ff=64,
                                 num_encoder_layers=0, num_decoder_layers=1, max_len=32,
                                 dropout_rate=0.0, use_bias=False)
  paper = base.replace(attention_scale="inv_dk")  # input 8 (E + PE/8), logits / 64
  pe_down = base.replace(embed_scale="none", posemb_scale=d ** -0.5, attention_scale="none")
  ids = tokens(7, (2, 12))
  params = DecoderOnly(paper).init(jax.random.PRNGKey(0), ids)["params"]
  out_paper = DecoderOnly(paper).apply({"params": params}, ids)
  out_pe_down = DecoderOnly(pe_down).apply({"params": params}, ids)
  np.testing.assert_allclose(out_paper, out_pe_down, rtol=2e-4, atol=2e-4)
  # Without the matching temperature the two differ: the identity is not trivial.
  out_plain = DecoderOnly(base.replace(embed_scale="none", posemb_scale=d ** -0.5)).apply(
      {"params": params}, ids)
  assert np.abs(np.asarray(out_paper) - np.asarray(out_plain)).max() > 1e-2


@pytest.mark.parametrize("cls", [Transformer, DecoderOnly])
def test_one_interface_serves_both_models(cls):
  """init_params, logits, start_decoding and decode_step: the callers never ask which model."""
  model = cls(tiny(dropout_rate=0.0))
  tokens = jnp.asarray([[3, 4, 5, 1]], jnp.int32)
  batch = {"inputs": tokens, "targets": tokens}
  params = models.init_params(model, jax.random.PRNGKey(0), batch)
  # The batch only fixes shapes: keys the model does not read, and other row lengths, give the
  # same params (a caller hands it whatever batch its data gives).
  other = {"inputs": jnp.ones((2, 7), jnp.int32), "targets": jnp.ones((2, 3), jnp.int32),
           "targets_segmentation": jnp.ones((2, 3), jnp.int32), "weights": jnp.ones((2, 3))}
  again = models.init_params(model, jax.random.PRNGKey(0), other)
  assert jax.tree_util.tree_all(jax.tree_util.tree_map(np.array_equal, params, again))
  assert ("encoder" in params) == (cls is Transformer)
  state, prefix, prefix_len = model.start_decoding(params, tokens, 1, 4)
  # A source is encoded and the output starts empty; a prompt is the output's prefix.
  assert int(prefix_len[0]) == (0 if cls is Transformer else 4)
  assert (model.decoding_source(batch) is None) == (cls is DecoderOnly)
  logits, state = model.decode_step(params, state, jnp.zeros((1,), jnp.int32))
  # The first step of the cache is the first position of the full forward pass.
  full = model.logits(params, batch)
  np.testing.assert_allclose(logits, full[:, 0], rtol=1e-5, atol=1e-5)
  # FLOPs from a batch's shapes: per row, and a source counted where the model reads one.
  shapes = {k: (3, 4) for k in model.batch_keys}
  assert model.forward_flops(shapes) == pytest.approx(3 * model.forward_flops(
      {k: (1, 4) for k in model.batch_keys}))


@pytest.mark.parametrize("model_cls", [Transformer, DecoderOnly])
def test_the_splash_kernel_computes_what_the_einsum_path_computes(model_cls):
  """The models hand attention a SegmentMask: the TPU kernel (interpreted here) takes it as
  segment ids and causal-ness, and the model's logits and gradients equal the einsum path's,
  on a packed batch with padding."""
  rng = np.random.default_rng(5)
  targets = rng.integers(3, V, (2, 12)).astype(np.int32)
  targets[1, 9:] = 0
  segmentation = np.where(targets > 0, 1 + (np.arange(12) >= 5), 0).astype(np.int32)
  position = np.where(segmentation > 0, np.arange(12) - 5 * (np.arange(12) >= 5), 0)
  batch = {"targets": targets, "targets_segmentation": segmentation,
           "targets_position": position.astype(np.int32)}
  if model_cls is Transformer:
    source_segment = np.where(np.arange(10) < 6, 1, 2)  # two source segments a row
    batch.update(inputs=rng.integers(3, V, (2, 10)).astype(np.int32),
                 inputs_segmentation=np.broadcast_to(source_segment, (2, 10)).astype(np.int32),
                 inputs_position=np.broadcast_to(np.arange(10) - 6 * (source_segment - 1),
                                                 (2, 10)).astype(np.int32))
  batch = {k: jnp.asarray(v) for k, v in batch.items()}
  out = {}
  for impl in ("einsum", "splash"):
    model = model_cls(tiny(num_encoder_layers=1, num_decoder_layers=1, attention_impl=impl,
                           dropout_rate=0.0))
    params = models.init_params(model, jax.random.PRNGKey(0), batch)
    def loss(p):
      logits = model.logits(p, batch)
      return jnp.sum(jnp.sin(logits)), logits
    (_, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)  # one program
    out[impl] = (logits, grads)
  np.testing.assert_allclose(out["splash"][0], out["einsum"][0], atol=1e-4)
  for a, b in zip(jax.tree_util.tree_leaves(out["splash"][1]),
                  jax.tree_util.tree_leaves(out["einsum"][1])):
    np.testing.assert_allclose(a, b, atol=1e-4)
