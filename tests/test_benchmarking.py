"""The matmul peak, timing, and scripts/benchmark.py end to end (the FLOP formula:
test_model_summary.py)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import batch_identity
import script_starter
from conftest import REPO, forked_script_runs, script_env
from transformer.config import ModelConfig
from transformer.research import benchmarking
from transformer.research.sweeps import grid
from transformer.training import experiment, run
from transformer.inference.decode_config import DecodeConfig


def test_matmul_peak_is_positive(devices):
  assert benchmarking.matmul_peak("float32", n=128, repeats=1, devices=devices[:2]) > 0


@pytest.mark.parametrize("kind, dtype, peak", [
    ("NVIDIA H200", "bfloat16", 989e12), ("NVIDIA H200", "float32", 495e12),  # TF32
    ("NVIDIA H100 80GB HBM3", "bfloat16", 989e12), ("NVIDIA A100-SXM4-80GB", "float32", 156e12),
    ("TPU v5 lite", "bfloat16", 197e12), ("TPU v5 lite", "float32", 197e12),  # one bf16 pass
    ("TPU v5", "bfloat16", 459e12), ("TPU v6 lite", "bfloat16", 918e12),
    ("TPU v4", "float32", 275e12)])
def test_mfu_divides_by_the_published_peak_of_the_chip_and_dtype(kind, dtype, peak):
  got = benchmarking.mfu_figures(0.3 * 4 * peak, kind, 4, dtype, measured_peak=1e9)
  assert (got["mfu"] == pytest.approx(0.3)
          and got["mfu_peak_tflops"] == pytest.approx(4 * peak / 1e12))
  assert got["mfu_peak_source"].startswith("published peak of 4 x ")


@pytest.mark.parametrize("kind", ["NVIDIA H200", "TPU v5 lite", "cpu"])
def test_mfu_is_never_above_one(kind):
  """A faked chip whose step would beat its peak (the H200's 166% a 2048 matmul chain gave):
  no MFU is printed, and the note says why."""
  for achieved in (1e12, 1e15, 1e18):
    got = benchmarking.mfu_figures(achieved, kind, 1, "bfloat16", measured_peak=5e13)
    assert got["mfu"] is None or 0 < got["mfu"] <= 1
    assert (got["mfu"] is None) == ("mfu_note" in got)
  assert benchmarking.mfu_figures(1e18, kind, 1, "bfloat16", 5e13)["mfu_note"].startswith(
      "the model's 1e+06 TFLOP/s exceed the peak")


def test_a_chip_without_published_figures_is_divided_by_the_measured_peak():
  got = benchmarking.mfu_figures(2e10, "cpu", 1, "float32", measured_peak=1e11)
  assert got["mfu"] == pytest.approx(0.2)
  assert got["mfu_peak_source"] == "measured matmul peak (cpu has no published peak in chips.CHIPS)"


def test_benchmark_script_reports_every_mode(tmp_path, tfds_dir):
  """scripts/benchmark.py end to end on a tiny config: one JSON with every mode's figures.
  The loop mode runs the main job, shrunk: the loop's steps a second (the windows after the
  compiling one), the step's alone, their ratio, and the host's time a step and its wait for
  batches. No time is asserted."""
  out = tmp_path / "bench.json"
  env = script_env()
  proc = script_starter.run(REPO / "scripts" / "benchmark.py", [
      "--config=configs/default.py", f"--config.tfds_data_dir={tfds_dir}",
      "--config.model.d_model=32", "--config.model.d_ff=64",
      "--config.model.num_encoder_layers=1", "--config.model.num_decoder_layers=1",
      "--config.batch_size=8", "--config.max_len=17", "--mode=train,eval,diagnostics,decode,loop",
      "--steps=1", "--repeats=1", "--diagnostics_every=2", "--decode_tokens=17",
      "--loop_steps=12", f"--output={out}", f"--profile={tmp_path / 'profile'}"], env=env,
      cwd=REPO)
  assert proc.returncode == 0, proc.stderr[-2000:]
  result = json.loads(out.read_text())
  assert result["mfu"] > 0 and result["compile_seconds"] > 0 and result["eval_tokens_per_sec"] > 0
  assert result["mfu_peak_source"].startswith("measured matmul peak (cpu")
  # The vocabulary the synthetic task gives training (32 symbols + 3 reserved ids).
  assert (result["vocab_size"], result["vocab_from"]) == (35, "the synthetic 'reverse' task")
  assert result["attention_kernel"] == "einsum"  # 'auto' on a CPU
  diag = result["diagnostics"]
  assert diag["every_steps"] == 2 and diag["seconds_with"] > 0 and diag["seconds_without"] > 0
  assert diag["overhead"] == pytest.approx(diag["seconds_with"] / diag["seconds_without"] - 1)
  assert result["decode"]["cached_tokens_per_sec"] > 0 and result["decode"]["speedup"] > 0
  loop = result["loop"]
  assert (loop["steps"], loop["log_every_steps"], loop["timed_steps"]) == (12, 3, 9)
  assert loop["step_alone_steps_per_sec"] == pytest.approx(1 / result["train_step_seconds"])
  assert loop["ratio"] == pytest.approx(loop["steps_per_sec"] / loop["step_alone_steps_per_sec"])
  assert 0 <= loop["input_ms_per_step"] <= loop["host_ms_per_step"] and loop["steps_per_sec"] > 0
  assert result["profile_dir"] == str(tmp_path / "profile")
  assert [t.stat().st_size > 0 for t in (tmp_path / "profile").rglob("*.xplane.pb")] == [True]


def test_benchmark_flags_are_checked_before_any_work(tmp_path):
  """Each was a traceback (UnboundLocalError, StatisticsError, a JAX error) or, for --output,
  a FileNotFoundError after the whole benchmark had run; --mode= measured nothing, rc 0."""
  cases = {"steps": (["--steps=0"], "error: flag --steps=0: 0 is not a positive integer"),
           "repeats": (["--repeats=0"], "error: flag --repeats=0: 0 is not a positive integer"),
           "decode_batch": (["--mode=decode", "--decode_batch=0"],
                            "error: flag --decode_batch=0"),
           # Before the config is parsed: its own mistake comes second.
           "mode": (["--mode=", "--config.batch_size=0"], "error: No benchmark mode given"),
           # Round 7, item 8: absl's validator message printed the whole config (2,117 chars).
           "table": (["--table=docs"], "error: Pass one of --config or --sweep (to benchmark "
                     "it) or --table (to tabulate a folder of results), not --config and "
                     "--table.\n"),
           "output": ([f"--output={tmp_path}/none/x.json"],
                      f"error: Cannot write --output={tmp_path}/none/x.json: the directory")}
  results = forked_script_runs(REPO / "scripts" / "benchmark.py", {
      name: ["--config=configs/default.py", *flags] for name, (flags, _) in cases.items()},
      before="import transformer.research.benchmarking, transformer.research.sweeps.grid")
  for name, (flags, said) in cases.items():
    code, output = results[name]["code"], results[name]["output"]
    assert code == 1 and output.startswith(said), (flags, output[-800:])
    assert len(output.strip().splitlines()) == 1, output[-800:]


@pytest.mark.parametrize("model_type", ["seq2seq", "lm"])
def test_benchmark_decoding_reports_both_paths_for_every_model_kind(model_type):
  result = benchmarking.benchmark_decoding(
      ModelConfig(vocab_size=20, d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1,
                  num_decoder_layers=1, max_len=8, dropout_rate=0.0), batch_size=2, num_tokens=8,
      model_type=model_type, source_len=4, bucket=8, repeats=2)
  assert set(result) == {"cached_tokens_per_sec", "uncached_tokens_per_sec", "speedup"}
  assert all(v > 0 for v in result.values())


@pytest.mark.parametrize("model_type", ["seq2seq", "lm"])
def test_the_uncached_path_decodes_the_cached_paths_tokens(model_type):
  """Both paths of the decoding benchmark compute the same greedy tokens (a source's output,
  or a prompt's continuation), so the speedup compares equal work."""
  from transformer import models
  from transformer.inference import decoding
  cfg = ModelConfig(vocab_size=20, d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1,
                    num_decoder_layers=1, max_len=16, dropout_rate=0.0)
  model = run.build_model(model_type, cfg)
  inputs = jnp.asarray(np.random.default_rng(0).integers(3, 20, (2, 4)), jnp.int32)
  params = models.init_params(model, jax.random.PRNGKey(0),
                              {"inputs": inputs, "targets": jnp.ones((2, 8), jnp.int32)})
  compile_widths, uncached = benchmarking._uncached_greedy(model, params, inputs, 8, bucket=4)
  compile_widths()
  cached = decoding.decode(model, params, inputs, DecodeConfig(
      method="greedy", eos_id=-1, extra_len=8), out_limit=jnp.full((2,), 8, jnp.int32))[0]
  np.testing.assert_array_equal(uncached(), np.asarray(cached)[:, :8])


def test_a_folder_of_results_is_one_table_and_the_committed_ones_match_their_readmes(tmp_path):
  """comparison_table: a row per pass, config and tree, 'before' first, a missing one 'not
  run'; a JSON file that is no train benchmark is one line; and each docs/gpu-runs/ folder's
  README shows exactly the table its JSON files give."""
  result = {"train_step_seconds": 0.0421, "train_tokens_per_sec": 1.5e6,
            "train_model_tflops_per_sec": 300.4, "mfu": 0.3071, "peak_memory_gib": 12.655,
            "attention_kernel": "cudnn"}
  for name in ("p1/base_after", "p1/base_before", "p2/base_after"):
    (tmp_path / name).parent.mkdir(exist_ok=True)
    (tmp_path / f"{name}.json").write_text(json.dumps(result))
  assert benchmarking.comparison_table(str(tmp_path))[2:] == [
      "| p1 | base | before | 42.1 ms | 1.500 M | 300 | 30.7% | 12.65 GiB | cudnn |",
      "| p1 | base | after | 42.1 ms | 1.500 M | 300 | 30.7% | 12.65 GiB | cudnn |",
      "| p2 | base | before | not run | | | | | |",
      "| p2 | base | after | 42.1 ms | 1.500 M | 300 | 30.7% | 12.65 GiB | cudnn |"]
  (tmp_path / "p2" / "big_after.json").write_text("not json")
  with pytest.raises(benchmarking.ConfigError, match="big_after.json is not a result of"):
    benchmarking.comparison_table(str(tmp_path))
  folders = [p.parent for p in (REPO / "docs" / "gpu-runs").glob("*/pass1")]
  assert folders
  for folder in folders:
    shown = [line for line in (folder / "README.md").read_text().splitlines()
             if line.startswith(("| pass", "|---"))]
    assert shown == benchmarking.comparison_table(str(folder)), folder.name


def test_the_loop_mode_runs_p1_at_a_tiny_size(tmp_path, tfds_dir):
  """P1's point (configs/sweeps/p1_paper_size.py: packed rows of a text corpus, its pipeline,
  bf16) shrunk to a tiny model on a corpus the test writes: its loop beside its step."""
  config = grid.named_point_config(str(REPO / "configs" / "sweeps" / "p1_paper_size.py"))
  files = batch_identity.write_corpora(tmp_path / "corpus")
  config.update(data_files=files["text"], tfds_data_dir=tfds_dir, batch_size=8, max_len=32)
  config.tokenizer.update(path=str(batch_identity.SPM_MODEL), vocab_size=320)
  config.model.update(d_model=32, num_heads=2, d_ff=64, num_decoder_layers=1)
  result = benchmarking.benchmark(experiment.parse(config), ["loop"], steps=1, repeats=1,
                                  loop_steps=8)
  assert result["dtype"] == "bfloat16" and result["d_model"] == 32
  assert result["loop"]["timed_steps"] == 6 and result["loop"]["steps_per_sec"] > 0
