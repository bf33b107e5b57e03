"""The train state, the schedules and the optimizer: the state is a pure pytree of arrays (jit,
sharding and checkpoints treat it as data), the paper's rsqrt exactly and the shapes of the
other schedules, every optimizer trains, clipping, weight decay, muP's rates."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import serialization

from transformer.training import experiment, fields, optimizer_settings, optimizers, run
from transformer.training.optimizers import TrainState


def _config(**overrides) -> fields.Optimization:
  return fields.Optimization(**{**dict(schedule="constant", warmup_steps=0, learning_rate=0.1,
                                       num_train_steps=100), **overrides})


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


@pytest.mark.parametrize("name", optimizer_settings.OPTIMIZERS)
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
  default = fields.Optimization()
  assert (default.optimizer, default.adam_b1, default.adam_b2, default.adam_eps) == (
      "adam", 0.9, 0.98, 1e-9)
  assert default.schedule == "rsqrt" and default.warmup_steps == 4000
  assert default.learning_rate == optimizer_settings.paper_peak_learning_rate(512, 4000)
  # No field is None, so each stays overridable as --config.FIELD=VALUE.
  assert all(v is not None for v in dataclasses.asdict(default).values())
  base = experiment.base_config()
  assert {k: base[k] for k in dataclasses.asdict(default)} == dataclasses.asdict(default)


def test_bad_config():
  """Checked once, when the experiment is parsed (`experiment.validate` calls the section's
  check, and its integer bounds)."""
  with pytest.raises(ValueError, match="adam, adamw, adafactor, sgd"):
    _config(optimizer="lion").check()
  with pytest.raises(ValueError, match="learning_rate must be a finite number > 0"):
    _config(learning_rate=float("nan")).check()
  config = experiment.base_config()
  config.grad_accum_steps = 0
  with pytest.raises(ValueError, match="grad_accum_steps=0 must be an integer >= 1"):
    experiment.validate(config)


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
    _config(hidden_lr_scale=0.0).check()


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
    _config(embed_learning_rate=-1.0).check()


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
@pytest.mark.parametrize("name", optimizer_settings.OPTIMIZERS)
def test_every_optimizer_and_schedule_takes_its_peak_rate_traced(name, schedule):
  """The train step builds the optimizer from its rate argument: every schedule and optimizer
  must trace with the peak a traced value, and give what the same peak as a constant gives."""
  config = fields.Optimization(optimizer=name, schedule=schedule, warmup_steps=3,
                               num_train_steps=10)
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


# ---- schedules ----

def test_rsqrt_is_the_papers_formula():
  d_model, warmup = 512, 4000
  peak = optimizer_settings.paper_peak_learning_rate(d_model, warmup)
  np.testing.assert_allclose(peak, 6.9877e-4, rtol=1e-4)
  sched = optimizers.make_schedule("rsqrt", learning_rate=peak, warmup_steps=warmup,
                                  total_steps=100_000)
  steps = np.array([0, 1, 10, 999, 3998, 3999, 4000, 4001, 10_000, 50_000, 99_999])
  paper_step = steps + 1.0  # the paper counts from 1
  paper = d_model**-0.5 * np.minimum(paper_step**-0.5, paper_step * warmup**-1.5)
  np.testing.assert_allclose([float(sched(s)) for s in steps], paper, rtol=1e-5)
  # Peak at paper step == warmup, i.e. optax step warmup - 1.
  values = np.asarray(sched(np.arange(8000)))
  assert int(np.argmax(values)) == warmup - 1
  np.testing.assert_allclose(values.max(), peak, rtol=1e-6)


def _values(name, warmup=10, total=50, lr=2.0):
  sched = optimizers.make_schedule(name, learning_rate=lr, warmup_steps=warmup, total_steps=total)
  return np.asarray(sched(np.arange(total + 5)))


@pytest.mark.parametrize("name", ["cosine", "constant", "linear"])
def test_warmup_shapes(name):
  v = _values(name)
  np.testing.assert_allclose(v[:10], 2.0 * np.arange(1, 11) / 10, rtol=1e-6)  # linear ramp
  assert v[0] > 0  # the first update is not wasted
  if name == "constant":
    np.testing.assert_allclose(v[9:], 2.0, rtol=1e-6)
  else:
    assert np.all(np.diff(v[9:50]) < 0)  # strictly decaying after the peak
    assert v[49] > 0  # every one of the 50 updates gets a nonzero rate
    # Past the last update: 0 up to optax's float32 interpolation (~1e-7 of the peak).
    np.testing.assert_allclose(v[50:], 0.0, atol=1e-6)


def test_cosine_midpoint_and_linear_midpoint():
  # Peak at s = 10, zero at s = 51: the midpoint s = 30.5 is between steps 29 and 30.
  cos, lin = _values("cosine"), _values("linear")
  np.testing.assert_allclose((cos[29] + cos[30]) / 2, 1.0, atol=5e-3)
  np.testing.assert_allclose((lin[29] + lin[30]) / 2, 1.0, rtol=1e-6)


def test_no_warmup():
  v = _values("cosine", warmup=0)
  np.testing.assert_allclose(v[0], 2.0, rtol=1e-6)


def test_bad_arguments():
  with pytest.raises(ValueError, match="rsqrt, cosine, constant, linear"):
    optimizer_settings.check_schedule("step", 1, 2)
  with pytest.raises(ValueError, match="warmup_steps"):
    optimizer_settings.check_schedule("cosine", -1, 2)
  with pytest.raises(ValueError, match="warmup_steps"):
    optimizer_settings.check_schedule("rsqrt", 0, 2)
  with pytest.raises(ValueError, match="total_steps"):
    optimizer_settings.check_schedule("linear", 10, 5)


# ---- the train state ----

def _state():
  params = {"w": jnp.ones((2, 3)), "b": jnp.zeros(3)}
  return TrainState(step=jnp.int32(0), params=params, opt_state=optax.adam(0.1).init(params))


def test_every_field_is_data_so_jit_and_checkpoints_see_the_whole_state():
  """No static field (a model or an optimizer's functions would be one): every leaf is an
  array, and the step, the params and Adam's two moments and count are all of them."""
  assert all(f.metadata.get("pytree_node", True) for f in dataclasses.fields(TrainState))
  state = _state()
  leaves = jax.tree_util.tree_leaves(state)
  assert all(isinstance(x, jax.Array) for x in leaves)
  assert len(leaves) == 1 + 2 + 2 * 2 + 1  # step, params, mu and nu of each, Adam's count


def test_the_state_round_trips_through_its_state_dict():
  """What orbax writes is the state dict; restoring it into a fresh state's structure gives
  the same arrays under the same names (step, params, opt_state)."""
  state = _state()
  saved = serialization.to_state_dict(state)
  assert set(saved) == {"step", "params", "opt_state"}
  bumped = jax.tree.map(lambda x: np.asarray(x) + 1, saved)
  restored = serialization.from_state_dict(_state(), bumped)
  assert isinstance(restored, TrainState) and int(restored.step) == 1
  np.testing.assert_array_equal(restored.params["w"], np.full((2, 3), 2.0))

  @jax.jit
  def bump(s: TrainState) -> TrainState:
    return s.replace(step=s.step + 1)

  assert int(bump(restored).step) == 2 and int(restored.step) == 1  # a new state, not edited
