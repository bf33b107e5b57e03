"""Local corpora: text_files / parallel_text builders, held-out splits, fingerprints."""

import os
import time

from conftest import PARAGRAPHS, write_file
from transformer.data import corpus_files, local_corpora


def _docs(builder, split):
  return sorted(ex["text"].decode() for ex in builder.as_data_source(split))


def test_text_files_documents_held_out_split_and_origins(corpus):
  files = str(corpus / "books" / "*.txt")
  builder = local_corpora.build_local("text_files", str(corpus / "tfds"), data_files=files,
                                      eval_fraction=0.1)
  train, validation = _docs(builder, "train"), _docs(builder, "validation")
  assert len(validation) == 4 and not set(train) & set(validation)
  assert sorted(train + validation) == sorted(PARAGRAPHS)
  origins = {ex["text"].decode(): ex["origin"].decode()
             for ex in builder.as_data_source("train")}
  assert origins.get(PARAGRAPHS[1], f"{corpus}/books/a.txt:4") == f"{corpus}/books/a.txt:4"
  # Deterministic: the same files and seed give the same split; lines make more documents.
  again = local_corpora.build_local("text_files", str(corpus / "tfds"), data_files=files,
                                    eval_fraction=0.1)
  assert again.data_path == builder.data_path and _docs(again, "validation") == validation
  lines = local_corpora.build_local("text_files", str(corpus / "tfds"), data_files=files,
                                    text_split="line", eval_fraction=0.1)
  assert len(lines.as_data_source("train")) + len(lines.as_data_source("validation")) == 80


def test_changed_files_rebuild_unchanged_files_do_not(corpus):
  files = str(corpus / "books" / "*.txt")
  first = local_corpora.build_local("text_files", str(corpus / "tfds"), data_files=files)
  stamp = {p.name: os.stat(p).st_mtime_ns for p in first.data_path.iterdir()}
  same = local_corpora.build_local("text_files", str(corpus / "tfds"), data_files=files)
  assert {p.name: os.stat(p).st_mtime_ns for p in same.data_path.iterdir()} == stamp
  time.sleep(0.01)
  write_file(corpus / "books" / "b.txt", "\n\n".join(PARAGRAPHS[25:] + ["A new paragraph."]))
  changed = local_corpora.build_local("text_files", str(corpus / "tfds"), data_files=files)
  assert changed.data_path != first.data_path
  assert "A new paragraph." in _docs(changed, "train") + _docs(changed, "validation")


def test_parallel_text_from_tsv_and_from_two_files(tmp_path):
  pairs = [(f"quelle {i} ü", f"target {i}") for i in range(30)]
  tsv = write_file(tmp_path / "c.tsv", "".join(f"{s}\t{t}\n" for s, t in pairs))
  src = write_file(tmp_path / "c.de", "".join(f"{s}\n" for s, _ in pairs))
  tgt = write_file(tmp_path / "c.en", "".join(f"{t}\n" for _, t in pairs))
  for files in (tsv, f"{src},{tgt}"):
    builder = local_corpora.build_local("parallel_text", str(tmp_path / "tfds"), data_files=files,
                                        eval_fraction=0.1)
    got = sorted((ex["source"].decode(), ex["target"].decode())
                 for split in ("train", "validation") for ex in builder.as_data_source(split))
    assert got == sorted(pairs) and len(builder.as_data_source("validation")) == 3


def test_a_test_split_is_held_out_apart_from_validation(corpus):
  files = str(corpus / "books" / "*.txt")
  plain = local_corpora.build_local("text_files", str(corpus / "tfds"), data_files=files,
                                    eval_fraction=0.1)
  builder = local_corpora.build_local("text_files", str(corpus / "tfds"), data_files=files,
                                      eval_fraction=0.1, test_fraction=0.1)
  train, validation, test = (_docs(builder, s) for s in ("train", "validation", "test"))
  assert len(test) == 4 and len(validation) == 4  # 10% of 40, then 10% of the 36 left
  assert not (set(train) & set(test)) and not (set(validation) & set(test))
  assert sorted(train + validation + test) == sorted(PARAGRAPHS)
  assert "test" not in plain.info.splits and builder.data_path != plain.data_path
  # Another seed, another test split; a dataset without one keeps its old fingerprint.
  other = local_corpora.build_local("text_files", str(corpus / "tfds"), data_files=files,
                                    eval_fraction=0.1, test_fraction=0.1, seed=1)
  assert _docs(other, "test") != test
  paths = corpus_files.resolve_files(files)
  old_key = corpus_files.fingerprint(paths, text_split="paragraph", eval_fraction=0.1, seed=0,
                                     version=local_corpora._VERSION)
  assert plain.builder_config.name == f"text_files-{old_key}"
