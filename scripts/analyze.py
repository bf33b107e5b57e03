"""Scale diagnostics of a trained run: python scripts/analyze.py --workdir=DIR [--step=N].

Writes DIR/plots/ (analysis.md, analysis.json, PNG plots); the work is
`transformer.research.analysis.analyze`.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

from absl import app, flags

from transformer.research import analysis


def _define_flags() -> flags.FlagValues:
  # Own FlagValues: importing this module (tests) never clashes with scripts/train.py's flags.
  fv = flags.FlagValues()
  flags.DEFINE_string("workdir", None, "A training workdir (config.json, checkpoints/).",
                      flag_values=fv)
  flags.DEFINE_integer("step", None, "Checkpoint step; default: the newest.", flag_values=fv)
  flags.DEFINE_integer("num_batches", analysis.NUM_BATCHES, "Held-out batches to average over.",
                       flag_values=fv)
  return fv


def main(argv: Sequence[str]) -> dict[str, Any]:
  """argv as sys.argv (argv[0] = program name); returns analysis.json's dict."""
  fv = _define_flags()
  fv(list(argv))
  if not fv.workdir:
    raise app.UsageError("--workdir is required: the training workdir to analyse.")
  return analysis.analyze(fv.workdir, fv.step, fv.num_batches)


if __name__ == "__main__":
  try:
    main(sys.argv)
  except (FileNotFoundError, ValueError, flags.Error, app.UsageError) as e:
    sys.exit(f"error: {e}")
