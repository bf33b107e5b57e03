"""transformer/research/sweeps/ and scripts/sweep.py: grid expansion, resume, aggregation, errors."""

import json
import math
import os
import subprocess
import sys

import pytest

from transformer.research import sweeps
from transformer.research.sweeps import Point, Sweep

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = {"num_train_steps": 4, "log_every_steps": 2, "eval_every_steps": 4,
        "checkpoint_every_steps": 4, "diagnostics_every_steps": 2, "synthetic.num_train": 128,
        "synthetic.num_eval": 32, "batch_size": 16, "model.d_model": 32, "model.d_ff": 64,
        "model.num_decoder_layers": 1, "async_checkpoints": False}


def _sweep(**kw) -> Sweep:
  fields = dict(name="t", question="q?", base=os.path.join(REPO, "configs/default.py"),
                axes=({"model.embed_scale": ["sqrt_d", "none"]},), seeds=(0,), fixed=TINY,
                metrics=("eval/nll", "init/decoder/embed/ratio"),
                curves=("eval/nll", "diagnostics/decoder/embed/ratio"))
  fields.update(kw)
  return Sweep(**fields)


def test_expand_zips_within_an_axis_and_crosses_axes():
  sweep = _sweep(axes=({"model.d_model": [32, 64], "model.d_ff": [128, 256]},
                       {"learning_rate": [1e-3, 3e-3, 1e-2]}), seeds=(0, 1))
  points = sweeps.expand(sweep)
  assert len(points) == 2 * 3 * 2
  assert {dict(p.overrides)["model.d_ff"] // dict(p.overrides)["model.d_model"]
          for p in points} == {4}
  assert len({p.name for p in points}) == len(points)
  assert len({p.group for p in points}) == 6
  config = sweeps.point_config(sweep, points[-1])
  assert (config.model.d_model, config.model.d_ff, config.learning_rate, config.seed) == (
      64, 256, 1e-2, 1)
  assert config.num_train_steps == 4  # fixed applied


def test_model_scale_fields_take_numbers():
  sweep = _sweep(axes=({"model.embed_init_std": [1.0, "inv_sqrt_d"]},))
  configs = [sweeps.point_config(sweep, p) for p in sweeps.expand(sweep)]
  assert [c.model.embed_init_std for c in configs] == ["1.0", "inv_sqrt_d"]


@pytest.mark.parametrize("kw, message", [
    (dict(axes=({"model.d_model": [32, 64], "model.d_ff": [128]},)), "equally many"),
    (dict(axes=({"model.no_such_field": [1]},)), "no field 'model.no_such_field'"),
    (dict(fixed={"nope": 1}), "no field 'nope'"),
    (dict(seeds=()), "no seeds"),
    (dict(base="configs/missing.py"), "is not a file"),
])
def test_malformed_sweeps_are_one_line_errors(kw, message):
  with pytest.raises(ValueError, match=message):
    sweeps.check_sweep(_sweep(**kw))


def test_load_sweep_errors(tmp_path):
  with pytest.raises(ValueError, match="does not exist"):
    sweeps.load_sweep(str(tmp_path / "none.py"))
  bad = tmp_path / "bad.py"
  bad.write_text("X = 1\n")
  with pytest.raises(ValueError, match="no get_sweep"):
    sweeps.load_sweep(str(bad))


def test_every_shipped_sweep_loads_and_expands():
  folder = os.path.join(REPO, "configs", "sweeps")
  names = sorted(f for f in os.listdir(folder) if f.endswith(".py"))
  assert len(names) >= 7
  cwd = os.getcwd()
  os.chdir(REPO)
  try:
    for name in names:
      sweep = sweeps.load_sweep(os.path.join(folder, name))
      points = sweeps.expand(sweep)
      assert len(sweep.seeds) >= 3 and len(points) >= 3 * len(sweep.seeds) // len(sweep.seeds)
      sweeps.point_config(sweep, points[0])
  finally:
    os.chdir(cwd)


def test_metric_value_patterns():
  m = {"final/a/head_0/x": 1.0, "final/a/head_1/x": 3.0, "final/b": float("nan")}
  assert sweeps.metric_value(m, "final/a/head_*/x") == 2.0
  assert sweeps.metric_value(m, "max:final/a/head_*/x") == 3.0
  assert math.isnan(sweeps.metric_value(m, "final/b"))
  assert math.isnan(sweeps.metric_value(m, "missing"))


def _fake(group_value, seed, metrics, status="ok"):
  point = Point((("model.head_dim", group_value),), seed)
  return {"name": point.name, "group": point.group, "overrides": dict(point.overrides),
          "seed": seed, "status": status, "metrics": metrics, "curves": {}}


def test_fit_slopes_recovers_a_power_law():
  sweep = _sweep(axes=({"model.head_dim": [8, 16, 32]},), seeds=(0, 1))
  results = [_fake(x, s, {"y": (1 + 0.1 * s) * x ** 2}) for x in (8, 16, 32) for s in (0, 1)]
  slopes = sweeps.fit_slopes(sweep, results, "model.head_dim", "y")
  mean, std, n = slopes["all"]
  assert n == 2 and mean == pytest.approx(2.0) and std == pytest.approx(0.0, abs=1e-9)


def test_aggregate_from_stored_results_counts_diverged_seeds(tmp_path):
  sweep = _sweep(axes=({"model.head_dim": [8, 16]},), seeds=(0, 1, 2),
                 metrics=("eval/nll",), curves=(), fits=({"x": "model.head_dim", "y": "v"},))
  results = [_fake(8, s, {"eval/nll": 2.0 + s, "v": 8.0}) for s in (0, 1, 2)]
  results += [_fake(16, 0, {"eval/nll": 1.0, "v": 16.0}), _fake(16, 1, {}, status="diverged")]
  for r in results:
    os.makedirs(tmp_path / "points" / r["name"])
    (tmp_path / "points" / r["name"] / "result.json").write_text(json.dumps(r))
  summary = sweeps.aggregate(sweep, str(tmp_path), command="CMD")
  text = (tmp_path / "results.md").read_text()
  assert "`CMD`" in text and "5 of 6 points finished" in text
  assert "| 8 | 3 | 0 | 3.000 ± 1.000 |" in text
  assert "| 16 | 2 | 1 | 1.000 |" in text
  assert summary["fits"]["v vs model.head_dim"]["all"][0] == pytest.approx(1.0)
  fit_plot = tmp_path / "plots" / "fit_v_vs_head_dim.png"
  assert fit_plot.stat().st_size > 1000 and "](plots/fit_v_vs_head_dim.png)" in text
  csv_text = (tmp_path / "results.csv").read_text().splitlines()
  assert csv_text[0].startswith("head_dim,seeds,diverged,eval/nll mean")
  assert csv_text[1] == "8,3,0,3,1,3"


def test_interrupted_sweep_resumes_and_aggregates_from_results(tmp_path):
  """A sweep stopped after its first point reruns only the rest; the tables rebuild alike."""
  sweep = _sweep()
  workdir = str(tmp_path / "w")
  first, second = sweeps.expand(sweep)
  assert sweeps.run_sweep(sweep, workdir, only=[first.name]) == [first]  # "interrupted" here
  result_file = os.path.join(sweeps.point_dir(workdir, first), sweeps.RESULT_FILE)
  stamp = os.stat(result_file).st_mtime_ns
  lines = sweeps.launch_lines(sweep, "S.py", workdir)
  assert len(lines) == 2 and second.name in lines[0] and "--aggregate_only" in lines[1]

  assert sweeps.run_sweep(sweep, workdir) == [second]
  assert os.stat(result_file).st_mtime_ns == stamp
  assert sweeps.run_sweep(sweep, workdir) == []

  sweeps.aggregate(sweep, workdir, command="CMD")
  table = open(os.path.join(workdir, "results.md")).read()
  with open(result_file) as f:
    stored = json.load(f)
  assert stored["status"] == "ok"
  # The paper's scale gives an input-embedding / PE ratio of sqrt(2) at init; none gives
  # sqrt(2/d) (d = 32).
  ratio = {r["group"]: r["metrics"]["init/decoder/embed/ratio"]
           for r in sweeps.load_results(workdir)}
  assert ratio["embed_scale=sqrt_d"] == pytest.approx(math.sqrt(2), rel=0.1)
  assert ratio["embed_scale=none"] == pytest.approx(math.sqrt(2 / 32), rel=0.1)
  for name in ("results.md", "results.csv"):
    os.remove(os.path.join(workdir, name))
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO, "scripts", "sweep.py"), "--config=SWEEP",
       f"--workdir={workdir}", "--aggregate_only"], capture_output=True, text=True, cwd=REPO)
  assert proc.returncode != 0 and "error: Sweep file SWEEP does not exist" in proc.stderr
  sweeps.aggregate(sweep, workdir, command="CMD")
  assert open(os.path.join(workdir, "results.md")).read() == table
  for plot in ("eval_nll.png", "diagnostics_decoder_embed_ratio.png"):
    assert os.path.getsize(os.path.join(workdir, "plots", plot)) > 1000


def test_a_diverging_point_is_recorded_and_length_losses_are_measured(tmp_path):
  sweep = _sweep(axes=({"learning_rate": [2e-3, 1e38]},), length_factors=(1, 2),
                 fixed={**TINY, "model_type": "lm", "model.num_encoder_layers": 0,
                        "max_len": 34, "model.max_len": 68},
                 metrics=("eval/nll", "length_1x/loss", "length_2x/loss"))
  sweeps.run_sweep(sweep, str(tmp_path))
  by_lr = {r["overrides"]["learning_rate"]: r for r in sweeps.load_results(str(tmp_path))}
  assert by_lr[1e38]["status"] == "diverged" and "Non-finite" in by_lr[1e38]["message"]
  ok = by_lr[2e-3]
  assert ok["status"] == "ok"
  # Synthetic rows are shorter than max_len: longer rows only add padding, same tokens.
  assert ok["metrics"]["length_2x/loss"] == pytest.approx(ok["metrics"]["length_1x/loss"], rel=1e-4)
  # The loss is the training objective (label smoothing included) everywhere.
  assert ok["metrics"]["length_1x/loss"] == pytest.approx(ok["metrics"]["eval/loss"], rel=1e-4)


def test_a_point_locked_by_a_live_process_is_skipped(tmp_path):
  sweep = _sweep()
  point = sweeps.expand(sweep)[0]
  lock = sweeps.claim(str(tmp_path), point)
  assert lock is not None and lock.is_locked
  assert sweeps.claim(str(tmp_path), point) is None  # held by a live process (this one)
  assert sweeps.run_sweep(sweep, str(tmp_path), only=[point.name]) == []
  lock.release()  # as the OS does when the holding process dies
  again = sweeps.claim(str(tmp_path), point)
  assert again is not None
  again.release()
  # A process that took the lock and died without releasing it leaves it free.
  path = os.path.join(sweeps.point_dir(str(tmp_path), point), sweeps.LOCK_FILE)
  subprocess.run([sys.executable, "-c", "import filelock, os; "
                  f"filelock.FileLock({path!r}).acquire(); os._exit(9)"], check=False)
  taken = sweeps.claim(str(tmp_path), point)
  assert taken is not None
  taken.release()