"""The README's Python example runs as written."""

import pathlib
import re


def test_readme_example_runs(capsys):
  readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
  blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
  assert blocks, "README.md has no python example"
  exec(compile(blocks[0], "README.md", "exec"), {})
  assert "(2, 8, 1000) (2, 8, 1000) (32, 64) (2, 8, 4, 16)" in capsys.readouterr().out
