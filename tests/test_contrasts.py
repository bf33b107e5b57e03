"""Contrasts across arms and sweeps: a signed sum of arms by seed, each arm at its own chosen
rate, checked by hand; across model sizes, Welch's unpaired interval beside it, checked by hand;
one-line errors; and docs/contrasts.md as the committed results make it."""

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


def _welch_by_hand(a, b):
  """Welch's interval of mean(a) - mean(b), written out: (difference, low, high, d.o.f.)."""
  va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
  df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
  half = scipy_stats.t.ppf(0.975, df) * math.sqrt(va + vb)
  d = np.mean(a) - np.mean(b)
  return d, d - half, d + half, df


def test_one_arm_across_two_sizes_gets_the_paired_and_welchs_unpaired_interval():
  # One arm at two sizes (two sweeps), seeds 3-5 in both; seed 9 is only in one.
  arms = {"big": {"x": {3: 3.60, 4: 3.55, 5: 3.63, 9: 1.0}},
          "small": {"x@1200": {3: 3.36, 4: 3.33, 5: 3.38}}}
  c = Contrast("big x - small x", plus=(("big", "x"),), minus=(("small", "x@1200"),),
               sizes=((("big", "x"),), (("small", "x@1200"),)))
  a, b = np.array([3.60, 3.55, 3.63]), np.array([3.36, 3.33, 3.38])
  paired = contrasts.evaluate(c, arms)
  half = scipy_stats.t.ppf(0.975, 2) * (a - b).std(ddof=1) / math.sqrt(3)
  assert paired.mean == pytest.approx((a - b).mean())
  assert (paired.low, paired.high) == pytest.approx(((a - b).mean() - half, (a - b).mean() + half))
  u = contrasts.evaluate_unpaired(c, arms)
  d, low, high, df = _welch_by_hand(a, b)
  assert u.seeds == 3 and u.verdict == "higher"
  assert (u.mean, u.low, u.high, u.df) == pytest.approx((d, low, high, df))
  # The same p as scipy's own unequal-variance t-test.
  assert u.p_value == pytest.approx(scipy_stats.ttest_ind(a, b, equal_var=False).pvalue)
  # A contrast within one size has no unpaired interval.
  assert contrasts.evaluate_unpaired(Contrast("x", plus=(("big", "x"),)), arms) is None


def test_a_difference_of_differences_across_sizes_is_welch_over_each_sizes_paired_sum():
  # (no - paper at the big size) - (no - paper at the small one): within a size the arms share
  # their initial draws and stay paired; the two sizes are the independent samples.
  arms = {"m9": {"no": {3: 3.62, 4: 3.57, 5: 3.59}, "paper": {3: 2.95, 4: 2.96, 5: 2.95}},
          "m4": {"no": {3: 3.36, 4: 3.33, 5: 3.38}, "paper": {3: 3.24, 4: 3.25, 5: 3.24}}}
  c = Contrast("d", plus=(("m9", "no"), ("m4", "paper")), minus=(("m9", "paper"), ("m4", "no")),
               sizes=((("m9", "no"), ("m9", "paper")), (("m4", "paper"), ("m4", "no"))))
  big = np.array([3.62 - 2.95, 3.57 - 2.96, 3.59 - 2.95])
  small = np.array([3.36 - 3.24, 3.33 - 3.25, 3.38 - 3.24])
  u = contrasts.evaluate_unpaired(c, arms)
  assert (u.mean, u.low, u.high, u.df) == pytest.approx(_welch_by_hand(big, small))
  assert contrasts.evaluate(c, arms).mean == pytest.approx(u.mean)  # one estimate, two intervals


def test_each_mistake_is_one_line_naming_what_is_wrong(tmp_path):
  with pytest.raises(ConfigError, match=r"sweep 'a' has no arm 'w'.*its arms: x, y\)"):
    contrasts.evaluate(Contrast("w", plus=(("a", "w"),)), {"a": {"x": {}, "y": {}}})
  with pytest.raises(ConfigError, match=r"share 1 seed\(s\) \(\[0\]\); an interval needs 2"):
    contrasts.evaluate(Contrast("c", plus=(("a", "x"),), minus=(("a", "y"),)),
                       {"a": {"x": {0: 1.0, 1: 2.0}, "y": {0: 1.0, 2: 3.0}}})
  with pytest.raises(ConfigError, match="needs at least one plus term"):
    Contrast("c", plus=())
  for sizes in (((("a", "x"), ("a", "y")),),  # one group
                ((("a", "x"),), (("b", "z"),)),  # a term in no group, one not in the contrast
                ((("a", "x"), ("a", "y")), (("a", "y"),))):  # a term in two groups
    with pytest.raises(ConfigError, match="sizes must put each of its terms in exactly one"):
      Contrast("c", plus=(("a", "x"),), minus=(("a", "y"),), sizes=sizes)
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
      "                   minus=(('s', 'embed_scale=sqrt_d'),)),\n"
      "          Contrast('as two sizes', plus=(('s', 'embed_scale=none'),),\n"
      "                   minus=(('s', 'embed_scale=sqrt_d'),),\n"
      "                   sizes=((('s', 'embed_scale=none'),), (('s', 'embed_scale=sqrt_d'),)))]\n")
  page = contrasts.build(str(tmp_path / "c.py"), str(tmp_path / "sweeps"),
                         str(tmp_path / "configs"), command="CMD")
  # At each arm's best rate the bowl is 3.0 + 0.01 seed: the difference is 0.5 + 0.1 seed.
  diffs = np.array([0.5, 0.6, 0.7])
  half = scipy_stats.t.ppf(0.975, 2) * diffs.std(ddof=1) / math.sqrt(3)
  assert "`CMD`" in page and "in no sweep's Holm family" in page
  assert (f"| none - sqrt_d | s:embed_scale=none - s:embed_scale=sqrt_d | +0.6000 | "
          f"[{0.6 - half:+.4f}, {0.6 + half:+.4f}] | 3 |") in page
  assert "| higher | - | - | - | - |" in page  # one size: no unpaired interval
  # Taken as two sizes: Welch's interval of (3.5, 3.61, 3.72) against (3.0, 3.01, 3.02).
  _, low, high, df = _welch_by_hand(np.array([3.5, 3.61, 3.72]), np.array([3.0, 3.01, 3.02]))
  assert f"| higher | [{low:+.4f}, {high:+.4f}] | {df:.1f} |" in page


def test_the_committed_page_is_what_the_script_makes_from_the_committed_results(tmp_path):
  """...and the script reads the committed results without importing jax (the reading side)."""
  out = tmp_path / "contrasts.md"
  done = subprocess.run([sys.executable, "-X", "importtime", "scripts/contrasts.py",
                         "--config=configs/contrasts.py", f"--out={out}"], cwd=REPO,
                        env=script_env(), capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-2000:]
  assert not imported_heavy(done.stderr), imported_heavy(done.stderr)
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
  for c, p, u in evaluated:
    for low, high in [(p.low, p.high)] + ([(u.low, u.high)] if u is not None else []):
      quoted = [f"[{low:.{n}f}, {high:.{n}f}]" for n in (3, 2)]
      assert any(q in findings for q in quoted), (c.name, quoted)


HEAVY = ("jax", "flax", "optax", "orbax")


def imported_heavy(importtime: str) -> list[str]:
  """The heavy packages a `python -X importtime` run imported, from its stderr."""
  imported = {line.split("|")[-1].strip().split(".")[0] for line in importtime.splitlines()
              if line.startswith("import time:")}
  return sorted(imported & set(HEAVY))
