"""Tokenizers: exact round trips (any script), reserved ids, save/load, reuse on resume, errors."""

import logging
import os

import ml_collections
import numpy as np
import pytest

from transformer.data import tokenizer as tk
from transformer.token_ids import EOS_ID as EOS, PAD_ID as PAD, UNK_ID as UNK

CORPUS = ["The quick brown fox jumps over the lazy dog.", "Grüße aus Köln, naïve café!",
          "Привет, мир: это проверка.", "日本語のテキストです。", "مرحبا بالعالم",
          "emoji 🤖 and tabs\tand  double  spaces"] * 30
TEXTS = CORPUS[:6] + [
    "", " ", "  leading and trailing  ", "line one\nline two\n\nparagraph",
    "unseen scripts: ελληνικά, עברית, हिन्दी, 한국어, ქართული",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ｆｕｌｌ ｗｉｄｔｈ \x00\r\n"]


@pytest.fixture(scope="module")
def spm():
  return tk.train_sentencepiece(CORPUS, 335, character_coverage=1.0, corpus_name="CORPUS")


def _cfg(**overrides):
  return ml_collections.ConfigDict({**dict(kind="sentencepiece", vocab_size=335, path=None,
                                           model_type="unigram", character_coverage=1.0),
                                    **overrides})


@pytest.mark.parametrize("kind", ["sentencepiece", "bytes"])
def test_round_trip_any_utf8_text(spm, kind):
  tok = spm if kind == "sentencepiece" else tk.ByteTokenizer()
  for text in TEXTS:
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.decode(ids + [EOS, 7, 8]) == text  # decode stops at EOS
    assert tok.decode(np.array([PAD] + ids + [PAD, PAD])) == text  # and skips padding
    assert not {PAD, EOS, UNK} & set(ids)  # byte fallback: never pad/eos/unk inside text
  assert [tok.decode(x) for x in tok.encode_batch(TEXTS)] == TEXTS


def test_reserved_ids_are_distinct(spm):
  for tok in (spm, tk.ByteTokenizer(), tk.SyntheticTokenizer("copy", 5)):
    assert (tok.pad_id, tok.eos_id, tok.unk_id) == (0, 1, 2)
  sp = spm._sp
  assert [sp.id_to_piece(i) for i in range(3)] == ["<pad>", "</s>", "<unk>"]
  assert spm.vocab_size == 335 and tk.ByteTokenizer().vocab_size == 259


def test_synthetic_tokenizer_inverts_to_text():
  tok = tk.SyntheticTokenizer("reverse", 60)
  assert tok.vocab_size == 63
  assert tok.decode(tok.encode("a b Z #57")) == "a b Z #57"
  assert tok.encode("a ? #99") == [3, UNK, UNK]
  add = tk.SyntheticTokenizer("addition", 10)
  assert add.decode(add.encode("12+9")) == "12+9" and add.vocab_size == 14


@pytest.mark.parametrize("make", [lambda spm: spm, lambda spm: tk.ByteTokenizer(),
                                  lambda spm: tk.SyntheticTokenizer("sort", 8)])
def test_save_and_load_from_workdir_or_file(tmp_path, spm, make):
  tok = make(spm)
  path = tok.save(tmp_path)
  assert os.path.basename(path) == tok.file_name
  for where in (tmp_path, path):
    loaded = tk.load_tokenizer(where)
    assert type(loaded) is type(tok) and loaded.vocab_size == tok.vocab_size
    assert loaded.to_bytes() == tok.to_bytes()
  assert [f for f in os.listdir(tmp_path) if f.startswith(".")] == []  # no temp file left
  # A second process that trained the same tokenizer (sweep points sharing one) overwrites it.
  assert tok.save(tmp_path) == path and tk.load_tokenizer(path).to_bytes() == tok.to_bytes()


def test_load_errors_name_the_path_and_the_fix(tmp_path):
  with pytest.raises(FileNotFoundError, match=f"{tmp_path} holds no tokenizer.model or "
                                              "tokenizer.json; pass the workdir"):
    tk.load_tokenizer(tmp_path)
  with pytest.raises(FileNotFoundError, match="nope.model does not exist"):
    tk.load_tokenizer(tmp_path / "nope.model")
  (tmp_path / "tokenizer.json").write_text("{}")
  with pytest.raises(ValueError, match="tokenizer.json is not a tokenizer.json this package "
                                       "wrote; delete it"):
    tk.load_tokenizer(tmp_path)


def test_trained_model_is_saved_in_workdir_and_reused_not_retrained(tmp_path):
  calls = []

  def texts():
    calls.append(1)
    return iter(CORPUS)

  first = tk.get_tokenizer(_cfg(), workdir=str(tmp_path), train_texts=texts, corpus_name="C")
  model = tmp_path / "tokenizer.model"
  stamp = model.stat().st_mtime_ns
  again = tk.get_tokenizer(_cfg(), workdir=str(tmp_path), train_texts=texts, corpus_name="C")
  assert calls == [1]  # the resumed run did not train again
  assert model.stat().st_mtime_ns == stamp and again.to_bytes() == first.to_bytes()
  assert tk.load_tokenizer(tmp_path).to_bytes() == first.to_bytes()  # what decoding reads
  with pytest.raises(ValueError, match="tokenizer.model has 335 pieces but tokenizer.vocab_size"
                                       "=400; set --config.tokenizer.vocab_size=335 to resume"):
    tk.get_tokenizer(_cfg(vocab_size=400), workdir=str(tmp_path), train_texts=texts,
                     corpus_name="C")


def test_tokenizer_path_is_used_and_copied_into_the_workdir(tmp_path, spm):
  shared = tmp_path / "shared.model"
  spm.save(shared)
  workdir = tmp_path / "run"
  tok = tk.get_tokenizer(_cfg(path=str(shared)), workdir=str(workdir),
                         train_texts=lambda: pytest.fail("must not train"), corpus_name="C")
  assert tok.to_bytes() == spm.to_bytes()
  assert (workdir / "tokenizer.model").read_bytes() == spm.to_bytes()


def test_a_tokenizer_path_that_does_not_exist_is_said_not_silently_trained(tmp_path, caplog):
  with pytest.raises(FileNotFoundError, match="tokenizer.path=.*/nodir/t.model: its directory "
                     ".*/nodir does not exist"):
    tk.get_tokenizer(_cfg(path=str(tmp_path / "nodir" / "t.model")), workdir=str(tmp_path / "w"),
                     train_texts=lambda: pytest.fail("must not train"), corpus_name="C")
  with caplog.at_level(logging.WARNING):
    tok = tk.get_tokenizer(_cfg(path=str(tmp_path / "t.model")), workdir=str(tmp_path / "w"),
                           train_texts=lambda: CORPUS, corpus_name="C")
  assert "tokenizer.path=" in caplog.text and "does not exist yet; training" in caplog.text
  assert (tmp_path / "t.model").read_bytes() == tok.to_bytes()  # trained there, as said


def test_a_damaged_tokenizer_json_in_the_workdir_is_named_as_damaged(tmp_path):
  tok = tk.SyntheticTokenizer("reverse", 8)
  tk.save_to_workdir(tok, str(tmp_path))
  path = tmp_path / "tokenizer.json"
  path.write_bytes(path.read_bytes()[:10])  # cut off, as by a crash
  with pytest.raises(ValueError, match="tokenizer.json is damaged .*; delete it and rerun"):
    tk.save_to_workdir(tok, str(tmp_path))
  path.write_text('{"type": "bytes"}')  # whole, but another tokenizer
  with pytest.raises(ValueError, match="holds a different tokenizer"):
    tk.save_to_workdir(tok, str(tmp_path))


def test_vocab_size_beyond_the_corpus_is_a_clear_error():
  with pytest.raises(ValueError, match=r"tokenizer.vocab_size=5000 is larger than CORPUS supports "
                                       r"\(at most \d+ pieces\); lower tokenizer.vocab_size"):
    tk.train_sentencepiece(CORPUS, 5000, character_coverage=1.0, corpus_name="CORPUS")
  with pytest.raises(ValueError, match="too small for SentencePiece"):
    tk.train_sentencepiece(CORPUS, 100, corpus_name="CORPUS")
  with pytest.raises(ValueError, match="tokenizer.kind='words' is not one of"):
    tk.get_tokenizer(_cfg(kind="words"), workdir=None, train_texts=list, corpus_name="C")


def test_a_garbage_sentencepiece_file_is_one_line(tmp_path):
  """Round 6, item 8: sentencepiece's `RuntimeError: INTERNAL ... ParseFromArray`."""
  garbage = tmp_path / "garbage.model"
  garbage.write_bytes(os.urandom(256))
  with pytest.raises(tk.ConfigError, match=r"garbage.model is not a SentencePiece model \(.*\); "
                     "pass the .model file a training run wrote"):
    tk.load_tokenizer(str(garbage))
