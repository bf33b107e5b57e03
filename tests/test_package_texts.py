"""English text out of .deb files: the ar and data.tar.xz layers read without dpkg, the
members chosen by pattern, dictionaries cut into entries, and scripts/make_corpus.py's
debian_docs corpus with its manifest, on packages the test builds."""

import gzip
import io
import json
import lzma
import os
import subprocess
import sys
import tarfile

import pytest

from test_grid import REPO
from transformer.data import corpus_files, package_texts
from transformer.errors import ConfigError, MissingFileError


def _deb(path, files):
  """A .deb of `files` {member name: bytes}: an ar archive of debian-binary, control and
  data.tar.xz, as dpkg-deb writes it."""
  data = io.BytesIO()
  with tarfile.open(fileobj=data, mode="w:xz") as tar:
    for name, body in files.items():
      info = tarfile.TarInfo(name)
      info.size = len(body)
      tar.addfile(info, io.BytesIO(body))
  members = [("debian-binary", b"2.0\n"), ("control.tar.xz", b"x"),
             ("data.tar.xz", data.getvalue())]
  out = b"!<arch>\n"
  for name, body in members:
    out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode() + body
    out += b"\n" if len(body) % 2 else b""
  path.write_bytes(out)
  return str(path)


DICT = b"Abdicate \\Ab\"di*cate\\, v. t.\n   To give up.\n   [1913 Webster]\n\nAbdication\n" \
       b"   The act of abdicating.\nAbdomen\n   The belly.\n"


def test_a_debs_members_are_read_and_a_dictionary_is_cut_into_entries(tmp_path):
  deb = _deb(tmp_path / "dict-gcide_1.0_all.deb",
             {"./usr/share/dictd/gcide.dict.dz": gzip.compress(DICT),
              "./usr/share/doc/dict-gcide/copyright": b"GPL"})
  package = package_texts.PackageText("dict-gcide", ("./usr/share/dictd/gcide.dict.dz",),
                                      "GPL-2+", "a dictionary")
  assert package_texts.find_deb(str(tmp_path), "dict-gcide") == deb
  # Three entries: the blank line ends the first; an unindented headword starts the others.
  assert package_texts.documents(deb, package) == [
      "Abdicate \\Ab\"di*cate\\, v. t.\n   To give up.\n   [1913 Webster]",
      "Abdication\n   The act of abdicating.", "Abdomen\n   The belly."]


def test_a_missing_package_or_member_or_a_non_deb_is_one_line(tmp_path):
  with pytest.raises(MissingFileError, match=r"No git-doc_\*\.deb in .*apt-get download git-doc"):
    package_texts.find_deb(str(tmp_path), "git-doc")
  deb = _deb(tmp_path / "git-doc_1_all.deb", {"./usr/share/doc/git-doc/README": b"hi"})
  with pytest.raises(ConfigError, match="has no member matching"):
    package_texts.documents(deb, package_texts.PackageText("git-doc", ("*.txt",), "GPL-2", "x"))
  (tmp_path / "bad.deb").write_bytes(b"not an archive")
  with pytest.raises(ConfigError, match="is not a .deb"):
    list(package_texts.member_texts(str(tmp_path / "bad.deb"), ("*",)))
  cut = tmp_path / "cut.deb"
  cut.write_bytes((tmp_path / "git-doc_1_all.deb").read_bytes()[:-100])  # a broken download
  with pytest.raises(ConfigError, match="is damaged or cut short"):
    list(package_texts.member_texts(str(cut), ("*",)))


def test_make_corpus_writes_the_debian_docs_corpus_and_its_manifest(tmp_path):
  """Every package of DEBIAN_DOCS, built here with one text member each: the corpus is their
  paragraphs in package order, xz'd, read back by the corpus reader."""
  debs = tmp_path / "debs"
  debs.mkdir()
  for i, package in enumerate(package_texts.DEBIAN_DOCS):
    member = package.members[0].replace("*", "5.36.0" if "/perl/" in package.members[0] else "a")
    text = f"{package.package} paragraph one.\n\n{package.package} paragraph two, word {i}.\n"
    body = gzip.compress(text.encode()) if member.endswith(".dz") else text.encode()
    _deb(debs / f"{package.package}_1.0_all.deb", {member: body})
  out = tmp_path / "out" / "corpus.txt.xz"
  proc = subprocess.run([sys.executable, os.path.join(REPO, "scripts/make_corpus.py"),
                         "--corpus=debian_docs", f"--debs={debs}", f"--out={out}"],
                        capture_output=True, text=True, cwd=REPO)
  assert proc.returncode == 0, proc.stderr
  n = len(package_texts.DEBIAN_DOCS)
  assert f"{2 * n} paragraphs" in proc.stdout
  manifest = json.loads((tmp_path / "out" / "corpus.txt.xz.json").read_text())
  assert manifest["paragraphs"] == 2 * n and manifest["xz_bytes"] == out.stat().st_size
  assert manifest["packages"]["perl-doc"]["licence"] == "GPL-1+ or Artistic"
  docs = corpus_files.documents(str(out), "paragraph")
  assert [d[0] for d in docs[:2]] == ["dict-gcide paragraph one.",
                                      "dict-gcide paragraph two, word 0."]
  assert lzma.decompress(out.read_bytes()).decode().count("\n\n") == 2 * n - 1


def test_packages_in_a_bucket_are_found_and_read(tmp_path, gcs):
  """--debs may be a gs:// folder: the .deb is found and read through transformer.storage."""
  from transformer import storage
  local = _deb(tmp_path / "dict-wn_1_all.deb",
               {"./usr/share/dictd/wn.dict.dz": gzip.compress(DICT)})
  remote = f"gs://{gcs}/debs"
  storage.as_path(f"{remote}/dict-wn_1_all.deb").write_bytes(open(local, "rb").read())
  package = package_texts.PackageText("dict-wn", ("./usr/share/dictd/wn.dict.dz",), "WordNet", "x")
  deb = package_texts.find_deb(remote, "dict-wn")
  assert deb == f"{remote}/dict-wn_1_all.deb"
  assert len(package_texts.documents(deb, package)) == 3
  with pytest.raises(MissingFileError, match="No git-doc_"):
    package_texts.find_deb(remote, "git-doc")
