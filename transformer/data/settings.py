"""What an experiment config's data settings decide on their own, read before anything is
prepared and without jax (the config is checked before jax starts): the paths that must be
reachable, the rows a dataset gives against the rows the model kind reads, the vocabulary the
model will have, and a SentencePiece vocabulary below its floor."""

from __future__ import annotations

import ml_collections

from transformer import model_kinds, storage
from transformer.errors import ConfigError
from transformer.data import corpus_files, local_corpora, synthetic, text
from transformer.data.tokenizer import (ByteTokenizer, SentencePieceTokenizer,
                                        check_sentencepiece_size)

# How fast the input is made, never what it is: the processes that tokenize a split into its
# token store the first time (0: one per core) and the train batches made ahead. The one place
# of these defaults, which the experiment config holds and a data-only config may leave out.
READ_DEFAULTS = {"data_threads": 0, "data_prefetch": 4}
# How training rows are filled (data.packing): one example a row, whole examples packed, or
# a language model's stream cut into rows.
PACKING_MODES = ("none", "pack", "concat")


def read_setting(config: ml_collections.ConfigDict, name: str) -> int:
  """config's `name` of READ_DEFAULTS, or its default where a data-only config has none."""
  return config.get(name, READ_DEFAULTS[name])


def check_tfds_data_dir(path: str | None, flag: str) -> None:
  """One line where the TFDS directory (reachable: `experiment.check_paths_reachable`) is a
  file."""
  if path and storage.as_path(path).is_file():
    raise ConfigError(f"{flag}={path} is a file; TFDS keeps its datasets in a directory: pass "
                      "a directory (made if missing).")


def check_data_config(config: ml_collections.ConfigDict) -> None:
  """Everything the data settings alone can refuse, before anything is prepared or trained:
  the packing mode (and 'concat' for a kind that reads a source), the synthetic task's fields,
  how a local corpus is cut and held out, a translation dataset's language pair, a model kind
  that needs a source on a corpus without one, and a SentencePiece vocabulary below its floor
  (where one would be trained)."""
  kind = model_kinds.get(config.model_type) if config.get("model_type") else None
  pairs = True if config.dataset == "synthetic" else text.holds_pairs(config.dataset)
  if pairs is not None and kind:  # first: the kind's rows against the corpus's
    kind.check_rows(model_kinds.ROWS if pairs else model_kinds.ROWS[1:], config.dataset)
  mode = config.get("packing") or "none"
  if mode not in PACKING_MODES:
    raise ConfigError(f"packing={mode!r} is not one of {list(PACKING_MODES)}.")
  if mode == "concat" and kind:
    kind.check_one_stream("packing='concat'")
  if config.dataset == "synthetic":
    synthetic.dataset_config(config.synthetic)
  if config.dataset in local_corpora.LOCAL or config.dataset == "tiny_shakespeare":
    corpus_files.check_split_settings(
        config.get("text_split", "paragraph"),
        None if config.get("eval_files") or config.dataset not in local_corpora.LOCAL
        else config.get("eval_fraction"))
  text.check_standard(config)
  tok = config.get("tokenizer") or {}
  if config.dataset != "synthetic" and tok.get("kind") == "sentencepiece" and \
      tok.get("vocab_size") is not None and not (
          tok.get("path") and storage.as_path(tok.path).exists()):
    check_sentencepiece_size(int(tok.vocab_size))


def planned_vocab_size(config: ml_collections.ConfigDict) -> tuple[int, str]:
  """(the vocabulary training would give the model, where it comes from), read off the config
  alone, without preparing data: model.vocab_size when set; else the synthetic task's, the
  byte tokenizer's or the SentencePiece model's tokenizer.vocab_size."""
  if config.model.get("vocab_size"):
    return int(config.model.vocab_size), "model.vocab_size"
  if config.dataset == "synthetic":
    s = config.synthetic
    return synthetic.vocab_size_for(s.task, s.vocab_size), f"the synthetic {s.task!r} task"
  if config.tokenizer.kind == "bytes":
    return ByteTokenizer().vocab_size, "the byte tokenizer"
  path = config.tokenizer.get("path")
  if path and storage.as_path(path).exists():  # an existing model is used as it is
    model = SentencePieceTokenizer(storage.as_path(path).read_bytes(), origin=str(path))
    return model.vocab_size, path
  return int(config.tokenizer.vocab_size), "tokenizer.vocab_size"
