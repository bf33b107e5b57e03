"""The analytic FLOP count against XLA's own count of the compiled forward pass."""

import jax
import jax.numpy as jnp
import pytest

from transformer import benchmarking
from transformer.config import ModelConfig
from transformer.models import DecoderOnly, Transformer


def _xla_flops(fn, *args):
  analysis = jax.jit(fn).lower(*args).compile().cost_analysis()
  analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
  return analysis["flops"]


@pytest.mark.parametrize("decoder_only", [False, True])
@pytest.mark.parametrize("activation", ["relu", "swiglu"])
def test_forward_flops_match_xla(decoder_only, activation):
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
  ours = benchmarking.forward_flops(cfg, S, T, decoder_only=decoder_only)
  # XLA also counts softmax, norms and activations (a few percent here); matmuls must dominate.
  assert 1.0 <= xla / ours < 1.1, (xla, ours)


def test_train_is_three_forwards():
  cfg = ModelConfig(vocab_size=100, d_model=32, num_heads=2, d_ff=64)
  assert benchmarking.train_flops_per_step(cfg, 4, 10, 12) == 12 * benchmarking.forward_flops(cfg, 10, 12)


def test_matmul_peak_is_positive(devices):
  assert benchmarking.matmul_peak("float32", n=128, repeats=1, devices=devices[:2]) > 0
