"""BLEU is sacrebleu's (the number its command line prints); exact match compares ids to EOS."""

import pathlib
import subprocess
import sys

import pytest

from transformer.inference import bleu

SACREBLEU = str(pathlib.Path(sys.executable).parent / "sacrebleu")


def sacrebleu_cli(references: pathlib.Path, hypotheses: pathlib.Path) -> float:
  """The score the sacrebleu command line of this environment prints (6 decimals)."""
  out = subprocess.run([SACREBLEU, str(references), "-i", str(hypotheses), "-b", "-w", "6"],
                       capture_output=True, text=True, check=True)
  return float(out.stdout.strip())


def test_bleu_equals_the_sacrebleu_command_line(tmp_path):
  hypotheses = ["the cat sat on the mat", "a b c d", "", "Größe 3.5 km, naïve café!",
                "x y z w", "it is a guide to action which ensures that the military"]
  references = ["the cat sat on a mat", "a b c e", "nothing here", "Größe 3,5 km, naive café !",
                "x y z w", "it is a guide to action that ensures that the military"]
  (tmp_path / "hyp.txt").write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
  (tmp_path / "ref.txt").write_text("".join(r + "\n" for r in references), encoding="utf-8")
  result = bleu.corpus_bleu(hypotheses, references)
  assert 0 < result.score < 100
  assert result.score == pytest.approx(sacrebleu_cli(tmp_path / "ref.txt", tmp_path / "hyp.txt"),
                                       abs=1e-6)
  assert "nrefs:1" in result.signature and "tok:13a" in result.signature
  with pytest.raises(ValueError, match="one hypothesis per reference"):
    bleu.corpus_bleu(["a"], [])


def test_exact_match_and_examples():
  assert bleu.until_eos([5, 6, 1, 7, 0]) == (5, 6, 1)
  assert bleu.until_eos([5, 6, 0, 0]) == (5, 6)
  split = bleu.DecodedSplit(sources=["a b", "c|d"], hypotheses=["b a", "d c"],
                                  references=["b a", "d|c"], exact=[True, False])
  metrics = split.metrics()
  assert metrics["exact_match"] == 0.5 and metrics["num_examples"] == 2.0
  assert metrics["bleu"] == bleu.corpus_bleu(["b a", "d c"], ["b a", "d|c"]).score
  table = split.examples_markdown(1)
  assert table.splitlines()[-1] == "| a b | b a | b a |" and len(table.splitlines()) == 3
  assert "c\\|d" in split.examples_markdown(5)


def test_one_line():
  assert bleu.one_line("a\nb\r\nc\rd") == "a b c d"
  assert bleu.one_line("a\u2028b") == "a\u2028b"  # not a line break to Python's files
