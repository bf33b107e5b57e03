"""make_optimizer: every optimizer trains, clipping, weight decay."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from transformer.training import optimizers, run


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


def test_hidden_lr_scale_scales_only_the_blocks_weight_matrices():
  """Adam's first step moves every parameter by lr (its update is g / |g|); with
  hidden_lr_scale 0.25 the blocks' kernels move by lr / 4, the embedding, readout and biases
  by lr."""
  params = {"decoder": {"blocks": {"layer_0": {"ffn": {"wi": {"kernel": jnp.ones((2, 3)),
                                                             "bias": jnp.ones((3,))}}}}},
            "embedding": {"embedding": jnp.ones((5, 2))},
            "output_logits": {"kernel": {"kernel": jnp.ones((2, 5))}}}
  grads = lambda p: jax.tree.map(jnp.ones_like, p)  # noqa: E731
  for scale in (1.0, 0.25):
    after = _run(optimizers.make_optimizer(_config(hidden_lr_scale=scale)), params, grads, 1)
    moved = jax.tree.map(lambda a, b: np.asarray(b - a), after, params)
    layer = moved["decoder"]["blocks"]["layer_0"]["ffn"]["wi"]
    np.testing.assert_allclose(layer["kernel"], 0.1 * scale, rtol=1e-5)
    for other in (layer["bias"], moved["embedding"]["embedding"],
                  moved["output_logits"]["kernel"]["kernel"]):
      np.testing.assert_allclose(other, 0.1, rtol=1e-5)
  # 1 = off adds no transform: the state, and so every stored checkpoint, keeps its structure.
  config = _config()
  adam = optax.adam(optimizers.learning_rate_fn(config), b1=0.9, b2=0.98, eps=1e-9)
  assert jax.tree.structure(optimizers.make_optimizer(config).init(params)) == \
      jax.tree.structure(adam.init(params))
  assert jax.tree.structure(optimizers.make_optimizer(_config(hidden_lr_scale=0.5)).init(
      params)) != jax.tree.structure(adam.init(params))
  with pytest.raises(ValueError, match="hidden_lr_scale must be a finite number > 0"):
    optimizers.make_optimizer(_config(hidden_lr_scale=0.0))


def test_embed_learning_rate_gives_the_token_embedding_its_own_peak_rate():
  """muP's input-layer rule: the embedding moves by embed_learning_rate on Adam's first step
  (a constant schedule), everything else by learning_rate, the rate a traced peak too."""
  params = {"decoder": {"blocks": {"layer_0": {"ffn": {"wi": {"kernel": jnp.ones((2, 3))}}}},
                        "posemb": {"pos_embedding": jnp.ones((4, 2))}},
            "embedding": {"embedding": jnp.ones((5, 2))},
            "output_logits": {"kernel": {"kernel": jnp.ones((2, 5))}}}
  grads = lambda p: jax.tree.map(jnp.ones_like, p)  # noqa: E731
  config = _config(embed_learning_rate=0.02)
  for opt in (optimizers.make_optimizer(config),
              jax.jit(lambda peak: optimizers.at_peak(config, peak)[0].update(
                  grads(params), optimizers.at_peak(config, peak)[0].init(params), params)[0])):
    if isinstance(opt, optax.GradientTransformation):
      moved = jax.tree.map(lambda a, b: np.asarray(a - b), params, _run(opt, params, grads, 1))
    else:  # the update at a traced peak of 0.1
      moved = jax.tree.map(lambda u: -np.asarray(u), opt(jnp.float32(0.1)))
    np.testing.assert_allclose(moved["embedding"]["embedding"], 0.02, rtol=1e-5)
    for other in (moved["decoder"]["blocks"]["layer_0"]["ffn"]["wi"]["kernel"],
                  moved["decoder"]["posemb"]["pos_embedding"],
                  moved["output_logits"]["kernel"]["kernel"]):
      np.testing.assert_allclose(other, 0.1, rtol=1e-5)
  with pytest.raises(ValueError, match="embed_learning_rate must be a finite number >= 0"):
    optimizers.make_optimizer(_config(embed_learning_rate=-1.0))


@pytest.mark.parametrize("scan_layers", [False, True])
def test_the_hidden_mask_picks_the_blocks_kernels_of_a_real_model(scan_layers):
  from transformer import models
  from transformer.config import ModelConfig
  config = ModelConfig.from_recipe("mup", vocab_size=50, d_model=32, num_heads=2, d_ff=64,
                                   num_decoder_layers=2, max_len=16, scan_layers=scan_layers)
  batch = {"inputs": jnp.ones((1, 8), jnp.int32), "targets": jnp.ones((1, 8), jnp.int32)}
  params = jax.eval_shape(lambda: models.init_params(run.build_model("lm", config),
                                                      jax.random.PRNGKey(0), batch))
  mask = [(jax.tree_util.keystr(path), hidden) for path, hidden in
          jax.tree_util.tree_flatten_with_path(optimizers._hidden_mask(params))[0]]
  picked = [path for path, hidden in mask if hidden]
  # q, k, v, out and the two feed-forward kernels of every layer (stacked when scanned)
  assert len(picked) == 6 * (1 if scan_layers else 2), picked
  assert all("['blocks']" in p and p.endswith("['kernel']") for p in picked), picked
  assert not any(hidden for path, hidden in mask
                 if "['embedding']" in path or "['output_logits']" in path)


@pytest.mark.parametrize("schedule", ["rsqrt", "cosine", "linear", "constant"])
@pytest.mark.parametrize("name", optimizers.OPTIMIZERS)
def test_every_optimizer_and_schedule_takes_its_peak_rate_traced(name, schedule):
  """The train step builds the optimizer from its rate argument: every schedule and optimizer
  must trace with the peak a traced value, and give what the same peak as a constant gives."""
  config = ml_collections.ConfigDict(optimizers.default_optimizer_fields())
  config.update(optimizer=name, schedule=schedule, warmup_steps=3, num_train_steps=10)
  params = {"w": jnp.ones((2, 3)), "b": jnp.ones((3,))}
  grads = {"w": jnp.full((2, 3), 0.5), "b": jnp.full((3,), -0.25)}

  @jax.jit
  def update(peak, count):
    tx, schedule_fn = optimizers.at_peak(config, peak)
    state = tx.init(params)
    state = jax.tree_util.tree_map(  # the step count as a traced value too
        lambda x: jnp.asarray(count, x.dtype) if x.ndim == 0 and x.dtype == jnp.int32 else x,
        state)
    return tx.update(grads, state, params)[0], schedule_fn(count)

  for step in (0, 4, 9):
    traced, rate = update(np.float32(3e-3), step)
    tx_c, schedule_c = optimizers.at_peak(config, 3e-3)
    state = jax.tree_util.tree_map(
        lambda x: jnp.asarray(step, x.dtype) if x.ndim == 0 and x.dtype == jnp.int32 else x,
        tx_c.init(params))
    constant = tx_c.update(grads, state, params)[0]
    assert float(rate) == pytest.approx(float(schedule_c(step)), rel=1e-6)
    for a, b in zip(jax.tree_util.tree_leaves(traced), jax.tree_util.tree_leaves(constant)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-9)
