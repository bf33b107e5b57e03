"""Scale diagnostics of a trained run: python scripts/analyze.py --workdir=DIR [--step=N].

Writes DIR/plots/ (analysis.md, analysis.json, PNG plots); the work is
`transformer.research.analysis.analyze`.
"""

from absl import app, flags

from transformer import errors
from transformer.research import analysis

_WORKDIR = flags.DEFINE_string("workdir", None, "A training workdir (config.json, checkpoints/).")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step; default: the newest.")
_NUM_BATCHES = flags.DEFINE_integer("num_batches", analysis.NUM_BATCHES,
                                    "Held-out batches to average over.", lower_bound=1)
flags.mark_flags_as_required(["workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  analysis.analyze(_WORKDIR.value, _STEP.value, _NUM_BATCHES.value)


if __name__ == "__main__":
  errors.run_script(main)
