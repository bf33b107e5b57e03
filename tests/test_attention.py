"""Scaled dot-product attention against a plain numpy reference, masks, the variance argument."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer import attention
from transformer.config import ModelConfig
from transformer.errors import ConfigError


def reference_attention(q, k, v, mask=None, scale=None, softcap=None):
  """softmax(q k^T * scale) v in float64 numpy; rows with nothing to attend to are 0."""
  q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
  scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
  logits = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
  if softcap is not None:
    logits = softcap * np.tanh(logits / softcap)
  if mask is not None:
    mask = np.broadcast_to(np.asarray(mask), logits.shape)
    logits = np.where(mask, logits, -np.inf)
  peak = np.max(logits, -1, keepdims=True)
  peak = np.where(np.isfinite(peak), peak, 0.0)
  weights = np.exp(logits - peak)
  total = weights.sum(-1, keepdims=True)
  weights = np.where(total > 0, weights / np.where(total > 0, total, 1), 0.0)
  return np.einsum("bhqk,bkhd->bqhd", weights, v)


def _qkv(seed=0, b=2, lq=5, lk=7, h=3, d=8):
  rng = np.random.default_rng(seed)
  return [rng.normal(size=(b, n, h, d)).astype(np.float32) for n in (lq, lk, lk)]


def _mask_with_empty_rows(b=2, lq=5, lk=7, seed=1):
  mask = np.random.default_rng(seed).random((b, 1, lq, lk)) > 0.4
  mask[0, 0, 2, :] = False  # a query with nothing to attend to
  mask[1, 0, 4, :] = False
  return mask


@pytest.mark.parametrize("implementation", ["einsum", "xla"])
@pytest.mark.parametrize("scale", [None, 1.0, 1 / 8, 0.37])
@pytest.mark.parametrize("softcap", [None, 3.0])
@pytest.mark.parametrize("masked", [False, True])
def test_matches_reference(implementation, scale, softcap, masked):
  q, k, v = _qkv()
  mask = _mask_with_empty_rows() if masked else None
  out = attention.dot_product_attention(q, k, v, mask=None if mask is None else jnp.asarray(mask),
                                        scale=scale, softcap=softcap,
                                        implementation=implementation)
  np.testing.assert_allclose(out, reference_attention(q, k, v, mask, scale, softcap), atol=2e-5)
  assert np.all(np.isfinite(out))
  if masked:
    assert np.all(np.asarray(out)[0, 2] == 0) and np.all(np.asarray(out)[1, 4] == 0)


@pytest.mark.parametrize("implementation", ["einsum", "xla"])
def test_fully_masked_rows_have_finite_zero_gradients(implementation):
  q, k, v = _qkv()
  mask = jnp.zeros((2, 1, 5, 7), bool)
  for softcap in (None, 2.0):
    loss = lambda q, k, v: jnp.sum(  # noqa: E731
        attention.dot_product_attention(q, k, v, mask=mask, softcap=softcap,
                                        implementation=implementation) ** 2)
    grads = jax.grad(loss, argnums=(0, 1, 2))(q, k, v)
    for g in grads:
      assert np.all(np.asarray(g) == 0)


def test_masks_padding_causal_segments():
  valid = jnp.array([[True, True, True, False]])
  m = attention.make_attention_mask(valid, valid, causal=True)
  assert m.shape == (1, 1, 4, 4)
  expected = np.tril(np.ones((4, 4), bool))
  expected[3, :] = False
  expected[:, 3] = False
  np.testing.assert_array_equal(m[0, 0], expected)
  seg = jnp.array([[1, 1, 2, 2]])
  m = attention.make_attention_mask(jnp.ones((1, 4), bool), jnp.ones((1, 4), bool),
                                    q_segmentation=seg, kv_segmentation=seg)
  np.testing.assert_array_equal(m[0, 0], np.kron(np.eye(2), np.ones((2, 2))).astype(bool))


def _module_reference(cfg, params, x, kv, mask):
  """The module recomputed by hand: projections, qk-norm, the mode's scale, softmax, output."""
  p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)
  proj = lambda name, a: np.einsum("bld,dhk->blhk", a, p[name]["kernel"]) + p[name]["bias"]  # noqa: E731
  q, k, v = proj("query", x), proj("key", kv), proj("value", kv)

  def norm(a, name):
    if cfg.qk_norm == "l2":
      return a / np.linalg.norm(a, axis=-1, keepdims=True)
    if cfg.qk_norm == "rmsnorm":
      return a / np.sqrt(np.mean(a * a, -1, keepdims=True) + cfg.norm_epsilon) * p[name]["scale"]
    if cfg.qk_norm == "layernorm":
      a = a - a.mean(-1, keepdims=True)
      return (a / np.sqrt(a.var(-1, keepdims=True) + cfg.norm_epsilon) * p[name]["scale"]
              + p[name]["bias"])
    return a
  q, k = norm(q, "query_norm"), norm(k, "key_norm")
  dk = q.shape[-1]
  mode = cfg.attention_scale
  if mode == "learned":
    q, scale = q * p["temperature"][:, None], 1.0
  else:
    scale = {"inv_sqrt_dk": dk ** -0.5, "inv_dk": 1 / dk, "none": 1.0}.get(mode, mode)
  out = reference_attention(q, k, v, mask, scale, cfg.attn_logit_softcap)
  return np.einsum("blhk,hkd->bld", out, p["out"]["kernel"]) + p["out"]["bias"]


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="cuDNN runs there")
def test_cudnn_without_a_gpu_is_one_clear_line():
  q = jnp.ones((1, 4, 2, 8))
  with pytest.raises(ConfigError, match="attention_impl='cudnn' needs NVIDIA GPUs, and JAX runs "
                     "on cpu; use 'auto', 'xla' or 'einsum'."):
    attention.dot_product_attention(q, q, q, implementation="cudnn")


def _rows(dtype=jnp.bfloat16, length=8, head_dim=8):
  """The shape of a query or key [1, length, 2, head_dim], as `resolve_implementation` reads it."""
  return jax.ShapeDtypeStruct((1, length, 2, head_dim), dtype)


def test_cudnn_in_float32_or_without_an_attached_gpu_is_one_clear_line(monkeypatch):
  monkeypatch.setattr(attention, "target_platform", lambda: "gpu")
  monkeypatch.setattr(attention, "_compute_capability", lambda: None)
  with pytest.raises(ConfigError, match=r"^attention_impl='cudnn' needs an attached NVIDIA GPU"):
    attention.resolve_implementation("cudnn", _rows(), _rows())  # compiling for an absent GPU
  monkeypatch.setattr(attention, "_compute_capability", lambda: (9, 0))
  q = jnp.ones((1, 4, 2, 8), jnp.float32)
  with pytest.raises(ConfigError, match=r"^attention_impl='cudnn' computes in bfloat16 or float16, "
                     r"and this model computes in float32; set --config.model.dtype=bfloat16 or "
                     r"use attention_impl='auto'.$"):
    attention.dot_product_attention(q, q, q, implementation="cudnn")
  assert attention.resolve_implementation("cudnn", _rows(), _rows()) == "cudnn"


@pytest.mark.parametrize("platform, dtype, kernel", [
    ("cpu", jnp.float32, "einsum"), ("cpu", jnp.bfloat16, "einsum"),
    ("gpu", jnp.bfloat16, "cudnn"), ("gpu", jnp.float16, "cudnn"), ("gpu", jnp.float32, "einsum"),
    ("rocm", jnp.bfloat16, "einsum")])  # a TPU: the test below
def test_auto_picks_the_kernel_of_the_chip(monkeypatch, platform, dtype, kernel):
  monkeypatch.setattr(attention, "target_platform", lambda: platform)
  monkeypatch.setattr(attention, "_compute_capability", lambda: (8, 0))  # an Ampere attached
  assert attention.resolve_implementation("auto", _rows(dtype), _rows(dtype)) == kernel
  assert attention.resolve_implementation("einsum", _rows(dtype), _rows(dtype)) == "einsum"
  for older in (None, (7, 5)):  # not attached, or older than Ampere
    monkeypatch.setattr(attention, "_compute_capability", lambda: older)
    assert attention.resolve_implementation("auto", _rows(dtype), _rows(dtype)) == (
        "einsum" if kernel == "cudnn" else kernel)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="assumes a CPU host")
def test_auto_is_the_einsum_path_on_this_cpu_and_the_default():
  assert attention.target_platform() == "cpu"
  assert ModelConfig().attention_impl == "auto"
  q, k, v = _qkv()
  mask = jnp.asarray(_mask_with_empty_rows())
  np.testing.assert_array_equal(
      attention.dot_product_attention(q, k, v, mask=mask, implementation="auto"),
      attention.dot_product_attention(q, k, v, mask=mask, implementation="einsum"))


@pytest.mark.skipif(jax.default_backend() != "cpu",
                    reason="assumes the 8 CPU devices are the default ones")
def test_auto_takes_splash_on_a_tpu_only_where_it_can_run_per_device(monkeypatch, devices):
  """A Mosaic kernel is not partitioned by XLA: with several chips and no mesh in context
  (a caller outside the train step) 'auto' is the einsum path; with the mesh, splash."""
  monkeypatch.setattr(attention, "target_platform", lambda: "tpu")
  assert jax.device_count() == 8
  assert attention.resolve_implementation("auto", _rows(), _rows()) == "einsum"
  with jax.set_mesh(jax.sharding.Mesh(np.array(devices).reshape(4, 2), ("data", "fsdp"))):
    assert attention.resolve_implementation("auto", _rows(), _rows()) == "splash"


def test_splash_on_a_gpu_is_one_clear_line(monkeypatch):
  monkeypatch.setattr(attention, "target_platform", lambda: "gpu")
  with pytest.raises(ConfigError, match="attention_impl='splash' is the TPU's kernel"):
    attention.resolve_implementation("splash", _rows(), _rows())


def test_the_kernel_a_step_runs_names_the_einsum_fallbacks(monkeypatch):
  monkeypatch.setattr(attention, "target_platform", lambda: "gpu")
  monkeypatch.setattr(attention, "_compute_capability", lambda: (9, 0))
  cfg = ModelConfig(dtype="bfloat16")
  assert attention.step_kernel(cfg, 256) == "cudnn"
  assert attention.step_kernel(cfg.replace(attn_logit_softcap=5.0), 256) == "einsum"
  assert attention.step_kernel(cfg.replace(attention_dropout_rate=0.1), 256) == "einsum"


# ---- cuDNN's refusals, traced on this CPU as on a GPU host ----
def _attach_a_gpu(monkeypatch, capability):
  """This CPU made to look, to the project and to JAX's cuDNN lowering, like a host with an
  NVIDIA GPU of `capability` attached: the platform and compute capability the project reads,
  and the cuDNN version and compute-capability queries of JAX's checks (`jax_cudnn`)."""
  jax_cudnn = pytest.importorskip("jax._src.cudnn.fused_attention_stablehlo")
  queries = ("check_cudnn_version", "check_compute_capability", "is_cuda_compute_capability_equal")
  if not all(hasattr(jax_cudnn, name) for name in queries):
    pytest.skip("this jax's cuDNN lowering has other queries to patch")
  version = lambda text: tuple(int(x) for x in text.split("."))  # noqa: E731
  monkeypatch.setattr(attention, "target_platform", lambda: "gpu")
  monkeypatch.setattr(attention, "_compute_capability", lambda: capability)
  monkeypatch.setattr(jax_cudnn, "check_cudnn_version", lambda: 90800)
  monkeypatch.setattr(jax_cudnn, "check_compute_capability", lambda c: capability >= version(c))
  monkeypatch.setattr(jax_cudnn, "is_cuda_compute_capability_equal",
                      lambda c: capability == version(c))


def _traced_step(cfg, length, packed=False):
  """The jaxpr (text) of a training step of `cfg`'s model on rows of `length` tokens (packed:
  two segments a row, as the language-model pipeline packs them)."""
  import optax
  from transformer.models import DecoderOnly, Transformer
  from transformer.training import steps
  model = (DecoderOnly if packed else Transformer)(cfg)
  batch = {k: jnp.ones((2, length), jnp.int32) for k in model.batch_keys}
  if packed:
    segments = 1 + (np.arange(length) >= length // 2)
    batch["targets_segmentation"] = jnp.asarray(np.tile(segments, (2, 1)))
    batch["targets_position"] = jnp.asarray(np.tile(np.arange(length) % (length // 2), (2, 1)))
  tx = optax.adam(1e-3)
  state = jax.eval_shape(functools.partial(steps.init_state, model, tx, batch=batch),
                         jax.random.PRNGKey(0))
  step = steps.make_train_step(model, lambda peak: (tx, lambda count: peak))
  return str(jax.make_jaxpr(step)(state, batch, jax.random.PRNGKey(1), np.float32(1e-3)))


_CUDNN_CALL = "dot_product_attention_fwd"  # the primitive of cuDNN's kernel in a jaxpr
# Each refusal of JAX's cuDNN lowering a project config reaches: (model fields, row length,
# the GPU's compute capability, the words of the one-line refusal of an explicit 'cudnn').
CUDNN_REFUSALS = {
    "float32": (dict(dtype="float32"), 16, (9, 0), "computes in bfloat16 or float16"),
    "head dim not a multiple of 8": (dict(head_dim=12), 16, (9, 0),
                                     "a multiple of 8 and at most 256 .* this model's is 12"),
    "head dim above Hopper's 256": (dict(head_dim=264), 16, (9, 0), "at most 256"),
    "head dim above Ampere's 128": (dict(head_dim=192), 16, (8, 0),
                                    "at most 128 on a GPU of compute capability 8.0"),
    "odd length (configs/default.py's 17)": (dict(), 17, (9, 0),
                                             "even lengths only .* 17 queries and 17 keys"),
    "odd length, packed rows": (dict(packed=True), 17, (9, 0), "even lengths only"),
}


def _cudnn_case(fields):
  fields = dict(fields)
  packed = fields.pop("packed", False)
  cfg = ModelConfig(vocab_size=16, d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1,
                    num_decoder_layers=1, max_len=32, dtype="bfloat16").replace(**fields)
  return cfg, packed


@pytest.mark.parametrize("case", list(CUDNN_REFUSALS))
def test_auto_falls_back_where_jaxs_cudnn_lowering_refuses(monkeypatch, case):
  """Where JAX's own lowering refuses the step's attention (shown first, with JAX's checks
  made to pass for the GPU), 'auto' traces the step on the einsum path and `step_kernel`
  says so; an explicit 'cudnn' is one line naming the condition."""
  fields, length, capability, words = CUDNN_REFUSALS[case]
  _attach_a_gpu(monkeypatch, capability)
  cfg, packed = _cudnn_case(fields)
  rows = jnp.ones((2, length, cfg.num_heads, cfg.qk_dim), cfg.compute_dtype)
  loss = lambda q: jnp.sum(jax.nn.dot_product_attention(  # noqa: E731
      q, q, q, implementation="cudnn").astype(jnp.float32))
  with pytest.raises(NotImplementedError):  # JAX's lowering itself refuses these inputs
    jax.make_jaxpr(jax.grad(loss))(rows)
  assert attention.step_kernel(cfg, length) == "einsum"
  assert _CUDNN_CALL not in _traced_step(cfg, length, packed)
  with pytest.raises(ConfigError, match=f"^attention_impl='cudnn' .*{words}") as refused:
    _traced_step(cfg.replace(attention_impl="cudnn"), length, packed)
  assert "\n" not in str(refused.value)


@pytest.mark.parametrize("packed", [False, True])
def test_auto_takes_cudnn_where_jaxs_lowering_accepts_the_step(monkeypatch, packed):
  """The control of the test above: bfloat16, head dim 16, even lengths, on a Hopper."""
  _attach_a_gpu(monkeypatch, (9, 0))
  cfg, _ = _cudnn_case({})
  assert attention.step_kernel(cfg, 16) == "cudnn"
  assert _CUDNN_CALL in _traced_step(cfg, 16, packed)


def _segment_batch(b=2, lq=20, lk=20, packed=False, causal=False):
  """A SegmentMask like the model's: padded rows, or packed rows of several segments."""
  q_valid = np.ones((b, lq), bool)
  kv_valid = np.ones((b, lk), bool)
  q_valid[0, lq - 6:] = False  # padding at the end
  q_valid[1, lq - 1:] = False  # a padding query whose keys hold no padding (cross)
  kv_valid[0, lk - 3:] = False
  q_seg = kv_seg = None
  if packed:
    q_seg = np.where(q_valid, 1 + (np.arange(lq) >= lq // 2), 0)
    kv_seg = np.where(kv_valid, 1 + (np.arange(lk) >= lk // 3), 0)
  return attention.segment_mask(jnp.asarray(q_valid), jnp.asarray(kv_valid), causal=causal,
                                q_segmentation=None if q_seg is None else jnp.asarray(q_seg),
                                kv_segmentation=None if kv_seg is None else jnp.asarray(kv_seg))


def test_a_segment_mask_is_make_attention_masks_mask():
  q_valid = jnp.array([[True, True, True, False]])
  seg = jnp.array([[1, 1, 2, 0]])
  for kwargs in ({}, {"causal": True}, {"q_segmentation": seg, "kv_segmentation": seg}):
    np.testing.assert_array_equal(
        attention.segment_mask(q_valid, q_valid, **kwargs).dense(),
        attention.make_attention_mask(q_valid, q_valid, **kwargs))


# The fused kernels this machine can run: splash anywhere but a GPU (interpreted off a TPU),
# cuDNN's only on an attached NVIDIA GPU (Ampere or newer), in half precision.
FUSED = [pytest.param("splash", marks=pytest.mark.skipif(
             jax.default_backend() == "gpu", reason="the TPU's kernel, refused on a GPU")),
         pytest.param("cudnn", marks=pytest.mark.skipif(
             (attention._compute_capability() or (0, 0)) < (8, 0),
             reason="needs an attached Ampere+ NVIDIA GPU"))]


@pytest.mark.parametrize("kernel", FUSED)
@pytest.mark.parametrize("dtype, atol", [(jnp.float32, 2e-5), (jnp.bfloat16, 3e-2)])
@pytest.mark.parametrize("case", ["padding", "causal", "packed", "packed_causal", "cross",
                                  "softcap"])
def test_a_fused_kernel_equals_the_einsum_path(kernel, dtype, atol, case):
  """Pallas splash attention (the TPU kernel; interpreted on a CPU) and cuDNN's (on a GPU):
  outputs and gradients equal the einsum path's, for the masks the models make. (A soft cap
  sends cuDNN to the einsum path: `_fused_serves`.)"""
  if kernel == "cudnn" and dtype == jnp.float32:
    pytest.skip("cuDNN's kernel computes in bfloat16 or float16 (float32 is one clear line)")
  # cuDNN takes even lengths only ('auto' sends odd ones to einsum: the tests above and below).
  lk = (14 if kernel == "cudnn" else 13) if case == "cross" else 20
  mask = _segment_batch(lk=lk, packed=case.startswith("packed") or case == "cross",
                        causal=case.endswith("causal") or case == "causal")
  softcap = 2.0 if case == "softcap" else None
  q, k, v = (jnp.asarray(a, dtype) for a in _qkv(b=2, lq=20, lk=lk, h=2, d=16))

  def loss(impl, q, k, v):
    out = attention.dot_product_attention(q, k, v, mask=mask, softcap=softcap,
                                          implementation=impl)
    return jnp.sum(out.astype(jnp.float32) * jnp.cos(jnp.arange(16.0))), out

  grads = {}
  for impl in (kernel, "einsum"):
    (_, out), g = jax.value_and_grad(functools.partial(loss, impl), argnums=(0, 1, 2),
                                     has_aux=True)(q, k, v)
    grads[impl] = (out, *g)
    assert out.dtype == dtype and all(np.all(np.isfinite(np.asarray(x, np.float32))) for x in g)
  for a, b in zip(grads[kernel], grads["einsum"]):
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), atol=atol)
  # Padding queries give zeros, as on the einsum path.
  assert np.all(np.asarray(grads[kernel][0], np.float32)[0, -6:] == 0)


ON_A_GPU = pytest.mark.skipif((attention._compute_capability() or (0, 0)) < (8, 0),
                              reason="needs an attached Ampere+ NVIDIA GPU (docs/speed.md)")


@ON_A_GPU
@pytest.mark.parametrize("lq, lk", [(256, 256), (17, 17), (20, 13)])
def test_auto_on_a_gpu_runs_the_models_shapes_and_odd_lengths(lq, lk):
  """'auto' in bfloat16 on the GPU, at base's attention shape (cuDNN) and at odd lengths (the
  einsum path): outputs and gradients equal the einsum path's on padded, causal rows."""
  mask = _segment_batch(b=4, lq=lq, lk=lk, causal=lq == lk)
  q, k, v = (jnp.asarray(a, jnp.bfloat16) for a in _qkv(b=4, lq=lq, lk=lk, h=8, d=64))

  def grads(impl):
    loss = lambda q, k, v: jnp.sum(attention.dot_product_attention(  # noqa: E731
        q, k, v, mask=mask, implementation=impl).astype(jnp.float32) * jnp.cos(jnp.arange(64.0)))
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(q, k, v)

  (auto_loss, auto_grads), (ref_loss, ref_grads) = grads("auto"), grads("einsum")
  assert auto_loss == pytest.approx(float(ref_loss), rel=2e-2)
  # Two bfloat16 results may differ by one step of their magnitude (2^-7 relative: 4.5625
  # against 4.53125 was seen on an H200), beside the absolute tolerance near zero.
  for a, b in zip(auto_grads, ref_grads):
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), atol=3e-2,
                               rtol=2 ** -7)


@pytest.mark.parametrize("batch", [8, 3])  # split over the 8 devices, or whole on each
def test_splash_under_a_mesh_runs_per_device_and_equals_the_einsum_path(devices, batch):
  """Under the train step's mesh the kernel runs in a shard_map over the batch's devices; a
  batch that does not split (init's one row) runs whole on every device."""
  mesh = jax.sharding.Mesh(np.array(devices).reshape(4, 2), ("data", "fsdp"))
  mask = _segment_batch(b=batch, packed=True, causal=True)
  q, k, v = (jnp.asarray(a) for a in _qkv(b=batch, lq=20, lk=20, h=2, d=16))
  with jax.set_mesh(mesh):
    fn = jax.jit(functools.partial(attention.dot_product_attention, implementation="splash"))
    text = fn.lower(q, k, v, mask=mask).as_text()
    out = fn(q, k, v, mask=mask)
  assert "shard_map" in text or "sdy.manual_computation" in text
  np.testing.assert_allclose(out, attention.dot_product_attention(
      q, k, v, mask=mask, implementation="einsum"), atol=2e-5)


def test_attention_dropout_drops_weights():
  q, k, v = _qkv()
  out = attention.dot_product_attention(q, k, v, dropout_rate=0.5,
                                        dropout_rng=jax.random.PRNGKey(0))
  assert not np.allclose(out, attention.dot_product_attention(q, k, v), atol=1e-3)
  with pytest.raises(ConfigError, match=r"attention_impl='flash' is not one of \['auto'"):
    attention.dot_product_attention(q, k, v, implementation="flash")


@pytest.mark.parametrize("attention_scale", ["inv_sqrt_dk", "inv_dk", "none", 0.3, "learned"])
@pytest.mark.parametrize("qk_norm", ["none", "layernorm", "rmsnorm", "l2"])
@pytest.mark.parametrize("softcap", [None, 4.0])
def test_multihead_module_matches_reference_for_every_mode(attention_scale, qk_norm, softcap):
  cfg = ModelConfig(d_model=16, num_heads=2, attention_scale=attention_scale, qk_norm=qk_norm,
                    attn_logit_softcap=softcap, posemb="none")
  rng = np.random.default_rng(3)
  x = rng.normal(size=(2, 5, 16)).astype(np.float32)
  kv = rng.normal(size=(2, 6, 16)).astype(np.float32)
  mask = rng.random((2, 1, 5, 6)) > 0.3
  mask[1, 0, 0, :] = False
  module = attention.MultiHeadAttention(cfg, self_attention=False)
  variables = module.init(jax.random.PRNGKey(0), x, kv, jnp.asarray(mask))
  params = variables["params"]
  if attention_scale == "learned":
    np.testing.assert_allclose(params["temperature"], [8 ** -0.5] * 2, rtol=1e-6)
    params = {**params, "temperature": jnp.array([0.2, 0.9])}  # a trained-looking temperature
  out = module.apply({"params": params}, x, kv, jnp.asarray(mask))
  np.testing.assert_allclose(out, _module_reference(cfg, params, x, kv, mask), atol=1e-4)


@pytest.mark.parametrize("use_bias, qk_norm, implementation", [
    (True, "none", "einsum"), (False, "rmsnorm", "einsum"), (True, "none", "xla"),
    pytest.param(True, "none", "splash", marks=pytest.mark.skipif(
        jax.default_backend() == "gpu", reason="the TPU's kernel, refused on a GPU"))])
def test_decoding_steps_through_the_cache_equal_causal_self_attention(use_bias, qk_norm,
                                                                     implementation):
  cfg = ModelConfig(d_model=16, num_heads=2, use_bias=use_bias, qk_norm=qk_norm, posemb="rope",
                    attention_impl=implementation)
  batch, length, heads, head_dim = 2, 5, 2, 8
  x = jnp.asarray(np.random.default_rng(4).normal(size=(batch, length, 16)), jnp.float32)
  positions = jnp.broadcast_to(jnp.arange(length), (batch, length))
  valid = jnp.ones((batch, length), bool)
  causal = attention.segment_mask(valid, valid, causal=True)  # as the models hand it over
  module = attention.MultiHeadAttention(cfg, self_attention=True)
  params = module.init(jax.random.PRNGKey(0), x, x, causal, q_positions=positions,
                       kv_positions=positions)["params"]
  full = module.apply({"params": params}, x, x, causal, q_positions=positions,
                      kv_positions=positions)
  # Creating the cache: keys/values [B * H, L, D] and q/k/v's kernels side by side, copied once.
  _, made = module.apply({"params": params}, x, x, None, q_positions=positions,
                         kv_positions=positions, decode=True, mutable=["cache"])
  cache = made["cache"]
  assert cache["cached_key"].shape == (batch * heads, length, head_dim)
  stacked = np.concatenate([np.asarray(params[n]["kernel"]).reshape(16, -1)
                            for n in ("query", "key", "value")], axis=1)
  np.testing.assert_array_equal(cache["qkv_kernel"], stacked)
  assert ("qkv_bias" in cache) == use_bias
  for t in range(length):
    out, made = module.apply({"params": params, "cache": cache}, x[:, t:t + 1], x[:, t:t + 1],
                             None, q_positions=positions[:, t:t + 1],
                             kv_positions=positions[:, t:t + 1], decode=True, mutable=["cache"])
    cache = made["cache"]
    np.testing.assert_allclose(out[:, 0], full[:, t], atol=1e-5)


@pytest.mark.parametrize("d_k", [16, 64, 256, 1024])
def test_variance_argument_for_iid_unit_q_and_k(d_k):
  # q, k iid N(0, 1): q.k is a sum of d_k products of variance 1, so Var(q.k) = d_k and
  # Var(q.k / sqrt(d_k)) = 1. With n = 20000 samples the sample variance has a relative standard
  # error of about sqrt(2/n) = 1%; the tolerance, 5%, is five standard errors.
  n = 20000
  kq, kk = jax.random.split(jax.random.PRNGKey(d_k))
  q = jax.random.normal(kq, (n, d_k))
  k = jax.random.normal(kk, (n, d_k))
  dots = np.asarray(jnp.sum(q * k, -1), np.float64)
  assert abs(np.mean(dots)) < 5 * math.sqrt(d_k / n)
  assert np.var(dots) / d_k == pytest.approx(1.0, rel=0.05)
  assert np.var(dots / math.sqrt(d_k)) == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("num_heads, head_dim", [(4, 8), (4, 32), (2, 64)])
def test_qkv_init_output_variance(num_heads, head_dim):
  # Unit-variance inputs of width d: 'lecun' gives q components of variance d * (1/d) = 1 at
  # any attention width; 'xavier' gives d * 2 / (d + heads * head_dim), set by the width.
  # 4096 rows x the kernel's heads * head_dim columns: sampling error well under the 10% allowed.
  d = 64
  x = jax.random.normal(jax.random.PRNGKey(1), (1, 4096, d))
  for init, expected in (("lecun", 1.0), ("xavier", 2 * d / (d + num_heads * head_dim))):
    cfg = ModelConfig(d_model=d, num_heads=num_heads, head_dim=head_dim, qkv_init=init,
                      use_bias=False, posemb="none")
    module = attention.MultiHeadAttention(cfg)
    params = module.init(jax.random.PRNGKey(0), x[:, :4], x[:, :4], None)["params"]
    q = jnp.einsum("bld,dhk->blhk", x, params["query"]["kernel"])
    assert float(jnp.var(q)) == pytest.approx(expected, rel=0.1), init


def test_qkv_init_is_validated():
  with pytest.raises(ConfigError, match="qkv_init"):
    ModelConfig(qkv_init="he")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lk", [9, 12])
def test_has_key_of_an_unpacked_segment_mask_is_the_dense_masks(causal, lk):
  """From the mask's factors, for any pattern of valid queries and keys (padding first, in
  the middle, whole rows of it), as the dense mask says."""
  rng = np.random.default_rng(lk + causal)
  q_valid, kv_valid = rng.random((6, 12)) > 0.4, rng.random((6, lk)) > 0.6
  q_valid[0], kv_valid[1], kv_valid[2, :3] = False, False, False  # empty rows, late keys
  mask = attention.segment_mask(jnp.asarray(q_valid), jnp.asarray(kv_valid), causal=causal)
  np.testing.assert_array_equal(attention.has_key(mask), jnp.any(mask.dense(), axis=-1))
  packed = attention.segment_mask(jnp.asarray(q_valid), jnp.asarray(kv_valid), causal=causal,
                                  q_segmentation=jnp.ones((6, 12), jnp.int32),
                                  kv_segmentation=jnp.ones((6, lk), jnp.int32))
  np.testing.assert_array_equal(attention.has_key(packed), jnp.any(packed.dense(), axis=-1))
