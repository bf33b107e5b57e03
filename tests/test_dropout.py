"""Dropout on 16-bit halves of threefry's draws: the rate is the config's, the mask unbiased."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer import dropout


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_the_drop_rate_over_many_draws_is_the_configs(rate):
  """Over 16 draws of 65,536 elements the dropped share is the config's rate within 4
  standard errors, and the grid's keep probability is within 2**-17 of 1 - rate."""
  assert abs(dropout.keep_probability(rate) - (1.0 - rate)) <= 2.0 ** -17
  masks = np.stack([np.asarray(dropout.keep_mask(jax.random.PRNGKey(seed), rate, (64, 1024)))
                    for seed in range(16)])
  dropped = 1.0 - masks.mean()
  stderr = np.sqrt(rate * (1 - rate) / masks.size)
  assert abs(dropped - rate) < 4 * stderr
  # The two halves of one 32-bit draw are independent: neighbours drop together at rate**2.
  both = (~masks[..., 0::2] & ~masks[..., 1::2]).mean()
  assert abs(both - rate ** 2) < 4 * np.sqrt(rate ** 2 * (1 - rate ** 2) / (masks.size / 2))


def test_kept_values_are_scaled_so_the_expectation_is_exact():
  x = jnp.ones((8, 4096), jnp.float32)
  out = np.asarray(dropout.apply_dropout(x, 0.1, jax.random.PRNGKey(3)))
  kept = out[out != 0]
  np.testing.assert_allclose(kept, 1.0 / dropout.keep_probability(0.1), rtol=1e-6)
  assert abs(out.mean() - 1.0) < 4 * np.sqrt(0.1 / 0.9 / out.size)


@pytest.mark.parametrize("shape", [(3, 7), (2, 5, 1), (4,), ()])
def test_odd_short_and_no_last_axes_have_masks_of_their_shape(shape):
  mask = dropout.keep_mask(jax.random.PRNGKey(0), 0.5, shape)
  assert mask.shape == shape and mask.dtype == jnp.bool_


@pytest.mark.parametrize("rate", [0.0, 1e-6, 1 - 1e-6])
def test_rates_at_the_grids_ends(rate):
  """Rates the 2**-16 grid cannot tell from 0 keep everything (a 16-bit half never reaches
  2**16); a rate just below 1 keeps 1 in 2**16."""
  mask = np.asarray(dropout.keep_mask(jax.random.PRNGKey(0), rate, (64, 1024)))
  assert mask.all() if rate < 2.0 ** -17 else mask.mean() < 1e-3
  x = jnp.full((8, 8), 2.0, jnp.bfloat16)
  out = dropout.apply_dropout(x, rate, jax.random.PRNGKey(1))
  assert out.dtype == jnp.bfloat16 and (rate > 0.5 or np.all(np.asarray(out, np.float32) == 2.0))


def test_the_module_is_the_identity_when_deterministic_and_draws_from_the_dropout_stream():
  module = dropout.Dropout(0.1)
  x = jnp.arange(1.0, 65.0).reshape(8, 8)
  assert module.apply({}, x, deterministic=True) is x
  a = module.apply({}, x, deterministic=False, rngs={"dropout": jax.random.PRNGKey(1)})
  b = module.apply({}, x, deterministic=False, rngs={"dropout": jax.random.PRNGKey(2)})
  assert not np.array_equal(a, b)
  kept = np.asarray(a) != 0
  np.testing.assert_allclose(np.asarray(a)[kept],
                             np.asarray(x / dropout.keep_probability(0.1))[kept], rtol=1e-6)
  everything = dropout.Dropout(1.0).apply({}, x, deterministic=False,
                                          rngs={"dropout": jax.random.PRNGKey(1)})
  assert np.all(np.asarray(everything) == 0)


def test_the_mask_is_the_same_on_one_device_and_eight(devices):
  """The draws depend on each element's place, not on how the rows are split."""
  mesh = jax.sharding.Mesh(np.array(devices), ("data",))
  rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
  fn = lambda key: dropout.keep_mask(key, 0.1, (16, 64))  # noqa: E731
  one = jax.jit(fn)(jax.random.PRNGKey(5))
  eight = jax.jit(fn, out_shardings=rows)(jax.random.PRNGKey(5))
  np.testing.assert_array_equal(one, eight)


def _random_words(jaxpr) -> int:
  """32-bit words drawn by `random_bits` in a jaxpr and its sub-jaxprs (jax's threefry: one
  evaluation per word)."""
  from jax.extend import core
  words = 0
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "random_bits":
      words += sum(v.aval.size * v.aval.dtype.itemsize // 4 for v in eqn.outvars)
    for param in eqn.params.values():
      for sub in param if isinstance(param, (list, tuple)) else [param]:
        if isinstance(sub, (core.ClosedJaxpr, core.Jaxpr)):
          words += _random_words(getattr(sub, "jaxpr", sub))
  return words


def test_a_train_step_draws_one_word_for_two_dropped_or_kept_elements():
  """By hand: a 1+1-layer Transformer, rows 2 x 8, d_model 32, has 7 dropout sites (two
  embedding sums, the encoder's 2 and the decoder's 3 residual sub-layers) of 2 x 8 x 32 =
  512 elements: 3,584 elements, 1,792 words (bernoulli would draw 3,584)."""
  import functools
  import optax
  from transformer.config import ModelConfig
  from transformer.models import Transformer
  from transformer.training import steps
  model = Transformer(ModelConfig(vocab_size=16, d_model=32, num_heads=2, d_ff=64,
                                  num_encoder_layers=1, num_decoder_layers=1, max_len=8,
                                  dropout_rate=0.1))
  batch = {k: jnp.ones((2, 8), jnp.int32) for k in model.batch_keys}
  tx = optax.adam(1e-3)
  state = jax.eval_shape(functools.partial(steps.init_state, model, tx, batch=batch),
                         jax.random.PRNGKey(0))
  step = steps.make_train_step(model, lambda peak: (tx, lambda count: peak))
  jaxpr = jax.make_jaxpr(step)(state, batch, jax.random.PRNGKey(1), np.float32(1e-3))
  assert _random_words(jaxpr.jaxpr) == 7 * 2 * 8 * 32 // 2
