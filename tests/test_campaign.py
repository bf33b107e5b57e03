"""The paper-size campaign (configs/sweeps/p1_paper_size.py and p1_sizes.py) run end to end at
tiny size on this CPU: its dry run's plan, a stop by the time budget between points, a restart
that runs the rest and reuses what was done, choosing before reporting, one compilation per
arm; its arms and sizes in one setup, its failure rule on the runs that ran, its edges
extended; and what travels to a GPU host."""

import dataclasses
import json
import lzma
import os
import shutil
import subprocess

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache

from test_grid import REPO
from transformer.research import sweeps
from transformer.research.sweeps import report, runner, tuning

CAMPAIGN = os.path.join(REPO, "configs/sweeps/p1_paper_size.py")
SIZES = os.path.join(REPO, "configs/sweeps/p1_sizes.py")
RESULTS = os.path.join(REPO, "docs/sweeps/p1_paper_size")
# What a GPU host is sent (launch/campaign_bundle.sh): the package, scripts, configs and
# launchers, the campaign's results directory and the xz'd corpus.
TRAVEL_LIMIT = 50 * 2**20


ARMS = ("no_scale", "mup")  # two of the campaign's four: the plain one and the one of its own rate


def _tiny_campaign(tmp_path):
  """The campaign's own sweep (its protocol, two of its arms and their pair) at d_model 32,
  1 layer, 3 steps, on a text file written here: 2 rates, 1 choosing and 2 reporting seeds,
  8 points."""
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
  keep = [sweep.arm_names.index(name) for name in ARMS]
  axes = ({field: [values[i] for i in keep] for field, values in sweep.axes[0].items()},)
  return dataclasses.replace(
      sweep, axes=axes, arm_names=ARMS, pairs=(ARMS[::-1],),
      base=os.path.join(REPO, sweep.base), fixed={**sweep.fixed, **tiny},
      tune={"learning_rate": sweep.tune["learning_rate"][:2]}, seeds=(0,), confirm_seeds=(3, 4),
      extend_edges=0,
      # 3 steps hold no step 500 to stall from; the rule is tested on P1's own runs below.
      failure=None)


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
    assert lines[0].startswith("Sweep p1_paper_size: 0 point(s) finished, 4 to run now (~")
    assert " ms a step on 8 x cpu" in lines[0]
    assert "then 4 reporting point(s) once their arms have chosen a rate" in lines[0]
    assert len(lines) == 5 and all("(chooses, d_model 32 x 1, 3 steps, ~" in line
                                   for line in lines[1:])

    # A budget shorter than any point: the call runs one point and stops between points.
    first = sweeps.run_sweep(sweep, workdir, time_budget=1e-3)
    assert len(first) == 1
    stored = (tmp_path / "w" / "points" / first[0].name / "result.json").read_text()
    # The same command again, without a budget: the rest, the finished point reused.
    rest = sweeps.run_sweep(sweep, workdir)
    assert len(rest) == 7 and first[0] not in rest
    assert (tmp_path / "w" / "points" / first[0].name / "result.json").read_text() == stored
  finally:  # the cache as it was, for the worker's other tests
    for option, value in before.items():
      jax.config.update(option, value)
    compilation_cache.reset_cache()
  order = first + rest
  seeds = [p.seed for p in order]
  assert seeds[:4] == [0] * 4 and sorted(seeds[4:]) == [3] * 2 + [4] * 2  # every arm chooses before any reports

  results = {r["name"]: r for r in sweeps.load_results(workdir)}
  compiled_by_arm = {}
  for point in order:  # in the order they ran
    compiled_by_arm.setdefault(runner.arm_key(sweep, point.overrides), []).append(
        sum(results[point.name]["compiled"].values()))
  assert len(compiled_by_arm) == 2
  for arm, counts in compiled_by_arm.items():
    # The arm's first point compiles its programs; its other rates and seeds read them from
    # the cache: one compilation an arm.
    assert counts[0] > 0 and counts[1:] == [0, 0, 0], (arm, counts)
  train_compiles = [n for r in results.values() for name, n in r["compiled"].items()
                    if "train_step" in name]
  assert sum(train_compiles) <= 2  # the train step at most once an arm

  summary = sweeps.aggregate(sweep, workdir, command="CMD")
  assert summary["points"] == 8
  table = (tmp_path / "w" / "results.md").read_text()
  for arm in ARMS:
    assert f"| {arm} |" in table
  # muP's arm trains its embedding at its own rate; the others leave the field at its default.
  mup = [r for r in results.values() if "embed_learning_rate" in r["overrides"]]
  assert len(mup) == 4 and all(r["config"]["embed_learning_rate"] == 1e-2 for r in mup)
  assert all(r["config"]["embed_learning_rate"] == 0.0 for r in results.values()
             if r not in mup)


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


def test_the_sizes_are_the_campaigns_setup_at_d_model_128_and_256():
  """P1-sizes differs from P1 only in the size (d_model, heads of d_k 64, d_ff, layers), the
  arms and their rate grids (E5's rule centres each size's); the rest is one setting."""
  big, small = sweeps.load_sweep(CAMPAIGN), sweeps.load_sweep(SIZES)
  paper = sweeps.point_config(big, sweeps.expand(big)[0])
  by_arm = {}
  for point in sweeps.expand(small):
    config = sweeps.point_config(small, point)
    by_arm.setdefault(small.arm_name(tuple((k, v) for k, v in point.overrides
                                           if k != "learning_rate")), set()).add(
        point.overrides[-1][1])
    size = {k: config.model[k] for k in ("d_model", "num_heads", "d_ff", "num_decoder_layers")}
    assert size in ({"d_model": 128, "num_heads": 2, "d_ff": 512, "num_decoder_layers": 2},
                    {"d_model": 256, "num_heads": 4, "d_ff": 1024, "num_decoder_layers": 4})
    same = lambda c: {k: v for k, v in c.to_dict().items()  # noqa: E731
                      if k not in ("model", "seed", "learning_rate")}
    assert same(config) == same(paper)
    arm = ("embed_scale", "posemb_scale")  # the arms' (posemb_scale: the recipe's 1 or 1.0)
    assert {k: v for k, v in config.model.to_dict().items() if k not in size and
            k not in arm} == {k: v for k, v in paper.model.to_dict().items()
                              if k not in size and k not in arm}
  assert by_arm == {"paper@128": {0.0035355, 0.005, 0.0070711},
                    "no_scale@128": {0.0035355, 0.005, 0.0070711},
                    "paper@256": {0.0017678, 0.0025, 0.0035355},
                    "no_scale@256": {0.0017678, 0.0025, 0.0035355}}
  assert small.failure == big.failure and small.extend_edges == big.extend_edges == 3
  assert big.arm_names == ("paper", "no_scale", "pe_down", "mup")


def test_the_dry_run_times_each_point_at_the_pace_of_the_finished_points(tmp_path):
  """--pace_from: P1's remaining points at the seconds a step its 8 finished points took (on
  the H200, as they ran); P1-sizes' smaller models at most that (no point of theirs ran)."""
  pace = runner.points_pace([RESULTS])
  results = sweeps.load_results(RESULTS)
  per_step = sorted(r["seconds"] / r["step"] for r in results)
  median = (per_step[3] + per_step[4]) / 2
  assert f"{median * 1e3:.1f} ms a step at d_model 512 x 6 (8 points)" in pace.describe
  big = runner.plan(sweeps.load_sweep(CAMPAIGN), RESULTS, pace).splitlines()
  assert big[0].startswith("Sweep p1_paper_size: 8 point(s) finished, 19 to run now")
  assert all(line.endswith(f"(chooses, d_model 512 x 6, 2500 steps, ~{2500 * median:.0f} s)")
             for line in big[1:17])
  small = runner.plan(sweeps.load_sweep(SIZES), str(tmp_path), pace).splitlines()
  assert len(small) == 25 and all(f"2500 steps, ~{2500 * median:.0f} s, at most)" in line
                                  for line in small[1:])


def test_the_failure_rule_marks_the_stalled_run_failed_and_the_tables_count_it(tmp_path):
  """P1's own points: the paper at 1.7678e-3, seed 1 (an attention entropy collapse whose run
  recorded 'ok', its train loss 5.485 at step 500 and 5.529 at the end) fails the rule as
  stalled; every other finished point passes. The rate is then never chosen, and the tables
  count the failure for its arm and rate."""
  sweep = sweeps.load_sweep(CAMPAIGN)
  results = sweeps.load_results(RESULTS, sweep.failure)
  failed = {r["name"]: r["failure"] for r in results if r["status"] == "failed"}
  assert failed == {"embed_scale=sqrt_d,posemb_scale=1,learning_rate=0.0017678,seed=1":
                    "stalled: train loss 5.529 at step 2500 against 5.485 at step 500"}
  assert all(r["status"] == "ok" for r in sweeps.load_results(RESULTS))  # as recorded
  [paper] = [b for b in tuning.best_per_arm(sweep, results) if b.name == "paper"]
  assert paper.best == 0.00125 and paper.curve[-1][3:] == (1, 1)  # (ok, failed) at 1.7678e-3
  # A dead layer alone (a finished run whose loss still fell) fails too.
  dead = {"status": "ok", "curves": {"train/loss": [[500, 4.0], [2500, 3.0]]},
          "metrics": {"final/grad_norm/decoder/layer_0": 3e-9,
                      "final/grad_norm/decoder/layer_1": 0.2}}
  assert sweeps.stats.failure_of(dead, sweep.failure).startswith("dead layer: decoder/layer_0")
  assert sweeps.stats.failure_of({**dead, "metrics": {}}, sweep.failure) is None
  shutil.copytree(RESULTS, tmp_path / "copy")
  summary = report.aggregate(sweep, str(tmp_path / "copy"), command="CMD")
  table = (tmp_path / "copy" / "results.md").read_text()
  assert "| sqrt_d | 1 | - | 0.0017678 | 2 | 1 |" in table
  assert "- embed_scale=sqrt_d,posemb_scale=1,learning_rate=0.0017678,seed=1: stalled" in table
  assert summary["points"] == 8


def test_an_edge_extends_until_the_best_rate_is_interior_at_most_three_times():
  """Made-up results of P1's paper arm whose validation loss falls with the rate: each time
  the best is the top of the searched grid, one sqrt(2) step more opens, three at most."""
  sweep = sweeps.load_sweep(CAMPAIGN)

  def result(rate, seed, loss):
    return {"name": f"r{rate}s{seed}", "seed": seed, "status": "ok",
            "overrides": {"model.embed_scale": "sqrt_d", "model.posemb_scale": 1.0,
                          "learning_rate": rate}, "metrics": {"eval/loss": loss}}

  results = []
  for extension in range(5):
    searched = tuning.searched_values(sweep, results)["embed_scale=sqrt_d,posemb_scale=1"]
    assert len(searched) == 3 + min(extension, 3)
    results = [result(v, s, 3.0 - v) for v in searched for s in sweep.seeds]
  [paper] = [b for b in tuning.best_per_arm(sweep, results) if b.name == "paper"]
  assert paper.complete and paper.on_edge and paper.best == max(paper.searched)
  assert paper.searched[-1] == pytest.approx(0.005, rel=1e-4)  # three sqrt(2) steps past 1.77e-3
