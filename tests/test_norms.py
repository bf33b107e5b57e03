"""make_norm: LayerNorm or RMSNorm over the last axis, by config, in its dtypes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer.config import ModelConfig
from transformer.norms import make_norm


def _config(**overrides) -> ModelConfig:
  return ModelConfig(vocab_size=16, d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1,
                     num_decoder_layers=1, max_len=8, **overrides)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_norm_matches_its_formula(norm):
  x = jax.random.normal(jax.random.key(0), (2, 3, 32)) * 3 + 1
  config = _config(norm=norm, norm_epsilon=1e-5)
  module = make_norm(config)
  params = module.init(jax.random.key(1), x)
  y = np.asarray(module.apply(params, x))
  x = np.asarray(x, np.float64)
  if norm == "layernorm":
    centred = x - x.mean(-1, keepdims=True)
    want = centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-5)
    assert set(params["params"]) == {"scale", "bias"}
  else:
    want = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-5)
    assert set(params["params"]) == {"scale"}
  np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)  # scale 1, bias 0 at init


def test_norm_computes_in_the_compute_dtype_and_keeps_params_in_theirs():
  config = _config(dtype="bfloat16")
  module = make_norm(config, name="ln")
  x = jnp.ones((1, 32), jnp.float32)
  params = module.init(jax.random.key(0), x)
  assert module.name == "ln"
  assert module.apply(params, x).dtype == jnp.dtype(config.compute_dtype)
  assert jax.tree.leaves(params)[0].dtype == jnp.dtype(config.storage_dtype)
