"""Train and eval steps: SPMD over 8 devices equals 1 device; accumulation equals one big batch."""

import dataclasses
import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer.config import ModelConfig
from transformer.models import DecoderOnly, Transformer
from transformer.training import fields, optimizers, sharding, steps


def _setup(model_cls=Transformer, **opt):
  cfg = ModelConfig(vocab_size=30, d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1,
                    num_decoder_layers=1, max_len=12, dropout_rate=0.1,
                    # The key bias has an exactly-zero true gradient (softmax ignores a constant
                    # shift), so Adam would turn reduction-order noise into +-lr updates of it.
                    use_bias=False)
  config = fields.Optimization(learning_rate=1e-2, warmup_steps=2, **opt)
  model = model_cls(cfg)
  tx, lr_fn = optimizers.at_peak(config, config.learning_rate)
  return model, tx, lr_fn


def _fixed(tx, lr_fn):
  """make_train_step's optimizer argument for a step at the optimizer's own rate (LR: any)."""
  return lambda peak: (tx, lr_fn)


LR = np.float32(0.0)  # the rate argument of a step built with _fixed (unused there)


def _batches(n, b=16, length=12, seed=0):
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    batch = {k: rng.integers(3, 30, (b, length)).astype(np.int32) for k in ("inputs", "targets")}
    batch["targets"][:, 8:] = 0  # some padding
    out.append(batch)
  return out


def _compile(model, tx, lr_fn, devices, batch, fsdp=1, **step_kw):
  """(initial state, jitted step) on a (data, fsdp) mesh of `devices`, laid out as training does."""
  mesh = sharding.make_mesh(devices, fsdp)
  init = functools.partial(steps.init_state, model, tx,
                           batch={k: jnp.asarray(v) for k, v in batch.items()})
  state_sh = sharding.tree_shardings(jax.eval_shape(init, jax.random.PRNGKey(0)), mesh)
  repl = sharding.replicated(mesh)
  state = jax.jit(init, out_shardings=state_sh)(jax.random.PRNGKey(0))
  step = jax.jit(steps.make_train_step(model, _fixed(tx, lr_fn), label_smoothing=0.1, mesh=mesh,
                                        **step_kw),
                 in_shardings=(state_sh, sharding.batch_sharding(mesh), repl, repl),
                 out_shardings=(state_sh, repl))
  return mesh, state, step


def _train(model, tx, lr_fn, devices, batches, fsdp=1, **step_kw):
  mesh, state, step = _compile(model, tx, lr_fn, devices, batches[0], fsdp, **step_kw)
  losses = []
  for batch in batches:
    state, metrics = step(state, sharding.global_batch(batch, mesh), jax.random.PRNGKey(1), LR)
    losses.append(float(metrics["loss_sum"] / metrics["weight_sum"]))
  return losses, sharding.to_host(state.params)


def _assert_same_run(run_a, run_b):
  """Two (losses, params) of one training: the same losses and params to float tolerance."""
  np.testing.assert_allclose(run_b[0], run_a[0], rtol=1e-5)
  for a, b in zip(jax.tree_util.tree_leaves(run_a[1]), jax.tree_util.tree_leaves(run_b[1])):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def _compiled(model, tx, lr_fn, devices, batch, fsdp=1, **step_kw):
  mesh, state, step = _compile(model, tx, lr_fn, devices, batch, fsdp, **step_kw)
  return step.lower(state, sharding.global_batch(batch, mesh), jax.random.PRNGKey(1), LR).compile()


def _flops(compiled) -> float:
  cost = compiled.cost_analysis()
  return (cost[0] if isinstance(cost, list) else cost)["flops"]


@functools.cache
def _one_device_run(model_cls=Transformer):
  """_setup's model trained on 5 batches on one device: what the multi-device runs of it below
  must compute (trained once a worker and model class)."""
  model, tx, lr_fn = _setup(model_cls)
  return _train(model, tx, lr_fn, jax.devices("cpu")[:1], _batches(5))


@pytest.mark.parametrize("model_cls", [Transformer, DecoderOnly])
def test_eight_devices_equal_one_device(devices, model_cls):
  model, tx, lr_fn = _setup(model_cls)
  one, p1 = _one_device_run(model_cls)
  eight, p8 = _train(model, tx, lr_fn, devices, _batches(5))
  np.testing.assert_allclose(eight, one, rtol=1e-5)
  assert one[-1] < one[0]
  for a, b in zip(jax.tree_util.tree_leaves(p1), jax.tree_util.tree_leaves(p8)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_gradient_accumulation_equals_one_big_batch(devices):
  # SGD: the update is linear in the gradient, so summation-order noise stays at float epsilon
  # (Adam's first steps take the sign of every gradient element, however tiny).
  model, tx, lr_fn = _setup(optimizer="sgd")
  model = Transformer(model.config.replace(dropout_rate=0.0))  # same math, no dropout keys
  batches = _batches(3)
  _assert_same_run(_train(model, tx, lr_fn, devices[:2], batches),
                   _train(model, tx, lr_fn, devices[:2], batches, grad_accum_steps=4))


@pytest.mark.parametrize("fsdp", [8, 4])  # fsdp 8; data 2 x fsdp 4
def test_fsdp_computes_what_one_device_computes(devices, fsdp):
  model, tx, lr_fn = _setup()
  _assert_same_run(_one_device_run(Transformer),
                   _train(model, tx, lr_fn, devices, _batches(5), fsdp=fsdp))


def test_fsdp_splits_params_and_optimizer_state_over_the_devices(devices):
  model, tx, lr_fn = _setup()
  batch = _batches(1)[0]
  _, state, _ = _compile(model, tx, lr_fn, devices, batch, fsdp=8)
  # Every weight, and Adam's moments of it, is split 8 ways along one dimension.
  for x in jax.tree_util.tree_leaves((state.params, state.opt_state)):
    if x.ndim:
      assert x.addressable_shards[0].data.size * 8 == x.size, x.shape
  memory = {fsdp: _compiled(model, tx, lr_fn, devices, batch, fsdp).memory_analysis()
            for fsdp in (1, 8)}
  assert memory[8].argument_size_in_bytes * 6 <= memory[1].argument_size_in_bytes


def test_gradient_accumulation_keeps_each_device_on_its_own_rows(devices):
  # micro_batches: micro-batch j takes rows j*m.. of each device's block.
  rows = {"x": np.arange(16)}
  np.testing.assert_array_equal(steps.micro_batches(rows, 2, shards=4)["x"],
                                [[0, 1, 4, 5, 8, 9, 12, 13], [2, 3, 6, 7, 10, 11, 14, 15]])
  model, tx, lr_fn = _setup(optimizer="sgd")
  model = Transformer(model.config.replace(dropout_rate=0.0))
  batches = _batches(2, b=64)
  accum = _compiled(model, tx, lr_fn, devices, batches[0], grad_accum_steps=4)
  # XLA's cost analysis counts a loop body once: the accumulating step's count is one
  # micro-batch's work (plus the update), i.e. the step without accumulation at a quarter of
  # the batch. A device that computed every device's micro-batch rows would count 4x that.
  quarter = _compiled(model, tx, lr_fn, devices, {k: v[:16] for k, v in batches[0].items()})
  assert abs(_flops(accum) / _flops(quarter) - 1) < 0.1
  # No device fetches another's rows: the gradient's all-reduce is the only collective.
  hlo = accum.as_text()
  assert "all-reduce" in hlo
  for other in ("all-gather", "all-to-all", "collective-permute", "reduce-scatter"):
    assert other not in hlo
  _assert_same_run(_train(model, tx, lr_fn, devices, batches),
                   _train(model, tx, lr_fn, devices, batches, grad_accum_steps=4))


def test_step_rng_is_folded_with_the_step(devices):
  model, tx, lr_fn = _setup()
  batch = _batches(1)[0]
  state = steps.init_state(model, tx, jax.random.PRNGKey(0),
                           {k: jnp.asarray(v) for k, v in batch.items()})
  step = jax.jit(steps.make_train_step(model, _fixed(tx, lr_fn)))
  _, m0 = step(state, batch, jax.random.PRNGKey(1), LR)
  _, m0_again = step(state, batch, jax.random.PRNGKey(1), LR)
  _, m1 = step(state.replace(step=state.step + 1), batch, jax.random.PRNGKey(1), LR)
  assert float(m0["loss_sum"]) == float(m0_again["loss_sum"])
  assert float(m0["loss_sum"]) != float(m1["loss_sum"])  # another step, another dropout mask


def test_eval_step_sums_and_ignores_padding(devices):
  model, tx, lr_fn = _setup()
  batch = _batches(1)[0]
  params = steps.init_state(model, tx, jax.random.PRNGKey(0),
                            {k: jnp.asarray(v) for k, v in batch.items()}).params
  out = jax.jit(steps.make_eval_step(model))(params, batch)
  assert float(out.weight_sum) == float((batch["targets"] > 0).sum())
  zero_rows = {k: np.zeros_like(v) for k, v in batch.items()}
  empty = jax.jit(steps.make_eval_step(model))(params, zero_rows)
  assert float(empty.weight_sum) == 0.0 and float(empty.loss_sum) == 0.0


@pytest.mark.parametrize("model_cls", [Transformer, DecoderOnly])
def test_chunked_loss_equals_the_whole_loss(devices, model_cls):
  model, tx, lr_fn = _setup(model_cls)
  batch = {k: jnp.asarray(v) for k, v in _batches(1)[0].items()}
  params = steps.init_state(model, tx, jax.random.PRNGKey(0), batch).params
  def sums(chunk):
    fn = lambda p: steps.loss_sums(model, p, batch, label_smoothing=0.1, z_loss=1e-4,  # noqa: E731
                                   chunk_size=chunk)
    return fn(params), jax.jit(jax.grad(lambda p: fn(p).loss_sum))(params)
  whole, g_whole = sums(0)
  chunked, g_chunked = sums(5)  # 12 positions: chunks of 5, 5 and 2 (+3 padding)
  for a, b in zip(whole[:5], chunked[:5]):  # the sums (log_z is dropped)
    np.testing.assert_allclose(a, b, rtol=1e-5)
  for a, b in zip(jax.tree_util.tree_leaves(g_whole), jax.tree_util.tree_leaves(g_chunked)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_bfloat16_computes_in_bfloat16_on_float32_params_and_state(devices):
  """Mixed precision: matmuls take bf16 operands; params, Adam's moments and the loss stay
  float32, the logits stay bf16 (the loss reads them in float32); a step lands near the
  float32 step."""
  model32, tx, lr_fn = _setup()
  model16 = Transformer(model32.config.replace(dtype="bfloat16", dropout_rate=0.0))
  model32 = Transformer(model32.config.replace(dropout_rate=0.0))
  batch = {k: jnp.asarray(v) for k, v in _batches(1)[0].items()}
  state = steps.init_state(model16, tx, jax.random.PRNGKey(0), batch)
  assert {x.dtype for x in jax.tree_util.tree_leaves((state.params, state.opt_state))
          if x.ndim} == {jnp.dtype("float32")}
  assert model16.logits(state.params, batch).dtype == jnp.bfloat16
  assert model32.logits(state.params, batch).dtype == jnp.float32
  out = {}
  for name, model in (("bf16", model16), ("f32", model32)):
    new, metrics = jax.jit(steps.make_train_step(model, _fixed(tx, lr_fn)))(
        state, batch, jax.random.PRNGKey(1), LR)
    out[name] = float(metrics["loss_sum"] / metrics["weight_sum"])
    assert metrics["loss_sum"].dtype == jnp.float32
    assert {x.dtype for x in jax.tree_util.tree_leaves(new.params)} == {jnp.dtype("float32")}
  assert out["bf16"] == pytest.approx(out["f32"], rel=2e-2)


_DOT = re.compile(r"stablehlo\.dot_general .*: \(tensor<[^>]*x(\w+)>, tensor<[^>]*x(\w+)>\)")


def _matmul_operand_types(model, tx, lr_fn, batch):
  """(lhs, rhs) element types of every dot_general of the lowered train step (fwd + bwd)."""
  state = steps.init_state(model, tx, jax.random.PRNGKey(0), batch)
  text = jax.jit(steps.make_train_step(model, _fixed(tx, lr_fn), label_smoothing=0.1,
                                       z_loss=1e-4)).lower(
      state, batch, jax.random.PRNGKey(1), LR).as_text()
  return [m.groups() for m in map(_DOT.search, text.splitlines()) if m]


@pytest.mark.parametrize("model_cls", [Transformer, DecoderOnly])
@pytest.mark.parametrize("tied", [True, False])
def test_a_bfloat16_step_has_no_float32_matmul(model_cls, tied):
  """No matmul of the forward or backward pass (attention logits, output projection, tied
  embedding included) runs float32 x float32 in a bf16 step: a float32 result asked of a
  bf16 einsum makes its backward matmuls float32 x float32 (jax-ml/jax#24047)."""
  _, tx, lr_fn = _setup()
  cfg = ModelConfig(vocab_size=30, d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1,
                    num_decoder_layers=1, max_len=12, dtype="bfloat16", logits_via_embedding=tied,
                    share_embeddings=tied, logits_scale="inv_sqrt_d")
  batch = {k: jnp.asarray(v) for k, v in _batches(1)[0].items()}
  types = _matmul_operand_types(model_cls(cfg), tx, lr_fn, batch)
  assert len(types) > 20  # the parse found the step's matmuls
  assert set(types) == {("bf16", "bf16")}
  # The same parse sees float32 matmuls where there are some: the float32 model's.
  assert set(_matmul_operand_types(model_cls(cfg.replace(dtype="float32")), tx, lr_fn,
                                   batch)) == {("f32", "f32")}


def test_the_learning_rate_is_an_input_of_the_compiled_step(devices):
  """Two rates lower to one program (a sweep's rates share a compilation), and a step at a
  rate is the step of an optimizer built with that rate as a constant, to float rounding
  (XLA folds a constant rate into its neighbours: the last bit may differ)."""
  model, tx, _ = _setup()
  config = fields.Optimization(learning_rate=1e-2, warmup_steps=2)
  batch = {k: jnp.asarray(v) for k, v in _batches(1)[0].items()}
  state = steps.init_state(model, tx, jax.random.PRNGKey(0), batch)
  step = jax.jit(steps.make_train_step(model, functools.partial(optimizers.at_peak, config)))
  rng = jax.random.PRNGKey(1)
  texts = {step.lower(state, batch, rng, np.float32(r)).as_text() for r in (1e-2, 3e-2)}
  assert len(texts) == 1
  for rate in (1e-2, 3e-2):
    constant = dataclasses.replace(config, learning_rate=rate)
    tx_c, lr_c = optimizers.at_peak(constant, constant.learning_rate)  # rate a Python float
    want, want_m = jax.jit(steps.make_train_step(model, _fixed(tx_c, lr_c)))(state, batch, rng, LR)
    got, got_m = step(state, batch, rng, np.float32(rate))
    for a, b in zip(jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(got)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert float(got_m["learning_rate"]) == pytest.approx(float(want_m["learning_rate"]),
                                                          rel=1e-6)
    assert float(got_m["learning_rate"]) > 0

