"""Contrasts across arms and sweeps: a signed sum of arms by seed, each arm at its own chosen
rate, checked by hand; one-line errors; and docs/contrasts.md as the committed results make it."""

import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from scipy import stats as scipy_stats

from conftest import script_env
from test_grid import REPO
from transformer.errors import ConfigError
from transformer.research.sweeps import contrasts
from transformer.research.sweeps.contrasts import Contrast


def test_a_contrast_is_the_signed_sum_by_seed_over_the_seeds_every_term_reports():
  arms = {"a": {"x": {0: 3.0, 1: 3.1, 2: 3.3, 7: 9.0}, "y": {0: 2.0, 1: 2.2, 2: 2.1}},
          "b": {"z": {0: 1.0, 1: 1.5, 2: 1.2, 3: 4.0}}}
  got = contrasts.evaluate(Contrast("x - y - z", plus=(("a", "x"),),
                                    minus=(("a", "y"), ("b", "z"))), arms)
  by_hand = np.array([3.0 - 2.0 - 1.0, 3.1 - 2.2 - 1.5, 3.3 - 2.1 - 1.2])  # seeds 0-2 only
  half = scipy_stats.t.ppf(0.975, 2) * by_hand.std(ddof=1) / math.sqrt(3)
  assert got.seeds == 3 and got.mean == pytest.approx(by_hand.mean())
  assert (got.low, got.high) == pytest.approx((by_hand.mean() - half, by_hand.mean() + half))


def test_each_mistake_is_one_line_naming_what_is_wrong(tmp_path):
  with pytest.raises(ConfigError, match=r"sweep 'a' has no arm 'w'.*its arms: x, y\)"):
    contrasts.evaluate(Contrast("w", plus=(("a", "w"),)), {"a": {"x": {}, "y": {}}})
  with pytest.raises(ConfigError, match=r"share 1 seed\(s\) \(\[0\]\); an interval needs 2"):
    contrasts.evaluate(Contrast("c", plus=(("a", "x"),), minus=(("a", "y"),)),
                       {"a": {"x": {0: 1.0, 1: 2.0}, "y": {0: 1.0, 2: 3.0}}})
  with pytest.raises(ConfigError, match="needs at least one plus term"):
    Contrast("c", plus=())
  # Two sweeps whose seeds draw different splits cannot be paired by seed.
  data = {"e": {"test_fraction": 0.02, "split_seed": None},
          "m": {"test_fraction": 0.02, "split_seed": 0}}
  with pytest.raises(ConfigError, match="'e' and 'm' differ in split_seed"):
    contrasts.check_shared_data(Contrast("c", plus=(("e", "x"),), minus=(("m", "x"),)), data)
  contrasts.check_shared_data(Contrast("c", plus=(("e", "x"), ("e", "y"))), data)
  with pytest.raises(ConfigError, match="does not exist"):
    contrasts.load_contrasts(str(tmp_path / "missing.py"))
  (tmp_path / "bad.py").write_text("def get_contrasts():\n  return [('c', 'x')]\n")
  with pytest.raises(ConfigError, match="must return Contrast objects"):
    contrasts.load_contrasts(str(tmp_path / "bad.py"))


def test_build_reads_each_arm_at_its_own_chosen_rate_from_stored_results(tmp_path):
  from test_tuning import bowl
  (tmp_path / "configs").mkdir()
  (tmp_path / "configs" / "s.py").write_text(textwrap.dedent("""
      from test_tuning import tuned_sweep
      def get_sweep():
        return tuned_sweep(name="s")
      """))
  # sqrt_d's best rate is 2e-3, none's 4e-3: each is read at its own (test = val + shift).
  for scale, best, shift in (("sqrt_d", 2e-3, 0.0), ("none", 4e-3, 0.5)):
    for lr in (1e-3, 2e-3, 4e-3, 8e-3):
      for seed in (0, 1, 2):
        r = bowl(scale, lr, seed, best, test_shift=shift + 0.1 * seed * (scale == "none"))
        point = tmp_path / "sweeps" / "s" / "points" / r["name"]
        point.mkdir(parents=True)
        (point / "result.json").write_text(json.dumps(r))
  (tmp_path / "c.py").write_text(
      "from transformer.research.sweeps.contrasts import Contrast\n"
      "def get_contrasts():\n"
      "  return [Contrast('none - sqrt_d', plus=(('s', 'embed_scale=none'),),\n"
      "                   minus=(('s', 'embed_scale=sqrt_d'),))]\n")
  page = contrasts.build(str(tmp_path / "c.py"), str(tmp_path / "sweeps"),
                         str(tmp_path / "configs"), command="CMD")
  # At each arm's best rate the bowl is 3.0 + 0.01 seed: the difference is 0.5 + 0.1 seed.
  diffs = np.array([0.5, 0.6, 0.7])
  half = scipy_stats.t.ppf(0.975, 2) * diffs.std(ddof=1) / math.sqrt(3)
  assert "`CMD`" in page and "in no sweep's Holm family" in page
  assert (f"| none - sqrt_d | s:embed_scale=none - s:embed_scale=sqrt_d | +0.6000 | "
          f"[{0.6 - half:+.4f}, {0.6 + half:+.4f}] | 3 |") in page


def test_the_committed_page_is_what_the_script_makes_from_the_committed_results(tmp_path):
  out = tmp_path / "contrasts.md"
  done = subprocess.run([sys.executable, "scripts/contrasts.py", "--config=configs/contrasts.py",
                         f"--out={out}"], cwd=REPO, env=script_env(), capture_output=True,
                        text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-2000:]
  with open(os.path.join(REPO, "docs", "contrasts.md")) as f:
    # The page names its command with the committed --out.
    assert out.read_text().replace(str(out), "docs/contrasts.md") == f.read()


def test_every_contrast_is_quoted_in_findings_with_its_interval(monkeypatch):
  """A wrong sign or term in configs/contrasts.py shows here: findings.md quotes each contrast's
  interval (to 3 decimals, or 2), its signs as computed ('+' may be left out)."""
  monkeypatch.chdir(REPO)  # the sweep files name their base config from the repository root
  evaluated = contrasts.evaluate_file("configs/contrasts.py", "docs/sweeps", "configs/sweeps")
  with open(os.path.join(REPO, "docs", "findings.md")) as f:
    findings = f.read().replace("+", "")
  assert len(evaluated) >= 10
  for c, p in evaluated:
    quoted = [f"[{p.low:.{n}f}, {p.high:.{n}f}]" for n in (3, 2)]
    assert any(q in findings for q in quoted), (c.name, quoted)
