"""The matmul peak, timing, and scripts/benchmark.py end to end (the FLOP formula: test_model_summary.py)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from transformer.config import ModelConfig
from transformer.research import benchmarking


def test_matmul_peak_is_positive(devices):
  assert benchmarking.matmul_peak("float32", n=128, repeats=1, devices=devices[:2]) > 0


def test_benchmark_script_reports_every_mode(tmp_path):
  """scripts/benchmark.py end to end on a tiny config: one JSON with every mode's figures."""
  out = tmp_path / "bench.json"
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  proc = subprocess.run(
      [sys.executable, str(REPO / "scripts" / "benchmark.py"), "--config=configs/default.py",
       "--config.model.vocab_size=35", "--config.model.d_model=32", "--config.model.d_ff=64",
       "--config.model.num_encoder_layers=1", "--config.model.num_decoder_layers=1",
       "--config.batch_size=8", "--config.max_len=8",
       "--mode=train,eval,diagnostics,decode", "--steps=1", "--repeats=1",
       "--diagnostics_every=2", "--decode_tokens=8", f"--output={out}",
       f"--profile={tmp_path / 'profile'}"],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  result = json.loads(out.read_text())
  assert result["mfu"] > 0 and result["compile_seconds"] > 0 and result["eval_tokens_per_sec"] > 0
  diag = result["diagnostics"]
  assert diag["every_steps"] == 2 and diag["seconds_with"] > 0 and diag["seconds_without"] > 0
  assert diag["overhead"] == pytest.approx(diag["seconds_with"] / diag["seconds_without"] - 1)
  assert result["decode"]["cached_tokens_per_sec"] > 0 and result["decode"]["speedup"] > 0
  assert result["profile_dir"] == str(tmp_path / "profile")
  assert [t.stat().st_size > 0 for t in (tmp_path / "profile").rglob("*.xplane.pb")] == [True]


def test_benchmark_decoding_reports_both_paths():
  result = benchmarking.benchmark_decoding(
      ModelConfig(vocab_size=20, d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1,
                  num_decoder_layers=1, max_len=8, dropout_rate=0.0), batch_size=2, num_tokens=8,
                                       source_len=4, bucket=8, repeats=2)
  assert set(result) == {"cached_tokens_per_sec", "uncached_tokens_per_sec", "speedup"}
  assert all(v > 0 for v in result.values())
