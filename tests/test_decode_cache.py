"""store_step_kernel / step_matmul: the cached copy multiplies like the weight it copies."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer.config import ModelConfig
from transformer.decode_cache import step_matmul, store_step_kernel


class _Projection(nn.Module):
  """Stores its kernel (and bias) in the cache on the first call, multiplies by the copy after."""
  config: ModelConfig
  use_bias: bool

  @nn.compact
  def __call__(self, x):
    kernel = self.param("kernel", nn.initializers.normal(1.0), (32, 48))
    bias = self.param("bias", nn.initializers.normal(1.0), (48,)) if self.use_bias else None
    if not self.has_variable("cache", "proj_kernel"):
      store_step_kernel(self, "proj", kernel, bias)
    return step_matmul(self, "proj", x)


@pytest.mark.parametrize("use_bias", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_step_matmul_of_the_stored_copy_is_x_times_kernel_plus_bias(use_bias, dtype):
  config = ModelConfig(vocab_size=16, d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1,
                       num_decoder_layers=1, max_len=8, dtype=dtype)
  module = _Projection(config, use_bias)
  x = jax.random.normal(jax.random.key(0), (3, 1, 32))
  variables = module.init(jax.random.key(1), x)
  cache = variables["cache"]
  assert cache["proj_kernel"].dtype == jnp.dtype(config.compute_dtype)
  assert ("proj_bias" in cache) == use_bias
  y, _ = module.apply(variables, x, mutable=["cache"])
  kernel = variables["params"]["kernel"].astype(config.compute_dtype)
  want = x.astype(config.compute_dtype) @ kernel
  if use_bias:
    want = want + variables["params"]["bias"].astype(config.compute_dtype)
  assert y.dtype == jnp.dtype(config.compute_dtype)
  np.testing.assert_array_equal(np.asarray(y, np.float32), np.asarray(want, np.float32))
