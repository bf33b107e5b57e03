"""Evaluates a workdir's checkpoint on its eval split; writes WORKDIR/eval/<step>/results.json.

  python scripts/evaluate.py --workdir=/tmp/transformer-default

Loss, perplexity and token accuracy; for a seq2seq model also BLEU (sacrebleu, on detokenized
text) and exact-sequence accuracy of beam search (beam 4, alpha 0.6, unless overridden), with
hypotheses.txt / references.txt beside results.json. Prints the results as JSON. The work is
`transformer.training.evaluate.evaluate_workdir`.
"""

import json

from absl import app, flags, logging

from transformer import errors
from transformer.inference import decoding
from transformer.training import evaluate

_WORKDIR = flags.DEFINE_string("workdir", None, "The training run's workdir.")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the newest readable).")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", None, "Eval batch (default: the run's).")
_TFDS_DATA_DIR = flags.DEFINE_string("tfds_data_dir", None,
                                     "Where the TFDS data lives (default: the run's).")
_DECODE = flags.DEFINE_boolean("decode", True, "Decode the split (BLEU, exact match).")
_DECODE_CONFIG = decoding.define_decode_flags()
flags.mark_flags_as_required(["workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  if not flags.FLAGS["verbosity"].present:  # keep orbax's per-file INFO lines off the terminal
    logging.set_verbosity(logging.WARNING)
  results = evaluate.evaluate_workdir(
      _WORKDIR.value, step=_STEP.value, config=_DECODE_CONFIG(), batch_size=_BATCH_SIZE.value,
      tfds_data_dir=_TFDS_DATA_DIR.value, decode=_DECODE.value)
  print(json.dumps(results, indent=2, sort_keys=True))


if __name__ == "__main__":
  errors.run_script(main)
