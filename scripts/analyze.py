"""Scale diagnostics of a trained run: python scripts/analyze.py --workdir=DIR [--step=N].

Writes DIR/plots/ (analysis.md, analysis.json, PNG plots); the work is
`transformer.research.analysis.analyze`. With --text="...", writes instead one figure of the
attention maps of that input, every layer and head (`analysis.attention_map_figure`).
"""

from transformer import extras

extras.require("train", "analysis")  # first: a core install lacks what the imports below need

from absl import app, flags  # noqa: E402

from transformer import cli, storage  # noqa: E402
from transformer.research import analysis  # noqa: E402

_WORKDIR = flags.DEFINE_string("workdir", None, "A training workdir (config.json, checkpoints/).")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step; default: the newest.")
_NUM_BATCHES = flags.DEFINE_integer("num_batches", analysis.NUM_BATCHES,
                                    "Held-out batches to average over.", lower_bound=1)
_TEXT = flags.DEFINE_string("text", None, "Draw the attention maps of this input (a source "
                            "sentence, or a language model's prompt) instead.")
_OUTPUT = flags.DEFINE_string("output", None, "With --text: the figure's path (default "
                              "DIR/plots/attention_maps.png).")
flags.mark_flags_as_required(["workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  if _TEXT.value is not None:
    made = analysis.attention_map_figure(_WORKDIR.value, _TEXT.value, _STEP.value, _OUTPUT.value)
    print(f"{made['path']}: {made['panels']} panels of {len(made['tokens'])} tokens")
    return
  result = analysis.analyze(_WORKDIR.value, _STEP.value, _NUM_BATCHES.value)
  plots = storage.join(_WORKDIR.value, "plots")
  print(f"Analysed {_WORKDIR.value} at step {result['step']} over {result['num_batches']} "
        f"held-out batch(es); wrote {plots}/analysis.md, analysis.json and "
        f"{', '.join(result['plots'])}")


if __name__ == "__main__":
  cli.run_script(main)
