"""The paper-size campaign (configs/sweeps/p1_paper_size.py) run end to end at tiny size on
this CPU: its dry run's plan, a stop by the time budget between points, a restart that runs
the rest and reuses what was done, choosing before reporting, one compilation per arm; and
what travels to a GPU host."""

import dataclasses
import json
import lzma
import os
import subprocess

import jax
from jax.experimental.compilation_cache import compilation_cache

from test_grid import REPO
from transformer.research import sweeps
from transformer.research.sweeps import runner

CAMPAIGN = os.path.join(REPO, "configs/sweeps/p1_paper_size.py")
# What a GPU host is sent (launch/campaign_bundle.sh): the package, scripts, configs and
# launchers, the campaign's results directory and the xz'd corpus.
TRAVEL_LIMIT = 50 * 2**20


def _tiny_campaign(tmp_path):
  """The campaign's own sweep (its arms, pairs, protocol) at d_model 32, 1 layer, 3 steps, on
  a text file written here: 2 rates, 1 choosing and 2 reporting seeds, 16 points."""
  corpus = tmp_path / "corpus.txt.xz"
  corpus.write_bytes(lzma.compress("\n\n".join(
      f"paragraph {i}: {'some words of text ' * (1 + i % 5)}" for i in range(300)).encode()))
  sweep = sweeps.load_sweep(CAMPAIGN)
  tiny = {"data_files": str(corpus), "tfds_data_dir": str(tmp_path / "tfds"),
          "tokenizer.kind": "bytes", "model.d_model": 32, "model.num_heads": 2,
          "model.d_ff": 64, "model.num_decoder_layers": 1, "model.dtype": "float32",
          "max_len": 32, "batch_size": 8, "num_train_steps": 3, "warmup_steps": 1,
          "log_every_steps": 1, "eval_every_steps": 3, "diagnostics_every_steps": 3,
          "checkpoint_every_steps": 3, "async_checkpoints": False, "data_threads": 1,
          "eval_fraction": 0.1, "test_fraction": 0.1}
  return dataclasses.replace(
      sweep, base=os.path.join(REPO, sweep.base), fixed={**sweep.fixed, **tiny},
      tune={"learning_rate": sweep.tune["learning_rate"][:2]}, seeds=(0,), confirm_seeds=(3, 4),
      extend_edges=0)


def test_the_campaign_plans_stops_on_its_budget_resumes_and_compiles_once_an_arm(
    tmp_path, monkeypatch):
  sweep = _tiny_campaign(tmp_path)
  monkeypatch.setattr(runner, "load_sweep", lambda path: sweep)
  workdir = str(tmp_path / "w")
  options = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
             "jax_persistent_cache_min_entry_size_bytes")
  before = {o: getattr(jax.config, o) for o in options}
  runner.enable_compilation_cache(str(tmp_path / "jax_cache"))
  try:
    plan = sweeps.run_command(CAMPAIGN, workdir, dry_run=True)
    lines = plan.splitlines()
    assert lines[0].startswith("Sweep p1_paper_size: 0 point(s) finished, 8 to run now (~")
    assert " ms a step on 8 x cpu" in lines[0]
    assert "then 8 reporting point(s) once their arms have chosen a rate" in lines[0]
    assert len(lines) == 9 and all("(chooses, 3 steps, ~" in line for line in lines[1:])

    # A budget shorter than any point: the call runs one point and stops between points.
    first = sweeps.run_sweep(sweep, workdir, time_budget=1e-3)
    assert len(first) == 1
    stored = (tmp_path / "w" / "points" / first[0].name / "result.json").read_text()
    # The same command again, without a budget: the rest, the finished point reused.
    rest = sweeps.run_sweep(sweep, workdir)
    assert len(rest) == 15 and first[0] not in rest
    assert (tmp_path / "w" / "points" / first[0].name / "result.json").read_text() == stored
  finally:  # the cache as it was, for the worker's other tests
    for option, value in before.items():
      jax.config.update(option, value)
    compilation_cache.reset_cache()
  order = first + rest
  seeds = [p.seed for p in order]
  assert seeds[:8] == [0] * 8 and sorted(seeds[8:]) == [3] * 4 + [4] * 4  # every arm chooses before any reports

  results = {r["name"]: r for r in sweeps.load_results(workdir)}
  compiled_by_arm = {}
  for point in order:  # in the order they ran
    compiled_by_arm.setdefault(runner.arm_key(sweep, point.overrides), []).append(
        sum(results[point.name]["compiled"].values()))
  assert len(compiled_by_arm) == 4
  for arm, counts in compiled_by_arm.items():
    # The arm's first point compiles its programs; its other rates and seeds read them from
    # the cache: one compilation an arm.
    assert counts[0] > 0 and counts[1:] == [0, 0, 0], (arm, counts)
  train_compiles = [n for r in results.values() for name, n in r["compiled"].items()
                    if "train_step" in name]
  assert sum(train_compiles) <= 4  # the train step at most once an arm

  summary = sweeps.aggregate(sweep, workdir, command="CMD")
  assert summary["points"] == 16
  table = (tmp_path / "w" / "results.md").read_text()
  for arm in ("paper", "no_scale", "pe_down", "ratio_matched"):
    assert f"| {arm} |" in table


def test_what_a_gpu_host_is_sent_fits_in_50_mib(tmp_path):
  """launch/campaign_bundle.sh's tar, with a stand-in of the corpus's size (its manifest's):
  0.7 MiB of files and 23.8 MiB of corpus when this was written."""
  with open(os.path.join(REPO, "docs/sweeps/p1_paper_size/corpus.json")) as f:
    corpus_bytes = json.load(f)["xz_bytes"]
  corpus = tmp_path / "debian_docs_en.txt.xz"
  corpus.write_bytes(os.urandom(corpus_bytes))
  out = tmp_path / "p1.tar"
  proc = subprocess.run(["bash", os.path.join(REPO, "launch/campaign_bundle.sh"), str(out),
                         str(corpus)], capture_output=True, text=True)
  assert proc.returncode == 0, proc.stderr
  names = subprocess.run(["tar", "-tf", str(out)], capture_output=True, text=True,
                         check=True).stdout.split()
  for needed in ("setup.py", "transformer/training/loop.py", "scripts/sweep.py",
                 "configs/sweeps/p1_paper_size.py", "data/debian_docs_en.txt.xz"):
    assert needed in names
  size = out.stat().st_size
  print(f"travels: {size / 2**20:.1f} MiB of {TRAVEL_LIMIT / 2**20:.0f} "
        f"(corpus {corpus_bytes / 2**20:.1f} MiB)")
  assert size <= TRAVEL_LIMIT
  missing = subprocess.run(["bash", os.path.join(REPO, "launch/campaign_bundle.sh"),
                            str(tmp_path / "x.tar"), str(tmp_path / "none.xz")],
                           capture_output=True, text=True)
  assert missing.returncode == 1 and "campaign_bundle: no corpus at" in missing.stderr
  usage = subprocess.run(["bash", os.path.join(REPO, "launch/campaign_bundle.sh"), "-h"],
                         capture_output=True, text=True)
  assert usage.returncode == 0 and usage.stdout.startswith("Packs what a GPU host")
