"""The README is a front door: at most 120 lines, the two commands a fresh machine needs; the
modules' example (docs/knobs.md) runs as written; every relative link of README and docs/
resolves."""

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parent.parent


# The README's two commands: the main job, set up and run; the tests, set up and run.
MAIN_JOB = ("python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[train]' && "
            "python scripts/train.py --config=configs/default.py "
            "--workdir=/tmp/transformer-default")
TESTS = ("python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && python -m "
         "pytest -n 2 tests")


def test_the_readme_is_a_front_door_with_the_two_commands():
  readme = (REPO / "README.md").read_text()
  assert len(readme.splitlines()) <= 120
  commands = re.findall(r"```bash\n(.*?)```", readme, re.S)
  assert commands[:2] == [MAIN_JOB + "\n", TESTS + "\n"]
  assert "python -m pytest -n 2 tests\n" in (REPO / ".ci" / "run").read_text()  # CI runs it too


def test_the_readmes_two_snippets_run_as_written(capsys, decode_run):
  """A module imported and applied; a checkpoint restored and applied (the main job's workdir
  replaced by a run trained here)."""
  readme = (REPO / "README.md").read_text()
  module, restore = re.findall(r"```python\n(.*?)```", readme, re.S)[:2]
  exec(compile(module, "README.md", "exec"), {})
  assert "(2, 8, 1000)" in capsys.readouterr().out
  assert '"/tmp/transformer-default"' in restore
  exec(compile(restore.replace("/tmp/transformer-default", decode_run), "README.md", "exec"), {})
  assert re.search(r"\[\[\d+ \d+ \d+ \d+\]\]", capsys.readouterr().out)


def test_the_modules_example_runs(capsys):
  page = (REPO / "docs" / "knobs.md").read_text()
  blocks = re.findall(r"```python\n(.*?)```", page, re.S)
  assert blocks, "docs/knobs.md has no python example"
  exec(compile(blocks[0], "docs/knobs.md", "exec"), {})
  assert "(2, 8, 1000) (2, 8, 1000) (32, 64) (2, 8, 4, 16)" in capsys.readouterr().out


def _slug(heading: str) -> str:
  """GitHub's anchor of a heading: link markup reduced to its text, lower case, punctuation
  dropped, spaces as hyphens."""
  text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
  return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: pathlib.Path) -> set[str]:
  """The anchors of a markdown page: its headings' slugs (a repeat gets -1, -2, ...) outside
  code blocks, and explicit <a name=...> / id=... anchors."""
  text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
  found, seen = set(), {}
  for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M):
    slug = _slug(heading)
    found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
    seen[slug] = seen.get(slug, 0) + 1
  return found | set(re.findall(r"""(?:name|id)=["']([^"']+)["']""", text))


def _broken_links(root):
  """Relative markdown links `](target)` of README.md, docs/ and launch/ whose file is missing,
  or whose #anchor names no heading of a markdown target."""
  broken = []
  for page in [root / "README.md", *sorted((root / "docs").rglob("*.md")),
               *sorted((root / "launch").glob("*.md"))]:
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
      path, _, anchor = target.partition("#")
      if re.match(r"[a-z]+:", path):
        continue
      file = (page.parent / path) if path else page
      if not file.exists():
        broken.append(f"{page.relative_to(root)}: {target}")
      elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
        broken.append(f"{page.relative_to(root)}: {target} (no such section)")
  return broken


def test_every_relative_link_and_anchor_in_readme_and_docs_resolves(tmp_path):
  assert _broken_links(REPO) == []
  (tmp_path / "docs").mkdir()  # and the check itself finds broken ones
  (tmp_path / "README.md").write_text(
      "# Top\n[a](docs/a.md) [b](docs/missing.md#x) [c](https://x.org) [d](docs/a.md#the-knob)"
      " [e](docs/a.md#gone) [f](#top) [g](docs/a.md#set-up-2)\n")
  (tmp_path / "docs" / "a.md").write_text(
      "[up](../README.md#nowhere)\n## The `knob`\n## Set-up?\n```bash\n# Not a heading\n```\n"
      "## Set up\n## Set up\n")
  assert _broken_links(tmp_path) == [
      "README.md: docs/missing.md#x", "README.md: docs/a.md#gone (no such section)",
      "docs/a.md: ../README.md#nowhere (no such section)"]
