"""Lines in, lines out: order kept, empty lines empty, truncation counted; scripts/decode.py."""

import io
import json
import logging
import os
import subprocess

import jax
import numpy as np
import pytest

import script_starter
from conftest import REPO, script_env
from test_bleu import sacrebleu_cli
from transformer.config import ModelConfig
from transformer.errors import InferenceError
from transformer.data import tokenizer as tokenizers
from transformer.inference import decoding
from transformer.trained import evaluate, loading
from transformer.training import experiment
from transformer.inference import lines as lines_io
from transformer.inference.decode_config import DecodeConfig
from transformer.models import DecoderOnly
from transformer.token_ids import UNK_ID


def _script(name: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
  return script_starter.run(REPO / "scripts" / name, args, env=script_env(), cwd=os.getcwd(),
                            stdin=stdin)


def test_lines_are_kept_in_order_and_empty_lines_stay_empty(decode_run, caplog):
  loaded = loading.load(decode_run)
  long_line = " ".join("abcdefgh"[i % 8] for i in range(30))
  lines = ["a b c", "", "   ", long_line, "h", "c d e f g", "b a"] * 3
  greedy = DecodeConfig(method="greedy")
  with caplog.at_level(logging.WARNING):
    together = lines_io.decode_lines(loaded, lines, greedy, batch_size=4)
  assert "3 of 21 input line(s) had more than 9 tokens and were truncated" in caplog.text
  assert len(together) == len(lines)
  assert [t for t, line in zip(together, lines) if not line.strip()] == [""] * 6
  # Batching and sorting by length change nothing (the long line aside: it pads its batch
  # to 9 tokens, which makes another compilation, not another result).
  alone = [lines_io.decode_lines(loaded, [line], greedy, batch_size=1)[0] if line != long_line
           else together[3] for line in lines[:7]]
  assert together == alone * 3


def test_a_language_model_continues_each_line(tiny_config):
  tok = tokenizers.SyntheticTokenizer("reverse", 8)
  cfg = ModelConfig.from_recipe("vaswani2017", vocab_size=tok.vocab_size, d_model=16,
                                num_heads=2, d_ff=32, num_encoder_layers=0, num_decoder_layers=1,
                                max_len=12)
  model = DecoderOnly(cfg)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), np.ones((1, 4), np.int32))["params"]
  tiny_config.model_type = "lm"
  loaded = loading.Loaded("", 0, model, params, experiment.recorded(tiny_config, cfg), tok, {})
  assert lines_io.max_input_len(loaded) == 11 and lines_io.prompt_ends_with_eos(loaded.data)
  ids, truncated = lines_io.encode_lines(loaded, ["a b", "", "a " * 20])
  assert ids[0] == [3, 4, 1] and ids[1] == [] and len(ids[2]) == 11 and ids[2][-1] == 1
  assert truncated == 1
  assert lines_io.encode_lines(loaded, ["a b"], prompt_eos=False)[0] == [[3, 4]]
  out = lines_io.decode_lines(loaded, ["a b", "", "c", "a " * 20], DecodeConfig(method="greedy"))
  assert len(out) == 4 and out[1] == ""
  alone = decoding.greedy(model, params, np.asarray([[3, 4, 1]], np.int32))
  assert out[0] == tok.decode(np.asarray(alone)[0])


def test_decode_script(decode_run):
  lines = ["a b c", "", "h g f e d c b a a b c", "d"]
  run = _script("decode.py", f"--workdir={decode_run}", "--method=greedy",
                stdin="\n".join(lines) + "\n")
  assert run.returncode == 0, run.stderr
  want = lines_io.decode_lines(loading.load(decode_run), lines, DecodeConfig(method="greedy"))
  assert run.stdout == "".join(w + "\n" for w in want)
  assert "1 of 4 input line(s) had more than 9 tokens" in run.stderr
  step = loading.load(decode_run).step  # what it loaded, said on stderr
  assert f"Decoded 4 line(s) with {decode_run} at step {step} (greedy) -> stdout" in run.stderr

  run = _script("decode.py", f"--workdir={decode_run}/nope", stdin="a b\n")
  assert run.returncode == 1 and run.stdout == ""
  assert run.stderr.strip().splitlines()[-1].startswith("error: No checkpoints in")
  run = _script("evaluate.py", f"--workdir={decode_run}", "--step=3")
  assert run.returncode == 1
  assert run.stderr.strip().splitlines()[-1].startswith("error: No checkpoint for step 3")


def test_inputs_past_the_position_table_are_refused_or_truncated_with_the_right_advice(
    decode_run, caplog):
  loaded = loading.load(decode_run)
  limit = lines_io.model_input_limit(loaded)
  assert limit == loaded.model_config.max_len == 9
  with pytest.raises(InferenceError, match=r"--max_input_len=40 is outside \[1, 9\]"):
    lines_io.decode_lines(loaded, ["a b"], max_len=40)
  with caplog.at_level(logging.WARNING):
    lines_io.decode_lines(loaded, [" ".join("abcdefgh" * 2)], DecodeConfig(method="greedy"))
  assert "the model's position table covers no more (max_len=9)" in caplog.text
  assert "--max_input_len" not in caplog.text  # raising it cannot help


def test_unknown_symbols_and_invalid_utf8_are_warned_about_with_their_line(
    decode_run, tmp_path, caplog, monkeypatch):
  loaded = loading.load(decode_run)
  with caplog.at_level(logging.WARNING):
    ids, _ = lines_io.encode_lines(loaded, ["a b", "a z b", "y"])
  assert ids[1][1] == UNK_ID
  assert "2 input line(s) held symbols the tokenizer lacks, read as UNK (first: line 2)" in (
      caplog.text)
  path = tmp_path / "in.txt"
  path.write_bytes(b"a b\n\xff c\n")
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    assert lines_io.read_lines(str(path)) == ["a b", "\ufffd c"]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"\xfe\nd e\n")))
    assert lines_io.read_lines("-") == ["\ufffd", "d e"]
  assert f"{path}: 1 line(s) held invalid UTF-8 (first: line 2)" in caplog.text
  assert "<stdin>: 1 line(s) held invalid UTF-8 (first: line 1)" in caplog.text


def test_an_unwritable_output_fails_before_any_work(tmp_path):
  source = tmp_path / "in.txt"
  source.write_text("a b\n")
  # The workdir does not exist either: the output is checked first, before loading anything.
  with pytest.raises(InferenceError, match="Cannot write --output=.*/nodir/out.txt: "
                     "the directory .*/nodir does not exist"):
    evaluate.decode_file(str(tmp_path / "no_run"), str(source), str(tmp_path / "nodir" / "out.txt"))
  with pytest.raises(InferenceError, match="Cannot read --input="):
    evaluate.decode_file(str(tmp_path / "no_run"), str(tmp_path / "missing.txt"))
  with pytest.raises(InferenceError, match=r"Cannot read --reference=.*missing.txt \(No "
                     r"such file or directory\); pass an existing text file.$"):
    evaluate.score_file(str(tmp_path / "no_run"), str(source), str(tmp_path / "missing.txt"))


def test_an_output_that_is_an_input_is_refused_and_the_input_kept(tmp_path):
  """decode's --output=--input, evaluate's --output=--input or --reference (also through
  another spelling of the same path) would overwrite the user's file with hypotheses."""
  source, reference = tmp_path / "in.txt", tmp_path / "ref.txt"
  source.write_text("a b\n")
  reference.write_text("b a\n")
  with pytest.raises(InferenceError, match=r"^--output=.*in.txt is also --input, which "
                     r"writing it would overwrite; pass another --output.$"):
    evaluate.decode_file(str(tmp_path / "no_run"), str(source), str(source))
  for output, flag in ((source, "--input"), (tmp_path / "." / "ref.txt", "--reference")):
    with pytest.raises(InferenceError, match=f"is also {flag}, "):
      evaluate.score_file(str(tmp_path / "no_run"), str(source), str(reference), str(output))
  hard = tmp_path / "refhard.txt"
  os.link(reference, hard)  # another name of the same file: compared by identity
  with pytest.raises(InferenceError, match="refhard.txt is also --reference, "):
    evaluate.score_file(str(tmp_path / "no_run"), str(source), str(reference), str(hard))
  os.link(source, tmp_path / "inhard.txt")
  with pytest.raises(InferenceError, match="inhard.txt is also --input, "):
    evaluate.decode_file(str(tmp_path / "no_run"), str(source), str(tmp_path / "inhard.txt"))
  assert source.read_text() == "a b\n" and reference.read_text() == "b a\n"
  # gs:// paths are compared as written (no local realpath), before anything is read.
  with pytest.raises(InferenceError, match="is also --input, "):
    lines_io.check_writable("gs://bucket/in.txt", {"--input": "gs://bucket/in.txt"})
  lines_io.check_writable("gs://bucket/out.txt", {"--input": "gs://bucket/in.txt"})


def test_an_empty_test_set_is_one_line(tmp_path):
  """Empty --input and --reference files: sacrebleu's IndexError before."""
  (tmp_path / "empty.src").write_text("")
  (tmp_path / "empty.ref").write_text("")
  with pytest.raises(InferenceError, match=r"^--input=.*empty.src holds no line: there is "
                     r"nothing to score; pass a test set of at least one line.$"):
    evaluate.score_file(str(tmp_path / "no_run"), str(tmp_path / "empty.src"),
                        str(tmp_path / "empty.ref"))


def test_the_decoding_flags_are_in_each_scripts_help():
  for script in ("decode.py", "evaluate.py"):
    run = _script(script, "--help")  # absl's --help ends with exit status 1
    for flag in ("--method", "--beam_size", "--alpha", "--top_p", "--workdir"):
      assert flag in run.stdout, (script, flag)


def test_evaluate_scores_a_named_test_set_as_sacrebleus_command_line_does(decode_run, tmp_path):
  sources = ["a b c", "d e", "h g f", "c c a b"]
  references = [s for s in sources[:2]] + ["f g h", "b a c c"]
  (tmp_path / "test.src").write_text("".join(s + "\n" for s in sources))
  (tmp_path / "test.ref").write_text("".join(r + "\n" for r in references))
  hypotheses = tmp_path / "hyp.txt"
  run = _script("evaluate.py", f"--workdir={decode_run}", f"--input={tmp_path / 'test.src'}",
                f"--reference={tmp_path / 'test.ref'}", f"--output={hypotheses}",
                "--method=greedy")
  assert run.returncode == 0, run.stderr
  results = json.loads(run.stdout)
  assert results["num_examples"] == 4 and results["step"] == loading.load(decode_run).step
  assert results["bleu"] == pytest.approx(sacrebleu_cli(tmp_path / "test.ref", hypotheses),
                                          abs=1e-6)
  assert f"wrote {hypotheses}" in run.stderr
  run = _script("evaluate.py", f"--workdir={decode_run}", f"--input={tmp_path / 'test.src'}")
  assert run.returncode == 1
  assert "--reference is missing: --input and --reference go together" in run.stderr
  run = _script("evaluate.py", f"--workdir={decode_run}", f"--reference={tmp_path / 'test.ref'}")
  assert run.returncode == 1 and "--input is missing: " in run.stderr
  # Round 6, item 16: --batch_size=0 silently meant the run's own batch.
  run = _script("evaluate.py", f"--workdir={decode_run}", "--batch_size=0")
  assert run.returncode == 1 and "flag --batch_size=0: 0 is not a positive integer" in run.stderr
