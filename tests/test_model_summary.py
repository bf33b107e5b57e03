"""Model summaries: parameters per module against the param trees, the FLOP formula against
XLA's own count."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer import model_summary
from transformer.config import ModelConfig
from transformer.models import DecoderOnly, Transformer


def _xla_flops(fn, *args):
  analysis = jax.jit(fn).lower(*args).compile().cost_analysis()
  analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
  return analysis["flops"]


@pytest.mark.parametrize("decoder_only", [False, True])
@pytest.mark.parametrize("activation", ["relu", "swiglu"])
def test_forward_flops_match_xla(decoder_only, activation):
  """Each model's forward_flops (the formula on its own structure) against XLA's count."""
  cfg = ModelConfig(vocab_size=1000, d_model=128, num_heads=4, d_ff=512, num_encoder_layers=2,
                    num_decoder_layers=2, max_len=64, dropout_rate=0.0, activation=activation)
  S, T = 48, 32
  source, target = jnp.ones((1, S), jnp.int32), jnp.ones((1, T), jnp.int32)
  if decoder_only:
    model = DecoderOnly(cfg)
    variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), target)
    xla = _xla_flops(lambda v, t: model.apply(v, t), variables, target)
  else:
    model = Transformer(cfg)
    variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), source, target)
    xla = _xla_flops(lambda v, s, t: model.apply(v, s, t), variables, source, target)
  ours = model.forward_flops({"inputs": (1, S), "targets": (1, T)})  # what a batch holds
  assert ours == model_summary.forward_flops(cfg, S, T, with_encoder=not decoder_only)
  # XLA also counts softmax, norms and activations (a few percent here); matmuls must dominate.
  assert 1.0 <= xla / ours < 1.1, (xla, ours)


def test_train_is_three_forwards():
  cfg = ModelConfig(vocab_size=100, d_model=32, num_heads=2, d_ff=64)
  forward = model_summary.forward_flops(cfg, 10, 12)
  assert model_summary.train_flops(forward, 4) == 12 * forward


@pytest.mark.parametrize("decoder_only", [False, True])
@pytest.mark.parametrize("tied", [True, False])
def test_param_counts_match_the_param_tree(decoder_only, tied):
  cfg = ModelConfig(vocab_size=100, d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1,
                    num_decoder_layers=2, max_len=16, logits_via_embedding=tied)
  tokens = jnp.ones((1, 8), jnp.int32)
  if decoder_only:
    params = jax.eval_shape(DecoderOnly(cfg).init, jax.random.PRNGKey(0), tokens)["params"]
  else:
    params = jax.eval_shape(Transformer(cfg).init, jax.random.PRNGKey(0), tokens, tokens)["params"]
  model = DecoderOnly(cfg) if decoder_only else Transformer(cfg)
  counts = model_summary.param_counts(model.parameter_groups(params))
  assert counts["total"] == sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(params))
  assert counts["total"] == sum(v for k, v in counts.items() if k != "total")
  assert counts["embedding"] == 100 * 32  # shared by encoder, decoder (and output if tied)
  assert counts.get("output", 0) == (0 if tied else 32 * 100)  # a kernel, no bias
  assert ("encoder" not in counts) == decoder_only and counts["decoder"] > 0
  summary = model_summary.summarize(
      model.parameter_groups(params),
      model.forward_flops({"inputs": (1, 16), "targets": (1, 16)}), 16)
  forward = model_summary.forward_flops(cfg, 16, 16, with_encoder=not decoder_only) / 16
  assert summary["flops_per_token"] == {"forward": forward, "train": 3 * forward, "seq_len": 16}
  text = model_summary.format_summary(summary)
  assert f"{counts['total']:,}" in text and "decoder" in text
