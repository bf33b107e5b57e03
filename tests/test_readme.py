"""The README's Python example runs as written; every relative link of README and docs/ resolves."""

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parent.parent


def test_readme_example_runs(capsys):
  readme = (REPO / "README.md").read_text()
  blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
  assert blocks, "README.md has no python example"
  exec(compile(blocks[0], "README.md", "exec"), {})
  assert "(2, 8, 1000) (2, 8, 1000) (32, 64) (2, 8, 4, 16)" in capsys.readouterr().out


def _broken_links(root):
  """Relative markdown links `](target)` of README.md, docs/ and launch/ whose file is missing."""
  broken = []
  for page in [root / "README.md", *sorted((root / "docs").rglob("*.md")),
               *sorted((root / "launch").glob("*.md"))]:
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
      path = target.split("#")[0]
      if path and not re.match(r"[a-z]+:", path) and not (page.parent / path).exists():
        broken.append(f"{page.relative_to(root)}: {target}")
  return broken


def test_every_relative_link_in_readme_and_docs_resolves(tmp_path):
  assert _broken_links(REPO) == []
  (tmp_path / "docs").mkdir()  # and the check itself finds a broken one
  (tmp_path / "README.md").write_text("[a](docs/a.md) [b](docs/missing.md#x) [c](https://x.org)")
  (tmp_path / "docs" / "a.md").write_text("[up](../README.md)")
  assert _broken_links(tmp_path) == ["README.md: docs/missing.md#x"]
