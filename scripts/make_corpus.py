"""Writes a corpus the experiments train on: the English-German pairs of the system's message
catalogs as a TSV (--corpus=catalogs, the default), or the English text of six Debian
documentation packages as one xz'd text file (--corpus=debian_docs).

  python scripts/make_corpus.py --out=data/catalogs_en_de.tsv
  mkdir -p /tmp/debs && (cd /tmp/debs && apt-get download dict-gcide dict-wn linux-doc-6.1 \
      python3.11-doc perl-doc git-doc)
  python scripts/make_corpus.py --corpus=debian_docs --debs=/tmp/debs \
      --out=data/debian_docs_en.txt.xz

catalogs (`transformer.data.message_catalogs.write_corpus`): every installed German gettext
catalog as source<TAB>target lines, and OUT.json; what a machine yields depends on the
packages it has installed. Train on it with --config.dataset=parallel_text
--config.data_files=OUT (the translation sweeps do).

debian_docs (`transformer.data.package_texts.write_corpus`): the paragraphs of six Debian 12
documentation packages, and OUT.json. The paper-size campaign (configs/sweeps/p1_paper_size.py)
trains on it with --config.data_files=OUT; its split is drawn once by split_seed.
"""

import os

from transformer import extras

extras.require("train")  # first: a core install lacks what the imports below need

from absl import app, flags  # noqa: E402

from transformer import cli, errors, storage  # noqa: E402
from transformer.inference import lines  # noqa: E402
from transformer.data import message_catalogs, package_texts  # noqa: E402

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
    print(package_texts.write_corpus(out, _DEBS.value))
  else:
    print(message_catalogs.write_corpus(out, _LANG.value, _CATALOGS.value,
                                        max_words=_MAX_WORDS.value, min_pairs=_MIN_PAIRS.value))


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


if __name__ == "__main__":
  cli.run_script(main)
