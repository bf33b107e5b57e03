"""Writes a corpus the experiments train on: the English-German pairs of the system's message
catalogs as a TSV (--corpus=catalogs, the default), or the English text of six Debian
documentation packages as one xz'd text file (--corpus=debian_docs).

  python scripts/make_corpus.py --out=data/catalogs_en_de.tsv
  mkdir -p /tmp/debs && (cd /tmp/debs && apt-get download dict-gcide dict-wn linux-doc-6.1 \
      python3.11-doc perl-doc git-doc)
  python scripts/make_corpus.py --corpus=debian_docs --debs=/tmp/debs --out=data/debian_docs_en.txt.xz

catalogs:
Reads every installed German gettext catalog (/usr/share/locale/de/LC_MESSAGES/*.mo and the
like; `transformer.data.message_catalogs` says what is kept), writes source<TAB>target lines
and OUT.json (each catalog's pair count, the line count and the file's sha256, so a result
can name the corpus it came from). What a machine yields depends on the packages it has
installed. Train on it with --config.dataset=parallel_text --config.data_files=OUT (the
translation sweeps do).

debian_docs: the packages of `transformer.data.package_texts.DEBIAN_DOCS` (Debian 12), their
paragraphs in package order, one blank line apart; OUT.json names each package's version,
licence and paragraph and word counts, and the file's sha256. The paper-size campaign
(configs/sweeps/p1_paper_size.py) trains on it with --config.data_files=OUT; its split is drawn
once from the file by split_seed.
"""

import collections
import hashlib
import json
import lzma
import os
import re

from absl import app, flags

from transformer import cli, errors, storage
from transformer.inference import lines
from transformer.data import message_catalogs, package_texts

_CORPUS = flags.DEFINE_enum("corpus", "catalogs", ["catalogs", "debian_docs"], "Which corpus.")
_OUT = flags.DEFINE_string("out", None, "The file to write (default: data/catalogs_en_de.tsv, "
                           "data/debian_docs_en.txt.xz).")
_DEBS = flags.DEFINE_string("debs", ".", "debian_docs: the directory of the packages' .deb files.")
_LANG = flags.DEFINE_string("lang", "de", "The catalogs' language (the target side).")
_MAX_WORDS = flags.DEFINE_integer("max_words", 30, "Longest pair kept, in words a side.")
_CATALOGS = flags.DEFINE_list("catalogs", list(message_catalogs.LOCALE_GLOBS),
                              "Globs of the .mo files; {lang} stands for --lang.")
_MIN_PAIRS = flags.DEFINE_integer("min_pairs", 1000, "Fewer pairs than this is an error.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  default = {"debian_docs": "data/debian_docs_en.txt.xz", "catalogs": "data/catalogs_en_de.tsv"}
  out = default[_CORPUS.value] if _OUT.value is None else _OUT.value
  check_out(out)
  if _CORPUS.value == "debian_docs":
    print(debian_docs(out, _DEBS.value))
  else:
    print(catalogs(out))


def check_out(out: str) -> None:
  """--out names a file that can be written (`lines.check_writable`, as decode's --output),
  its local folder made if needed; said before any corpus is read."""
  if not out.strip():
    raise errors.ConfigError("--out is empty; pass the file to write, e.g. "
                             "--out=data/corpus.tsv.")
  storage.check_reachable(out, "--out")
  if storage.is_local(out) and not os.path.isdir(out):
    try:
      os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    except OSError as e:
      raise errors.ConfigError(f"Cannot make the folder of --out={out} ({e.strerror}); pass "
                               "another path.") from None
  lines.check_writable(out, out_flag="--out")


def debian_docs(out: str, debs: str) -> str:
  """Writes the packages' paragraphs to `out` (xz) and its manifest; returns a summary line."""
  if not out.endswith(".txt.xz"):
    raise app.UsageError(f"--out={out} must end in .txt.xz (the corpus is written xz'd).")
  manifest = {"packages": {}}
  parts = []
  for package in package_texts.DEBIAN_DOCS:
    deb = package_texts.find_deb(debs, package.package)
    docs = package_texts.documents(deb, package)
    manifest["packages"][package.package] = {
        "deb": os.path.basename(deb), "licence": package.licence, "what": package.what,
        "paragraphs": len(docs), "words": sum(len(d.split()) for d in docs)}
    parts += docs
  text = "\n\n".join(re.sub(r"\n\s*\n", "\n", d) for d in parts).encode() + b"\n"
  packed = lzma.compress(text, preset=6)
  manifest.update(paragraphs=len(parts), words=sum(p["words"] for p in manifest["packages"].values()),
                  text_bytes=len(text), xz_bytes=len(packed),
                  sha256=hashlib.sha256(packed).hexdigest())
  storage.write_atomically(out, packed)
  storage.write_atomically(out + ".json", json.dumps(manifest, indent=1))
  return (f"{len(parts)} paragraphs, {manifest['words']} words of {len(package_texts.DEBIAN_DOCS)} "
          f"packages -> {out} ({len(packed) / 2**20:.1f} MiB, sha256 {manifest['sha256'][:16]})")


def catalogs(out: str) -> str:
  """Writes the message catalogs' pairs to `out` and its manifest; returns a summary line."""
  paths = message_catalogs.catalog_paths(_LANG.value, _CATALOGS.value)
  pairs = message_catalogs.sentence_pairs(paths, max_words=_MAX_WORDS.value)
  if len(pairs) < _MIN_PAIRS.value:
    raise errors.MissingFileError(
        f"Only {len(pairs)} pairs in {len(paths)} {_LANG.value!r} catalogs under "
        f"{', '.join(_CATALOGS.value)}; install the language's translations "
        f"(on Debian/Ubuntu the packages' locale files, e.g. language-pack-{_LANG.value}) "
        "or train on a TSV of your own.")
  message_catalogs.write_tsv(pairs, out)
  with open(out, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
  counts = collections.Counter(p.catalog for p in pairs)
  manifest = {"pairs": len(pairs), "sha256": digest, "lang": _LANG.value,
              "max_words": _MAX_WORDS.value, "catalogs": dict(sorted(counts.items()))}
  storage.write_atomically(out + ".json", json.dumps(manifest, indent=1))
  return f"{len(pairs)} pairs from {len(counts)} catalogs -> {out} (sha256 {digest[:16]})"


if __name__ == "__main__":
  cli.run_script(main)
