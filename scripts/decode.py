"""Translates (seq2seq) or continues (lm) text with a trained workdir, one line per line.

  python scripts/decode.py --workdir=/tmp/transformer-default < in.txt > out.txt
  echo "a b c d" | python scripts/decode.py --workdir=DIR --method=greedy
  python scripts/decode.py --workdir=DIR --input=in.txt --output=out.txt --step=1500

The newest readable checkpoint (or --step) and the workdir's tokenizer; beam search (beam 4,
alpha 0.6, as the paper) unless --method=greedy or --method=sample. The output has exactly one
line per input line, in order; an empty line gives an empty line. The work is
`transformer.trained.evaluate.decode_file`.
"""

import sys

from transformer import extras

extras.require("train")  # first: a core install lacks what the imports below need

from absl import app, flags  # noqa: E402

from transformer import cli  # noqa: E402
from transformer.trained import evaluate  # noqa: E402

_WORKDIR = flags.DEFINE_string("workdir", None, "The training run's workdir.")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the newest readable).")
_INPUT = flags.DEFINE_string("input", "-", "Input text file, one example a line ('-' = stdin).")
_OUTPUT = flags.DEFINE_string("output", "-", "Output file ('-' = stdout).")
_TOKENIZER = flags.DEFINE_string("tokenizer", None, "A tokenizer file instead of the workdir's.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 64, "Lines decoded together.", lower_bound=1)
_MAX_INPUT_LEN = flags.DEFINE_integer("max_input_len", None,
                                      "Longer inputs are truncated (default: the training rows; at "
                                      "most what the model's position table covers).")
_PROMPT_EOS = flags.DEFINE_enum("prompt_eos", "auto", ["auto", "true", "false"],
                                "lm: append EOS to each prompt (auto: for seq2seq-style data).")
_SEED = flags.DEFINE_integer("seed", 0, "Sampling seed.")
_DECODE_CONFIG = cli.define_decode_flags()
flags.adopt_module_key_flags(cli)  # --method, --beam_size, ... in --help
flags.mark_flags_as_required(["workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  prompt_eos = None if _PROMPT_EOS.value == "auto" else _PROMPT_EOS.value == "true"
  done = evaluate.decode_file(_WORKDIR.value, _INPUT.value, _OUTPUT.value, config=_DECODE_CONFIG(),
                           step=_STEP.value, tokenizer=_TOKENIZER.value,
                           batch_size=_BATCH_SIZE.value, max_len=_MAX_INPUT_LEN.value,
                           prompt_eos=prompt_eos, seed=_SEED.value)
  # On stderr: stdout may be the output itself.
  output = "stdout" if done["output"] == "-" else done["output"]
  print(f"Decoded {done['lines']} line(s) with {done['workdir']} at step {done['step']} "
        f"({_DECODE_CONFIG().method}) -> {output}", file=sys.stderr)


if __name__ == "__main__":
  cli.run_script(main)
