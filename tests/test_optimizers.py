"""make_optimizer: every optimizer trains, clipping, weight decay."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from transformer.training import optimizers


def _config(**overrides) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict(optimizers.default_optimizer_fields())
  config.update(schedule="constant", warmup_steps=0, learning_rate=0.1, num_train_steps=100)
  config.update(overrides)
  return config


def _params():
  return {"w": jnp.array([[1.0, -2.0], [3.0, 0.5]]), "b": jnp.array([1.0, -1.0])}


def _quadratic(params):
  return sum(jnp.sum(jnp.square(p)) for p in jax.tree.leaves(params))


def _run(opt, params, grads_fn, steps):
  state = opt.init(params)
  for _ in range(steps):
    updates, state = opt.update(grads_fn(params), state, params)
    params = optax.apply_updates(params, updates)
  return params


@pytest.mark.parametrize("name", optimizers.OPTIMIZERS)
def test_each_optimizer_reduces_a_quadratic(name):
  config = _config(optimizer=name, learning_rate=0.01 if name == "sgd" else 0.1)
  params = _params()
  trained = _run(optimizers.make_optimizer(config), params, jax.grad(_quadratic), 20)
  assert float(_quadratic(trained)) < 0.5 * float(_quadratic(params))


def test_clipping_caps_the_update():
  config = _config(optimizer="sgd", momentum=0.0, learning_rate=1.0, grad_clip_norm=1.0)
  opt = optimizers.make_optimizer(config)
  params = _params()
  huge = jax.tree.map(lambda p: 1e6 * jnp.ones_like(p), params)
  updates, _ = opt.update(huge, opt.init(params), params)
  np.testing.assert_allclose(optax.tree.norm(updates), 1.0, rtol=1e-5)


def test_learning_rate_fn_is_the_schedule():
  config = _config(schedule="linear", warmup_steps=4, num_train_steps=10)
  lr = optimizers.learning_rate_fn(config)
  np.testing.assert_allclose([float(lr(s)) for s in range(4)], [0.025, 0.05, 0.075, 0.1])


def test_weight_decay_only_in_adamw():
  params = _params()
  zero = lambda p: jax.tree.map(jnp.zeros_like, p)  # noqa: E731
  for name in ("adam", "adamw"):
    opt = optimizers.make_optimizer(_config(optimizer=name, weight_decay=0.5))
    after = _run(opt, params, zero, 1)
    moved = not np.allclose(after["w"], params["w"])
    assert moved == (name == "adamw"), name
    np.testing.assert_allclose(after["b"], params["b"])  # biases are never decayed
  np.testing.assert_allclose(after["w"], params["w"] * (1 - 0.1 * 0.5), rtol=1e-6)


def test_defaults_are_the_papers_adam():
  fields = optimizers.default_optimizer_fields()
  assert (fields["optimizer"], fields["adam_b1"], fields["adam_b2"], fields["adam_eps"]) == (
      "adam", 0.9, 0.98, 1e-9)
  assert fields["schedule"] == "rsqrt" and fields["warmup_steps"] == 4000
  assert all(v is not None for v in fields.values())


def test_bad_config():
  with pytest.raises(ValueError, match="adam, adamw, adafactor, sgd"):
    optimizers.make_optimizer(_config(optimizer="lion"))
  with pytest.raises(ValueError, match="default_optimizer_fields"):
    optimizers.make_optimizer(ml_collections.ConfigDict({"optimizer": "adam"}))
  with pytest.raises(ValueError, match="grad_accum_steps"):
    optimizers.make_optimizer(_config(grad_accum_steps=0))
