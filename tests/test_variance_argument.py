"""transformer/research/variance_argument.py: Question 5's slopes and levels per layer, checked by
hand on made-up results, against the committed E6 and E5 sweep reports, and for its imports."""

import json
import math
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats as scipy_stats

from transformer.research import variance_argument as va
from transformer.research.sweeps import grid

REPO = pathlib.Path(__file__).resolve().parents[1]

TOY_SWEEP = '''"""A toy sweep: d_k 32, 16, 8 at a fixed width, rates chosen on seed 0."""

from transformer.research.sweeps import Sweep


def get_sweep() -> Sweep:
  return Sweep(name="toy", question="toy", base="configs/lm_tiny.py",
               axes=({"model.num_heads": [1, 2, 4], "model.head_dim": [32, 16, 8]},),
               seeds=(0,), confirm_seeds=(1, 2), tune={"learning_rate": [1e-2, 2e-2]},
               fixed={"test_fraction": 0.02})
'''
# Var(q.k) = c_seed * d_k ** p_seed at init and trained, per seed (the known slopes).
C = {0: 3.0, 1: 0.5, 2: 1.7}
P_INIT = {0: 1.0, 1: 0.9, 2: 1.1}
P_FINAL = {0: 0.6, 1: 0.8, 2: 0.7}
D_KS = (32, 16, 8)


def _metrics(heads: int, d_k: int, seed: int, layer_factor: dict[int, float]) -> dict:
  """Every head's diagnostics; heads spread around the layer's value (their mean is it)."""
  m = {}
  for phase, p in (("init", P_INIT[seed]), ("final", P_FINAL[seed])):
    for layer, factor in layer_factor.items():
      var = factor * C[seed] * d_k ** p
      for h in range(heads):
        head = var * (1 + 0.2 * (h - (heads - 1) / 2))
        key = f"{phase}/decoder/layer_{layer}/self_attention/head_{h}/"
        m.update({key + "raw_var_within": head, key + "qk_var_over_dk_within": head / d_k,
                  key + "qk_alignment": 2.0, key + "logit_var_within": head / d_k})
  return m


def _write_point(points: pathlib.Path, heads: int, d_k: int, rate: float, seed: int,
                 eval_loss: float, layer_factor: dict[int, float]) -> None:
  overrides = {"learning_rate": rate, "model.head_dim": d_k, "model.num_heads": heads}
  name = f"num_heads={heads},head_dim={d_k},learning_rate={rate},seed={seed}"
  metrics = {**_metrics(heads, d_k, seed, layer_factor), "eval/loss": eval_loss}
  (points / name).mkdir(parents=True)
  (points / name / "result.json").write_text(json.dumps(
      {"name": name, "overrides": overrides, "seed": seed, "status": "ok", "metrics": metrics}))


@pytest.fixture(autouse=True)
def _at_the_repo_root(monkeypatch):
  """A sweep file names its base config from the repo root, where the runner reads it."""
  monkeypatch.chdir(REPO)


@pytest.fixture
def toy(tmp_path):
  """docs/sweeps/toy/points/*/result.json and configs/sweeps/toy.py under tmp_path: seed 0 at
  both rates (1e-2 has the lower validation loss; 2e-2's Var(q.k) grows one power of d_k
  slower, so reading the wrong rate would show), seeds 1 and 2 at 1e-2 only."""
  points = tmp_path / "docs" / "sweeps" / "toy" / "points"
  for heads, d_k in zip((1, 2, 4), D_KS):
    for seed in (0, 1, 2):
      _write_point(points, heads, d_k, 0.01, seed, 3.0, {0: 1.0, 1: 0.5})
    _write_point(points, heads, d_k, 0.02, 0, 3.5, {0: 10.0 / d_k, 1: 10.0 / d_k})
  (tmp_path / "configs" / "sweeps").mkdir(parents=True)
  (tmp_path / "configs" / "sweeps" / "toy.py").write_text(TOY_SWEEP)
  return va.report(str(tmp_path / "docs" / "sweeps"), str(tmp_path / "configs" / "sweeps"),
                   sweeps=("toy",))


def _by_hand(slopes: list[float]) -> tuple[str, str]:
  """'mean ± std' and '[low, high]' of a 95% t-interval, from scipy's t directly."""
  n, mean, std = len(slopes), float(np.mean(slopes)), float(np.std(slopes, ddof=1))
  half = scipy_stats.t.ppf(0.975, n - 1) * std / math.sqrt(n)
  return f"{mean:.3f} ± {std:.3f}", f"[{mean - half:.3f}, {mean + half:.3f}]"


def _row(markdown: str, layer: int, reading: str) -> list[str]:
  rows = [line.split(" | ") for line in markdown.splitlines()
          if line.startswith(f"| {layer} | ") and f" | {reading} | " in line]
  assert len(rows) == 1, rows
  return rows[0]


@pytest.mark.parametrize("layer", [0, 1])
@pytest.mark.parametrize("reading, powers, holds", [("init", P_INIT, "yes"),
                                                    ("trained", P_FINAL, "no")])
def test_slopes_and_their_t_interval_are_the_hand_computed_ones(toy, layer, reading, powers,
                                                                holds):
  row = _row(toy, layer, reading)
  spread, interval = _by_hand([powers[s] for s in (0, 1, 2)])
  assert row[5:8] == [spread, interval, f"{holds} |"], row
  for seed in (0, 1, 2):
    assert f"{powers[seed]:.3f} (seed {seed})" in row[4]
  # Layer 0 of a post-LN model reads the embedding sum; layer 1 a layer norm's output.
  assert row[1] == (va.EMBEDDING_INPUT if layer == 0 else va.NORM_INPUT)


def test_logit_levels_are_the_mean_and_std_over_seeds(toy):
  line = next(row for row in toy.splitlines()
              if row.startswith("| 1 | layer norm output | all | 8 |"))
  init = [0.5 * C[s] * 8 ** P_INIT[s] / 8 for s in (0, 1, 2)]
  final = [0.5 * C[s] * 8 ** P_FINAL[s] / 8 for s in (0, 1, 2)]
  def cell(v):
    return f"{np.mean(v):.3f} ± {np.std(v, ddof=1):.3f}"
  assert line.split(" | ")[7] == f"{cell(init)} / {cell(final)}"
  assert "Every arm chose 0.01" in toy and "seeds 0-2" in toy


def test_the_lead_names_the_slopes_from_the_numbers(toy):
  lead = toy.split("\n\n")[1]
  _, interval = _by_hand([P_FINAL[s] for s in (0, 1, 2)])
  assert "init, 1 of 1 hold 1" in lead and "trained, 0 of 1 hold 1" in lead
  assert f"below 1: toy layer 1 (all) 0.700 {interval}" in lead
  assert "post-LN layer 0" in lead


def _results_md_fits(path: pathlib.Path) -> dict[tuple[str, str], dict[frozenset, str]]:
  """{(phase, 'raw' or 'change'): {settings: 'mean ± std'}} of results.md's layer-0 fits."""
  fits, key = {}, None
  for line in path.read_text().splitlines():
    heading = re.match(r"Slope of log\(mean:(init|final)/decoder/layer_0/self_attention/"
                       r"head_\*/raw_var_within( - .*)?\) against", line)
    if heading:
      key = fits.setdefault((heading.group(1), "change" if heading.group(2) else "raw"), {})
    elif line and not line.startswith("|"):
      key = None  # a table ends at the next text
    elif key is not None and line.startswith("| ") and "±" in line:
      settings, slope, _ = line.strip("| ").split(" | ")
      key[frozenset(settings.split(","))] = slope
  return fits


@pytest.mark.parametrize("name", ["e6_head_dim", "e5_width"])
def test_layer_0_slopes_agree_with_the_committed_sweep_report(name):
  sweep = grid.load_sweep(str(REPO / "configs" / "sweeps" / f"{name}.py"))
  runs = va.read_runs(str(REPO / "docs" / "sweeps" / name), sweep)
  rows = va.slope_rows(va.reported_runs(runs, sweep), sweep)
  expected = _results_md_fits(REPO / "docs" / "sweeps" / name / "results.md")
  readings = {"init": ("init", "raw"), "trained": ("final", "raw"),
              "trained - init": ("final", "change")}
  checked = 0
  for row in rows:
    if row.layer == ("decoder", 0) and row.slopes:
      mean, std, _, _, n = va.t_interval(row.slopes)
      settings = frozenset(row.setting.split(", "))
      assert f"{mean:.3f} ± {std:.3f}" == expected[readings[row.reading]][settings], row
      assert n == 5
      checked += 1
  assert checked >= (9 if name == "e6_head_dim" else 6)
  if name == "e6_head_dim":  # the page's example: 0.968 ± 0.035 at init, Xavier
    assert "| 0.968 ± 0.035 | [0.925, 1.012] | yes |" in va.report(
        str(REPO / "docs" / "sweeps"), str(REPO / "configs" / "sweeps"), sweeps=(name,))


def test_a_point_outside_the_sweeps_arms_is_not_read(toy, tmp_path):
  """A result whose overrides set a field off the axes (a stray run copied in) is left out."""
  _write_point(tmp_path / "docs" / "sweeps" / "toy" / "points", 1, 32, 0.03, 0, 1.0,
               {0: 1.0, 1: 0.5})  # the lowest loss: read as a point, it would be chosen
  extra = next((tmp_path / "docs" / "sweeps" / "toy" / "points").glob("*learning_rate=0.03*"))
  result = json.loads((extra / "result.json").read_text())
  result["overrides"]["dropout_rate"] = 0.3
  (extra / "result.json").write_text(json.dumps(result))
  assert va.report(str(tmp_path / "docs" / "sweeps"), str(tmp_path / "configs" / "sweeps"),
                   sweeps=("toy",)) == toy


def test_chosen_rates_are_the_sweep_reports():
  """E6: every arm chose 1e-2 on seed 0 (docs/findings.md, Question 5)."""
  sweep = grid.load_sweep(str(REPO / "configs" / "sweeps" / "e6_head_dim.py"))
  reported = va.reported_runs(
      va.read_runs(str(REPO / "docs" / "sweeps" / "e6_head_dim"), sweep), sweep)
  assert len(reported) == 12
  assert {rate for rate, _ in reported.values()} == {0.01}
  assert all([r.seed for r in runs] == [0, 1, 2, 3, 4] for _, runs in reported.values())


def test_the_base_config_gives_the_model_fields_the_page_reads():
  """configs/lm_tiny.py leaves them to its recipe (vaswani2017: post-LN, 1/sqrt(d_k))."""
  model = va._base_model("configs/lm_tiny.py")
  assert (model["norm_position"], model["attention_scale"], model["embed_norm"]) == (
      "post", "inv_sqrt_dk", False)


def test_the_module_imports_no_jax():
  code = ("import sys, transformer.research.variance_argument; "
          "print(sorted(m for m in ('jax', 'flax', 'optax') if m in sys.modules))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                       timeout=120, check=True)
  assert out.stdout.strip() == "[]", out.stdout + out.stderr
