"""The analytic FLOP count against XLA's own count; scripts/benchmark.py end to end."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from conftest import REPO
from transformer.research import benchmarking
from transformer.config import ModelConfig
from transformer.models import DecoderOnly, Transformer


def _xla_flops(fn, *args):
  analysis = jax.jit(fn).lower(*args).compile().cost_analysis()
  analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
  return analysis["flops"]


@pytest.mark.parametrize("decoder_only", [False, True])
@pytest.mark.parametrize("activation", ["relu", "swiglu"])
def test_forward_flops_match_xla(decoder_only, activation):
  cfg = ModelConfig(vocab_size=1000, d_model=128, num_heads=4, d_ff=512, num_encoder_layers=2,
                    num_decoder_layers=2, max_len=64, dropout_rate=0.0, activation=activation)
  S, T = 48, 32
  source, target = jnp.ones((1, S), jnp.int32), jnp.ones((1, T), jnp.int32)
  if decoder_only:
    model = DecoderOnly(cfg)
    variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), target)
    xla = _xla_flops(lambda v, t: model.apply(v, t), variables, target)
  else:
    model = Transformer(cfg)
    variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), source, target)
    xla = _xla_flops(lambda v, s, t: model.apply(v, s, t), variables, source, target)
  ours = benchmarking.forward_flops(cfg, S, T, decoder_only=decoder_only)
  # XLA also counts softmax, norms and activations (a few percent here); matmuls must dominate.
  assert 1.0 <= xla / ours < 1.1, (xla, ours)


def test_train_is_three_forwards():
  cfg = ModelConfig(vocab_size=100, d_model=32, num_heads=2, d_ff=64)
  assert benchmarking.train_flops_per_step(cfg, 4, 10, 12) == 12 * benchmarking.forward_flops(cfg, 10, 12)


def test_matmul_peak_is_positive(devices):
  assert benchmarking.matmul_peak("float32", n=128, repeats=1, devices=devices[:2]) > 0


def test_benchmark_script_reports_every_mode(tmp_path):
  """scripts/benchmark.py end to end on a tiny config: one JSON with every mode's figures."""
  out = tmp_path / "bench.json"
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  proc = subprocess.run(
      [sys.executable, str(REPO / "scripts" / "benchmark.py"), "--config=configs/default.py",
       "--config.model.vocab_size=35", "--config.batch_size=8", "--config.max_len=8",
       "--mode=train,eval,diagnostics,decode", "--steps=1", "--repeats=1",
       "--diagnostics_every=2", "--decode_tokens=8", f"--output={out}"],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  result = json.loads(out.read_text())
  assert result["mfu"] > 0 and result["compile_seconds"] > 0 and result["eval_tokens_per_sec"] > 0
  diag = result["diagnostics"]
  assert diag["every_steps"] == 2 and diag["seconds_with"] > 0 and diag["seconds_without"] > 0
  assert diag["overhead"] == pytest.approx(diag["seconds_with"] / diag["seconds_without"] - 1)
  assert result["decode"]["cached_tokens_per_sec"] > 0 and result["decode"]["speedup"] > 0


def test_benchmark_decoding_reports_both_paths():
  result = benchmarking.benchmark_decoding(
      ModelConfig(vocab_size=20, d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1,
                  num_decoder_layers=1, max_len=8, dropout_rate=0.0), batch_size=2, num_tokens=8,
                                       source_len=4, bucket=8, repeats=2)
  assert set(result) == {"cached_tokens_per_sec", "uncached_tokens_per_sec", "speedup"}
  assert all(v > 0 for v in result.values())
