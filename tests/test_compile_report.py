"""The compile report: a tiny config compiled for an absent TPU topology, its fields against
hand values (state bytes, the analytic FLOPs), and the HLO collective parser."""

import importlib.util
import math
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from conftest import REPO
from transformer.errors import ConfigError
from transformer.research import compile_report
from transformer.training import experiment, run

TARGET = "v5e:2x2"  # 4 chips


@pytest.fixture(scope="module")
def tpu():
  if importlib.util.find_spec("libtpu") is None:  # installed: any failure is a failure
    pytest.skip("libtpu is not installed (pip install -e '.[tpu]'): no TPU compiler here")


def _tiny(fsdp):
  config = experiment.load_config(str(REPO / "configs" / "default.py"))
  # Sizes in multiples of 128: TPU tiles pad smaller arrays, which would count in memory.
  config.model = experiment.model_fields(
      "vaswani2017", vocab_size=512, d_model=128, num_heads=1, d_ff=512, num_encoder_layers=1,
      num_decoder_layers=1, dropout_rate=0.0, dtype="bfloat16", use_bias=False)
  config.batch_size, config.max_len, config.fsdp = 32, 32, fsdp
  return config


def _hand_state_bytes(params, devices, fsdp):
  """Params, Adam's two moments of each (float32) and 3 int32 scalars (step, 2 counts): a
  weight is split over fsdp devices when one of its dimensions is a multiple of fsdp."""
  total = 0
  for x in jax.tree_util.tree_leaves(params):
    n = math.prod(x.shape)
    total += 3 * 4 * (n // fsdp if any(d % fsdp == 0 for d in x.shape) else n)
  return total + 3 * 4


@pytest.fixture(scope="module")
def reports(tpu):
  """The tiny config's reports, all-data and FSDP over the 4 chips (compiled once)."""
  return {fsdp: compile_report.compile_report(experiment.parse(_tiny(fsdp)), TARGET)
          for fsdp in (1, 4)}


@pytest.mark.parametrize("fsdp", [1, 4])
def test_a_tiny_config_compiled_for_a_tpu_topology_reports_hand_values(reports, fsdp):
  report = reports[fsdp]
  assert report["devices"] == 4 and report["mesh"] == {"data": 4 // fsdp, "fsdp": fsdp}
  cfg = experiment.model_config(_tiny(fsdp), 512)
  params = jax.eval_shape(lambda: run.build_model(_tiny(fsdp).model_type, cfg).init(
      jax.random.PRNGKey(0), np.ones((1, 32), np.int32), np.ones((1, 32), np.int32)))["params"]
  state = _hand_state_bytes(params, 4, fsdp)
  rows = 2 * 32 // 4 * 32 * 4  # this device's inputs and targets, int32
  assert report["state_bytes_per_device"] == state
  # The arguments are the state and the batch (TPU tiles pad the rows, the rng and the
  # scalars to 128 lanes: under 2% here; a weight replicated by mistake would be 4x).
  assert report["memory_bytes"]["arguments"] == pytest.approx(state + rows, rel=0.02)
  assert report["memory_bytes"]["aliased"] >= 0.99 * state  # the donated state is reused
  flops = report["flops_per_device"]
  assert flops["analytic"] == pytest.approx(
      3 * 32 * 32 * (2 * 128 * 512 + 1 * (8 * 128 * 128 + 4 * 128 * 512 + 4 * 32 * 128)  # out, enc
                     + 1 * (8 * 128 * 128 + 4 * 128 * 512 + 4 * 32 * 128  # decoder self
                            + 8 * 128 * 128 + 4 * 32 * 128)) / 4)  # cross
  assert flops["xla"] == pytest.approx(flops["analytic"], rel=0.1)
  kinds = set(report["collectives"])
  assert "all-reduce" in kinds or "reduce-scatter" in kinds  # the gradient
  assert ("all-gather" in kinds) == (fsdp > 1)  # FSDP gathers its weights
  assert report["fits"]
  step, mfu = report["step_seconds_estimate"], report["mfu_estimate"]
  terms = [t for t in report["roofline_seconds"].values() if t is not None]
  assert step == {"overlapped": max(terms), "serial": pytest.approx(sum(terms))}
  assert 0 < mfu["serial"] < mfu["overlapped"] <= 1
  assert "cloud.google.com/tpu/docs/v5e" in compile_report.format_report(report)
  # 'auto' is the Pallas kernel on a TPU, compiled from this CPU host; its FLOPs are hidden
  # from XLA, so the roofline takes the analytic count, and no score array reaches HBM.
  assert report["attention_kernel"] == "splash" and flops["roofline"] == "analytic"
  assert report["roofline_seconds"]["compute"] == pytest.approx(flops["analytic"] / 197e12)
  assert report["big_float32_buffers"] == {"scores": 0, "logits": 0}
  assert 0 < report["hbm_traffic_per_device"] < report["bytes_accessed_per_device"]


def test_fsdp_splits_the_state_and_the_table_has_a_line_a_report(reports):
  assert reports[4]["state_bytes_per_device"] * 3.9 < reports[1]["state_bytes_per_device"]
  assert reports[4]["state_bytes_replicated"] == 0  # every array has a dimension 4 divides
  table = compile_report.table_markdown({"tiny_v5e-2x2_all-data": reports[1],
                                         "tiny_v5e-2x2_fsdp": reports[4]})
  lines = table.splitlines()
  assert len(lines) == 4 and lines[2].startswith("| tiny | v5e:2x2 (4 chips) | all-data |")
  bound = compile_report.batch_bound(reports[1])
  assert bound % 4 == 0 and bound > reports[1]["batch_size"]  # a tiny model: room for more


def test_collectives_are_counted_with_the_bytes_of_their_results():
  hlo = """
  %all-reduce.1 = (f32[2,16]{1,0}, bf16[8]{0}) all-reduce(%a, %b), channel_id=1
  %all-gather-start = (f32[4]{0}, f32[16]{0}) all-gather-start(%c), dimensions={0}
  %all-gather-done = f32[16]{0:T(128)} all-gather-done(%all-gather-start)
  %x = f32[4]{0} add(%all-reduce.1, %y)
  %reduce-scatter.2 = s32[3,5]{1,0} reduce-scatter(%z), dimensions={0}
  """
  assert compile_report.collectives(hlo) == {
      "all-reduce": {"count": 1, "bytes": 2 * 16 * 4 + 8 * 2},
      "all-gather": {"count": 1, "bytes": 16 * 4},
      "reduce-scatter": {"count": 1, "bytes": 15 * 4}}


@pytest.mark.parametrize("batch", [8, 1])
def test_auto_is_splash_on_a_tpu_slice_and_compiles_for_any_batch(tpu, batch):
  """With the slice's mesh in context 'auto' is splash, and the kernel compiles for it whether
  the batch splits over the chips or not (init's one row): a Mosaic kernel outside a
  shard_map would not compile on several devices."""
  from transformer import attention
  from transformer.training import sharding
  devices, _ = compile_report.target_devices(TARGET)
  mesh = sharding.make_mesh(devices, 1)
  rows = sharding.batch_sharding(mesh) if batch % 4 == 0 else sharding.replicated(mesh)
  qkv = jax.ShapeDtypeStruct((batch, 256, 2, 128), jax.numpy.bfloat16, sharding=rows)
  ids = jax.ShapeDtypeStruct((batch, 256), jax.numpy.int32, sharding=rows)

  def attend(q, k, v, ids):
    mask = attention.SegmentMask(ids, ids, causal=True)
    return attention.dot_product_attention(q, k, v, mask=mask, implementation="auto")

  with jax.set_mesh(mesh):
    assert attention.resolve_implementation("auto", qkv, qkv) == "splash"
    compiled = jax.jit(attend).lower(qkv, qkv, qkv, ids).compile()
  assert "tpu_custom_call" in compiled.as_text()


def test_hbm_traffic_counts_what_top_level_ops_read_and_write_in_hbm():
  hlo = """
HloModule m

%fused_computation.1 (p: f32[4,8]) -> f32[4,8] {
  %p = f32[4,8]{1,0} parameter(0)
  ROOT %big = f32[4,8]{1,0} multiply(%p, %p)
}

ENTRY %main (a: f32[4,8], b: bf16[16]) -> (f32[4,8], bf16[16]) {
  %a = f32[4,8]{1,0} parameter(0)
  %b = bf16[16]{0} parameter(1)
  %fusion.1 = f32[4,8]{1,0} fusion(%a), kind=kLoop, calls=%fused_computation.1
  %copy-start = (bf16[16]{0:S(1)}, bf16[16]{0}, u32[]) copy-start(%b)
  %copy-done = bf16[16]{0:T(128)S(1)} copy-done(%copy-start)
  %neg = bf16[16]{0:T(128)S(1)} negate(%copy-done)
  %gte = f32[4,8]{1,0} get-tuple-element(%t), index=0
  %sl = f32[1,8]{1,0} slice(%a), slice={[0:1], [0:8]}
  %sls = ((f32[4,8]{1,0}), f32[2,8]{1,0:S(1)}, s32[]{:S(2)}) slice-start(%a), slice={[0:2], [0:8]}
  %sld = f32[2,8]{1,0:S(1)} slice-done(%sls)
  ROOT %t = (f32[4,8]{1,0}, bf16[16]{0:T(128)S(1)}) tuple(%fusion.1, %neg)
}
"""
  # fusion: reads a (128 B), writes 128 B; copy-start reads b from HBM (32 B); the copy's
  # result and the negate live on chip (S(1)); a slice reads and writes its 32 B, the async
  # one reads its 64 B into VMEM; the fusion body, tuples and views count nothing.
  assert compile_report.hbm_traffic(hlo) == 128 + 128 + 32 + 2 * 32 + 64
  assert compile_report.big_float32_buffers(hlo, 8, 99) == {"scores": 0, "logits": 0}
  scores = hlo.replace("f32[4,8]", "f32[2,8,8]")
  assert compile_report.big_float32_buffers(scores, 8, 99) == {"scores": 1, "logits": 0}
  # Operands printed with their shapes (TPU layouts hold parentheses) are read the same, a
  # `call`'s body (XLA:GPU's command buffers) is top level, and an in-place
  # dynamic-update-slice reads and writes its update.
  shaped = hlo.replace("fusion(%a)", "fusion(f32[4,8]{1,0:T(8,128)(2,1)} %a)")
  assert compile_report.hbm_traffic(shaped) == compile_report.hbm_traffic(hlo)
  gpu = """
%command_buffer (p: f32[4,8]) -> f32[4,8] {
  %p = f32[4,8]{1,0} parameter(0)
  ROOT %k = f32[4,8]{1,0} fusion(%p), kind=kLoop, calls=%fused_computation.1
}

ENTRY %main (a: f32[4,8], u: f32[1,8]) -> f32[4,8] {
  %a = f32[4,8]{1,0} parameter(0)
  %u = f32[1,8]{1,0} parameter(1)
  %c = f32[4,8]{1,0} call(%a), to_apply=%command_buffer
  ROOT %d = f32[4,8]{1,0} dynamic-update-slice(%c, %u, %i, %j)
}
"""
  assert compile_report.hbm_traffic(gpu) == 128 + 128 + 2 * 32
  logits = hlo.replace("f32[4,8]", "f32[2,4,8]")
  assert compile_report.big_float32_buffers(logits, 4, 8) == {"scores": 0, "logits": 1}
  assert compile_report.big_float32_buffers(hlo, 3, 8) == {"scores": 0, "logits": 0}  # a weight


def test_a_gather_reads_its_rows_and_a_workspace_is_not_traffic():
  """The target logits gathered from [4, 1000] bf16 logits read 4 values, not the logits; an
  embedding table gathered by two lookups is read at most once; the s8 workspace that ends a
  cuBLAS call's result is not written (another call's byte arrays are); and each kernel (not
  the views, one for an async pair) is counted once."""
  hlo = """
HloModule m

%gather_fusion (p0: bf16[4,1000], p1: s32[4,1], p2: f32[50,8]) -> (bf16[4,1], f32[6,8]) {
  %p0 = bf16[4,1000]{1,0} parameter(0)
  %view = bf16[4000]{0} bitcast(%p0)
  %p1 = s32[4,1]{1,0} parameter(1)
  %picked = bf16[4,1]{1,0} gather(%view, %p1), offset_dims={}, slice_sizes={1}
  %p2 = f32[50,8]{1,0} parameter(2)
  %rows = f32[3,8]{1,0} gather(%p2, %p1), offset_dims={1}, slice_sizes={1,8}
  %more = f32[3,8]{1,0} gather(%p2, %p1), offset_dims={1}, slice_sizes={1,8}
  %both = f32[6,8]{1,0} concatenate(%rows, %more), dimensions={0}
  ROOT %out = (bf16[4,1]{1,0}, f32[6,8]{1,0}) tuple(%picked, %both)
}

%scale_fusion (q: bf16[4,1000]) -> bf16[4,1000] {
  %q = bf16[4,1000]{1,0} parameter(0)
  ROOT %twice = bf16[4,1000]{1,0} add(%q, %q)
}

ENTRY %main (logits: bf16[4,1000], ids: s32[4,1], table: f32[50,8], w: bf16[8,8]) -> f32[] {
  %logits = bf16[4,1000]{1,0} parameter(0)
  %ids = s32[4,1]{1,0} parameter(1)
  %table = f32[50,8]{1,0} parameter(2)
  %w = bf16[8,8]{1,0} parameter(3)
  %g = (bf16[4,1]{1,0}, f32[6,8]{1,0}) fusion(%logits, %ids, %table), kind=kLoop, \
calls=%gather_fusion
  %s = bf16[4,1000]{1,0} fusion(%logits), kind=kLoop, calls=%scale_fusion
  %mm = (bf16[8,8]{1,0}, s8[4194304]{0}) custom-call(%w, %w), custom_call_target="__cublas$gemm"
  %top = bf16[2,8]{1,0} gather(%w, %ids), offset_dims={1}, slice_sizes={1,8}
  %int8 = (s8[64]{0}, s8[16]{0}) custom-call(%w), custom_call_target="tpu_custom_call"
  %cs = (bf16[8,8]{1,0}, bf16[8,8]{1,0}, u32[]) copy-start(%w)
  %cd = bf16[8,8]{1,0} copy-done(%cs)
  ROOT %r = f32[] constant(0)
}
"""
  gather_fusion = 4 * 2 + 16 + min(2 * 3 * 8 * 4, 50 * 8 * 4) + (4 * 2 + 6 * 8 * 4)
  scale_fusion = 2 * 4 * 1000 * 2  # a fusion that reads the whole logits reads them
  gemm = 2 * 8 * 8 * 2 + 8 * 8 * 2  # reads w twice, writes its result, not its workspace
  top_gather = 2 * 8 * 2 + 16 + 2 * 8 * 2
  int8 = 8 * 8 * 2 + 64 + 16  # another call's byte arrays are results: written
  copy = 8 * 8 * 2 + 8 * 8 * 2  # the async copy reads w, its done half writes
  assert compile_report.hbm_traffic(hlo) == (gather_fusion + scale_fusion + gemm + top_gather
                                             + int8 + copy)
  assert compile_report.kernel_count(hlo) == 6  # fusions 2, calls 2, gather, the copy once


@pytest.mark.parametrize("target,kind", [("v4:2x2x1", "TPU v4"), ("v5p:2x2x1", "TPU v5"),
                                         ("v5e:2x2", "TPU v5 lite")])
def test_one_device_is_one_chip_whose_published_figures_apply(tpu, target, kind):
  # v4 and v5p chips have two TensorCores each; a device per core would halve HBM and peak.
  devices, _ = compile_report.target_devices(target)
  assert len(devices) == 4 and {d.device_kind for d in devices} == {kind}


def test_compile_script_builds_the_main_job_with_the_vocabulary_its_data_gives(tpu):
  """scripts/compile.py on configs/default.py, which takes its vocabulary from the synthetic
  task: 235,712 params, as training builds them (not a 32,000-token guess); and on a machine
  without a TPU, libtpu's search for TPU workers logs no error."""
  env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "TPU_WORKER_HOSTNAMES")}
  proc = subprocess.run([sys.executable, str(REPO / "scripts" / "compile.py"),
                         "--config=configs/default.py", f"--target={TARGET}"],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "235,712 params (vocabulary 35 from the synthetic 'reverse' task)" in proc.stdout
  if not compile_report._tpu_attached():
    assert "E0000" not in proc.stderr and "Source Location Trace" not in proc.stderr


def test_an_unknown_target_is_one_line():
  with pytest.raises(ConfigError, match="Unknown target 'v9x:2x2'"):
    compile_report.target_devices("v9x:2x2")
  # A shape that is not numbers: ValueError before; a count of 0: advice to install a plugin.
  for target, said in (("h100:abc", "needs a GPU count >= 1"), ("h100:0", "needs a GPU count"),
                       ("v5e:4xq", "needs a topology of numbers >= 1")):
    with pytest.raises(ConfigError, match=rf"^Target '{target}' {said}"):
      compile_report.target_devices(target)


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_a_gpu_host_compiles_without_a_gpu_and_its_arguments_are_the_state_and_rows(gpu):
  if importlib.util.find_spec("jax_cuda12_plugin") is None:
    pytest.skip(f"jax's CUDA plugin is not installed (pip install 'jax-cuda12-plugin=="
                f"{jax.__version__}' 'jax-cuda12-pjrt=={jax.__version__}'): no GPU compiler here")
  report = compile_report.compile_report(experiment.parse(_tiny(4)), f"{gpu}:4")
  # 'auto' in bf16 on an NVIDIA GPU is cuDNN's kernel, which JAX lowers only with a GPU
  # attached: compiled from a CPU host for an absent GPU, 'auto' is the einsum path.
  assert report["attention_kernel"] == "einsum"
  cfg = experiment.model_config(_tiny(4), 512)
  params = jax.eval_shape(lambda: run.build_model(_tiny(4).model_type, cfg).init(
      jax.random.PRNGKey(0), np.ones((1, 32), np.int32), np.ones((1, 32), np.int32)))["params"]
  # No tiles on a GPU: the state split 4 ways, this device's rows and the learning rate, a
  # float32 scalar (without dropout the rng is unused, and XLA drops it).
  assert report["memory_bytes"]["arguments"] == (_hand_state_bytes(params, 4, 4) + 2 * 8 * 32 * 4
                                                 + 4)
  assert report["flops_per_device"]["xla"] is None  # XLA:GPU gives no cost analysis
  assert "reduce-scatter" in report["collectives"]  # FSDP's gradient


@pytest.mark.parametrize("head_dim, length", [(12, 256), (264, 256), (64, 17)])
def test_splash_compiles_for_head_dims_and_lengths_cudnn_refuses(tpu, head_dim, length):
  """No refusal of the TPU's kernel is reachable from a config: head dims cuDNN refuses (not a
  multiple of 8, above 256) and odd lengths (padded to the kernel's block) compile for a
  slice, forward and backward, with 'auto' still splash."""
  from transformer import attention
  from transformer.training import sharding
  mesh = sharding.make_mesh(compile_report.target_devices(TARGET)[0], 1)
  rows = sharding.batch_sharding(mesh)
  qkv = jax.ShapeDtypeStruct((4, length, 2, head_dim), jax.numpy.bfloat16, sharding=rows)
  ids = jax.ShapeDtypeStruct((4, length), jax.numpy.int32, sharding=rows)

  def loss(q, k, v, ids):
    mask = attention.SegmentMask(ids, ids, causal=True)
    out = attention.dot_product_attention(q, k, v, mask=mask, implementation="auto")
    return out.astype(jax.numpy.float32).sum()

  with jax.set_mesh(mesh):
    compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(qkv, qkv, qkv, ids).compile()
  assert "tpu_custom_call" in compiled.as_text()


def test_an_explicit_kernel_is_checked_against_the_target_devices_not_this_host(tpu):
  """run.device_mesh asks the platform of the devices it is given (a TPU slice compiled for
  from this CPU host): cudnn is refused naming the TPU, splash is taken."""
  devices, _ = compile_report.target_devices(TARGET)
  config = _tiny(1)
  config.model.attention_impl = "cudnn"
  with pytest.raises(ConfigError, match="JAX runs on tpu"):
    run.device_mesh(experiment.parse(config), devices)
  config.model.attention_impl = "splash"
  run.device_mesh(experiment.parse(config), devices)
