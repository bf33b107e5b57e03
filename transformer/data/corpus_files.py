"""Plain-text corpus files (.xz and .gz read decompressed): resolving paths, reading lines,
cutting documents, holding out.

A document is a paragraph (lines up to a blank line) or a non-blank line (`TEXT_SPLITS`);
a translation pair comes from a TSV line or from the same line of two aligned files. Each
carries its origin 'FILE:LINE' for messages. Invalid UTF-8 is replaced by U+FFFD and counted,
with a warning naming the file and its first such line.
"""

from __future__ import annotations

import gzip
import hashlib
import lzma
import os
from typing import Any, Callable, Optional, Sequence

import numpy as np
from absl import logging

from transformer import storage
from transformer.errors import ConfigError, MissingFileError

TEXT_SPLITS = ("paragraph", "line")


def resolve_files(patterns: str | Sequence[str] | None, field: str = "data_files") -> list[str]:
  """Files of comma-separated paths, globs or directories (all their files), in order; local
  or gs:// (transformer/storage.py).

  Raises FileNotFoundError naming the pattern when nothing matches, ValueError for an empty file.
  """
  if not patterns:
    raise ConfigError(f"config.{field} is not set; pass --config.{field}=FILE, a glob like "
                     "'corpus/*.txt', or a comma-separated list.")
  if isinstance(patterns, str) and "," in patterns and storage.is_local(patterns) and \
      os.path.exists(os.path.expanduser(patterns)):
    items = [patterns]  # one file or directory whose name holds a comma
  else:
    items = patterns.split(",") if isinstance(patterns, str) else list(patterns)
  files: list[str] = []
  for item in (i.strip() for i in items):
    if not item:
      continue
    path = os.path.expanduser(item) if storage.is_local(item) else item
    if storage.as_path(path).is_dir():
      found = [p for p in storage.glob_files(storage.join(path, "*"))
               if not os.path.basename(p).startswith(".")]
      if not found:
        raise MissingFileError(f"Directory {item} (config.{field}) holds no files; put text "
                                f"files in it or pass a glob like '{item.rstrip('/')}/*.txt'.")
    else:
      found = storage.glob_files(path)
      if not found and storage.is_local(path) and os.path.islink(path):
        raise MissingFileError(f"{item} (config.{field}) is a symbolic link that leads nowhere "
                               "(a loop, or its target is gone); point it at a file.")
      if not found:
        raise MissingFileError(f"No file matches {item!r} (config.{field}); check the path, "
                                "or pass an existing file or a glob like 'corpus/*.txt'.")
    files += found
  if not files:  # only separators, e.g. ','
    raise ConfigError(f"config.{field}={patterns!r} names no file; pass --config.{field}=FILE, a "
                      "glob like 'corpus/*.txt', or a comma-separated list.")
  for f in files:
    if storage.size_and_mtime(f)[0] == 0:
      raise ConfigError(f"File {f} (config.{field}) is empty; add text to it or leave it out of "
                       f"config.{field}.")
  return files


def read_lines(path: str) -> list[str]:
  """The lines of a text file, local or gs:// (no line ends), decompressed where its name ends
  in .xz or .gz; invalid UTF-8 replaced by U+FFFD, counted, warned."""
  raw = storage.as_path(path).read_bytes()
  if path.endswith(".xz"):
    raw = lzma.decompress(raw)
  elif path.endswith(".gz"):
    raw = gzip.decompress(raw)
  return split_utf8_lines(raw, path)


def split_utf8_lines(raw: bytes, name: str) -> list[str]:
  """raw split into lines without their line ends ('\n' or '\r\n'); a final line end adds no
  empty line. Invalid UTF-8 is replaced by U+FFFD, with one warning naming `name` and the
  first such line."""
  lines, bad, first_bad = [], 0, 0
  for n, line in enumerate(raw.split(b"\n"), 1):
    try:
      text = line.decode("utf-8")
    except UnicodeDecodeError:
      text = line.decode("utf-8", errors="replace")
      bad += 1
      first_bad = first_bad or n
    lines.append(text[:-1] if text.endswith("\r") else text)
  if raw.endswith(b"\n") or not raw:
    lines.pop()  # the empty string after the last newline is not a line
  if bad:
    logging.warning("%s: %d line(s) held invalid UTF-8 (first: line %d), replaced by U+FFFD; "
                    "re-encode the file as UTF-8 to keep those characters.", name, bad, first_bad)
  return lines


def check_split_settings(text_split: str, eval_fraction: Optional[float]) -> None:
  """One line for a text_split that is not a way to cut documents, or an eval_fraction (None:
  none held out, eval_files given) that holds out no validation split or all of the text."""
  if text_split not in TEXT_SPLITS:
    raise ConfigError(f"text_split={text_split!r} is not one of {list(TEXT_SPLITS)}.")
  if eval_fraction is not None and not 0 < eval_fraction < 1:
    raise ConfigError(f"eval_fraction={eval_fraction} must be in (0, 1); e.g. 0.01.")


def documents(path: str, text_split: str) -> list[tuple[str, str]]:
  """(text, 'FILE:LINE') of each paragraph (blank-line separated) or non-blank line of a file."""
  return split_documents(read_lines(path), text_split, path)


def split_documents(lines: Sequence[str], text_split: str, name: str) -> list[tuple[str, str]]:
  """(text, 'NAME:LINE') of each paragraph or non-blank line of `lines` (1-based line numbers)."""
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
          raise ConfigError(f"{f} line {n} has {len(parts) - 1} TABs, not 1; write each line as "
                           "source<TAB>target (or pass two line-aligned files 'SRC,TGT').")
        pairs.append((parts[0], parts[1], f"{f}:{n}"))
    return _drop_half_empty(pairs)
  if len(files) != 2:
    raise ConfigError(f"parallel_text needs one or more .tsv files or exactly two line-aligned "
                     f"files (source, target), got {len(files)}: {', '.join(files)}; pass "
                     "--config.data_files=corpus.tsv or --config.data_files=train.de,train.en.")
  source, target = read_lines(files[0]), read_lines(files[1])
  if len(source) != len(target):
    raise ConfigError(f"{files[0]} has {len(source)} lines but {files[1]} has {len(target)}; the "
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


# Fewer held-out documents than this is said: one paragraph's loss is no validation split.
FEW_HELD_OUT = 20


def hold_out(docs: Sequence[Any], key: Callable[[Any], str], eval_fraction: float, seed: int,
             name: str) -> tuple[list[Any], list[Any]]:
  """(train, validation): a seeded eval_fraction of docs (>= 1); train loses their duplicates."""
  if len(docs) < 2:
    raise ConfigError(f"{name} holds {len(docs)} document(s), too few for a train and a "
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
    raise ConfigError(f"{name}: every document equals a held-out one, so train is empty; add "
                     "distinct text or pass eval_files.")
  if num_eval < FEW_HELD_OUT:
    logging.warning("%s: a fraction of %g of its %d documents holds out %d (%d words); a loss "
                    "read off so little text is noisy: raise the fraction (eval_fraction, "
                    "test_fraction), or pass eval_files.", name,
                    eval_fraction, len(docs), num_eval,
                    sum(len(key(d).split()) for d in validation))
  return train, validation


def describe(files: Sequence[str]) -> str:
  return files[0] if len(files) == 1 else f"{files[0]} and {len(files) - 1} more file(s)"


_CHUNK_BYTES = 1 << 23  # read and hashed 8 MiB at a time
# content_fingerprint's results in this process, keyed by what any change to the file changes
# (a local inode's change time cannot be set back, as its mtime can; an object's mtime is its
# write): one hash per file per process, however many readers ask.
_fingerprints: dict[tuple, str] = {}


def content_fingerprint(path: str) -> str:
  """'SIZE:HASH' of a file: its size and a hash of all of its bytes.

  A touch or a copy keeps it; any other text, a single byte changed anywhere (its mtime set
  back or not), changes it. Costs one pass over the file's bytes, once per process (per
  object version on gs://).
  """
  if storage.is_local(path):
    st = os.stat(path)
    key: tuple = (os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                  st.st_ctime_ns)
  else:
    key = (path, *storage.size_and_mtime(path))
  if key not in _fingerprints:
    h = _sha1(path, None)
    _fingerprints[key] = f"{storage.size_and_mtime(path)[0]}:{h.hexdigest()[:16]}"
  return _fingerprints[key]


def _sha1(path: str, ends: Optional[int]) -> Any:
  """sha1 of the file's bytes: all of them, or (ends=N) its first N and last N bytes."""
  h = hashlib.sha1()
  with storage.as_path(path).open("rb") as f:
    if ends is None:
      while chunk := f.read(_CHUNK_BYTES):
        h.update(chunk)
      return h
    size = storage.size_and_mtime(path)[0]
    h.update(f.read(ends))
    if size > ends:
      f.seek(max(ends, size - ends))
      h.update(f.read(ends))
  return h


# Runs before whole-file fingerprints recorded 'SIZE:HASH' of the first and last MiB: the same
# value for a file of up to 2 MiB, another for a larger one.
_LEGACY_ENDS = 1 << 20


def same_content(recorded: str, path: str) -> bool:
  """Whether `path` holds what a run recorded as its fingerprint: its content_fingerprint, or,
  for a file over 2 MiB recorded by a run before whole-file fingerprints, the fingerprint of
  its first and last MiB (what that record can tell; a warning says so)."""
  now = content_fingerprint(path)
  if recorded == now:
    return True
  size = int(now.split(":")[0])
  legacy = f"{size}:{_sha1(path, _LEGACY_ENDS).hexdigest()[:16]}"
  if size <= 2 * _LEGACY_ENDS or recorded != legacy:
    return False
  logging.warning("%s was recorded by a run from before whole-file fingerprints, which hashed "
                  "its first and last MiB only: those match; the record is renewed at the next "
                  "checkpoint.", path)
  return True


def fingerprint(files: Sequence[str], **options: Any) -> str:
  """A short hash of the files' paths and contents (content_fingerprint) and the options: a
  file holding other text rebuilds what was prepared from it, whatever its size and mtime say;
  a touch or a copy of the same text does not."""
  h = hashlib.sha1(repr(sorted(options.items())).encode())
  for f in files:
    name = os.path.abspath(f) if storage.is_local(f) else f
    h.update(f"{name}\0{content_fingerprint(f)}\0".encode())
  return h.hexdigest()[:16]
