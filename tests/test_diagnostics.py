"""transformer.diagnostics: the scale statistics against their expected values and numpy."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer import diagnostics
from transformer.attention import MultiHeadAttention
from transformer.config import ModelConfig
from transformer.models import DecoderOnly, Transformer, shift_right

VOCAB = 64


def _lm(**overrides):
  cfg = ModelConfig.from_recipe("vaswani2017", **{
      **dict(vocab_size=VOCAB, d_model=256, num_heads=4, d_ff=32, num_encoder_layers=0,
             num_decoder_layers=1, max_len=64), **overrides})
  model = DecoderOnly(cfg)
  tokens = jnp.asarray(np.random.RandomState(0).randint(1, VOCAB, (4, 64)), jnp.int32)
  params = model.init(jax.random.PRNGKey(0), tokens)["params"]
  return model, params, {"targets": tokens}


@pytest.mark.parametrize("embed_scale, expected", [
    ("sqrt_d", math.sqrt(2.0)),  # RMS(sqrt(d) * N(0, 1/d)) = 1, RMS(sinusoids) = 1/sqrt(2)
    ("none", 1.0 / math.sqrt(256 / 2)),  # RMS(N(0, 1/d)) = d^-0.5
])
def test_embedding_to_posemb_ratio_at_init(embed_scale, expected):
  model, params, batch = _lm(embed_scale=embed_scale)
  out = diagnostics.scale_diagnostics(model, params, batch)
  # PE's RMS is exactly 1/sqrt(2) (sin^2 + cos^2 = 1 per column pair); the token RMS is a
  # sample of 64 x 256 Gaussians (~1% error): 5% is several standard errors.
  np.testing.assert_allclose(float(out["decoder/embed/posemb_rms"]), 1 / math.sqrt(2), rtol=1e-5)
  np.testing.assert_allclose(float(out["decoder/embed/ratio"]), expected, rtol=0.05)


def test_frequency_buckets_split_the_ratio():
  model, params, batch = _lm()
  freq = jnp.arange(VOCAB, dtype=jnp.float32)[::-1]  # token 0 most frequent
  np.testing.assert_array_equal(diagnostics.frequency_buckets(freq),
                                np.repeat(np.arange(4), VOCAB // 4))
  out = diagnostics.scale_diagnostics(model, params, batch, freq)
  for b in range(4):
    np.testing.assert_allclose(float(out[f"decoder/embed/bucket_{b}/ratio"]), math.sqrt(2),
                               rtol=0.1)  # ~1/4 of the tokens each: a looser tolerance


def test_rope_has_no_posemb_terms():
  model, params, batch = _lm(posemb="rope")
  out = diagnostics.scale_diagnostics(model, params, batch)
  assert "decoder/embed/token_rms" in out and "decoder/embed/ratio" not in out


def test_qk_variance_over_dk_is_one_for_unit_variance_q_and_k():
  """q = x Q, k = y K with x, y ~ N(0, 1) iid and Q, K orthogonal: q, k are iid N(0, 1), so
  Var(q.k) = d_k and, scaled by d_k^-0.5, the logits have unit variance (Section 3.2.1)."""
  cfg = ModelConfig(d_model=128, num_heads=2, vocab_size=8, max_len=32)
  d, heads, d_k = cfg.d_model, cfg.num_heads, cfg.qk_dim
  mha = MultiHeadAttention(cfg, self_attention=False)
  rng = np.random.RandomState(0)
  x = jnp.asarray(rng.randn(4, 32, d), jnp.float32)
  y = jnp.asarray(rng.randn(4, 32, d), jnp.float32)  # independent of x: no q_i.k_i terms
  params = mha.init(jax.random.PRNGKey(0), x, y, None)["params"]
  for name, seed in (("query", 1), ("key", 2)):
    orth = np.linalg.qr(np.random.RandomState(seed).randn(d, d))[0]
    params[name]["kernel"] = jnp.asarray(orth.reshape(d, heads, d_k), jnp.float32)
    params[name]["bias"] = jnp.zeros_like(params[name]["bias"])
  _, state = mha.apply({"params": params}, x, y, None, mutable=["intermediates"])
  sown = state["intermediates"]
  stats = diagnostics.attention_stats(sown["q"][0], sown["k"][0], sown["scale"][0])
  # 4 x 32 x 32 logits per head, correlated along rows and columns: the variance estimate
  # has a few percent error, so 10% is > 3 standard errors.
  np.testing.assert_allclose(np.asarray(stats["qk_var_over_dk"]), 1.0, rtol=0.1)
  np.testing.assert_allclose(np.asarray(stats["logit_var"]), 1.0, rtol=0.1)
  np.testing.assert_allclose(np.asarray(stats["raw_var"]) / d_k, np.asarray(stats["logit_var"]),
                             rtol=1e-4)


def _np_entropy(logits, mask):
  """Mean softmax entropy (nats) over valid keys, over rows with a valid key: numpy float64."""
  logits = np.where(mask, logits, -np.inf)
  rows = mask.any(-1)
  z = logits - np.max(np.where(rows[..., None], logits, 0.0), -1, keepdims=True)
  p = np.where(mask, np.exp(z), 0.0)
  p = p / np.maximum(p.sum(-1, keepdims=True), 1e-300)
  h = -np.sum(np.where(mask, p * np.log(np.where(mask, p, 1.0)), 0.0), -1)  # [B, H, Lq]
  return np.array([h[:, i][rows[:, i]].mean() for i in range(h.shape[1])])


def _seq2seq(batch, seed):
  """A 1 + 1-layer encoder-decoder (d_model 32, 2 heads) with a sharp attention scale, 0.5
  (entropies well below log L), on a padded [2, 6] batch: its params, scale_diagnostics, output
  logits and sown intermediates. One config and shape for every test, so one compile."""
  cfg = ModelConfig.from_recipe("vaswani2017", vocab_size=16, d_model=32, num_heads=2, d_ff=32,
                                num_encoder_layers=1, num_decoder_layers=1, max_len=8,
                                attention_scale=0.5)
  model = Transformer(cfg)
  params = model.init(jax.random.PRNGKey(seed), batch["inputs"], batch["targets"])["params"]
  out = diagnostics.scale_diagnostics(model, params, batch)
  logits, state = model.apply({"params": params}, batch["inputs"], batch["targets"],
                              mutable=["intermediates"])
  return params, out, logits, state["intermediates"]


def test_entropy_and_log_z_match_numpy():
  batch = {"inputs": jnp.array([[3, 4, 5, 6, 0, 0], [7, 8, 9, 10, 11, 1]], jnp.int32),
           "targets": jnp.array([[5, 6, 1, 0, 0, 0], [2, 3, 4, 5, 6, 1]], jnp.int32)}
  params, out, logits, inter = _seq2seq(batch, seed=1)
  for stack, kind in (("encoder", "self_attention"), ("decoder", "self_attention"),
                      ("decoder", "cross_attention")):
    a = inter[stack]["blocks"]["layer_0"][kind]
    q, k = np.asarray(a["q"][0], np.float64), np.asarray(a["k"][0], np.float64)
    raw = np.einsum("bqhd,bkhd->bhqk", q, k)
    mask = np.broadcast_to(np.asarray(a["mask"][0]), raw.shape)
    scaled = raw * 0.5
    for h in range(2):
      key = f"{stack}/layer_0/{kind}/head_{h}"
      np.testing.assert_allclose(float(out[f"{key}/raw_var"]), raw[:, h][mask[:, h]].var(),
                                 rtol=1e-4)
      np.testing.assert_allclose(float(out[f"{key}/logit_absmax"]),
                                 np.abs(scaled[:, h][mask[:, h]]).max(), rtol=1e-5)
      np.testing.assert_allclose(float(out[f"{key}/entropy"]), _np_entropy(scaled, mask)[h],
                                 rtol=1e-4)
  logits = np.asarray(logits, np.float64)
  valid = np.asarray(batch["targets"]) > 0
  m = logits.max(-1)
  log_z = m + np.log(np.exp(logits - m[..., None]).sum(-1))
  np.testing.assert_allclose(float(out["output/log_z"]), log_z[valid].mean(), rtol=1e-5)
  np.testing.assert_allclose(float(out["output/max_logit"]), m[valid].mean(), rtol=1e-5)
  # The decoder embeds shift_right(targets): its token RMS is over those ids.
  emb = np.asarray(params["embedding"]["embedding"], np.float64) * math.sqrt(32)
  tok = emb[np.asarray(shift_right(batch["targets"]))][valid]
  np.testing.assert_allclose(float(out["decoder/embed/token_rms"]), np.sqrt(np.mean(tok ** 2)),
                             rtol=1e-5)


def test_translation_rows_first_attention_of_encoder_and_decoder_against_hand_masks():
  """T1's diagnostics batches: one padded sentence pair a row. The encoder's first attention is
  bidirectional over the real source tokens, the decoder's causal over the real target tokens;
  both masks are built here from the sentence lengths, not taken from the model."""
  d, heads = 32, 2
  src_len, tgt_len = np.array([4, 6]), np.array([3, 6])
  batch = {"inputs": jnp.array([[3, 4, 5, 6, 0, 0], [7, 8, 9, 10, 11, 2]], jnp.int32),
           "targets": jnp.array([[5, 6, 2, 0, 0, 0], [2, 3, 4, 5, 6, 2]], jnp.int32)}
  params, out, _, inter = _seq2seq(batch, seed=3)
  pos = np.arange(6)
  real = lambda n: pos[None, :] < n[:, None]  # noqa: E731  [B, L]
  masks = {"encoder": real(src_len)[:, :, None] & real(src_len)[:, None, :],
           "decoder": (real(tgt_len)[:, :, None] & real(tgt_len)[:, None, :]
                       & (pos[None, None, :] <= pos[None, :, None]))}
  references = {"encoder": np.mean(np.log(np.repeat(src_len, src_len))),  # log(len) per query
                "decoder": np.mean(np.log(np.concatenate([np.arange(1, n + 1) for n in tgt_len])))}
  for stack in ("encoder", "decoder"):
    a = inter[stack]["blocks"]["layer_0"]["self_attention"]
    q, k = np.asarray(a["q"][0], np.float64), np.asarray(a["k"][0], np.float64)
    logits = 0.5 * np.einsum("bqhd,bkhd->bhqk", q, k)  # _seq2seq's attention scale
    mask = np.broadcast_to(masks[stack][:, None], logits.shape)
    for h in range(heads):
      key = f"{stack}/layer_0/self_attention/head_{h}"
      rows = [logits[b, h, i][mask[b, h, i]] for b in range(2) for i in range(6)]
      within = np.mean([r.var() for r in rows if r.size >= 2])
      np.testing.assert_allclose(float(out[f"{key}/logit_var_within"]), within, rtol=1e-4)
      np.testing.assert_allclose(float(out[f"{key}/entropy_uniform"]), references[stack],
                                 rtol=1e-5)
      np.testing.assert_allclose(float(out[f"{key}/entropy"]), _np_entropy(logits, mask)[h],
                                 rtol=1e-4)
  # The encoder's token/PE ratio: RMS over the real source tokens of sqrt(d) E[token], and of
  # the paper's interleaved sinusoids at their positions.
  emb = np.asarray(params["embedding"]["embedding"], np.float64) * math.sqrt(d)
  valid = real(src_len)
  token_rms = np.sqrt(np.mean(emb[np.asarray(batch["inputs"])][valid] ** 2))
  angles = pos[:, None] / 10000.0 ** (2 * np.arange(d // 2)[None, :] / d)
  pe = np.stack([np.sin(angles), np.cos(angles)], -1).reshape(6, d)  # sin, cos interleaved
  pe_rms = np.sqrt(np.mean(np.broadcast_to(pe, (2, 6, d))[valid] ** 2))
  np.testing.assert_allclose(float(out["encoder/embed/ratio"]), token_rms / pe_rms, rtol=1e-5)


def test_entropy_reference_follows_the_packed_causal_mask():
  """A packed row of two documents and padding: a query sees only the earlier tokens of its own
  document, so the uniform reference is the mean of log(1), log(2), ... per document, counted
  here by hand from the segment ids, not from the model's mask."""
  model, params, _ = _lm(attention_scale=0.5)
  targets = jnp.array([[5, 6, 7, 8, 9, 10, 0, 0], [11, 12, 13, 14, 15, 16, 17, 18]], jnp.int32)
  segments = jnp.array([[1, 1, 1, 2, 2, 2, 0, 0], [1, 1, 2, 2, 2, 2, 2, 3]], jnp.int32)
  positions = jnp.array([[0, 1, 2, 0, 1, 2, 0, 0], [0, 1, 0, 1, 2, 3, 4, 0]], jnp.int32)
  batch = {"targets": targets, "targets_segmentation": segments, "targets_position": positions}
  out = diagnostics.scale_diagnostics(model, params, batch)
  # Visible keys of each real query: its position within its document + 1.
  counts = [1, 2, 3, 1, 2, 3] + [1, 2, 1, 2, 3, 4, 5, 1]
  expected = np.mean(np.log(counts))
  _, state = model.logits(params, batch, mutable=["intermediates"])
  a = state["intermediates"]["decoder"]["blocks"]["layer_0"]["self_attention"]
  logits = 0.5 * np.einsum("bqhd,bkhd->bhqk", np.asarray(a["q"][0], np.float64),
                           np.asarray(a["k"][0], np.float64))
  mask = np.broadcast_to(np.asarray(a["mask"][0]), logits.shape)
  for h in range(4):
    key = f"decoder/layer_0/self_attention/head_{h}"
    np.testing.assert_allclose(float(out[f"{key}/entropy_uniform"]), expected, rtol=1e-5)
    np.testing.assert_allclose(float(out[f"{key}/entropy"]), _np_entropy(logits, mask)[h],
                               rtol=1e-4)
    np.testing.assert_allclose(float(out[f"{key}/entropy_deficit"]),
                               expected - _np_entropy(logits, mask)[h], rtol=1e-4, atol=1e-6)
    # The 1-key queries (a document's first token) have zero entropy and zero reference.
    assert 0 <= float(out[f"{key}/entropy"]) <= expected + 1e-6


@pytest.mark.parametrize("causal", [False, True])
def test_within_row_variance_leaves_out_differences_between_rows(causal):
  """q_i = (1, r_i), k_j = (x_j, 1): q_i.k_j = x_j + r_i. The softmax of row i sees only the
  spread of x over its visible keys; r_i shifts the whole row. By hand, x = 0, 1, 2, 3 and
  r = 0, 10, 20, 30: within-row variance 1.25 on every full row, pooled 1.25 + 125; with a
  causal mask, rows 1-3 see 2, 3, 4 keys: (0.25 + 2/3 + 1.25) / 3 (row 0, one key, left out)."""
  x, r = np.arange(4.0), 10.0 * np.arange(4.0)
  q = np.stack([np.ones(4), r], -1)[None, :, None, :]  # [B=1, L=4, H=1, D=2]
  k = np.stack([x, np.ones(4)], -1)[None, :, None, :]
  mask = np.tril(np.ones((4, 4), bool))[None, None] if causal else None
  stats = diagnostics.attention_stats(jnp.asarray(q, jnp.float32), jnp.asarray(k, jnp.float32),
                                      jnp.array([0.5]), None if mask is None else jnp.asarray(mask))
  if causal:
    within = (0.25 + 2 / 3 + 1.25) / 3
    logits = (x[None, :] + r[:, None])[np.tril(np.ones((4, 4), bool))]
    pooled = logits.var()
    uniform = np.mean(np.log([1, 2, 3, 4]))
  else:
    within, pooled, uniform = 1.25, 1.25 + 125.0, math.log(4)
  np.testing.assert_allclose(float(stats["raw_var_within"][0]), within, rtol=1e-5)
  np.testing.assert_allclose(float(stats["logit_var_within"][0]), 0.25 * within, rtol=1e-5)
  np.testing.assert_allclose(float(stats["qk_var_over_dk_within"][0]), within / 2, rtol=1e-5)
  np.testing.assert_allclose(float(stats["raw_var"][0]), pooled, rtol=1e-5)
  np.testing.assert_allclose(float(stats["entropy_uniform"][0]), uniform, rtol=1e-6)


def test_update_diagnostics_per_group():
  model, params, _ = _lm()
  new = dict(params)
  new["embedding"] = jax.tree_util.tree_map(lambda w: 1.1 * w, params["embedding"])
  grads = jax.tree_util.tree_map(jnp.ones_like, params)
  out = diagnostics.update_diagnostics(model, params, new, grads)
  np.testing.assert_allclose(float(out["update_ratio/embedding"]), 0.1, rtol=1e-4)
  assert float(out["update_ratio/decoder/layer_0"]) == 0.0
  n_block = sum(x.size for x in jax.tree_util.tree_leaves(params["decoder"]["blocks"]["layer_0"]))
  np.testing.assert_allclose(float(out["grad_norm/decoder/layer_0"]), math.sqrt(n_block),
                             rtol=1e-5)
  np.testing.assert_allclose(float(out["grad_norm/embedding"]), math.sqrt(VOCAB * 256), rtol=1e-5)


def test_scanned_layers_give_the_same_names_and_values():
  kw = dict(vocab_size=16, d_model=16, num_heads=2, d_ff=16, num_encoder_layers=0,
            num_decoder_layers=2, max_len=8)
  tokens = jnp.array([[3, 4, 5, 1, 0, 0]], jnp.int32)
  loop_model = DecoderOnly(ModelConfig(**kw))
  scan_model = DecoderOnly(ModelConfig(**kw, scan_layers=True))
  scan_params = scan_model.init(jax.random.PRNGKey(0), tokens)["params"]
  layers = scan_params["decoder"]["blocks"]["layers"]["block"]
  loop_params = {**scan_params, "decoder": {**scan_params["decoder"], "blocks": {
      f"layer_{i}": jax.tree_util.tree_map(lambda x: x[i], layers) for i in range(2)}}}
  a = diagnostics.scale_diagnostics(loop_model, loop_params, {"targets": tokens})
  b = diagnostics.scale_diagnostics(scan_model, scan_params, {"targets": tokens})
  assert sorted(a) == sorted(b) and "decoder/layer_1/self_attention/head_1/entropy" in a
  for k in a:
    np.testing.assert_allclose(float(a[k]), float(b[k]), rtol=1e-4, atol=1e-6, err_msg=k)
  ua = diagnostics.update_diagnostics(scan_model, scan_params, scan_params, scan_params)
  assert "grad_norm/decoder/layer_1" in ua


def test_token_counts_skip_padding_and_rank_buckets():
  counts = diagnostics.TokenCounts(8)
  counts.add({"inputs": np.array([[5, 5, 5, 0]]), "targets": np.array([[5, 6, 6, 0]])})
  counts.add({"targets": np.array([[7, 0, 0, 0]])})
  freq = counts.frequency()
  np.testing.assert_array_equal(freq, [0, 0, 0, 0, 0, 4, 2, 1])
  assert freq.dtype == np.float32
  buckets = np.asarray(diagnostics.frequency_buckets(freq))
  # Quantiles of the 3 ids seen (ranks 0, 1, 2 of 3); the 5 unseen ids count as the rarest.
  np.testing.assert_array_equal(buckets[5:], [0, 1, 2])
  assert np.all(buckets[:5] == 3)


def test_qk_alignment_against_hand_values():
  """q = (1, 0) for every query; keys by hand. Keys spread along q, x = +-1, y = 0: Var(q.k) = 1
  against |q|^2 mean|k|^2 / d_k = 1/2: alignment 2. Keys spread across q (x = 0, y = +-1): 0.
  Keys of the four directions (+-1, 0), (0, +-1): Var = 1/2 against 1/2: 1, as random
  directions would give. Rows of one visible key (causal row 0) are left out."""
  q = np.tile([1.0, 0.0], (4, 1))[None, :, None, :]
  cases = {2.0: [[1, 0], [-1, 0], [1, 0], [-1, 0]], 0.0: [[0, 1], [0, -1], [0, 1], [0, -1]],
           1.0: [[1, 0], [0, 1], [-1, 0], [0, -1]]}
  for expected, keys in cases.items():
    k = np.asarray(keys, np.float64)[None, :, None, :]
    stats = diagnostics.attention_stats(jnp.asarray(q, jnp.float32), jnp.asarray(k, jnp.float32),
                                        jnp.array([1.0]))
    np.testing.assert_allclose(float(stats["qk_alignment"][0]), expected, atol=1e-6)
  # Causal: row i sees keys 0..i of the four-direction set: rows 1-3 by hand.
  k = np.asarray(cases[1.0], np.float64)[None, :, None, :]
  mask = jnp.asarray(np.tril(np.ones((4, 4), bool))[None, None])
  stats = diagnostics.attention_stats(jnp.asarray(q, jnp.float32), jnp.asarray(k, jnp.float32),
                                      jnp.array([1.0]), mask)
  rows = []
  for i in (1, 2, 3):
    dots = k[0, :i + 1, 0, 0]
    rows.append(dots.var() / (1.0 * np.mean(np.sum(k[0, :i + 1, 0] ** 2, -1)) / 2))
  np.testing.assert_allclose(float(stats["qk_alignment"][0]), np.mean(rows), rtol=1e-6)


def test_softcap_of_the_first_layer_only_in_the_statistics_and_maps():
  """With attn_logit_softcap_layers=1, layer 0's statistics and weights are of the capped
  logits (|logit| < cap) and layer 1's of the raw ones, as the model computes them."""
  cap = 0.05  # below the init logits' spread, so the cap shows in every head
  model, params, batch = _lm(num_decoder_layers=2, attn_logit_softcap=cap,
                             attn_logit_softcap_layers=1)
  out = diagnostics.scale_diagnostics(model, params, batch)
  absmax = lambda i: max(float(out[f"decoder/layer_{i}/self_attention/head_{h}/logit_absmax"])  # noqa: E731
                         for h in range(4))
  assert absmax(0) <= cap * (1 + 1e-6) < absmax(1)  # tanh reaches 1 in float32
  uncapped = DecoderOnly(model.config.replace(attn_logit_softcap=None,
                                              attn_logit_softcap_layers=None))
  maps, raw = (diagnostics.attention_maps(m, params, batch) for m in (model, uncapped))
  assert not np.allclose(maps["decoder/layer_0/self_attention"],
                         raw["decoder/layer_0/self_attention"], atol=1e-4)
