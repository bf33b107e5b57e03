"""research.analysis through scripts/analyze.py on a tiny trained run: the files it writes."""

import json
import os
import shutil

import jax
import numpy as np
import pytest

import script_starter
from conftest import REPO, script_env
from transformer.errors import ConfigError, RunError
from transformer.research import analysis
from transformer.trained import loading
from transformer.training import experiment, loop, writers


def test_train_with_diagnostics_then_analyze(tiny_config, tmp_path):
  workdir = str(tmp_path / "run")
  tiny_config.diagnostics_every_steps = 2
  tiny_config.num_train_steps = 6
  tiny_config.eval_every_steps = 3
  tiny_config.checkpoint_every_steps = 3
  loop.train_and_evaluate(experiment.parse(tiny_config), workdir)

  records = writers.read_metrics(workdir, "diagnostics")
  assert [r["step"] for r in records] == [0, 2, 4, 6]  # step 0: the scales at init
  assert {"encoder/embed/ratio", "decoder/embed/bucket_0/ratio", "decoder/embed/bucket_3/ratio",
          "output/log_z"} <= set(records[0])
  assert "grad_norm/embedding" not in records[0]
  # Buckets are quantiles of the ids seen so far, so each holds tokens from step 0 on.
  assert all(np.isfinite(records[0][f"decoder/embed/bucket_{b}/ratio"] or np.nan)
             for b in range(4))
  assert {"encoder/embed/ratio", "decoder/layer_0/cross_attention/head_1/entropy",
          "decoder/embed/bucket_0/ratio", "output/log_z", "grad_norm/embedding",
          "update_ratio/decoder/layer_0"} <= set(records[1])
  assert records[1]["update_ratio/embedding"] > 0

  # Written by 8 devices (tests/conftest.py), analysed by a process with one device.
  assert jax.device_count() == 8
  proc = script_starter.run(REPO / "scripts" / "analyze.py",
                            [f"--workdir={workdir}", "--num_batches=2"], env=script_env(), cwd=REPO)
  assert proc.returncode == 0, proc.stderr[-2000:]
  plots = os.path.join(workdir, "plots")
  for name in ("analysis.md", "analysis.json", "attention_entropy.png", "logit_variance.png",
               "embed_ratio_by_frequency.png", "embed_posemb_ratio.png", "log_z.png", "loss.png"):
    assert os.path.getsize(os.path.join(plots, name)) > 0, name
  with open(os.path.join(plots, "analysis.json")) as f:
    saved = json.load(f)
  assert {"workdir", "step", "num_batches", "model", "diagnostics", "embedding", "residual_rms",
          "attention", "output", "plots"} <= set(saved)
  assert saved["step"] == 6 and saved["num_batches"] == 2 and saved["devices"] == 1
  assert set(saved["attention"]) == {"encoder/layer_0/self_attention",
                                     "decoder/layer_0/self_attention",
                                     "decoder/layer_0/cross_attention"}
  assert len(saved["attention"]["decoder/layer_0/cross_attention"]["entropy"]) == 2  # heads
  assert set(saved["embedding"]) == {"encoder", "decoder"}
  # Synthetic reverse task, 512 train examples of 2-8 symbols + EOS on each side; unpacked rows
  # consume padding too, so no epoch count.
  assert 512 * 2 * 3 <= saved["data"]["train_tokens"] <= 512 * 2 * 9
  assert saved["data"]["epochs"] is None
  assert "entropy_uniform" in saved["attention"]["decoder/layer_0/self_attention"]

  # Attention maps of a source sentence: the encoder's 1 layer x 2 heads, tokens + EOS.
  text = loading.load(workdir).tokenizer.decode([3, 4, 5])
  made = analysis.attention_map_figure(workdir, text)
  assert made["panels"] == 1 * 2 and made["tokens"][-1] == "</s>" and len(made["tokens"]) == 4
  assert made["path"] == os.path.join(workdir, "plots", "attention_maps.png")
  assert os.path.getsize(made["path"]) > 10000
  with pytest.raises(ConfigError, match="holds no tokens"):
    analysis.attention_map_figure(workdir, "")
  assert "ratio" in saved["embedding"]["encoder"]
  # Where the analysis cannot be written, it says so before doing the work.
  shutil.rmtree(plots)
  with open(plots, "w") as f:
    f.write("a file where the plots folder goes")
  with pytest.raises(RunError, match=r"The analysis is written to .*/plots, which cannot be "
                     "written"):
    analysis.analyze(workdir, num_batches=1)


def test_zero_batches_is_a_mistake_not_an_empty_eval_split():
  with pytest.raises(ConfigError, match="num_batches=0 must be >= 1"):
    analysis.analyze("/no/such/workdir", num_batches=0)

