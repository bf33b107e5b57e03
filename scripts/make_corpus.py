"""Writes the English-German corpus of the system's message catalogs as a TSV.

  python scripts/make_corpus.py --out=data/catalogs_en_de.tsv

Reads every installed German gettext catalog (/usr/share/locale/de/LC_MESSAGES/*.mo and the
like; `transformer.data.message_catalogs` says what is kept), writes source<TAB>target lines
and OUT.json (each catalog's pair count, the line count and the file's sha256, so a result
can name the corpus it came from). What a machine yields depends on the packages it has
installed. Train on it with --config.dataset=parallel_text --config.data_files=OUT (the
translation sweeps do).
"""

import collections
import hashlib
import json

from absl import app, flags

from transformer import cli, errors
from transformer.data import message_catalogs

_OUT = flags.DEFINE_string("out", "data/catalogs_en_de.tsv", "The TSV to write.")
_LANG = flags.DEFINE_string("lang", "de", "The catalogs' language (the target side).")
_MAX_WORDS = flags.DEFINE_integer("max_words", 30, "Longest pair kept, in words a side.")
_CATALOGS = flags.DEFINE_list("catalogs", list(message_catalogs.LOCALE_GLOBS),
                              "Globs of the .mo files; {lang} stands for --lang.")
_MIN_PAIRS = flags.DEFINE_integer("min_pairs", 1000, "Fewer pairs than this is an error.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  paths = message_catalogs.catalog_paths(_LANG.value, _CATALOGS.value)
  pairs = message_catalogs.sentence_pairs(paths, max_words=_MAX_WORDS.value)
  if len(pairs) < _MIN_PAIRS.value:
    raise errors.MissingFileError(
        f"Only {len(pairs)} pairs in {len(paths)} {_LANG.value!r} catalogs under "
        f"{', '.join(_CATALOGS.value)}; install the language's translations "
        f"(on Debian/Ubuntu the packages' locale files, e.g. language-pack-{_LANG.value}) "
        "or train on a TSV of your own.")
  message_catalogs.write_tsv(pairs, _OUT.value)
  with open(_OUT.value, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
  counts = collections.Counter(p.catalog for p in pairs)
  manifest = {"pairs": len(pairs), "sha256": digest, "lang": _LANG.value,
              "max_words": _MAX_WORDS.value, "catalogs": dict(sorted(counts.items()))}
  with open(_OUT.value + ".json", "w") as f:
    json.dump(manifest, f, indent=1)
  print(f"{len(pairs)} pairs from {len(counts)} catalogs -> {_OUT.value} (sha256 {digest[:16]})")


if __name__ == "__main__":
  cli.run_script(main)
