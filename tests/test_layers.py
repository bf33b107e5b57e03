"""Feed-forward and blocks: Eq. 2, the residual sub-layer in post-LN and pre-LN order."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer import layers
from transformer.config import ModelConfig
from transformer.norms import make_norm


def _cfg(**overrides):
  return ModelConfig(**{**dict(vocab_size=20, d_model=16, num_heads=2, d_ff=32, max_len=8,
                               dropout_rate=0.0), **overrides})


X = jnp.asarray(np.random.default_rng(0).normal(size=(2, 5, 16)), jnp.float32)


@pytest.mark.parametrize("activation", ["relu", "gelu", "silu", "geglu", "swiglu"])
def test_feed_forward_is_eq2(activation):
  cfg = _cfg(activation=activation)
  module = layers.FeedForward(cfg)
  params = module.init(jax.random.PRNGKey(0), X)["params"]
  p = jax.tree_util.tree_map(np.asarray, params)
  act = {"relu": jax.nn.relu, "gelu": jax.nn.gelu, "silu": jax.nn.silu, "geglu": jax.nn.gelu,
         "swiglu": jax.nn.silu}[activation]
  h = np.asarray(act(X @ p["wi"]["kernel"] + p["wi"]["bias"]))
  if activation in ("geglu", "swiglu"):
    h = h * (np.asarray(X) @ p["wi_gate"]["kernel"] + p["wi_gate"]["bias"])
  expected = h @ p["wo"]["kernel"] + p["wo"]["bias"]
  np.testing.assert_allclose(module.apply({"params": params}, X), expected, rtol=1e-5, atol=1e-5)


def test_no_bias_option():
  params = layers.FeedForward(_cfg(use_bias=False)).init(jax.random.PRNGKey(0), X)["params"]
  assert "bias" not in params["wi"] and "bias" not in params["wo"]


class _OneSublayer(nn.Module):
  config: ModelConfig

  @nn.compact
  def __call__(self, x):
    return layers.residual(self.config, x, lambda h: 2.0 * h + 1.0, make_norm(self.config, "norm"),
                           deterministic=True)


@pytest.mark.parametrize("position", ["post", "pre"])
def test_residual_order(position):
  cfg = _cfg(norm_position=position)
  module = _OneSublayer(cfg)
  variables = module.init(jax.random.PRNGKey(0), X)
  norm = make_norm(cfg).bind({"params": variables["params"]["norm"]})
  sublayer = lambda h: 2.0 * h + 1.0  # noqa: E731
  expected = norm(X + sublayer(X)) if position == "post" else X + sublayer(norm(X))
  np.testing.assert_allclose(module.apply(variables, X), expected, rtol=1e-6)


@pytest.mark.parametrize("position", ["post", "pre"])
def test_encoder_block_output_normalised_only_post_ln(position):
  cfg = _cfg(norm_position=position)
  block = layers.EncoderBlock(cfg)
  mask = jnp.ones((2, 1, 5, 5), bool)
  positions = jnp.broadcast_to(jnp.arange(5), (2, 5))
  y = block.apply(block.init(jax.random.PRNGKey(0), 5 * X, mask, positions), 5 * X, mask, positions)
  rms = np.sqrt(np.mean(np.asarray(y) ** 2, -1))
  if position == "post":  # the stream is re-normalised after every sub-layer
    np.testing.assert_allclose(rms, 1.0, rtol=1e-3)
  else:  # pre-LN keeps the residual stream's own scale (5x here)
    assert rms.mean() > 3.0


def test_decoder_block_with_and_without_cross_attention():
  cfg = _cfg()
  mask = jnp.ones((2, 1, 5, 5), bool)
  positions = jnp.broadcast_to(jnp.arange(5), (2, 5))
  enc = jnp.ones((2, 3, 16))
  cross_mask = jnp.ones((2, 1, 5, 3), bool)
  block = layers.DecoderBlock(cfg)
  params = block.init(jax.random.PRNGKey(0), X, mask, positions, enc, cross_mask)["params"]
  assert "cross_attention" in params
  lm_block = layers.DecoderBlock(cfg, cross_attention=False)
  lm_params = lm_block.init(jax.random.PRNGKey(0), X, mask, positions)["params"]
  assert "cross_attention" not in lm_params
  assert lm_block.apply({"params": lm_params}, X, mask, positions).shape == X.shape


def _restack(params, scanned):
  """Looped params {layer_i: P_i} -> the scanned layout {layers: {block: stack(P_i)}} or the
  rematerialised one {layer_i: {block: P_i}}."""
  if isinstance(params, dict) and "layer_0" in params:
    layers = [params[f"layer_{i}"] for i in range(len(params))]
    if scanned:
      return {"layers": {"block": jax.tree_util.tree_map(lambda *x: jnp.stack(x), *layers)}}
    return {f"layer_{i}": {"block": p} for i, p in enumerate(layers)}
  if isinstance(params, dict):
    return {k: _restack(v, scanned) for k, v in params.items()}
  return params


@pytest.mark.parametrize("scan_layers, remat", [(True, "none"), (False, "full"), (True, "dots")])
def test_scan_and_remat_compute_the_same_model(scan_layers, remat):
  from transformer.models import Transformer
  base = ModelConfig(vocab_size=30, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=3,
                     num_decoder_layers=2, max_len=8, dropout_rate=0.0)
  inputs = jnp.asarray(np.random.default_rng(0).integers(3, 30, (2, 7)))
  targets = jnp.asarray(np.random.default_rng(1).integers(3, 30, (2, 6)))
  looped = Transformer(base)
  params = jax.jit(looped.init)(jax.random.PRNGKey(0), inputs, targets)["params"]
  other = Transformer(base.replace(scan_layers=scan_layers, remat=remat))
  shapes = jax.eval_shape(other.init, jax.random.PRNGKey(0), inputs, targets)["params"]
  converted = _restack(params, scan_layers)
  assert jax.tree_util.tree_structure(converted) == jax.tree_util.tree_structure(shapes)
  # Jitted: op by op, the gradient of five layers takes far longer than compiling it.
  loss = lambda m, p: jnp.sum(m.apply({"params": p}, inputs, targets) ** 2)  # noqa: E731
  value_and_grad = lambda m: jax.jit(jax.value_and_grad(functools.partial(loss, m)))  # noqa: E731
  value_looped, g_looped = value_and_grad(looped)(params)
  value_other, g_other = value_and_grad(other)(converted)
  np.testing.assert_allclose(value_other, value_looped, rtol=1e-5)
  g_looped = _restack(g_looped, scan_layers)
  for a, b in zip(jax.tree_util.tree_leaves(g_looped), jax.tree_util.tree_leaves(g_other)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)  # key-bias grads are ~1e-6 noise


@pytest.mark.parametrize("remat", ["none", "full"])
def test_softcap_on_the_first_layers_only(remat):
  """attn_logit_softcap_layers=1: block 0 runs capped, block 1 as if no cap were set (the
  blocks composed by hand from the stack's own params), and the stack differs from both the
  uncapped and the everywhere-capped one."""
  mask = jnp.ones((2, 1, 5, 5), bool)
  positions = jnp.broadcast_to(jnp.arange(5), (2, 5))
  x = 4.0 * X  # large logits, so a cap of 0.5 bites
  capped, uncapped = _cfg(attn_logit_softcap=0.5), _cfg()
  first_only = capped.replace(attn_logit_softcap_layers=1, remat=remat)
  stack = layers.BlockStack(first_only, num_layers=2, cross_attention=False)
  params = stack.init(jax.random.PRNGKey(0), x, mask, positions)["params"]
  out = stack.apply({"params": params}, x, mask, positions)
  unwrap = (lambda p: p["block"]) if remat != "none" else (lambda p: p)  # noqa: E731
  by_hand = x
  for i, cfg in enumerate((capped, uncapped)):
    by_hand = layers.DecoderBlock(cfg, cross_attention=False).apply(
        {"params": unwrap(params[f"layer_{i}"])}, by_hand, mask, positions)
  np.testing.assert_allclose(out, by_hand, rtol=1e-5, atol=1e-6)
  for other in (capped, uncapped):
    whole = layers.BlockStack(other.replace(remat=remat), num_layers=2, cross_attention=False)
    assert not np.allclose(whole.apply({"params": params}, x, mask, positions), out, atol=1e-4)
