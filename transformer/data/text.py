"""Text corpora as random-access splits: local files as TFDS builders, and standard TFDS names.

Local corpora (prepared once into tfds_data_dir as array_record, keyed by the files' paths,
sizes and mtimes, so changed files give a new dataset):
  text_files     language modelling from plain-text files or globs (config.data_files); a
                 document is a paragraph (lines up to a blank line) or a line (text_split);
                 features {'text', 'origin'}.
  parallel_text  translation from a TSV of source<TAB>target lines, or two line-aligned files
                 'SOURCE_FILE,TARGET_FILE'; features {'source', 'target', 'origin'}.
Both hold out a deterministic validation split: eval_fraction of the documents drawn with the
seed (at least one), and train drops every document whose text equals a held-out one; or the
documents of config.eval_files when given. 'origin' is FILE:LINE, for messages.

Standard TFDS datasets, read with `tfds.data_source` from tfds_data_dir (prepare them once
where the internet is reachable, see README '## Data'):
  wmt14_translate/de-en, wmt17_translate/de-en (any wmtNN_translate/xx-yy): inputs =
      config.source_lang, targets = config.target_lang; eval split 'validation'.
  lm1b: targets = 'text'; eval split 'test'.
  tiny_shakespeare: one string per split, cut into documents by text_split; eval 'validation'.

Invalid UTF-8 in a file is replaced by U+FFFD and counted, with a warning naming the file
and its first such line. `TokenizedSource` turns a text split into id examples (EOS appended).
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import importlib
import os
import re
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import tensorflow_datasets as tfds
from absl import logging

from transformer.data.packing import read_examples
from transformer.data.tokenizer import Tokenizer
from transformer.token_ids import EOS_ID

LOCAL = ("text_files", "parallel_text")
TEXT_SPLITS = ("paragraph", "line")
_VERSION = "1.0.0"  # bump whenever the documents a builder writes would change


# ---------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------
def resolve_files(patterns: str | Sequence[str] | None, field: str = "data_files") -> list[str]:
  """Files of comma-separated paths, globs or directories (all their files), in order.

  Raises FileNotFoundError naming the pattern when nothing matches, ValueError for an empty file.
  """
  if not patterns:
    raise ValueError(f"config.{field} is not set; pass --config.{field}=FILE, a glob like "
                     "'corpus/*.txt', or a comma-separated list.")
  items = patterns.split(",") if isinstance(patterns, str) else list(patterns)
  files: list[str] = []
  for item in (i.strip() for i in items):
    if not item:
      continue
    path = os.path.expanduser(item)
    if os.path.isdir(path):
      found = sorted(p for p in glob.glob(os.path.join(path, "*"))
                     if os.path.isfile(p) and not os.path.basename(p).startswith("."))
      if not found:
        raise FileNotFoundError(f"Directory {item} (config.{field}) holds no files; put text "
                                f"files in it or pass a glob like '{item.rstrip('/')}/*.txt'.")
    else:
      found = sorted(p for p in glob.glob(path) if os.path.isfile(p))
      if not found:
        raise FileNotFoundError(f"No file matches {item!r} (config.{field}); check the path, "
                                "or pass an existing file or a glob like 'corpus/*.txt'.")
    files += found
  for f in files:
    if os.path.getsize(f) == 0:
      raise ValueError(f"File {f} (config.{field}) is empty; add text to it or leave it out of "
                       f"config.{field}.")
  return files


def read_lines(path: str) -> list[str]:
  """The lines of a text file (no line ends); invalid UTF-8 replaced by U+FFFD, counted, warned."""
  with open(path, "rb") as f:
    raw = f.read()
  lines, bad, first_bad = [], 0, 0
  for n, line in enumerate(raw.split(b"\n"), 1):
    try:
      text = line.decode("utf-8")
    except UnicodeDecodeError:
      text = line.decode("utf-8", errors="replace")
      bad += 1
      first_bad = first_bad or n
    lines.append(text[:-1] if text.endswith("\r") else text)
  if raw.endswith(b"\n"):
    lines.pop()  # the empty string after the last newline is not a line
  if bad:
    logging.warning("%s: %d line(s) held invalid UTF-8 (first: line %d), replaced by U+FFFD; "
                    "re-encode the file as UTF-8 to keep those characters.", path, bad, first_bad)
  return lines


def documents(path: str, text_split: str) -> list[tuple[str, str]]:
  """(text, 'FILE:LINE') of each paragraph (blank-line separated) or non-blank line of a file."""
  if text_split not in TEXT_SPLITS:
    raise ValueError(f"text_split={text_split!r} is not one of {list(TEXT_SPLITS)}.")
  return _split_documents(read_lines(path), text_split, path)


def _split_documents(lines: Sequence[str], text_split: str, name: str) -> list[tuple[str, str]]:
  docs: list[tuple[str, str]] = []
  block: list[str] = []
  start = 0
  for n, line in enumerate(list(lines) + [""], 1):
    if not line.strip():
      if block:
        docs.append(("\n".join(block), f"{name}:{start}"))
        block = []
    elif text_split == "line":
      docs.append((line, f"{name}:{n}"))
    else:
      start = start if block else n
      block.append(line)
  return docs


def parallel_pairs(files: Sequence[str]) -> list[tuple[str, str, str]]:
  """(source, target, 'FILE:LINE') from TSV files, or from two line-aligned files."""
  if all(f.endswith(".tsv") for f in files):
    pairs = []
    for f in files:
      for n, line in enumerate(read_lines(f), 1):
        if not line.strip():
          continue
        parts = line.split("\t")
        if len(parts) != 2:
          raise ValueError(f"{f} line {n} has {len(parts) - 1} TABs, not 1; write each line as "
                           "source<TAB>target (or pass two line-aligned files 'SRC,TGT').")
        pairs.append((parts[0], parts[1], f"{f}:{n}"))
    return _drop_half_empty(pairs)
  if len(files) != 2:
    raise ValueError(f"parallel_text needs one or more .tsv files or exactly two line-aligned "
                     f"files (source, target), got {len(files)}: {', '.join(files)}; pass "
                     "--config.data_files=corpus.tsv or --config.data_files=train.de,train.en.")
  source, target = read_lines(files[0]), read_lines(files[1])
  if len(source) != len(target):
    raise ValueError(f"{files[0]} has {len(source)} lines but {files[1]} has {len(target)}; the "
                     "two parallel files must be line-aligned (one sentence pair per line).")
  pairs = [(s, t, f"{files[0]}:{n}") for n, (s, t) in enumerate(zip(source, target), 1)
           if s.strip() or t.strip()]
  return _drop_half_empty(pairs)


def _drop_half_empty(pairs: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
  kept = [p for p in pairs if p[0].strip() and p[1].strip()]
  if len(kept) < len(pairs):
    first = next(p for p in pairs if not (p[0].strip() and p[1].strip()))
    logging.warning("parallel_text: %d pair(s) with an empty side were skipped (first: %s); "
                    "fix or remove those lines to keep them.", len(pairs) - len(kept), first[2])
  return kept


def hold_out(docs: Sequence[Any], key: Callable[[Any], str], eval_fraction: float, seed: int,
             name: str) -> tuple[list[Any], list[Any]]:
  """(train, validation): a seeded eval_fraction of docs (>= 1); train loses their duplicates."""
  if not 0 < eval_fraction < 1:
    raise ValueError(f"eval_fraction={eval_fraction} must be in (0, 1); e.g. 0.01.")
  if len(docs) < 2:
    raise ValueError(f"{name} holds {len(docs)} document(s), too few for a train and a "
                     "validation split; add text, use text_split='line', or pass eval_files.")
  num_eval = min(len(docs) - 1, max(1, round(len(docs) * eval_fraction)))
  chosen = set(np.random.default_rng(seed).permutation(len(docs))[:num_eval].tolist())
  validation = [d for i, d in enumerate(docs) if i in chosen]
  held = {key(d) for d in validation}
  train = [d for i, d in enumerate(docs) if i not in chosen and key(d) not in held]
  if len(train) + len(validation) < len(docs):
    logging.info("%s: %d train document(s) equal to a validation document were dropped.", name,
                 len(docs) - len(train) - len(validation))
  if not train:
    raise ValueError(f"{name}: every document equals a held-out one, so train is empty; add "
                     "distinct text or pass eval_files.")
  return train, validation


def _describe(files: Sequence[str]) -> str:
  return files[0] if len(files) == 1 else f"{files[0]} and {len(files) - 1} more file(s)"


def fingerprint(files: Sequence[str], **options: Any) -> str:
  """A short hash of the files' paths, sizes and mtimes and the options: a changed file rebuilds."""
  h = hashlib.sha1(repr(sorted(options.items())).encode())
  for f in files:
    st = os.stat(f)
    h.update(f"{os.path.abspath(f)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
  return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------
# TFDS builders of local corpora
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass(eq=False)
class LocalTextConfig(tfds.core.BuilderConfig):
  """One local corpus: its files, how to cut and hold out documents (name = fingerprint)."""
  files: tuple[str, ...] = ()
  eval_files: tuple[str, ...] = ()
  text_split: str = "paragraph"
  eval_fraction: float = 0.01
  seed: int = 0


class _LocalText(tfds.core.GeneratorBasedBuilder):
  VERSION = tfds.core.Version(_VERSION)
  BUILDER_CONFIGS = [LocalTextConfig(name="default")]
  FIELDS: tuple[str, ...] = ()

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self, description=self.__doc__,
        features=tfds.features.FeaturesDict({f: tfds.features.Text() for f in self.FIELDS}))

  def _documents(self, files: Sequence[str]) -> list[tuple[str, ...]]:
    raise NotImplementedError

  def _split_generators(self, dl_manager):
    del dl_manager  # local files only
    cfg = self.builder_config
    docs = self._documents(cfg.files)
    name = _describe(cfg.files)
    if cfg.eval_files:
      train, validation = docs, self._documents(cfg.eval_files)
    else:
      train, validation = hold_out(docs, lambda d: d[0], cfg.eval_fraction, cfg.seed, name)
    if not train or not validation:
      raise ValueError(f"{name} gave {len(train)} train and {len(validation)} validation "
                       "documents; add text to the files.")
    return {"train": self._generate_examples(train),
            "validation": self._generate_examples(validation)}

  def _generate_examples(self, docs: list[tuple[str, ...]]) -> Iterator[tuple[int, dict]]:
    for i, doc in enumerate(docs):
      yield i, dict(zip(self.FIELDS, doc))


class TextFiles(_LocalText):
  """Language-modelling documents from local plain-text files."""
  name = "text_files"
  FIELDS = ("text", "origin")

  def _documents(self, files):
    return [d for f in files for d in documents(f, self.builder_config.text_split)]


class ParallelText(_LocalText):
  """Translation pairs from a local TSV or two line-aligned files."""
  name = "parallel_text"
  FIELDS = ("source", "target", "origin")

  def _documents(self, files):
    return parallel_pairs(files)


_BUILDERS = {"text_files": TextFiles, "parallel_text": ParallelText}


def build_local(name: str, data_dir: str | None, *, data_files: Any, eval_files: Any = None,
                text_split: str = "paragraph", eval_fraction: float = 0.01,
                seed: int = 0) -> tfds.core.DatasetBuilder:
  """The prepared text_files / parallel_text builder of these files (built once per fingerprint)."""
  files = resolve_files(data_files, "data_files")
  held = resolve_files(eval_files, "eval_files") if eval_files else []
  if text_split not in TEXT_SPLITS:
    raise ValueError(f"text_split={text_split!r} is not one of {list(TEXT_SPLITS)}.")
  options = dict(text_split=text_split if name == "text_files" else "-",
                 eval_fraction=None if held else eval_fraction, seed=None if held else seed,
                 version=_VERSION)
  key = fingerprint(files + held, **options)
  cfg = LocalTextConfig(name=f"{name}-{key}", files=tuple(files), eval_files=tuple(held),
                        text_split=text_split, eval_fraction=eval_fraction, seed=seed,
                        description=f"{name} of {_describe(files)}")

  def make() -> tfds.core.DatasetBuilder:
    return _BUILDERS[name](config=cfg, data_dir=data_dir, file_format="array_record")

  builder = make()
  try:
    builder.download_and_prepare()  # a no-op when this fingerprint is already prepared
  except OSError:
    builder = make()  # hosts sharing data_dir race; the loser finds it prepared
    if not builder.is_prepared():
      raise
  return builder


# ---------------------------------------------------------------------------------------
# Standard TFDS datasets
# ---------------------------------------------------------------------------------------
_WMT = re.compile(r"^(wmt\d\d)_translate/([a-z]{2})-([a-z]{2})$")
STANDARD = ("wmt14_translate/de-en", "wmt17_translate/de-en", "lm1b", "tiny_shakespeare")
_LM_MODULES = {"lm1b": ("tensorflow_datasets.text.lm1b", "test"),
               "tiny_shakespeare": ("tensorflow_datasets.text.tiny_shakespeare", "validation")}


def is_standard(name: str) -> bool:
  return name in _LM_MODULES or bool(_WMT.match(name))


def _tfds_split(name: str, split: str, data_dir: str | None) -> Sequence[Mapping[str, Any]]:
  """A prepared split as an array_record data source; never downloads (download=False)."""
  try:
    return tfds.data_source(name, split=split, data_dir=data_dir, download=False)
  except (tfds.core.registered.DatasetNotFoundError, FileNotFoundError, NotImplementedError,
          AssertionError) as e:
    # NotImplementedError: nothing prepared there, or prepared as TFRecord (no random access).
    where = data_dir or "~/tensorflow_datasets"
    raise FileNotFoundError(
        f"TFDS dataset {name!r} split {split!r} is not prepared as array_record in {where} "
        f"({type(e).__name__}); prepare it once where the internet and TensorFlow are: `tfds "
        f"build {name} --data_dir={where} --file_format=array_record` (README, '## Data'), or "
        "set tfds_data_dir to where it is.") from None
  except (ValueError, KeyError) as e:
    raise ValueError(f"TFDS dataset {name!r} has no split {split!r} ({e}); set train_split / "
                     "eval_split to one of its splits.") from None


class Documents:
  """A one-record text split (tiny_shakespeare) cut into documents: {'text': str}."""

  def __init__(self, source: Sequence[Mapping[str, Any]], field: str, text_split: str,
               name: str):
    lines = "\n".join(_as_str(ex[field]) for ex in source).split("\n")
    self.docs = [{"text": t, "origin": o} for t, o in _split_documents(lines, text_split, name)]

  def __len__(self) -> int:
    return len(self.docs)

  def __getitem__(self, i: int) -> dict[str, str]:
    return self.docs[i]


@dataclasses.dataclass(frozen=True)
class TextSplits:
  """Raw text splits of a dataset and how to read them: fields[key] = feature name."""
  train: Sequence[Mapping[str, Any]]
  eval: Sequence[Mapping[str, Any]]
  fields: Mapping[str, str]
  name: str  # for messages


def open_splits(config: Any) -> TextSplits:
  """The raw train and eval text splits of config.dataset (local builder or TFDS name)."""
  name, data_dir = config.dataset, config.get("tfds_data_dir")
  if name in LOCAL:
    builder = build_local(name, data_dir, data_files=config.data_files,
                          eval_files=config.get("eval_files"), text_split=config.text_split,
                          eval_fraction=config.eval_fraction, seed=config.seed)
    fields = {"targets": "text"} if name == "text_files" else {"inputs": "source",
                                                                "targets": "target"}
    return TextSplits(builder.as_data_source("train"), builder.as_data_source("validation"),
                      fields, f"{name} ({config.data_files})")
  train_split = config.get("train_split") or "train"
  wmt = _WMT.match(name)
  if wmt:
    importlib.import_module(f"tensorflow_datasets.translate.{wmt.group(1)}")  # registers it
    langs = (wmt.group(2), wmt.group(3))
    for field in ("source_lang", "target_lang"):
      if config[field] not in langs:
        raise ValueError(f"{field}={config[field]!r} is not a language of {name}; use one of "
                         f"{list(langs)}.")
    if config.source_lang == config.target_lang:
      raise ValueError(f"source_lang and target_lang are both {config.source_lang!r}; set them "
                       "to the two languages of the pair.")
    eval_split = config.get("eval_split") or "validation"
    return TextSplits(_tfds_split(name, train_split, data_dir),
                      _tfds_split(name, eval_split, data_dir),
                      {"inputs": config.source_lang, "targets": config.target_lang}, name)
  if name in _LM_MODULES:
    module, default_eval = _LM_MODULES[name]
    importlib.import_module(module)
    eval_split = config.get("eval_split") or default_eval
    train = _tfds_split(name, train_split, data_dir)
    evaluation = _tfds_split(name, eval_split, data_dir)
    if name == "tiny_shakespeare":  # one huge string per split
      train = Documents(train, "text", config.text_split, f"{name}/{train_split}")
      evaluation = Documents(evaluation, "text", config.text_split, f"{name}/{eval_split}")
    return TextSplits(train, evaluation, {"targets": "text"}, name)
  raise ValueError(f"Unknown dataset {name!r}.")


def _as_str(value: Any) -> str:
  if isinstance(value, bytes):
    return value.decode("utf-8", errors="replace")
  if isinstance(value, np.ndarray):
    return _as_str(value.item())
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
        for line in _as_str(ex[field]).split("\n"):
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
        {"origin": _as_str(ex["origin"]) if "origin" in ex else f"{self.name} example {i}"}
        for i, ex in zip(indices, raw)]
    for key, field in self.fields.items():
      ids = self.tokenizer.encode_batch([_as_str(ex[field]) for ex in raw])
      for o, seq in zip(out, ids):
        o[key] = np.array(list(seq) + [EOS_ID], np.int32)
    return out
