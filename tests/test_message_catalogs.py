"""Message catalogs as a parallel corpus: .mo reading (both byte orders, charsets, plural and
context entries), the filters, one source sentence once, the TSV, scripts/make_corpus.py."""

import json
import os
import struct
import subprocess
import sys

import pytest

from conftest import REPO
from transformer.data import message_catalogs
from transformer.errors import ConfigError


def write_mo(path, entries, charset="UTF-8", big_endian=False):
  """A compiled gettext catalog of {message: translation} (bytes keys allowed for plural and
  context entries), laid out as msgfmt does: header, two offset tables, then the strings."""
  encode = lambda s: s if isinstance(s, bytes) else s.encode(charset)  # noqa: E731
  header = f"Content-Type: text/plain; charset={charset}\n".encode("ascii")
  items = sorted([(b"", header)] + [(encode(k), encode(v)) for k, v in entries.items()])
  end = ">" if big_endian else "<"
  n = len(items)
  originals, translations = 28, 28 + 8 * n
  data_start = 28 + 16 * n
  blob, o_table, t_table = b"", b"", b""
  for k, _ in items:
    o_table += struct.pack(end + "2I", len(k), data_start + len(blob))
    blob += k + b"\x00"
  for _, v in items:
    t_table += struct.pack(end + "2I", len(v), data_start + len(blob))
    blob += v + b"\x00"
  head = struct.pack(end + "7I", 0x950412de, 0, n, originals, translations, 0, 0)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "wb") as f:
    f.write(head + o_table + t_table + blob)


ENTRIES = {
    "Could not open %s": "Konnte %s nicht öffnen",
    "File\nnot   found": "Datei\tnicht gefunden",  # whitespace collapsed: one pair a line
    b"menu\x04Open": "Öffnen",  # msgctxt removed
    b"%d file\x00%d files": "%d Datei\x00%d Dateien",  # plural: the singular forms
    "Untranslated": "",
    "Same": "Same",
    "%s: %d": "%s: %d",  # no word in the source
    "one two three four": "eins zwei drei vier fünf sechs",  # longer than max_words=5
}


def test_read_mo_decodes_entries_in_both_byte_orders_and_the_headers_charset(tmp_path):
  for big_endian, charset in ((False, "UTF-8"), (True, "ISO-8859-1")):
    path = str(tmp_path / f"{charset}.mo")
    write_mo(path, {"Open": "Öffnen", b"ctx\x04Save": "Speichern"}, charset, big_endian)
    assert sorted(message_catalogs.read_mo(path)) == [("Open", "Öffnen"), ("Save", "Speichern")]


def test_sentence_pairs_filter_and_keep_each_source_once(tmp_path):
  a, b = str(tmp_path / "a" / "apt.mo"), str(tmp_path / "b" / "bash.mo")
  write_mo(a, ENTRIES)
  write_mo(b, {"Could not open %s": "Öffnen von %s fehlgeschlagen", "Exit": "Beenden"})
  pairs = message_catalogs.sentence_pairs([a, b], max_words=5)
  assert [(p.catalog, p.source, p.target) for p in pairs] == [
      ("apt", "%d file", "%d Datei"),
      ("apt", "Could not open %s", "Konnte %s nicht öffnen"),
      ("apt", "File not found", "Datei nicht gefunden"),
      ("apt", "Open", "Öffnen"),
      ("bash", "Exit", "Beenden")]  # bash's "Could not open %s" is apt's: kept once
  out = str(tmp_path / "out" / "c.tsv")
  message_catalogs.write_tsv(pairs, out)
  assert open(out, encoding="utf-8").read().splitlines()[1] == \
      "Could not open %s\tKonnte %s nicht öffnen"


def test_catalog_paths_sort_by_name_and_leave_out_name_lists(tmp_path):
  for rel in ("locale/de/LC_MESSAGES/zsh.mo", "locale/de/LC_MESSAGES/iso_3166.mo",
              "vim/vim90/lang/de/LC_MESSAGES/vim.mo", "locale/fr/LC_MESSAGES/apt.mo",
              "locale/de/LC_MESSAGES/apt.mo"):
    write_mo(str(tmp_path / rel), {"a b": "c d"})
  patterns = (str(tmp_path / "locale/{lang}/LC_MESSAGES/*.mo"),
              str(tmp_path / "*/*/lang/{lang}/LC_MESSAGES/*.mo"))
  names = [message_catalogs.catalog_name(p)
           for p in message_catalogs.catalog_paths("de", patterns)]
  assert names == ["apt", "vim", "zsh"]


@pytest.mark.parametrize("data,message", [
    (b"not a catalog at all, but long enough", "is not a compiled gettext catalog"),
    (struct.pack("<7I", 0x950412de, 0, 5, 28, 68, 0, 0), "is truncated")])
def test_a_file_that_is_not_a_catalog_is_a_one_line_error(tmp_path, data, message):
  path = tmp_path / "x.mo"
  path.write_bytes(data)
  with pytest.raises(ConfigError, match=message):
    message_catalogs.read_mo(str(path))


def test_make_corpus_writes_the_tsv_and_its_manifest(tmp_path):
  write_mo(str(tmp_path / "de" / "apt.mo"), ENTRIES)
  out = tmp_path / "c.tsv"
  script = [sys.executable, os.path.join(REPO, "scripts", "make_corpus.py"),
            f"--catalogs={tmp_path}/{{lang}}/*.mo", f"--out={out}"]
  proc = subprocess.run(script + ["--min_pairs=3"], capture_output=True, text=True)
  assert proc.returncode == 0, proc.stderr
  assert "5 pairs from 1 catalogs" in proc.stdout  # "one two three four" fits in 30 words
  manifest = json.load(open(f"{out}.json"))
  assert manifest["pairs"] == 5 and manifest["catalogs"] == {"apt": 5}
  assert len(out.read_text(encoding="utf-8").splitlines()) == 5
  proc = subprocess.run(script + ["--min_pairs=100"], capture_output=True, text=True)
  assert proc.returncode != 0 and "Only 5 pairs in 1 'de' catalogs" in proc.stderr
  # --out empty or a directory: one line before any catalog is read, and no temporary file
  # left (one stayed in the working directory, 3.5 MB, before).
  before = sorted(p.name for p in tmp_path.iterdir())
  for out, said in (("", "error: --out is empty; pass the file to write"),
                    (str(tmp_path), f"error: Cannot write --out={tmp_path} (a directory")):
    proc = subprocess.run(script[:-1] + [f"--out={out}", "--min_pairs=3"], capture_output=True,
                          text=True, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1].startswith(said)
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
  assert sorted(p.name for p in tmp_path.iterdir()) == before
