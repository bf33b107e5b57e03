"""Loading a workdir for inference: every mistake is one clear line."""

import json
import os
import shutil

import pytest

from transformer.data import tokenizer as tokenizers
from transformer.errors import InferenceError
from transformer.trained import loading


def test_mistakes_give_one_clear_line(decode_run, tmp_path):
  empty = tmp_path / "empty"
  empty.mkdir()
  with pytest.raises(InferenceError, match="No checkpoints in"):
    loading.load(str(empty))
  (empty / "config.json").write_text(open(os.path.join(decode_run, "config.json")).read())
  with pytest.raises(InferenceError, match="No checkpoints in") as e:
    loading.load(str(empty))
  assert "\n" not in str(e.value)
  other = tokenizers.SyntheticTokenizer("reverse", 20)  # the run's task has 8 symbols
  path = other.save(tmp_path / "tokenizer.json")
  with pytest.raises(InferenceError, match="has 23 ids but the checkpoint's model has "
                     "vocab_size=11") as e:
    loading.load(decode_run, tokenizer=path)
  assert "\n" not in str(e.value)
  with pytest.raises(InferenceError, match="No checkpoint for step 7"):
    loading.load(decode_run, step=7)


def test_another_runs_tokenizer_copied_into_the_workdir_is_refused(decode_run, tmp_path):
  """Same vocabulary size, other pieces (the copy task's 8 symbols for the reverse task's):
  evaluate and decode would read every id as another piece; the recorded hash tells."""
  workdir = tmp_path / "w"
  shutil.copytree(decode_run, workdir, ignore=shutil.ignore_patterns("*.lock*"))
  assert loading.load(str(workdir)).tokenizer.vocab_size == 11  # its own: loads
  tokenizers.SyntheticTokenizer("copy", 8).save(workdir / "tokenizer.json")
  with pytest.raises(InferenceError, match=r"tokenizer file is not the one its run was "
                     r"trained with \(tokenizer.json:\w+ -> tokenizer.json:\w+\)"):
    loading.load(str(workdir))
  assert loading.load(str(workdir), tokenizer=os.path.join(decode_run, "tokenizer.json"))
  # Round 6, item 8: a garbage tokenizer.model is not the run's own, said before it is parsed
  # (sentencepiece's RuntimeError before).
  (workdir / "tokenizer.model").write_bytes(os.urandom(200))
  with pytest.raises(InferenceError, match=r"tokenizer file is not the one its run was "
                     r"trained with \(tokenizer.json:\w+ -> tokenizer.model:\w+\)"):
    loading.load(str(workdir))
  (workdir / "tokenizer.model").unlink()
  from transformer.research import analysis
  with pytest.raises(InferenceError, match="tokenizer file is not the one"):
    analysis.analyze(str(workdir), num_batches=1)  # its statistics read through the tokenizer
  assert not (workdir / "plots").exists()


def _copy_with_config_file(decode_run, workdir, edit) -> str:
  shutil.copytree(decode_run, workdir, ignore=shutil.ignore_patterns("*.lock*", "eval", "plots"))
  path = workdir / "config.json"
  path.write_text(json.dumps(edit(json.loads(path.read_text()))))
  return str(workdir)


def _edit_data_fields(config):
  config["experiment"]["synthetic"]["seed"] = 5  # another held-out split, were it read
  config["experiment"]["label_smoothing"] = 0.0  # another eval loss, were it read
  return config


@pytest.mark.parametrize("edit", [_edit_data_fields, lambda c: {"experiment": {}, "model": {}},
                                  lambda c: {"experiment": {"model": 5}}],
                         ids=["data_fields", "emptied", "not_a_config"])
def test_readers_take_the_checkpoints_record_not_an_edited_config_json(decode_run, tmp_path,
                                                                       edit, caplog):
  """evaluate, decode and analyze read the experiment recorded with the checkpoint, as a
  resume does: an edited config.json is said in a warning and changes no figure."""
  from transformer.research import analysis
  from transformer.trained import evaluate
  workdir = _copy_with_config_file(decode_run, tmp_path / "w", edit)
  with caplog.at_level("WARNING"):
    loaded = loading.load(workdir)
  assert ("config.json differs from the record of checkpoint 10 in label_smoothing, synthetic; "
          "the record is used" in caplog.text if edit is _edit_data_fields else
          "is not a config this package wrote" in caplog.text and
          "the record of checkpoint 10 is used" in caplog.text)
  assert loaded.config.synthetic.seed == 0 and loaded.config.label_smoothing == 0.1
  logged = [json.loads(line) for line in open(os.path.join(decode_run, "metrics.jsonl"))]
  logged = [r for r in logged if r["split"] == "eval" and r["step"] == loaded.step][-1]
  results = evaluate.evaluate_workdir(workdir, decode=False)
  assert results["loss"] == pytest.approx(logged["loss"], rel=1e-5)
  assert results["accuracy"] == pytest.approx(logged["accuracy"], rel=1e-5)
  assert analysis.analyze(workdir, num_batches=1)["step"] == loaded.step


def test_the_summary_in_config_json_counts_the_restored_params(decode_run):
  """An encoder-decoder run: the parameter count logged at the start (and kept in config.json)
  is the count of the params restored from its checkpoint."""
  from transformer import checkpoint, model_summary, models
  restored = checkpoint.load_params(decode_run)
  saved = checkpoint.read_config(decode_run)["summary"]
  assert saved["params"] == model_summary.param_counts(models.parameter_groups(restored.params))
  assert saved["params"]["encoder"] > 0 and saved["params"]["total"] > 0
