"""Evaluates a workdir's checkpoint on its eval split, or on a named test set.

  python scripts/evaluate.py --workdir=/tmp/transformer-default
  python scripts/evaluate.py --workdir=DIR --input=test.src --reference=test.ref [--output=hyp.txt]

On the eval split (writes WORKDIR/eval/<step>/results.json):
Loss, perplexity and token accuracy; for a seq2seq model also BLEU (sacrebleu, on detokenized
text) and exact-sequence accuracy of beam search (beam 4, alpha 0.6, unless overridden), with
hypotheses.txt / references.txt beside results.json. On a named test set: the BLEU and exact
match of its decoded --input lines against --reference (one line each), the figure
`sacrebleu REFERENCE -i HYPOTHESES` prints. Prints the results as JSON. The work is
`transformer.trained.evaluate.evaluate_workdir` and `transformer.trained.evaluate.score_file`.
"""

import json
import sys

from transformer import extras

extras.require("train")  # first: a core install lacks what the imports below need

from absl import app, flags  # noqa: E402

from transformer import cli  # noqa: E402
from transformer.trained import evaluate  # noqa: E402

_WORKDIR = flags.DEFINE_string("workdir", None, "The training run's workdir.")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the newest readable).")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", None, "Eval batch (default: the run's).",
                                   lower_bound=1)
_TFDS_DATA_DIR = flags.DEFINE_string("tfds_data_dir", None,
                                     "Where the TFDS data lives (default: the run's).")
_DECODE = flags.DEFINE_boolean("decode", True, "Decode the split (BLEU, exact match).")
_INPUT = flags.DEFINE_string("input", None, "A test set's sources, one a line (with --reference).")
_REFERENCE = flags.DEFINE_string("reference", None, "The test set's references, one a line.")
_OUTPUT = flags.DEFINE_string("output", None, "With --input: write the hypotheses here too.")
_DECODE_CONFIG = cli.define_decode_flags()
flags.adopt_module_key_flags(cli)  # --method, --beam_size, ... in --help
flags.mark_flags_as_required(["workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  if (_INPUT.value is None) != (_REFERENCE.value is None):
    missing = "--reference" if _REFERENCE.value is None else "--input"
    raise app.UsageError(f"{missing} is missing: --input and --reference go together (a test "
                         "set's sources and references).")
  if _INPUT.value is not None:
    results = evaluate.score_file(_WORKDIR.value, _INPUT.value, _REFERENCE.value, _OUTPUT.value,
                               config=_DECODE_CONFIG(), step=_STEP.value,
                               batch_size=_BATCH_SIZE.value or 64)
    wrote = results["hypotheses_file"] or "no file (pass --output to keep the hypotheses)"
  else:
    results = evaluate.evaluate_workdir(
        _WORKDIR.value, step=_STEP.value, config=_DECODE_CONFIG(), batch_size=_BATCH_SIZE.value,
        tfds_data_dir=_TFDS_DATA_DIR.value, decode=_DECODE.value)
    wrote = results["results_file"]
  print(f"Evaluated {results['workdir']} at step {results['step']}; wrote {wrote}",
        file=sys.stderr)
  # Rounded where printed (results.json keeps every digit): BLEU 100.00000000000004 is 100.0.
  rounded = {k: round(v, 6) if isinstance(v, float) else v for k, v in results.items()}
  print(json.dumps(rounded, indent=2, sort_keys=True))


if __name__ == "__main__":
  cli.run_script(main)
