"""Text datasets as random-access splits of raw text, and of token ids.

`open_splits(data)` opens data.dataset: a local corpus (`local_corpora`: text_files,
parallel_text) or a standard TFDS dataset, read with `tfds.data_source` from tfds_data_dir
(prepare it once where the internet is reachable, see docs/data.md):
  wmt14_translate/de-en, wmt17_translate/de-en (any wmtNN_translate/xx-yy): inputs =
      data.source_lang, targets = data.target_lang; eval split 'validation'.
  lm1b: targets = 'text'; eval split 'test'.
  tiny_shakespeare: one string per split, cut into documents by text_split; eval 'validation'.
`TokenizedSource` turns a text split into id examples (EOS appended).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Iterator, Mapping, Optional, Sequence

import numpy as np
import tensorflow_datasets as tfds

from transformer.data import corpus_files, fields, local_corpora
from transformer.data.prepared import read_examples
from transformer.data.tokenizer import Tokenizer
from transformer.errors import ConfigError, MissingFileError
from transformer.token_ids import EOS_ID

_WMT = re.compile(r"^(wmt\d\d)_translate/([a-z]{2})-([a-z]{2})$")
STANDARD = ("wmt14_translate/de-en", "wmt17_translate/de-en", "lm1b", "tiny_shakespeare")
_LM_EVAL_SPLITS = {"lm1b": "test", "tiny_shakespeare": "validation"}  # each one's held-out split


def holds_pairs(name: str) -> Optional[bool]:
  """Whether dataset `name`'s examples are (source, target) pairs (parallel_text, wmt) rather
  than one text stream (text_files, lm1b, tiny_shakespeare); None for a name this module does
  not read. Read off the name alone, before any data is prepared."""
  if name in local_corpora.LOCAL:
    return name == "parallel_text"
  if _WMT.match(name):
    return True
  return False if name in _LM_EVAL_SPLITS else None


def check_standard(data: fields.Data) -> None:
  """One line where a standard TFDS dataset is asked for a test split held out of it
  (test_fraction), or a translation dataset's source_lang / target_lang are not its pair's
  two languages (read off the name: wmtNN_translate/xx-yy)."""
  if is_standard(data.dataset) and data.test_fraction:
    raise ConfigError(f"test_fraction={data.test_fraction} holds out a test split of a local "
                      f"corpus (text_files, parallel_text), not of {data.dataset!r}; set it "
                      "to 0.")
  wmt = _WMT.match(data.dataset)
  if not wmt:
    return
  langs = (wmt.group(2), wmt.group(3))
  for field in ("source_lang", "target_lang"):
    if getattr(data, field) not in langs:
      raise ConfigError(f"{field}={getattr(data, field)!r} is not a language of {data.dataset}; "
                        f"use one of {list(langs)}.")
  if data.source_lang == data.target_lang:
    raise ConfigError(f"source_lang and target_lang are both {data.source_lang!r}; set them "
                      "to the two languages of the pair.")


def is_standard(name: str) -> bool:
  """Whether name is a standard TFDS dataset this module reads (wmtNN_translate/xx-yy, lm1b,
  ...)."""
  return name in _LM_EVAL_SPLITS or bool(_WMT.match(name))


def _tfds_split(name: str, split: str, data_dir: str | None) -> Sequence[Mapping[str, Any]]:
  """A prepared split as an array_record data source; never downloads (download=False)."""
  try:
    return tfds.data_source(name, split=split, data_dir=data_dir, download=False)
  except (tfds.core.registered.DatasetNotFoundError, FileNotFoundError, NotImplementedError,
          AssertionError) as e:
    # NotImplementedError: nothing prepared there, or prepared as TFRecord (no random access).
    where = data_dir or "~/tensorflow_datasets"
    raise MissingFileError(
        f"TFDS dataset {name!r} split {split!r} is not prepared as array_record in {where} "
        f"({type(e).__name__}); prepare it once where the internet and TensorFlow are: `tfds "
        f"build {name} --data_dir={where} --file_format=array_record` (docs/data.md), or "
        "set tfds_data_dir to where it is.") from None
  except (ValueError, KeyError) as e:
    raise ConfigError(f"TFDS dataset {name!r} has no split {split!r} ({e}); set train_split / "
                     "eval_split to one of its splits.") from None


class Documents:
  """A one-record text split (tiny_shakespeare) cut into documents: {'text': str}."""

  def __init__(self, source: Sequence[Mapping[str, Any]], field: str, text_split: str,
               name: str):
    lines = "\n".join(as_str(ex[field]) for ex in source).split("\n")
    self.docs = [{"text": t, "origin": o}
                 for t, o in corpus_files.split_documents(lines, text_split, name)]

  def __len__(self) -> int:
    return len(self.docs)

  def __getitem__(self, i: int) -> dict[str, str]:
    return self.docs[i]


@dataclasses.dataclass(frozen=True)
class TextSplits:
  """Raw text splits of a dataset and how to read them: fields[key] = feature name.

  home: the prepared dataset's directory (TFDS's version directory), where the splits'
  token stores go; split_names: each role's ('train', 'eval', 'test') split there;
  reading: anything else that decides the examples read from them (a text_split)."""
  train: Sequence[Mapping[str, Any]]
  eval: Sequence[Mapping[str, Any]]
  fields: Mapping[str, str]
  name: str  # for messages
  test: Optional[Sequence[Mapping[str, Any]]] = None  # held out for reporting only
  home: Optional[str] = None
  split_names: Mapping[str, str] = dataclasses.field(default_factory=dict)
  reading: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def split_seed(data: fields.Data) -> int:
  """The seed that draws a local corpus's held-out splits: data.split_seed, else data.seed."""
  return data.seed if data.split_seed is None else data.split_seed


def open_splits(config: Any) -> TextSplits:
  """The raw train and eval text splits of the dataset `fields.of(config)` names (local
  builder or TFDS name)."""
  data = fields.of(config)
  name, data_dir = data.dataset, data.tfds_data_dir
  if name in local_corpora.LOCAL:
    try:
      builder = local_corpora.build_local(
          name, data_dir, data_files=data.data_files, eval_files=data.eval_files,
          text_split=data.text_split, eval_fraction=data.eval_fraction,
          test_fraction=data.test_fraction, seed=split_seed(data))
    except MissingFileError as missing:  # the config may say how to get its default data
      if not data.data_help:
        raise
      raise MissingFileError(f"{missing} The config's own data_files: {data.data_help}."
                             ) from None
    keys = {"inputs": "source", "targets": "target"} if holds_pairs(name) else \
        {"targets": "text"}
    test = builder.as_data_source("test") if "test" in builder.info.splits else None
    return TextSplits(builder.as_data_source("train"), builder.as_data_source("validation"),
                      keys, f"{name} ({data.data_files})", test, home=str(builder.data_dir),
                      split_names={"train": "train", "eval": "validation", "test": "test"})
  train_split = data.train_split
  wmt = _WMT.match(name)
  if wmt:
    import tensorflow_datasets.translate  # noqa: F401  (registers every WMT year's builder)
    eval_split = data.eval_split or "validation"
    train = _tfds_split(name, train_split, data_dir)
    return TextSplits(train, _tfds_split(name, eval_split, data_dir),
                      {"inputs": data.source_lang, "targets": data.target_lang}, name,
                      home=str(train.dataset_info.data_dir),
                      split_names={"train": train_split, "eval": eval_split})
  if name in _LM_EVAL_SPLITS:
    from tensorflow_datasets.text import lm1b, tiny_shakespeare  # noqa: F401  (registers them)
    default_eval = _LM_EVAL_SPLITS[name]
    eval_split = data.eval_split or default_eval
    train = _tfds_split(name, train_split, data_dir)
    evaluation = _tfds_split(name, eval_split, data_dir)
    home, reading = str(train.dataset_info.data_dir), {}
    if name == "tiny_shakespeare":  # one huge string per split
      train = Documents(train, "text", data.text_split, f"{name}/{train_split}")
      evaluation = Documents(evaluation, "text", data.text_split, f"{name}/{eval_split}")
      reading = {"text_split": data.text_split}
    return TextSplits(train, evaluation, {"targets": "text"}, name, home=home,
                      split_names={"train": train_split, "eval": eval_split}, reading=reading)
  raise ConfigError(f"Unknown dataset {name!r}.")


def as_str(value: Any) -> str:
  """A TFDS text feature (bytes, a 0-d array or str) as str; invalid UTF-8 replaced."""
  if isinstance(value, bytes):
    return value.decode("utf-8", errors="replace")
  if isinstance(value, np.ndarray):
    return as_str(value.item())
  return str(value)


def training_texts(splits: TextSplits, max_examples: int, seed: int) -> Iterator[str]:
  """Lines of up to max_examples train examples (a seeded sample), every field: tokenizer input."""
  n = len(splits.train)
  if n > max_examples:
    indices = np.sort(np.random.default_rng(seed).choice(n, max_examples, replace=False))
  else:
    indices = np.arange(n)
  for start in range(0, len(indices), 1024):
    for ex in read_examples(splits.train, indices[start:start + 1024]):
      for field in splits.fields.values():
        for line in as_str(ex[field]).split("\n"):
          if line.strip():
            yield line


class TokenizedSource:
  """Text examples -> {KEY: int32 [ids..., EOS], 'origin': str}: random access, bulk reads.

  'origin' is the example's FILE:LINE (local corpora) or 'NAME example I' (for messages).
  """

  def __init__(self, source: Sequence[Mapping[str, Any]], fields: Mapping[str, str],
               tokenizer: Tokenizer, name: str):
    self.source, self.fields, self.tokenizer, self.name = source, dict(fields), tokenizer, name

  def __len__(self) -> int:
    return len(self.source)

  def __getitem__(self, i: int) -> dict[str, Any]:
    return self.__getitems__([i])[0]

  def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
    raw = read_examples(self.source, indices)
    out: list[dict[str, Any]] = [
        {"origin": as_str(ex["origin"]) if "origin" in ex else f"{self.name} example {i}"}
        for i, ex in zip(indices, raw)]
    for key, field in self.fields.items():
      ids = self.tokenizer.encode_batch([as_str(ex[field]) for ex in raw])
      for o, seq in zip(out, ids):
        o[key] = np.array(list(seq) + [EOS_ID], np.int32)
    return out
