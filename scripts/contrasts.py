"""Rebuilds docs/contrasts.md: the contrasts across arms and sweeps that docs/findings.md quotes
beyond each sweep's own table, from the committed result.json files.

  python scripts/contrasts.py --config=configs/contrasts.py --out=docs/contrasts.md

The work is `transformer.research.sweeps.contrasts.build`.
"""

from transformer import extras

extras.require("train", "analysis")  # first: a core install lacks what the imports below need

from absl import app, flags  # noqa: E402

from transformer import cli, storage  # noqa: E402
from transformer.research.sweeps import contrasts  # noqa: E402

_CONFIG = flags.DEFINE_string("config", "configs/contrasts.py", "Contrasts file.")
_OUT = flags.DEFINE_string("out", "docs/contrasts.md", "Where the page goes.")
_SWEEPS_DIR = flags.DEFINE_string("sweeps_dir", "docs/sweeps", "The sweeps' workdirs (NAME/).")
_CONFIGS_DIR = flags.DEFINE_string("configs_dir", "configs/sweeps", "The sweep files (NAME.py).")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  command = f"python scripts/contrasts.py --config={_CONFIG.value} --out={_OUT.value}"
  for flag in (_SWEEPS_DIR, _CONFIGS_DIR):  # the page names every flag it was made with
    command += f" --{flag.name}={flag.value}" if flag.value != flag.default else ""
  page = contrasts.build(_CONFIG.value, _SWEEPS_DIR.value, _CONFIGS_DIR.value, command)
  storage.write_atomically(_OUT.value, page)
  print(page)


if __name__ == "__main__":
  cli.run_script(main)
