"""English text out of Debian packages (.deb files): the language-modelling corpus of the
paper-size campaign (configs/sweeps/p1_paper_size.py), about 15.7M words.

`DEBIAN_DOCS` names each package, the files of it that are read (fnmatch patterns on the
archive's member names) and its licence as its copyright file states it. `documents` reads
those members straight from the .deb (an `ar` archive holding data.tar.xz; no dpkg needed)
and cuts each into paragraphs (`corpus_files.split_documents`); gzip'd members (dictd's
.dict.dz) are decompressed, and a dictionary's documents are its entries. The text keeps its
markup (reStructuredText, POD, AsciiDoc, dictionary entries): it is what the packages ship,
not a cleaned corpus.
Get the packages with `apt-get download PACKAGE...` (scripts/make_corpus.py --corpus=debian_docs
says how); their versions and the output's sha256 go in the corpus's manifest.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import gzip
import hashlib
import io
import json
import lzma
import os
import re
import tarfile
from typing import Iterator, Sequence

from transformer import storage
from transformer.data import corpus_files
from transformer.errors import ConfigError, MissingFileError


@dataclasses.dataclass(frozen=True)
class PackageText:
  package: str
  members: tuple[str, ...]  # fnmatch patterns on the data archive's member names
  licence: str
  what: str


DEBIAN_DOCS = (
    PackageText("dict-gcide", ("./usr/share/dictd/gcide.dict.dz",), "GPL-2+",
                "GNU Collaborative International Dictionary of English (Webster's 1913 and more)"),
    PackageText("dict-wn", ("./usr/share/dictd/wn.dict.dz",), "WordNet 3.0 licence",
                "WordNet 3.0, Princeton's lexical database of English"),
    PackageText("linux-doc-6.1", ("./usr/share/doc/linux-doc-6.1/html/_sources/*.rst.txt",),
                "GPL-2", "the Linux kernel's documentation, reStructuredText sources"),
    PackageText("python3.11-doc", ("./usr/share/doc/python3.11/html/_sources/*.rst.txt",),
                "PSF-2.0", "the Python 3.11 documentation, reStructuredText sources"),
    PackageText("perl-doc", ("./usr/share/perl/*/pod/*.pod",), "GPL-1+ or Artistic",
                "Perl's manual pages in POD"),
    PackageText("git-doc", ("./usr/share/doc/git-doc/*.txt",), "GPL-2",
                "Git's manual pages in AsciiDoc"),
)


def data_archive(deb: bytes, name: str) -> tarfile.TarFile:
  """The data.tar.* member of a .deb's `ar` archive, opened (xz, gzip or bzip2)."""
  if not deb.startswith(b"!<arch>\n"):
    raise ConfigError(f"{name} is not a .deb (no ar header); download it with apt-get download.")
  offset = 8
  while offset + 60 <= len(deb):
    header = deb[offset:offset + 60]
    size = int(header[48:58]) if header[58:60] == b"`\n" and header[48:58].strip().isdigit() else -1
    if size < 0 or offset + 60 + size > len(deb):
      raise ConfigError(f"{name} is damaged or cut short (a bad ar member header at byte "
                        f"{offset}); download it again with apt-get download.")
    member, body = header[:16].decode(errors="replace").strip().rstrip("/"), \
        deb[offset + 60:offset + 60 + size]
    if member.startswith("data.tar"):
      if member.endswith(".zst"):
        raise ConfigError(f"{name}'s data is zstd-compressed, which Python's tarfile cannot "
                          "read; unpack it with dpkg-deb and pass the text files instead.")
      try:
        return tarfile.open(fileobj=io.BytesIO(body), mode="r:*")
      except (tarfile.TarError, EOFError, OSError) as e:
        raise ConfigError(f"{name}'s {member} does not open ({e}); download it again with "
                          "apt-get download.") from None
    offset += 60 + size + size % 2  # members are 2-byte aligned
  raise ConfigError(f"{name} holds no data.tar member; is it a complete .deb?")


def member_texts(deb_path: str, patterns: Sequence[str]) -> Iterator[tuple[str, bytes]]:
  """(member name, bytes) of the .deb's regular files matching `patterns`, in name order
  (gzip'd members decompressed)."""
  archive = data_archive(storage.as_path(deb_path).read_bytes(), deb_path)
  with archive:
    members = sorted((m for m in archive.getmembers() if m.isfile() and
                      any(fnmatch.fnmatchcase(m.name, p) for p in patterns)),
                     key=lambda m: m.name)
    for m in members:
      raw = archive.extractfile(m).read()
      yield m.name, gzip.decompress(raw) if m.name.endswith((".gz", ".dz")) else raw


def find_deb(directory: str, package: str) -> str:
  """The one PACKAGE_*.deb in `directory` (local or gs://); a missing one says how to get it."""
  found = sorted(storage.glob_files(storage.join(directory, f"{package}_*.deb")))
  if not found:
    raise MissingFileError(f"No {package}_*.deb in {directory}; run `apt-get download "
                           f"{package}` there (Debian 12), or pass --debs=DIR where it is.")
  if len(found) > 1:
    names = ", ".join(p.rsplit("/", 1)[-1] for p in found)
    raise ConfigError(f"{directory} holds {len(found)} versions of {package} ({names}); keep one.")
  return found[0]


def documents(deb_path: str, package: PackageText) -> list[str]:
  """The paragraphs of a package's text members, in member order."""
  docs: list[str] = []
  for name, raw in member_texts(deb_path, package.members):
    lines = corpus_files.split_utf8_lines(raw, f"{package.package}:{name}")
    if name.endswith(".dict.dz"):  # dictd: an entry starts at its unindented headword line
      lines = [x for line in lines for x in ([""] if line[:1].strip() else []) + [line]]
    docs += [text for text, _ in corpus_files.split_documents(lines, "paragraph", name)]
  if not docs:
    raise ConfigError(f"{deb_path} has no member matching {list(package.members)}; is it the "
                      f"package {package.package} of Debian 12?")
  return docs


def write_corpus(out: str, debs: str) -> str:
  """The paragraphs of DEBIAN_DOCS's packages (their .deb files in `debs`), in package order,
  one blank line apart, written xz'd to `out` (which ends in .txt.xz), with OUT.json beside
  it (each package's version, licence and paragraph and word counts, and the file's sha256);
  returns a summary line."""
  if not out.endswith(".txt.xz"):
    raise ConfigError(f"--out={out} must end in .txt.xz (the corpus is written xz'd).")
  manifest: dict = {"packages": {}}
  parts: list[str] = []
  for package in DEBIAN_DOCS:
    deb = find_deb(debs, package.package)
    docs = documents(deb, package)
    manifest["packages"][package.package] = {
        "deb": os.path.basename(deb), "licence": package.licence, "what": package.what,
        "paragraphs": len(docs), "words": sum(len(d.split()) for d in docs)}
    parts += docs
  text = "\n\n".join(re.sub(r"\n\s*\n", "\n", d) for d in parts).encode() + b"\n"
  packed = lzma.compress(text, preset=6)
  manifest.update(paragraphs=len(parts),
                  words=sum(p["words"] for p in manifest["packages"].values()),
                  text_bytes=len(text), xz_bytes=len(packed),
                  sha256=hashlib.sha256(packed).hexdigest())
  storage.write_atomically(out, packed)
  storage.write_atomically(out + ".json", json.dumps(manifest, indent=1))
  return (f"{len(parts)} paragraphs, {manifest['words']} words of {len(DEBIAN_DOCS)} packages "
          f"-> {out} ({len(packed) / 2**20:.1f} MiB, sha256 {manifest['sha256'][:16]})")
