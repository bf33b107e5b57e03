"""scripts/analyze.py on a tiny trained run: the files it writes and their keys."""

import importlib.util
import json
import os

from conftest import REPO
from transformer.training import loop, writers


def _analyze_module():
  spec = importlib.util.spec_from_file_location("analyze", REPO / "scripts" / "analyze.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_train_with_diagnostics_then_analyze(tiny_config, tmp_path):
  workdir = str(tmp_path / "run")
  tiny_config.diagnostics_every_steps = 2
  tiny_config.num_train_steps = 6
  tiny_config.eval_every_steps = 3
  tiny_config.checkpoint_every_steps = 3
  loop.train_and_evaluate(tiny_config, workdir)

  records = writers.read_metrics(workdir, "diagnostics")
  assert [r["step"] for r in records] == [2, 4, 6]
  assert {"encoder/embed/ratio", "decoder/layer_0/cross_attention/head_1/entropy",
          "output/log_z", "grad_norm/embedding", "update_ratio/decoder/layer_0"} <= set(records[0])
  assert records[0]["update_ratio/embedding"] > 0

  result = _analyze_module().main(["analyze.py", f"--workdir={workdir}", "--num_batches=2"])
  plots = os.path.join(workdir, "plots")
  for name in ("analysis.md", "analysis.json", "attention_entropy.png", "logit_variance.png",
               "embed_posemb_ratio.png", "loss.png"):
    assert os.path.getsize(os.path.join(plots, name)) > 0, name
  with open(os.path.join(plots, "analysis.json")) as f:
    saved = json.load(f)
  assert {"workdir", "step", "num_batches", "model", "diagnostics", "embedding", "residual_rms",
          "attention", "output", "plots"} <= set(saved)
  assert saved["step"] == 6 and saved["num_batches"] == 2 == result["num_batches"]
  assert set(saved["attention"]) == {"encoder/layer_0/self_attention",
                                     "decoder/layer_0/self_attention",
                                     "decoder/layer_0/cross_attention"}
  assert len(saved["attention"]["decoder/layer_0/cross_attention"]["entropy"]) == 2  # heads
  assert set(saved["embedding"]) == {"encoder", "decoder"}
  assert "ratio" in saved["embedding"]["encoder"]
