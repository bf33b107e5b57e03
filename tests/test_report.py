"""Sweep reports: results.md, results.csv and plots rebuilt from stored per-point results."""

import json
import math
import os
import shutil
import subprocess
import sys

import pytest

from test_contrasts import imported_heavy
from test_grid import REPO, tiny_sweep
from conftest import script_env
from test_stats import fake_result
from transformer.research import sweeps


def test_aggregate_from_stored_results_counts_diverged_seeds(tmp_path):
  sweep = tiny_sweep(axes=({"model.head_dim": [8, 16]},), seeds=(0, 1, 2),
                 metrics=("eval/nll",), curves=(), fits=({"x": "model.head_dim", "y": "v"},))
  results = [fake_result(8, s, {"eval/nll": 2.0 + s, "v": 8.0}) for s in (0, 1)]
  results.append(fake_result(8, 2, {"eval/nll": 4.0, "v": -1.0}))  # a log-log fit cannot use it
  results += [fake_result(16, 0, {"eval/nll": 1.0, "v": 16.0}),
              fake_result(16, 1, {}, status="diverged")]
  for r in results:
    os.makedirs(tmp_path / "points" / r["name"])
    (tmp_path / "points" / r["name"] / "result.json").write_text(json.dumps(r))
  summary = sweeps.aggregate(sweep, str(tmp_path), command="CMD")
  text = (tmp_path / "results.md").read_text()
  assert "`CMD`" in text and "5 of 6 points finished" in text
  assert "| 8 | 3 | 0 | 3.000 ± 1.000 |" in text
  assert "| 16 | 2 | 1 | 1.000 |" in text
  assert summary["fits"]["v vs model.head_dim"]["all"][0] == pytest.approx(1.0)
  assert "per seed (1 finished points left out: y missing or <= 0):" in text
  fit_plot = tmp_path / "plots" / "fit_v_vs_head_dim.png"
  assert fit_plot.stat().st_size > 1000 and "](plots/fit_v_vs_head_dim.png)" in text
  csv_text = (tmp_path / "results.csv").read_text().splitlines()
  assert csv_text[0].startswith("head_dim,seeds,diverged,eval/nll mean")
  assert csv_text[1] == "8,3,0,3,1,3"


def test_a_tuned_sweep_reports_each_arm_at_its_best_rate_and_paired_differences(tmp_path):
  from test_tuning import result, tuned_sweep
  sweep = tuned_sweep(metrics=("eval/loss",), curves=())
  for seed in (0, 1, 2):
    for lr in (1e-3, 2e-3, 4e-3):
      far = abs(math.log2(lr / 2e-3))
      for r in (result("sqrt_d", lr, seed, 3.0 + far, test=3.0 + 0.1 * seed),
                result("none", lr, seed, 3.2 + far, test=3.3 + 0.1 * seed + 0.01 * seed)):
        os.makedirs(tmp_path / "points" / r["name"])
        (tmp_path / "points" / r["name"] / "result.json").write_text(json.dumps(r))
  summary = sweeps.aggregate(sweep, str(tmp_path), command="CMD")
  text = (tmp_path / "results.md").read_text()
  assert "## Each arm at its own best learning_rate" in text
  assert ("| embed_scale=sqrt_d | 0.001, 0.002, 0.004 | 0.002 | 3.000 ± 0.000 | 3.100 ± 0.100 | 3 |"
          in text)
  # none - sqrt_d = 0.30, 0.31, 0.32: mean 0.31, sd 0.01, t(0.975, 2) = 4.3027.
  assert ("| embed_scale=none | embed_scale=sqrt_d | +0.3100 | [+0.2852, +0.3348] | 3 | 0.00035 "
          "| kept | higher |" in text)
  assert [b.best for b in summary["bests"]] == [2e-3, 2e-3]
  plot = tmp_path / "plots" / "tuning_eval_loss_vs_learning_rate.png"
  assert plot.stat().st_size > 1000 and "](plots/tuning_eval_loss_vs_learning_rate.png)" in text


def test_stored_test_rows_add_the_test_sets_error_and_correlations_read_every_chosen_run(
    tmp_path):
  """Runs that stored each test example's NLL get the test-set columns (the verdict on the
  wider interval), and a correlation is over the runs at each arm's chosen rate."""
  from test_tuning import result, tuned_sweep
  sweep = tuned_sweep(metrics=("eval/loss",), curves=(),
                      correlations=({"x": "step_150/v", "y": "test/loss"},))
  xs = {}
  for seed in (0, 1, 2):
    for lr in (1e-3, 2e-3, 4e-3):
      far = abs(math.log2(lr / 2e-3))
      for scale, test in (("sqrt_d", 3.0 + 0.1 * seed), ("none", 3.3 + 0.11 * seed)):
        r = result(scale, lr, seed, 3.0 + far, test=test)
        r["metrics"]["step_150/v"] = xs[(scale, lr, seed)] = test * 2 + (0.05 if seed == 1 else 0)
        # Two examples of 10 tokens whose NLL sums make the test loss; the arms differ by
        # +-2.7 nats a token on them, so the test set's own error dwarfs the seeds'.
        swing = 2.7 if scale == "none" else 0.0
        r["test_rows"] = [[10 * (test + swing), 10.0], [10 * (test - swing), 10.0]]
        os.makedirs(tmp_path / "points" / r["name"])
        (tmp_path / "points" / r["name"] / "result.json").write_text(json.dumps(r))
  sweeps.aggregate(sweep, str(tmp_path), command="CMD")
  text = (tmp_path / "results.md").read_text()
  assert "| test-set s.e. | 95% interval with test set | seeds | p | Holm | verdict |" in text
  line = next(row for row in text.splitlines() if row.startswith("| embed_scale=none |")
              and "[" in row)
  assert "| 2.7" in line and line.endswith("| not settled |"), line
  pairs = [(xs[(a, 2e-3, s)], 3.0 + 0.1 * s if a == "sqrt_d" else 3.3 + 0.11 * s)
           for a in ("sqrt_d", "none") for s in (0, 1, 2)]
  r, low, high, n = sweeps.correlation(*zip(*pairs))
  assert f"| all arms pooled | {r:+.3f} | [{low:+.4f}, {high:+.4f}] | 6 |" in text
  assert "| embed_scale=sqrt_d | " in text.split("Pearson r of test/loss")[1]


def test_an_untuned_sweep_with_a_baseline_reports_paired_differences(tmp_path):
  """E4's case: arms at fixed settings, compared with the first by seed all the same."""
  sweep = tiny_sweep(axes=({"model.head_dim": [8, 16]},), seeds=(0, 1, 2), metrics=("test/loss",),
                     curves=(), baseline="head_dim=8", arm_names=("small", "large"))
  for seed in (0, 1, 2):
    for r in (fake_result(8, seed, {"test/loss": 3.0 + 0.1 * seed}),
              fake_result(16, seed, {"test/loss": 3.3 + 0.11 * seed})):
      os.makedirs(tmp_path / "points" / r["name"])
      (tmp_path / "points" / r["name"] / "result.json").write_text(json.dumps(r))
  sweeps.aggregate(sweep, str(tmp_path), command="CMD")
  text = (tmp_path / "results.md").read_text()
  assert "**small** = head_dim=8; **large** = head_dim=16" in text
  # 16 - 8 = 0.30, 0.31, 0.32: mean 0.31, sd 0.01, t(0.975, 2) = 4.3027 (as for a tuned sweep).
  assert "| large | small | +0.3100 | [+0.2852, +0.3348] | 3 | 0.00035 | kept | higher |" in text
  # Without a baseline an untuned sweep's report has no such table.
  sweeps.aggregate(tiny_sweep(axes=({"model.head_dim": [8, 16]},), seeds=(0, 1, 2),
                              metrics=("test/loss",), curves=()), str(tmp_path))
  assert "Paired differences" not in (tmp_path / "results.md").read_text()


def test_curves_show_each_arm_at_its_chosen_rate_and_every_arm_of_an_untuned_sweep(
    tmp_path, monkeypatch):
  """The curve plots get a tuned sweep's chosen groups only (the whole grid is unreadable),
  and every group of an untuned sweep, baseline or not."""
  from test_tuning import result, tuned_sweep
  from transformer.research.sweeps import report
  drawn = []
  monkeypatch.setattr(report, "curve_plots", lambda sweep, groups, workdir: drawn.append(
      sorted(groups)) or [])
  tuned = tmp_path / "tuned"
  for seed in (0, 1, 2):
    for lr in (1e-3, 2e-3, 4e-3):
      for scale in ("sqrt_d", "none"):
        r = result(scale, lr, seed, 3.0 + abs(math.log2(lr / 2e-3)))
        os.makedirs(tuned / "points" / r["name"])
        (tuned / "points" / r["name"] / "result.json").write_text(json.dumps(r))
  sweeps.aggregate(tuned_sweep(metrics=("eval/loss",)), str(tuned))
  assert drawn[-1] == ["embed_scale=none,learning_rate=0.002",
                       "embed_scale=sqrt_d,learning_rate=0.002"]
  fixed = tmp_path / "fixed"
  for seed in (0, 1, 2):
    for r in (fake_result(8, seed, {"test/loss": 3.0}), fake_result(16, seed, {"test/loss": 3.1})):
      os.makedirs(fixed / "points" / r["name"])
      (fixed / "points" / r["name"] / "result.json").write_text(json.dumps(r))
  sweeps.aggregate(tiny_sweep(axes=({"model.head_dim": [8, 16]},), seeds=(0, 1, 2),
                              metrics=("test/loss",), baseline="head_dim=8"), str(fixed))
  assert drawn[-1] == ["head_dim=16", "head_dim=8"]


def test_also_report_gives_a_second_metric_at_the_same_choices_with_its_own_differences(
    tmp_path):
  """Translation reports test NLL and test BLEU of each arm at the rate chosen on validation
  NLL: BLEU is read at the same choices, not chosen again."""
  from test_tuning import result, tuned_sweep
  for seed in (0, 1, 2):
    for lr in (1e-3, 2e-3, 4e-3):
      for scale, best, bleu in (("sqrt_d", 2e-3, 20.0), ("none", 4e-3, 18.0)):
        r = result(scale, lr, seed, 3.0 + abs(math.log2(lr / best)) + 0.01 * seed)
        # BLEU highest at 1e-3 for both arms: never the chosen rate, so never reported.
        r["metrics"]["test/bleu"] = bleu + seed + (50.0 if lr == 1e-3 else 0.0)
        os.makedirs(tmp_path / "points" / r["name"])
        (tmp_path / "points" / r["name"] / "result.json").write_text(json.dumps(r))
  sweep = tuned_sweep(metrics=("eval/loss",), curves=(), also_report=("test/bleu",))
  sweeps.aggregate(sweep, str(tmp_path))
  text = (tmp_path / "results.md").read_text()
  bleu = text[text.index("### test/bleu"):]
  assert "| embed_scale=sqrt_d | 21.000 ± 1.000 | 3 |" in bleu
  assert "| embed_scale=none | 19.000 ± 1.000 | 3 |" in bleu
  # none - sqrt_d = -2 at every seed: no spread, the interval is the point.
  assert ("| embed_scale=none | embed_scale=sqrt_d | -2.0000 | [-2.0000, -2.0000] | 3 | - | - "
          "| lower |" in bleu)


def test_a_tuned_sweeps_fit_reads_each_arm_at_its_chosen_rate(tmp_path):
  """Head dims 8 and 16, each best at another rate: the fit joins the chosen points (y = x
  there, slope 1) and never the others (y = 100 there)."""
  from test_grid import tiny_sweep
  sweep = tiny_sweep(axes=({"model.head_dim": [8, 16]},), seeds=(0, 1), metrics=("v",),
                     curves=(), tune={"learning_rate": [1e-3, 2e-3, 4e-3]}, select="eval/loss",
                     report="test/loss", fits=({"x": "model.head_dim", "y": "v"},))
  best = {8: 2e-3, 16: 1e-3}
  for dk in (8, 16):
    for lr in (1e-3, 2e-3, 4e-3, 5e-4):
      for seed in (0, 1):
        loss = 3.0 + abs(math.log2(lr / best[dk]))
        point = sweeps.Point((("model.head_dim", dk), ("learning_rate", lr)), seed)
        r = {"name": point.name, "group": point.group, "overrides": dict(point.overrides),
             "seed": seed, "status": "ok", "curves": {},
             "metrics": {"eval/loss": loss, "test/loss": loss,
                         "v": dk if lr == best[dk] else 100.0}}
        os.makedirs(tmp_path / "points" / r["name"])
        (tmp_path / "points" / r["name"] / "result.json").write_text(json.dumps(r))
  summary = sweeps.aggregate(sweep, str(tmp_path))
  assert [b.best for b in summary["bests"]] == [2e-3, 1e-3]
  mean, std, n = summary["fits"]["v vs model.head_dim"]["all"]
  assert n == 2 and mean == pytest.approx(1.0) and std == pytest.approx(0.0, abs=1e-9)
  assert "per seed, each arm at its chosen learning_rate" in (tmp_path / "results.md").read_text()


def test_a_tuned_sweep_reports_learning_rate_sensitivity_with_paired_differences(tmp_path):
  from test_tuning import result, tuned_sweep
  sweep = tuned_sweep(metrics=("eval/loss",), curves=(), sensitivity_cap=4.15,
                      arm_names=("paper", "none"))
  # paper: flat (1.0 above its best at the far rates); none: 2.0 above, seed by seed + 0.1 * seed
  for seed in (0, 1, 2):
    for lr in (1e-3, 2e-3, 4e-3):
      far = abs(math.log2(lr / 2e-3))
      for r in (result("sqrt_d", lr, seed, 2.0 + far), result("none", lr, seed,
                                                               2.0 + far * (2.0 + 0.1 * seed))):
        os.makedirs(tmp_path / "points" / r["name"])
        (tmp_path / "points" / r["name"] / "result.json").write_text(json.dumps(r))
  sweeps.aggregate(sweep, str(tmp_path), command="CMD")
  text = (tmp_path / "results.md").read_text()
  assert "## Learning-rate sensitivity over learning_rate 0.001, 0.002, 0.004" in text
  assert "| paper | 0.667 ± 0.000 | 3 |" in text  # (1 + 0 + 1) / 3
  # none - paper = (2 (2 + 0.1 s) - 2) / 3, but seed 2's far losses, 4.2, count as the cap
  diffs = [(2 * 2.0 - 2) / 3, (2 * 2.1 - 2) / 3, (2 * 2.15 - 2) / 3]
  mean, low, high = sweeps.tuning.t_interval(diffs)
  assert (f"| none | paper | {mean:+.4f} | [{low:+.4f}, {high:+.4f}] | 3 | 0.0017 | kept | higher |"
          in text)


def _committed_sweeps():
  root = os.path.join(REPO, "docs", "sweeps")
  return sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "results.md")))


@pytest.mark.parametrize("name", _committed_sweeps())
def test_committed_results_rebuild_their_tables_and_new_comparisons_report_fresh_seeds(
    name, tmp_path, monkeypatch):
  """docs/sweeps/NAME/results.md is what --aggregate_only makes from the committed result.json
  files (its tables; the plots are not redrawn here), each of whose points the sweep file
  still gives as it ran. The sweeps of issue 32 (m*) report every
  figure on seeds that did not choose its rate."""
  from transformer.research.sweeps import report
  committed = os.path.join(REPO, "docs", "sweeps", name)
  monkeypatch.setattr(report, "curve_plots", lambda *a: [])
  monkeypatch.setattr(report, "tuning_plot", lambda *a: "")
  monkeypatch.setattr(report, "fit_plot", lambda *a: "")
  monkeypatch.setattr(report, "trend_plot", lambda *a: "")
  os.symlink(os.path.join(committed, "points"), tmp_path / "points")
  sweep = sweeps.load_sweep(os.path.join(REPO, "configs", "sweeps", f"{name}.py"))
  command = f"python scripts/sweep.py --sweep=configs/sweeps/{name}.py --workdir=WORKDIR"
  summary = sweeps.aggregate(sweep, str(tmp_path), command=command)
  # Every committed point is still the point its sweep file gives: a rerun schedules none.
  assert report.changed_points(sweep, sweeps.load_results(committed)) == []
  tables = lambda text: "\n".join(  # noqa: E731
      line for line in text.splitlines() if not line.startswith("![")).rstrip()
  with open(os.path.join(committed, "results.md")) as f:
    assert tables((tmp_path / "results.md").read_text()) == tables(f.read())
  if name.startswith("m"):
    assert sweep.fresh_report and len(sweep.confirm_seeds) >= 3
    for best in summary["bests"]:
      assert set(best.report_by_seed) <= set(sweep.confirm_seeds)
      assert not set(best.report_by_seed) & set(sweep.seeds)


def test_a_trend_reports_the_difference_at_each_length_its_lines_and_a_plot(tmp_path):
  from test_grid import TINY
  from test_tuning import trend_results, trend_sweep
  for r in trend_results():
    os.makedirs(tmp_path / "points" / r["name"])
    (tmp_path / "points" / r["name"] / "result.json").write_text(json.dumps(r))
  # A seq2seq base pads its rows: steps are not turned into tokens.
  sweeps.aggregate(trend_sweep(metrics=("eval/loss",), curves=()), str(tmp_path))
  assert "M tokens" not in (tmp_path / "results.md").read_text()
  sweep = trend_sweep(metrics=("eval/loss",), curves=(),
                      fixed={**TINY, "model_type": "lm", "packing": "concat"})
  summary = sweeps.aggregate(sweep, str(tmp_path), command="CMD")
  text = (tmp_path / "results.md").read_text()
  per = 16 * sweeps.point_config(sweep, sweeps.expand(sweep)[0]).max_len  # TINY's batch_size
  assert "## The difference against num_train_steps" in text
  assert f"Tokens: num_train_steps x {per} (batch_size x max_len, packed rows)." in text
  # at 10000 steps the seeds' differences are 0.3 + 2 b: 0.1, 0.12, 0.14
  mean, low, high = sweeps.tuning.t_interval([0.1, 0.12, 0.14])
  assert (f"| embed_scale=none | embed_scale=sqrt_d | 10000 ({10000 * per / 1e6:.3g} M tokens) | "
          f"{mean:+.4f} | [{low:+.4f}, {high:+.4f}] | 3 |") in text
  zero = 10 ** (0.48 / 0.09)
  assert f"| {zero:.3g} = {zero * per / 1e6:.3g} M tokens (extrapolated) | 0: 1e+05" in text
  [plot] = [p for p in summary["plots"] if os.path.basename(p).startswith("trend_")]
  assert os.path.basename(plot) == "trend_test_loss_vs_num_train_steps.png"
  assert os.path.getsize(plot) > 1000
  [t] = summary["trends"]
  p, p_low, p_high, n = t.power
  assert (f"| {p:+.3f} [{p_low:+.4f}, {p_high:+.4f}], 3 | {t.residual_line:.4f}, "
          f"{t.residual_power:.4f} |") in text
  # Differences that cross 0 (0.3, 0.1, -0.1) have no power law: its cells say so.
  for r in trend_results(lambda seed: -0.2):
    (tmp_path / "points" / r["name"] / "result.json").write_text(json.dumps(r))
  sweeps.aggregate(sweep, str(tmp_path), command="CMD")
  assert "| - (a difference is not above 0) | 0.0000, - |" in (tmp_path / "results.md").read_text()


def test_aggregate_only_rebuilds_a_committed_report_without_importing_jax(tmp_path):
  """`scripts/sweep.py --aggregate_only` is the reading side alone: the committed report of a
  sweep comes back byte for byte (its plots redrawn too) and no jax, flax, optax or orbax is
  imported, as `import transformer.research.sweeps.report` imports none."""
  name = "m8_first_layer_cap"
  workdir = tmp_path / name
  shutil.copytree(os.path.join(REPO, "docs", "sweeps", name), workdir)
  done = subprocess.run([sys.executable, "-X", "importtime", "scripts/sweep.py",
                         f"--sweep=configs/sweeps/{name}.py", f"--workdir={workdir}",
                         "--aggregate_only"], cwd=REPO, env=script_env(), capture_output=True,
                        text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-2000:]
  assert not imported_heavy(done.stderr), imported_heavy(done.stderr)
  with open(os.path.join(REPO, "docs", "sweeps", name, "results.md")) as f:
    assert (workdir / "results.md").read_text() == f.read()
  imports = subprocess.run([sys.executable, "-X", "importtime", "-c",
                            "import transformer.research.sweeps.report"], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
  assert imports.returncode == 0 and not imported_heavy(imports.stderr), imports.stderr[-2000:]
