"""The paper-size campaign (configs/sweeps/p1_paper_size.py and p1_sizes.py) run end to end at
tiny size on this CPU: its dry run's plan and leases, a stop by the time budget between points,
a restart that runs the rest and reuses what was done, a first arm choosing then reporting
before the other arm, one compilation per arm, the intention-to-treat figure beside the one
over the runs that did not fail; its arms and sizes in one setup and one depth, its failure
rule on the runs that ran, its Holm family, its edges extended; and what travels to a GPU
host."""

import dataclasses
import json
import lzma
import os
import shutil
import subprocess

import math

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache

from test_grid import REPO
from transformer.research import sweeps
from transformer.research.sweeps import grid, report, runner, tuning
from transformer.research.sweeps.stats import cell, mean_std

CAMPAIGN = os.path.join(REPO, "configs/sweeps/p1_paper_size.py")
SIZES = os.path.join(REPO, "configs/sweeps/p1_sizes.py")
RESULTS = os.path.join(REPO, "docs/sweeps/p1_paper_size")
# What a GPU host is sent (launch/campaign_bundle.sh): the package, scripts, configs and
# launchers, the campaign's results directory and the xz'd corpus.
TRAVEL_LIMIT = 50 * 2**20


# Two of the campaign's four: the plain one (one of P1's first arms) and the one whose
# embedding has its own rate (not a first arm).
ARMS = ("no_scale", "embed_lr_fixed")


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
      sweep, axes=axes, arm_names=ARMS, pairs=(ARMS[::-1],), holm_family=(),
      first_arms=ARMS[:1], base=os.path.join(REPO, sweep.base), fixed={**sweep.fixed, **tiny},
      tune={"learning_rate": sweep.tune["learning_rate"][:2]}, seeds=(0,), confirm_seeds=(3, 4),
      extend_edges=0,
      # 3 steps hold no step 500 to stall from (P1's rule is tested on its own runs below):
      # a rule that judges no stall over so few steps, and a 1-layer model no dead layer, so
      # every run here passes it; the default ITT value, ln of the byte vocabulary's 259.
      failure=sweeps.FailureRule(min_span=100), itt_missing=None)


def _fail_two_reporting_runs(workdir, bests):
  """As a GPU run may: no_scale's seed 3 diverged (no test NLL recorded), embed_lr_fixed's
  seed 3 finished with a dead layer (its test NLL recorded; the rule, read again as results
  are read, fails it: a second layer with 1e6 times layer 0's final gradient norm)."""
  by_name = {b.name: b for b in bests}
  for arm, how in (("no_scale", "diverged"), ("embed_lr_fixed", "dead")):
    b = by_name[arm]
    name = sweeps.Point(b.overrides + (("learning_rate", b.best),), 3).name
    path = os.path.join(workdir, "points", name, "result.json")
    with open(path) as f:
      result = json.load(f)
    if how == "diverged":
      result.update(status="diverged", message="non-finite loss at step 2",
                    metrics={k: v for k, v in result["metrics"].items()
                             if k.startswith("init/")})
      result.pop("test_rows")
    else:
      norm = result["metrics"]["final/grad_norm/decoder/layer_0"]
      result["metrics"]["final/grad_norm/decoder/layer_1"] = norm * 1e6
    with open(path, "w") as f:
      json.dump(result, f)


def test_the_campaign_plans_stops_on_its_budget_resumes_and_compiles_once_an_arm(
    tmp_path, monkeypatch):
  sweep = _tiny_campaign(tmp_path)
  monkeypatch.setattr(grid, "load_sweep", lambda path: sweep)  # what run_command loads
  workdir = str(tmp_path / "w")
  options = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
             "jax_persistent_cache_min_entry_size_bytes")
  before = {o: getattr(jax.config, o) for o in options}
  runner.enable_compilation_cache(str(tmp_path / "jax_cache"))
  try:
    plan = sweeps.run_command(CAMPAIGN, workdir, dry_run=True, lease_seconds=1e6)
    lines = plan.splitlines()
    assert lines[0].startswith("Sweep p1_paper_size: 0 point(s) finished, 4 to run now (~")
    assert " ms a step on 8 x cpu" in lines[0]
    assert "and 4 reporting point(s) that open once their arms have chosen a rate" in lines[0]
    # In run order: the first arm's choosing points, its reporting points, then the other's.
    assert len(lines) == 10
    for line, (arm, role) in zip(lines[1:9], [(ARMS[0], "c")] * 2 + [(ARMS[0], "r")] * 2
                                 + [(ARMS[1], "c")] * 2 + [(ARMS[1], "r")] * 2):
      assert ("embed_learning_rate=0.01" in line) == (arm == ARMS[1])
      assert ("(chooses, d_model 32 x 1, 3 steps, ~" in line if role == "c" else
              "CHOSEN,seed=" in line and f"(reports, once {arm} has chosen its rate" in line)
    assert lines[-1].startswith("In all: 8 point(s), ~") and lines[-1].endswith(
        ", 1 lease(s) of 1000000 s (the first arms, no_scale: 4 point(s) in the first 1 "
        "lease(s)) before any edge.")

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
  # The first arm (no_scale) chooses, then reports as soon as its own choice is complete,
  # before the other arm's first point; the other arm then chooses, then reports.
  assert [(sweep.arm_name(runner.arm_of_point(sweep, p)), p.seed) for p in order] == [
      (ARMS[0], 0), (ARMS[0], 0), (ARMS[0], 3), (ARMS[0], 4),
      (ARMS[1], 0), (ARMS[1], 0), (ARMS[1], 3), (ARMS[1], 4)]

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
  # embed_lr_fixed trains its embedding at its own rate; the other leaves it at its default.
  fixed_rate = [r for r in results.values() if "embed_learning_rate" in r["overrides"]]
  assert len(fixed_rate) == 4 and all(r["config"]["embed_learning_rate"] == 1e-2
                                      for r in fixed_rate)
  assert all(r["config"]["embed_learning_rate"] == 0.0 for r in results.values()
             if r not in fixed_rate)
  _check_intention_to_treat(sweep, workdir, summary["bests"])


def _check_intention_to_treat(sweep, workdir, bests):
  """Two reporting runs of seed 3 failed: the ITT figure counts them (no_scale's at ln 259, the
  byte vocabulary's uniform NLL; embed_lr_fixed's at its recorded test NLL), the figure beside
  it and its paired difference do not."""
  clean = {b.name: b.report_by_seed for b in bests}
  assert all(set(by_seed) == {3, 4} for by_seed in clean.values())
  _fail_two_reporting_runs(workdir, bests)
  summary = sweeps.aggregate(sweep, workdir, command="CMD")
  text = open(os.path.join(workdir, "results.md")).read()
  ns, fixed = summary["bests"]
  uniform = math.log(259)
  assert (ns.failed_seeds, fixed.failed_seeds) == ((3,), (3,))
  assert ns.report_by_seed == {4: clean["no_scale"][4]}  # left out of the other figure
  assert ns.itt_by_seed == {3: uniform, 4: clean["no_scale"][4]} and ns.itt_missing_seeds == (3,)
  assert fixed.report_by_seed == {4: clean["embed_lr_fixed"][4]}
  assert fixed.itt_by_seed == clean["embed_lr_fixed"] and fixed.itt_missing_seeds == ()
  [without], [itt] = summary["paired"], summary["itt_paired"]
  assert without.seeds == 1 and itt.seeds == 2
  fixed_rate, plain = clean["embed_lr_fixed"], clean["no_scale"]
  assert itt.mean == pytest.approx((fixed_rate[3] - uniform + fixed_rate[4] - plain[4]) / 2)
  assert "Intention to treat (ITT), the headline figure" in text
  assert f"else at {uniform:.4f}, ln of the model's vocabulary size" in text
  assert (f"| no_scale | {report._best_cell(ns)} | {cell(*mean_std([uniform, plain[4]]))} | 2 "
          f"| seed 3: {uniform:.3f} (no finite figure) |") in text
  assert f"| 2 | seed 3: {fixed_rate[3]:.3f} (recorded) |" in text
  assert text.index("Paired differences of test/loss (ITT)") < text.index(
      "Over the runs that did not fail") < text.index("| arm | learning_rate searched |")
  assert "- embed_scale=none,posemb_scale=1,embed_learning_rate=0.01,learning_rate=" in text


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
    # One depth, P1's 6 layers: the sizes differ in the width (and its heads and d_ff) alone.
    assert size in ({"d_model": 128, "num_heads": 2, "d_ff": 512, "num_decoder_layers": 6},
                    {"d_model": 256, "num_heads": 4, "d_ff": 1024, "num_decoder_layers": 6})
    same = lambda c: {k: v for k, v in c.to_dict().items()  # noqa: E731
                      if k not in ("model", "seed", "learning_rate")}
    assert same(config) == same(paper)
    arm = ("embed_scale", "posemb_scale")  # the arms' (posemb_scale: the recipe's 1 or 1.0)
    moved = ("d_model", "num_heads", "d_ff")
    assert {k: v for k, v in config.model.to_dict().items() if k not in moved and
            k not in arm} == {k: v for k, v in paper.model.to_dict().items()
                              if k not in moved and k not in arm}
  assert by_arm == {"paper@128": {0.0035355, 0.005, 0.0070711},
                    "no_scale@128": {0.0035355, 0.005, 0.0070711},
                    "paper@256": {0.0017678, 0.0025, 0.0035355},
                    "no_scale@256": {0.0017678, 0.0025, 0.0035355}}
  assert small.failure == big.failure and small.extend_edges == big.extend_edges == 3
  assert small.itt_missing == big.itt_missing == pytest.approx(math.log(16384))
  assert big.arm_names == ("paper", "no_scale", "pe_down", "embed_lr_fixed")
  # The declared Holm families: each arm minus the paper, pe_down's left out; no scale minus
  # the paper at each width. P1 runs the paper and no scale first.
  assert big.holm_family == (("no_scale", "paper"), ("embed_lr_fixed", "paper"))
  assert small.holm_family == (("no_scale@128", "paper@128"), ("no_scale@256", "paper@256"))
  assert big.first_arms == ("paper", "no_scale") and small.first_arms == ()


def test_the_dry_run_times_each_point_at_the_pace_of_the_finished_points(tmp_path):
  """--pace_from: P1's remaining points at the seconds a step its 8 finished points took (on
  the H200, as they ran); P1-sizes' smaller models at most that (no point of theirs ran). The
  8 finished points are none of the points to run; the paper's and no scale's come first, and
  --lease_seconds=480 counts the calls of --time_budget=480 the rest needs."""
  pace = runner.points_pace([RESULTS])
  results = sweeps.load_results(RESULTS)
  per_step = sorted(r["seconds"] / r["step"] for r in results)
  median = (per_step[3] + per_step[4]) / 2
  assert f"{median * 1e3:.1f} ms a step at d_model 512 x 6 (8 points)" in pace.describe
  big = runner.plan(sweeps.load_sweep(CAMPAIGN), RESULTS, pace, lease_seconds=480).splitlines()
  assert big[0].startswith("Sweep p1_paper_size: 8 point(s) finished, 19 to run now")
  assert "and 9 reporting point(s) that open once their arms have chosen a rate" in big[0]
  assert not {r["name"] for r in results} & {line.split()[1] for line in big[1:-1]}
  point = f"d_model 512 x 6, 2500 steps, ~{2500 * median:.0f} s)"
  paper = "embed_scale=sqrt_d,posemb_scale=1,learning_rate=0.00125,seed="
  assert [line.split()[1] for line in big[1:4]] == [paper + s for s in "345"]
  assert all(line.endswith("(reports, " + point) for line in big[1:4])
  assert all(line.split()[1].startswith("embed_scale=none,posemb_scale=1,learning_rate=")
             and line.endswith("(chooses, " + point) for line in big[4:8])
  assert all("embed_scale=none,posemb_scale=1,learning_rate=CHOSEN" in line
             and "(reports, once no_scale has chosen its rate" in line for line in big[8:11])
  assert all(line.endswith("(chooses, " + point) for line in big[11:23])
  assert all("CHOSEN" in line for line in big[23:29]) and len(big) == 30
  # 81 s a point: a call of 480 s runs 5 (the 6th would end past it by the longest so far).
  assert runner.leases([2500 * median] * 28, 480) == 6
  assert runner.leases([2500 * median] * 10, 480) == 2
  assert runner.leases([100, 100, 300, 50], 480) == 2 and runner.leases([], 480) == 0
  assert big[-1] == ("In all: 28 point(s), ~0.6 h, 6 lease(s) of 480 s (the first arms, paper "
                     "and no_scale: 10 point(s) in the first 2 lease(s)) before any edge; each "
                     f"rate an edge adds ~{2 * 2500 * median / 60:.0f} min.")
  small = runner.plan(sweeps.load_sweep(SIZES), str(tmp_path), pace).splitlines()
  assert len(small) == 1 + 24 + 12 + 1 and all(
      f"~{2500 * median:.0f} s, at most)" in line for line in small[1:-1])
  assert all(" x 6, 2500 steps" in line for line in small[1:25])


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
  # Without the rule the choice is the same: the failed seed's 6.543 makes 1.7678e-3's mean
  # 4.49, above 1.25e-3's 2.478.
  [paper] = [b for b in tuning.best_per_arm(dataclasses.replace(sweep, failure=None),
                                            sweeps.load_results(RESULTS)) if b.name == "paper"]
  assert paper.best == 0.00125 and paper.curve[-1][1] == pytest.approx(4.488, abs=1e-3)
  # The ITT figure heads the tables, at the declared ln 16384 where a run has no test NLL.
  assert "else at 9.7041, declared in the sweep (itt_missing)" in table


def test_the_holm_family_is_the_declared_two_and_pe_down_is_exploratory():
  """P1's report corrects no scale minus the paper and embed_lr_fixed minus the paper as one
  family of two; pe_down's comparisons and those against no scale are exploratory. A declared
  comparison not yet in the table still counts in the family's size."""
  sweep = sweeps.load_sweep(CAMPAIGN)

  def with_p(arm, baseline, p):  # a paired difference whose p-value is p (5 seeds)
    from scipy import stats as scipy_stats
    half = scipy_stats.t.ppf(0.975, 4) / scipy_stats.t.isf(p / 2, 4)
    return tuning.Paired(arm, baseline, 1.0, 1.0 - half, 1.0 + half, 5)

  rows = [with_p("no_scale", "paper", 0.02), with_p("pe_down", "paper", 0.03),
          with_p("embed_lr_fixed", "paper", 0.04), with_p("pe_down", "no_scale", 0.2),
          with_p("embed_lr_fixed", "no_scale", 0.001)]
  assert tuning.family_holm(sweep, rows) == [True, None, True, None, None]
  # Alone in the table, no_scale's 0.04 is tested at 0.05 / 2: the family has two members.
  assert tuning.family_holm(sweep, [with_p("no_scale", "paper", 0.04)]) == [False]
  assert tuning.family_holm(dataclasses.replace(sweep, holm_family=()), rows) == [
      False, False, False, False, True]  # every row one family: 0.02 > 0.05 / 4
  lines = report._paired_lines(sweep, rows, "each at its own best value")
  assert "the 2 comparisons the sweep declares its family (no_scale minus paper; " \
         "embed_lr_fixed minus paper)" in lines[1]
  assert [line.split(" | ")[6] for line in lines[5:]] == [
      "kept", "exploratory", "kept", "exploratory", "exploratory"]


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
