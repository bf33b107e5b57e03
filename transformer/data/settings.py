"""What an experiment config's data settings decide on their own, read before anything is
prepared and without jax (the config is checked before jax starts): the paths that must be
reachable, the rows a dataset gives against the rows the model kind reads, the vocabulary the
data plans for the model, and a SentencePiece vocabulary below its floor."""

from __future__ import annotations

from typing import Any

from transformer import model_kinds, storage
from transformer.errors import ConfigError
from transformer.data import corpus_files, fields, local_corpora, synthetic, text
from transformer.data.tokenizer import (ByteTokenizer, SentencePieceTokenizer,
                                        check_sentencepiece_size)

# How training rows are filled (data.packing): one example a row, whole examples packed, or
# a language model's stream cut into rows.
PACKING_MODES = ("none", "pack", "concat")


def check_tfds_data_dir(path: str | None, flag: str) -> None:
  """One line where the TFDS directory (reachable: `experiment.check_paths_reachable`) is a
  file."""
  if path and storage.as_path(path).is_file():
    raise ConfigError(f"{flag}={path} is a file; TFDS keeps its datasets in a directory: pass "
                      "a directory (made if missing).")


def check_data_config(config: Any) -> None:
  """Everything the data settings alone (`fields.of(config)`) can refuse, before anything is
  prepared or trained: the packing mode (and 'concat' for a kind that reads a source), the
  synthetic task's fields, how a local corpus is cut and held out, a translation dataset's
  language pair, a model kind that needs a source on a corpus without one, and a SentencePiece
  vocabulary below its floor (where one would be trained)."""
  data = fields.of(config)
  kind = model_kinds.get(data.model_type)
  pairs = True if data.dataset == "synthetic" else text.holds_pairs(data.dataset)
  if pairs is not None:  # first: the kind's rows against the corpus's
    kind.check_rows(model_kinds.ROWS if pairs else model_kinds.ROWS[1:], data.dataset)
  if data.packing not in PACKING_MODES:
    raise ConfigError(f"packing={data.packing!r} is not one of {list(PACKING_MODES)}.")
  if data.packing == "concat":
    kind.check_one_stream("packing='concat'")
  if data.dataset == "synthetic":
    synthetic.dataset_config(data.synthetic)
  if data.dataset in local_corpora.LOCAL or data.dataset == "tiny_shakespeare":
    corpus_files.check_split_settings(
        data.text_split,
        None if data.eval_files or data.dataset not in local_corpora.LOCAL
        else data.eval_fraction)
  text.check_standard(data)
  tok = data.tokenizer
  if data.dataset != "synthetic" and tok.kind == "sentencepiece" and \
      tok.vocab_size is not None and not (tok.path and storage.as_path(tok.path).exists()):
    check_sentencepiece_size(int(tok.vocab_size))


def planned_vocab_size(config: Any) -> tuple[int, str]:
  """(the vocabulary training would give the model, where it comes from), read off the data
  settings (`fields.of(config)`) alone, without preparing data: the synthetic task's, the
  byte tokenizer's or the SentencePiece model's tokenizer.vocab_size. (An explicit
  model.vocab_size overrides it: `experiment.validate`.)"""
  data = fields.of(config)
  if data.dataset == "synthetic":
    s = {**synthetic.DEFAULTS, **data.synthetic}
    return synthetic.vocab_size_for(s["task"], s["vocab_size"]), f"the synthetic {s['task']!r} task"
  if data.tokenizer.kind == "bytes":
    return ByteTokenizer().vocab_size, "the byte tokenizer"
  path = data.tokenizer.path
  if path and storage.as_path(path).exists():  # an existing model is used as it is
    model = SentencePieceTokenizer(storage.as_path(path).read_bytes(), origin=str(path))
    return model.vocab_size, path
  return int(data.tokenizer.vocab_size), "tokenizer.vocab_size"
