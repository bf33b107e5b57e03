"""The embedding knobs: the sqrt(d) multiplier, its target, the init std, tied logits."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer import embeddings, positional
from transformer.config import ModelConfig


class _Inputs(nn.Module):
  """A token embedding and the input path, as the encoder builds them."""
  config: ModelConfig

  @nn.compact
  def __call__(self, tokens):
    table = embeddings.TokenEmbedding(self.config, self.config.vocab_size, name="embed")
    return embeddings.InputEmbedding(self.config, table)(
        tokens, positional.default_positions(tokens))


def _embed(cfg, tokens, seed=0):
  module = _Inputs(cfg)
  variables = module.init(jax.random.PRNGKey(seed), tokens)
  return np.asarray(module.apply(variables, tokens), np.float64), variables


def _small(**overrides):
  return ModelConfig(**{**dict(vocab_size=64, d_model=32, num_heads=4, max_len=16), **overrides})


TOKENS = jnp.array([[5, 9, 3, 63, 0, 17]])


@pytest.mark.parametrize("target", ["token", "sum"])
@pytest.mark.parametrize("embed_scale, value",
                         [("sqrt_d", math.sqrt(32)), ("none", 1.0), (2.5, 2.5)])
def test_embedding_output_is_scale_times_token_plus_pe(target, embed_scale, value):
  cfg = _small(embed_scale=embed_scale, embed_scale_target=target)
  x, variables = _embed(cfg, TOKENS)
  table = np.asarray(variables["params"]["embed"]["embedding"], np.float64)
  token = table[np.asarray(TOKENS[0])]
  pe = positional.sinusoidal_table(16, 32)[:6].astype(np.float64)
  expected = value * token + pe if target == "token" else value * (token + pe)
  np.testing.assert_allclose(x[0], expected, rtol=1e-5, atol=1e-6)


def test_posemb_scale_multiplies_only_the_positional_part():
  x, variables = _embed(_small(posemb_scale=0.25), TOKENS)
  table = np.asarray(variables["params"]["embed"]["embedding"], np.float64)
  expected = (math.sqrt(32) * table[np.asarray(TOKENS[0])]
              + 0.25 * positional.sinusoidal_table(16, 32)[:6])
  np.testing.assert_allclose(x[0], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("init, std", [("inv_sqrt_d", 256 ** -0.5), (1.0, 1.0), (0.02, 0.02)])
def test_embedding_init_std(init, std):
  cfg = ModelConfig(vocab_size=1000, d_model=256, num_heads=4, embed_init_std=init)
  module = embeddings.TokenEmbedding(cfg, 1000)
  table = np.asarray(module.init(jax.random.PRNGKey(0), TOKENS)["params"]["embedding"])
  # 256k samples: the sample std has a relative standard error of ~0.14%; allow 2%.
  assert table.std() == pytest.approx(std, rel=0.02)
  assert abs(table.mean()) < 5 * std / math.sqrt(table.size)


def _token_pe_rms_ratio(cfg):
  tokens = jnp.asarray(np.random.default_rng(0).integers(3, cfg.vocab_size, (8, 64)))
  module = embeddings.TokenEmbedding(cfg, cfg.vocab_size)
  variables = module.init(jax.random.PRNGKey(1), tokens)
  token = np.asarray(module.apply(variables, tokens)) * embeddings.embed_scale_value(cfg)
  pe = positional.sinusoidal_table(64, cfg.d_model)
  return np.sqrt(np.mean(token ** 2)) / np.sqrt(np.mean(pe ** 2))


def test_token_to_pe_rms_ratio_at_init():
  d = 512
  paper = ModelConfig.from_recipe("vaswani2017", vocab_size=2000, d_model=d)
  assert _token_pe_rms_ratio(paper) == pytest.approx(math.sqrt(2), rel=0.03)
  unscaled = paper.replace(embed_scale="none")
  assert _token_pe_rms_ratio(unscaled) == pytest.approx(1 / math.sqrt(d / 2), rel=0.03)


@pytest.mark.parametrize("logits_scale, value", [("none", 1.0), ("inv_sqrt_d", 32 ** -0.5),
                                                ("inv_d", 1 / 32), (0.7, 0.7)])
def test_tied_logits_are_h_times_embedding_transpose_times_scale(logits_scale, value):
  cfg = _small(logits_scale=logits_scale)
  table = embeddings.TokenEmbedding(cfg, 64)
  module = embeddings.OutputLogits(cfg, 64, table)
  h = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3, 32)), jnp.float32)
  variables = module.init(jax.random.PRNGKey(0), h)
  E = np.asarray(variables["params"]["token_embedding"]["embedding"])
  np.testing.assert_allclose(module.apply(variables, h), value * np.asarray(h) @ E.T, rtol=1e-5,
                             atol=1e-5)


def test_tied_logits_of_a_decoding_step_read_the_transpose_copied_into_the_cache():
  cfg = _small(logits_scale="inv_sqrt_d")
  module = embeddings.OutputLogits(cfg, 64, embeddings.TokenEmbedding(cfg, 64))
  h = jnp.asarray(np.random.default_rng(1).normal(size=(2, 1, 32)), jnp.float32)
  variables = module.init(jax.random.PRNGKey(0), h)
  E = np.asarray(variables["params"]["token_embedding"]["embedding"])
  first, made = module.apply(variables, h, decode=True, mutable=["cache"])  # creates the copy
  np.testing.assert_array_equal(made["cache"]["logits_kernel"], E.T)
  step = module.apply({**variables, **made}, h, decode=True)
  for logits in (first, step):
    np.testing.assert_allclose(logits, 32 ** -0.5 * np.asarray(h) @ E.T, rtol=1e-5, atol=1e-5)


def test_untied_logits_have_their_own_matrix():
  cfg = _small(logits_via_embedding=False, logits_scale="inv_sqrt_d")
  module = embeddings.OutputLogits(cfg, 64, None)
  h = jnp.ones((1, 2, 32))
  variables = module.init(jax.random.PRNGKey(0), h)
  W = np.asarray(variables["params"]["kernel"]["kernel"])
  assert W.shape == (32, 64)
  np.testing.assert_allclose(module.apply(variables, h), 32 ** -0.5 * np.ones((1, 2, 32)) @ W,
                             rtol=1e-5, atol=1e-6)


def test_embedding_norm_option_normalises_the_sum():
  x, _ = _embed(_small(embed_norm=True), TOKENS)
  np.testing.assert_allclose(x.mean(-1), 0, atol=1e-5)
  np.testing.assert_allclose(x.std(-1), 1, atol=1e-2)
