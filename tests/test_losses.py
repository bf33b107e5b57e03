"""cross_entropy against a direct numpy computation; masking, smoothing, z-loss, dtypes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer.training import losses

B, L, V = 3, 5, 7


def _batch(seed: int = 0):
  rng = np.random.default_rng(seed)
  logits = rng.normal(scale=3.0, size=(B, L, V)).astype(np.float32)
  targets = rng.integers(1, V, size=(B, L)).astype(np.int32)
  targets[0, 3:] = 0  # padding
  targets[2, 1:] = 0
  return logits, targets


def _reference(logits, targets, eps, z):
  """Direct float64 computation with an explicit smoothed target distribution q."""
  x = logits.astype(np.float64)
  log_z = np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1)) + x.max(-1)
  log_p = x - log_z[..., None]
  q = np.full(x.shape, eps / (V - 1))
  np.put_along_axis(q, targets[..., None], 1.0 - eps, axis=-1)
  kl = np.sum(np.where(q > 0, q * (np.log(np.where(q > 0, q, 1.0)) - log_p), 0.0), -1)
  nll = -np.take_along_axis(log_p, targets[..., None], -1)[..., 0]
  w = (targets > 0).astype(np.float64)
  return dict(
      loss_sum=np.sum(w * (kl + z * log_z**2)), nll_sum=np.sum(w * nll),
      z_loss_sum=np.sum(w * z * log_z**2), weight_sum=w.sum(), log_z=log_z)


@pytest.mark.parametrize("eps,z", [(0.0, 0.0), (0.1, 0.0), (0.1, 1e-2), (0.0, 1e-4)])
def test_matches_numpy(eps, z):
  logits, targets = _batch()
  out = losses.cross_entropy(jnp.asarray(logits), jnp.asarray(targets),
                             label_smoothing=eps, z_loss=z)
  ref = _reference(logits, targets, eps, z)
  for name in ("loss_sum", "nll_sum", "z_loss_sum", "weight_sum"):
    np.testing.assert_allclose(getattr(out, name), ref[name], rtol=1e-5, atol=1e-5, err_msg=name)
  np.testing.assert_allclose(out.log_z, ref["log_z"], rtol=1e-5)
  if eps == 0.0 and z == 0.0:
    np.testing.assert_allclose(out.loss_sum, out.nll_sum, rtol=1e-6)


def test_pad_positions_contribute_nothing():
  logits, targets = _batch()
  out = losses.cross_entropy(jnp.asarray(logits), jnp.asarray(targets), label_smoothing=0.1,
                             z_loss=1e-3)
  garbage = logits.copy()
  garbage[targets == 0] = 1e4 * np.random.default_rng(1).normal(size=(int((targets == 0).sum()), V))
  out2 = losses.cross_entropy(jnp.asarray(garbage), jnp.asarray(targets), label_smoothing=0.1,
                              z_loss=1e-3)
  for a, b in zip(out[:5], out2[:5]):
    np.testing.assert_allclose(a, b, rtol=1e-6)
  assert float(out.weight_sum) == float((targets > 0).sum())


def test_explicit_weights_are_used_as_given():
  logits, targets = _batch()
  w = np.zeros((B, L), np.float32)
  w[1, 2] = 2.0
  out = losses.cross_entropy(jnp.asarray(logits), jnp.asarray(targets), jnp.asarray(w))
  ref = _reference(logits[1:2, 2:3], targets[1:2, 2:3], 0.0, 0.0)
  np.testing.assert_allclose(out.nll_sum, 2.0 * ref["nll_sum"], rtol=1e-6)
  assert float(out.weight_sum) == 2.0


def test_perfect_model_has_zero_loss():
  _, targets = _batch()
  eps = 0.1
  # The perfect model under smoothing predicts q itself: log-probabilities as logits.
  q = np.full((B, L, V), eps / (V - 1))
  np.put_along_axis(q, targets[..., None], 1.0 - eps, axis=-1)
  out = losses.cross_entropy(jnp.asarray(np.log(q), jnp.float32), jnp.asarray(targets),
                             label_smoothing=eps)
  assert abs(float(out.loss_sum)) < 1e-5
  # Without smoothing, a very confident correct prediction has loss ~0.
  confident = 100.0 * np.eye(V, dtype=np.float32)[targets]
  out = losses.cross_entropy(jnp.asarray(confident), jnp.asarray(targets))
  assert abs(float(out.loss_sum)) < 1e-5
  assert float(out.correct_sum) == float(out.weight_sum)


def test_bf16_logits_give_float32():
  logits, targets = _batch()
  out = losses.cross_entropy(jnp.asarray(logits, jnp.bfloat16), jnp.asarray(targets),
                             label_smoothing=0.1, z_loss=1e-4)
  for a in out:
    assert a.dtype == jnp.float32
  ref = _reference(np.asarray(jnp.asarray(logits, jnp.bfloat16), np.float32), targets, 0.1, 1e-4)
  np.testing.assert_allclose(out.loss_sum, ref["loss_sum"], rtol=1e-5)


def _plain_cross_entropy(logits, targets, eps, z):
  """The loss written with autodiff's own gradient (no custom backward): the reference."""
  x = logits.astype(jnp.float32)
  log_p = jax.nn.log_softmax(x)
  q = jnp.where(jnp.arange(V) == targets[..., None], 1.0 - eps, eps / (V - 1))
  entropy = -jnp.sum(jnp.where(q > 0, q * jnp.log(q), 0.0), -1)
  log_z = jax.nn.logsumexp(x, -1)
  w = (targets > 0).astype(jnp.float32)
  return jnp.sum(w * (-jnp.sum(q * log_p, -1) - entropy + z * log_z ** 2))


@pytest.mark.parametrize("eps,z", [(0.0, 0.0), (0.1, 0.0), (0.1, 1e-2)])
def test_gradient_equals_autodiffs(eps, z):
  logits, targets = _batch(1)
  for dtype, tol in ((jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)):  # bf16: the lean backward
    x = jnp.asarray(logits, dtype)
    got = jax.grad(lambda x: losses.cross_entropy(x, jnp.asarray(targets), label_smoothing=eps,
                                                  z_loss=z).loss_sum)(x)
    want = jax.grad(_plain_cross_entropy)(x, jnp.asarray(targets), eps, z)
    assert got.dtype == dtype
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                               rtol=tol, atol=tol)
  # Every statistic carries its own gradient (a loss of nll and log Z alone, too).
  stats = lambda x: sum(s.sum() * c for s, c in zip(  # noqa: E731
      losses.lean_logit_statistics(x, jnp.asarray(targets)), (0.3, -1.1, 0.7)))
  plain = lambda x: (0.3 * jax.nn.logsumexp(x, -1).sum() - 1.1 * jnp.take_along_axis(  # noqa: E731
      x, jnp.asarray(targets)[..., None], -1).sum() + 0.7 * x.sum())
  np.testing.assert_allclose(jax.grad(stats)(jnp.asarray(logits)),
                             jax.grad(plain)(jnp.asarray(logits)), rtol=1e-5, atol=1e-6)


def test_bf16_logits_are_kept_for_the_backward_pass_without_a_float32_copy():
  """What the backward pass keeps of [B, L, V] is the bf16 logits; in float32 only [B, L]."""
  logits, targets = _batch()
  loss = lambda x: losses.cross_entropy(x, jnp.asarray(targets), label_smoothing=0.1,  # noqa: E731
                                        z_loss=1e-4).loss_sum
  _, backward = jax.vjp(loss, jnp.asarray(logits, jnp.bfloat16))
  kept = [x for x in jax.tree_util.tree_leaves(backward) if hasattr(x, "dtype")]
  assert any(x.shape == (B, L, V) and x.dtype == jnp.bfloat16 for x in kept)
  assert all(x.size < B * L * V for x in kept if x.dtype == jnp.float32)
  (grad,) = backward(jnp.float32(1.0))
  assert grad.dtype == jnp.bfloat16
  # The plain float32 formulation keeps a float32 [B, L, V] array: what this avoids.
  _, plain = jax.vjp(lambda x: _plain_cross_entropy(x, jnp.asarray(targets), 0.1, 1e-4),
                     jnp.asarray(logits, jnp.bfloat16))
  assert any(x.shape == (B, L, V) and x.dtype == jnp.float32
             for x in jax.tree_util.tree_leaves(plain) if hasattr(x, "dtype"))


def test_accuracy_and_summary():
  logits = np.zeros((1, 4, 3), np.float32)
  logits[0, :, 1] = 1.0  # always predicts token 1
  targets = np.array([[1, 2, 1, 0]], np.int32)  # 2 of 3 real tokens right; pad predicted wrong
  out = losses.cross_entropy(jnp.asarray(logits), jnp.asarray(targets))
  assert float(out.correct_sum) == 2.0 and float(out.weight_sum) == 3.0
  summary = losses.summarize(out)
  np.testing.assert_allclose(summary["accuracy"], 2 / 3, rtol=1e-6)
  np.testing.assert_allclose(summary["perplexity"], np.exp(summary["nll"]), rtol=1e-6)
  np.testing.assert_allclose(summary["loss"], out.loss_sum / 3, rtol=1e-6)


def test_summary_of_nothing_is_finite():
  out = losses.cross_entropy(jnp.zeros((2, 3, 5)), jnp.zeros((2, 3), jnp.int32))
  summary = losses.summarize(out)
  assert all(np.isfinite(v) for v in summary.values())
  assert float(summary["loss"]) == 0.0 and float(summary["perplexity"]) == 1.0


def test_bad_arguments():
  with pytest.raises(ValueError, match="targets"):
    losses.cross_entropy(jnp.zeros((1, 2, 3)), jnp.ones((1, 3), jnp.int32))


def test_loss_outputs_add_up_field_by_field_on_device_and_on_host():
  a = losses.LossOutput(*(jnp.float32(v) for v in (1.0, 2.0, 0.5, 3.0, 4.0)),
                        log_z=jnp.ones((2, 3)))
  b = losses.LossOutput(*(jnp.float32(v) for v in (0.5, 1.0, 0.0, 1.0, 2.0)))
  total = losses.LossOutput.total([a, b])
  assert [float(v) for v in total[:5]] == [1.5, 3.0, 0.5, 4.0, 6.0] and total.log_z is None
  on_host = losses.LossOutput.total([a._asdict(), b._asdict()], dtype=np.float64)  # dicts too
  assert on_host == total and all(np.asarray(v).dtype == np.float64 for v in on_host[:5])
  assert [float(v) for v in losses.LossOutput.total([])[:5]] == [0.0] * 5
