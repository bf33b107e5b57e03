"""Every mistake a config can hold is said by scripts/train.py in one line before anything
exists: no workdir, lock, TFDS directory or tokenizer. And a run parses and validates its
config once.

Each case runs train.py's own `main` as the command line does (`runpy`, its flags in argv),
in a child forked from one process that imported the package once, so a dozen cases cost
one interpreter start, not twelve.
"""

import json
import os

import pytest

from conftest import REPO, TRAIN, forked_script_runs, tiny_train_flags

LM_TINY = str(REPO / "configs" / "lm_tiny.py")
TRANSLATE_TINY = str(REPO / "configs" / "translate_tiny.py")

# Before the forks: the package imported once, where the test wrote a model kind of one's own
# importable, and the three functions counted; the counted case prints its counts.
_COUNTING = """
sys.path.insert(0, os.environ["MY_KINDS_DIR"])
from transformer.training import experiment, run
counts = {"parse": 0, "validate": 0, "device_mesh": 0}
def counting(module, function):
  inner = getattr(module, function)
  def wrapped(*args, **kwargs):
    counts[function] += 1
    return inner(*args, **kwargs)
  setattr(module, function, wrapped)
for module, function in ((experiment, "parse"), (experiment, "validate"), (run, "device_mesh")):
  counting(module, function)
"""
_PRINT_COUNTS = 'print("COUNTS " + json.dumps(counts), flush=True) if name == "counted" else None'

_INCOMPLETE_KIND = """
from typing import ClassVar
import flax.linen as nn
from transformer.config import ModelConfig

class Incomplete(nn.Module):
  config: ModelConfig
  batch_keys: ClassVar[tuple[str, ...]] = ("targets",)
"""


CASES = ("concat for a model that reads a source", "eval_fraction above 1", "eval_fraction 0",
         "text_split unknown", "synthetic max_len below min_len", "synthetic task unknown",
         "a language outside the pair", "the same language twice",
         "a test split held out of a TFDS dataset",
         "a kind that does not answer ModelKind", "BLEU for a kind with no source",
         "packing unknown")


def _late_mistakes(tmp_path) -> dict[str, tuple[list[str], str]]:
  """name -> (flags, the words its one line holds): the mistakes that used to be found only
  after the workdir, its lock, the TFDS dataset or the tokenizer had been made."""
  text = tmp_path / "text.txt"
  text.write_text("\n\n".join(f"Paragraph {i}, its words." for i in range(30)) + "\n")
  pairs = tmp_path / "pairs.tsv"
  pairs.write_text("".join(f"Satz {i}\tsentence {i}\n" for i in range(30)))
  lm = [f"--config={LM_TINY}", f"--config.data_files={text}"]
  translate = [f"--config={TRANSLATE_TINY}", f"--config.data_files={pairs}"]
  return {
      "concat for a model that reads a source": (
          [*translate, "--config.packing=concat", "--config.tokenizer.kind=bytes"],
          "packing='concat' splits examples across rows"),
      "eval_fraction above 1": ([*lm, "--config.eval_fraction=1.5"],
                                "eval_fraction=1.5 must be in (0, 1)"),
      "eval_fraction 0": ([*lm, "--config.eval_fraction=0.0"], "eval_fraction=0.0 must be in"),
      "text_split unknown": ([*lm, "--config.text_split=sentence"],
                             "text_split='sentence' is not one of"),
      "synthetic max_len below min_len": (
          [f"--config={REPO / 'configs' / 'default.py'}", "--config.synthetic.min_len=9",
           "--config.synthetic.max_len=4"], "Synthetic max_len=4 is below min_len=9"),
      "synthetic task unknown": (
          [f"--config={REPO / 'configs' / 'default.py'}", "--config.synthetic.task=shuffle"],
          "Unknown synthetic task 'shuffle'"),
      "a language outside the pair": (
          [*translate, "--config.dataset=wmt14_translate/de-en", "--config.data_files=",
           "--config.test_fraction=0", "--config.source_lang=fr"],
          "source_lang='fr' is not a language of wmt14"),
      "the same language twice": (
          [*translate, "--config.dataset=wmt14_translate/de-en", "--config.data_files=",
           "--config.test_fraction=0", "--config.source_lang=en"],
          "source_lang and target_lang are both 'en'"),
      "a test split held out of a TFDS dataset": (
          [*translate, "--config.dataset=wmt14_translate/de-en", "--config.data_files="],
          "test_fraction=0.025 holds out a test split of a local corpus"),
      "a kind that does not answer ModelKind": (
          [*lm, "--config.model_type=my_kinds:Incomplete"],
          "'my_kinds:Incomplete' lacks decode_step"),
      "BLEU for a kind with no source": ([*lm, "--config.bleu_every_steps=10"],
                                         "bleu_every_steps=10 needs model_type='seq2seq'"),
      "packing unknown": ([*lm, "--config.packing=bogus"], "packing='bogus' is not one of"),
  }


@pytest.fixture(scope="module")
def driven(tmp_path_factory, tfds_dir):
  """Every case's (exit code, output, what it left), and the counted run's counts."""
  tmp = tmp_path_factory.mktemp("late")
  (tmp / "my_kinds.py").write_text(_INCOMPLETE_KIND)
  cases, expected, mistakes = {}, {}, _late_mistakes(tmp)
  assert set(mistakes) == set(CASES)
  for name, (flags, words) in mistakes.items():
    where = tmp / name.replace(" ", "_")
    cases[name] = [*flags, f"--workdir={where / 'w'}", f"--config.tfds_data_dir={where / 't'}"]
    expected[name] = (where, words)
  counted = tmp / "counted"
  cases["counted"] = tiny_train_flags(tfds_dir, counted, steps=2, every=2)
  os.environ["MY_KINDS_DIR"] = str(tmp)  # for the driver, which inherits the environment
  try:
    results = forked_script_runs(TRAIN, cases, before=_COUNTING, after=_PRINT_COUNTS)
  finally:
    del os.environ["MY_KINDS_DIR"]
  return results, expected


@pytest.mark.parametrize("name", CASES)
def test_a_mistake_is_one_line_before_anything_is_made(driven, name):
  results, expected = driven
  where, words = expected[name]
  code, output = results[name]["code"], results[name]["output"]
  assert code != 0 and "Traceback" not in output, output[-3000:]
  errors = [line for line in output.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and words in errors[0], output[-3000:]
  # Nothing was made: no workdir (no lock, tokenizer or checkpoint in it), no TFDS directory.
  assert not os.path.exists(where / "w") and not os.path.exists(where / "t"), \
      sorted(os.listdir(where)) if where.exists() else None


def test_a_run_parses_and_validates_its_config_once(driven):
  results, _ = driven
  output = results["counted"]["output"]
  assert results["counted"]["code"] == 0, output[-3000:]
  [line] = [printed for printed in output.splitlines() if printed.startswith("COUNTS ")]
  assert json.loads(line[len("COUNTS "):]) == {"parse": 1, "validate": 1, "device_mesh": 1}
