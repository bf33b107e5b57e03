"""A real English-German parallel corpus from the message catalogs a system already has.

Programs translated with gettext install compiled catalogs (`.mo` files) of human
translations: /usr/share/locale/LANG/LC_MESSAGES/*.mo on Linux (from libc, coreutils, git,
dpkg, postgresql, vim, ... on Debian/Ubuntu). Each entry pairs an English message with its
translation, so the catalogs of one language form a sentence-aligned corpus of short technical
messages that needs no download. `sentence_pairs` reads them, `write_tsv` writes the
`source<TAB>target` file that `--config.dataset=parallel_text --config.data_files=FILE` trains
on (scripts/make_corpus.py is the command).

What is kept: the first form of each message (plural forms beyond the singular are dropped),
without its msgctxt; whitespace collapsed to single spaces (the TSV has one pair a line);
pairs whose translation is missing or equal to the source, or whose source has no word of two
letters, are dropped; pairs longer than `max_words` words on either side are dropped (the
models read 64 tokens); each English message is kept once (the first catalog in name order
wins), so no source sentence is in two splits. Catalogs that list names rather than sentences
(iso-codes' country, language and currency names, keyboard layout names) are excluded by
default.
"""

from __future__ import annotations

import collections
import dataclasses
import fnmatch
import glob
import hashlib
import json
import os
import re
import struct
from typing import Iterable, Sequence

from transformer import storage
from transformer.errors import ConfigError, MissingFileError

LOCALE_GLOBS = ("/usr/share/locale/{lang}/LC_MESSAGES/*.mo",
                "/usr/share/*/lang/{lang}/LC_MESSAGES/*.mo",
                "/usr/share/*/*/lang/{lang}/LC_MESSAGES/*.mo")  # e.g. vim's
NAME_LISTS = ("iso_*", "xkeyboard-config")  # name lists, not sentences
_MAGIC, _MAGIC_SWAPPED = 0x950412de, 0xde120495
_CHARSET = re.compile(rb"charset=([\w.-]+)")
_WORD = re.compile(r"[^\W\d_]{2}")


@dataclasses.dataclass(frozen=True)
class Pair:
  catalog: str  # the .mo file's name without the extension, e.g. 'coreutils'
  source: str
  target: str


def read_mo(path: str) -> list[tuple[str, str]]:
  """(message, translation) of every entry of a compiled gettext catalog, header excluded.

  Plural entries give their singular message and first translation; a msgctxt prefix
  ('context\\x04message') is removed. Strings are decoded with the header's charset.
  """
  with open(path, "rb") as f:
    data = f.read()
  try:
    # The magic number read little-endian tells the file's byte order.
    endian = {_MAGIC: "<", _MAGIC_SWAPPED: ">"}.get(struct.unpack("<I", data[:4])[0])
    if endian is None:
      raise ConfigError(f"{path} is not a compiled gettext catalog (.mo): its magic number is "
                      f"wrong; pass .mo files (msgfmt compiles .po files into them).")
    count, originals, translations = struct.unpack(endian + "3I", data[8:20])

    def strings(table: int) -> list[bytes]:
      out = []
      for i in range(count):
        length, offset = struct.unpack(endian + "2I", data[table + 8 * i:table + 8 * i + 8])
        out.append(data[offset:offset + length])
      return out

    entries = list(zip(strings(originals), strings(translations)))
  except struct.error:
    raise ConfigError(f"{path} is truncated: it is not a whole .mo catalog.") from None
  charset = "utf-8"
  for message, translation in entries:
    if message == b"":
      found = _CHARSET.search(translation)
      if found and found.group(1).lower() != b"charset":
        charset = found.group(1).decode("ascii")
  out = []
  for message, translation in entries:
    if not message:
      continue
    text = message.split(b"\x00")[0].rpartition(b"\x04")[2]  # singular, no context
    first = translation.split(b"\x00")[0]
    out.append((text.decode(charset, "replace"), first.decode(charset, "replace")))
  return out


def catalog_paths(lang: str = "de", patterns: Sequence[str] = LOCALE_GLOBS,
                  exclude: Sequence[str] = NAME_LISTS) -> list[str]:
  """The compiled catalogs of `lang` installed here, sorted by name, less `exclude` (globs on
  the catalog name)."""
  paths = sorted({p for pattern in patterns for p in glob.glob(pattern.format(lang=lang))},
                 key=lambda p: (catalog_name(p), p))
  return [p for p in paths
          if not any(fnmatch.fnmatch(catalog_name(p), x) for x in exclude)]


def catalog_name(path: str) -> str:
  return os.path.splitext(os.path.basename(path))[0]


def _clean(text: str) -> str:
  return " ".join(text.split())


def sentence_pairs(paths: Iterable[str], max_words: int = 30) -> list[Pair]:
  """The English -> translation pairs of the catalogs at `paths`, filtered as the module
  docstring says, in catalog then catalog-entry order."""
  seen: set[str] = set()
  pairs = []
  for path in paths:
    name = catalog_name(path)
    for message, translation in read_mo(path):
      source, target = _clean(message), _clean(translation)
      if not target or source == target or not _WORD.search(source):
        continue
      if len(source.split()) > max_words or len(target.split()) > max_words:
        continue
      if source in seen:
        continue
      seen.add(source)
      pairs.append(Pair(name, source, target))
  return pairs


def write_tsv(pairs: Sequence[Pair], path: str) -> bytes:
  """source<TAB>target, one pair a line (what parallel_text reads); returns what it wrote."""
  storage.as_path(path).parent.mkdir(parents=True, exist_ok=True)
  data = "".join(f"{p.source}\t{p.target}\n" for p in pairs).encode("utf-8")
  storage.write_atomically(path, data)
  return data


def write_corpus(out: str, lang: str, globs: Sequence[str], *, max_words: int,
                 min_pairs: int) -> str:
  """The pairs of the `lang` catalogs under `globs` written to `out` as a TSV, with OUT.json
  beside it (each catalog's pair count, the settings and the file's sha256, so a result can
  name the corpus it came from); returns a summary line. Fewer than `min_pairs` pairs is one
  line saying what to install."""
  paths = catalog_paths(lang, globs)
  pairs = sentence_pairs(paths, max_words=max_words)
  if len(pairs) < min_pairs:
    raise MissingFileError(
        f"Only {len(pairs)} pairs in {len(paths)} {lang!r} catalogs under {', '.join(globs)}; "
        "install the language's translations (on Debian/Ubuntu the packages' locale files, "
        f"e.g. language-pack-{lang}) or train on a TSV of your own.")
  digest = hashlib.sha256(write_tsv(pairs, out)).hexdigest()
  counts = collections.Counter(p.catalog for p in pairs)
  manifest = {"pairs": len(pairs), "sha256": digest, "lang": lang, "max_words": max_words,
              "catalogs": dict(sorted(counts.items()))}
  storage.write_atomically(out + ".json", json.dumps(manifest, indent=1))
  return f"{len(pairs)} pairs from {len(counts)} catalogs -> {out} (sha256 {digest[:16]})"
