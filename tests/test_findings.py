"""docs/findings.md: its first screen is the verdict table, it stays readable (at most 800
lines), and its generated parts (the headline figure and tables) are what `scripts/findings.py`
makes from the committed result.json files."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from transformer.errors import ConfigError
from transformer.research import findings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(REPO, "docs", "findings.md")


def _page() -> str:
  with open(PAGE) as f:
    return f.read()


def test_the_page_opens_with_a_verdict_for_every_question_and_explanation():
  page = _page()
  assert len(page.splitlines()) <= 800
  first_screen = "\n".join(page.splitlines()[:40])
  table = first_screen[first_screen.index("## The verdicts"):]
  for row in ("Is the sqrt(d_model) in the paper?", "(a) It exists because the embedding is shared",
              "(b) It is not needed at all",
              "(c) It keeps the positional encoding relatively small",
              "(d) It cancels against the 1/sqrt(d_k)", "(e) The arithmetic",
              "(f) It keeps gradients in a good range", "Why scale before adding the positional",
              "The variance argument for 1/sqrt(d_k)"):
    assert f"| {row}" in table, row
  verdicts = re.findall(r"\*\*(settled|refuted|refuted at small size|holds at small size only|"
                        r"not tested|holds|not settled)\*\*", table)
  assert len(verdicts) >= 9


def test_the_generated_parts_are_what_the_script_makes(tmp_path):
  page = tmp_path / "findings.md"
  shutil.copy(PAGE, page)
  variance = tmp_path / "variance_argument.md"
  done = subprocess.run([sys.executable, "scripts/findings.py", f"--page={page}",
                         f"--figures={tmp_path / 'figures'}", f"--variance_page={variance}"],
                        cwd=REPO, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-2000:]
  assert page.read_text() == _page()
  with open(os.path.join(REPO, "docs", "variance_argument.md")) as f:
    assert variance.read_text() == f.read()
  for figure in (findings.HEADLINE, findings.BALANCE):
    assert os.path.getsize(tmp_path / "figures" / figure) > 10_000
    assert os.path.isfile(os.path.join(REPO, "docs", "figures", figure))


def test_the_headline_points_are_rows_of_their_sweeps_tables():
  found = {(p.sweep, p.x): p.paired for p in findings.headline_points()}
  # E5 at d_model 64 is E1's pair (its results.md: +0.1986 [+0.1522, +0.2450] over 5 seeds).
  e5 = found[("e5_width", 64)]
  assert (round(e5.mean, 4), e5.seeds) == (0.1986, 5)
  assert [round(v, 4) for v in e5.interval] == [0.1522, 0.245]
  m9 = found[("m9_width_256", 256)]  # its interval adds the test set's own error
  assert [round(v, 3) for v in m9.interval] == [0.553, 0.725] and m9.seeds == 3
  assert {x for s, x in found if s == "m4_penalty_vs_steps"} == {64, 400, 1200, 3000}


def test_fill_replaces_each_marked_block_and_names_a_missing_marker():
  page = "a\n<!-- t -->\nold\n<!-- /t -->\nb\n"
  assert findings.fill(page, {"t": "new"}) == "a\n<!-- t -->\nnew\n<!-- /t -->\nb\n"
  with pytest.raises(ConfigError, match="no <!-- u --> ... <!-- /u --> block"):
    findings.fill(page, {"u": "x"})
