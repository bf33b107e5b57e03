"""Rebuilds the generated parts of docs/findings.md from the committed result.json files: the
figures in docs/figures/ and the tables between the page's markers: the headline's numbers
(<!-- headline -->), W1's cost against the token/PE ratio at each width (<!-- balance -->) and
the variance argument on the layers whose input is normalised (<!-- variance_argument -->),
whose every layer and setting goes to docs/variance_argument.md.

  python scripts/findings.py

The work is `transformer.research.findings` and `transformer.research.variance_argument`.
"""

from transformer import extras

extras.require("train", "analysis")  # first: a core install lacks what the imports below need

from absl import app, flags  # noqa: E402

from transformer import cli, storage  # noqa: E402
from transformer.research import findings, variance_argument  # noqa: E402

_PAGE = flags.DEFINE_string("page", "docs/findings.md", "The page whose marked blocks are rebuilt.")
_FIGURES = flags.DEFINE_string("figures", "docs/figures", "Where the figures go.")
_VARIANCE = flags.DEFINE_string("variance_page", "docs/variance_argument.md",
                                "Where the variance argument's full tables go.")
_SWEEPS_DIR = flags.DEFINE_string("sweeps_dir", "docs/sweeps", "The sweeps' workdirs (NAME/).")
_CONFIGS_DIR = flags.DEFINE_string("configs_dir", "configs/sweeps", "The sweep files (NAME.py).")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  where = (_FIGURES.value, _CONFIGS_DIR.value, _SWEEPS_DIR.value)
  blocks = {"headline": findings.headline(*where), "balance": findings.balance(*where),
            "variance_argument": variance_argument.summary(_SWEEPS_DIR.value, _CONFIGS_DIR.value)}
  storage.write_atomically(_VARIANCE.value, "# The variance argument for 1/sqrt(d_k), every "
                           "layer and setting\n\n" + variance_argument.report(
                               _SWEEPS_DIR.value, _CONFIGS_DIR.value).replace("## ", "### ", 1))
  with storage.as_path(_PAGE.value).open() as f:
    page = f.read()
  storage.write_atomically(_PAGE.value, findings.fill(page, blocks))
  print(f"{_PAGE.value}: rebuilt {', '.join(blocks)}; figures {findings.HEADLINE} and "
        f"{findings.BALANCE} in {_FIGURES.value}")


if __name__ == "__main__":
  cli.run_script(main)
