"""Corpus files: resolving patterns, reading lines, cutting documents, pairs, holding out."""

import logging
import os

import pytest

from conftest import PARAGRAPHS, write_file
from transformer.data import corpus_files


def test_invalid_utf8_is_replaced_counted_and_warned(tmp_path, caplog):
  path = write_file(tmp_path / "bad.txt", b"good line\nbad \xff\xfe line\nok\n\xc3\n")
  with caplog.at_level(logging.WARNING):
    lines = corpus_files.read_lines(path)
  assert lines == ["good line", "bad \ufffd\ufffd line", "ok", "\ufffd"]
  (record,) = [r.getMessage() for r in caplog.records if "UTF-8" in r.getMessage()]
  assert f"{path}: 2 line(s) held invalid UTF-8 (first: line 2), replaced by U+FFFD" in record
  assert "re-encode the file as UTF-8" in record


def test_crlf_line_ends_and_a_missing_final_newline_read_alike(tmp_path):
  unix = write_file(tmp_path / "unix.txt", "one\ntwo\n")
  dos = write_file(tmp_path / "dos.txt", b"one\r\ntwo")
  assert corpus_files.read_lines(unix) == corpus_files.read_lines(dos) == ["one", "two"]


def test_documents_are_paragraphs_or_lines_with_their_first_line_as_origin(tmp_path):
  path = write_file(tmp_path / "d.txt", "a1\na2\n\n\nb1\n  \nc1\nc2\nc3\n")
  assert corpus_files.documents(path, "paragraph") == [
      ("a1\na2", f"{path}:1"), ("b1", f"{path}:5"), ("c1\nc2\nc3", f"{path}:7")]
  assert corpus_files.documents(path, "line") == [
      ("a1", f"{path}:1"), ("a2", f"{path}:2"), ("b1", f"{path}:5"), ("c1", f"{path}:7"),
      ("c2", f"{path}:8"), ("c3", f"{path}:9")]


@pytest.mark.parametrize("text_split, eval_fraction, message", [
    ("words", 0.1, "text_split='words' is not one of"),
    ("line", 1.0, "eval_fraction=1.0 must be in (0, 1)"),
    ("line", 0.0, "eval_fraction=0.0 must be in (0, 1)")])
def test_the_split_settings_are_one_line(text_split, eval_fraction, message):
  with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
    corpus_files.check_split_settings(text_split, eval_fraction)
  corpus_files.check_split_settings("paragraph", None)  # eval_files given: no fraction


def test_resolve_files_takes_globs_directories_and_lists_in_order(corpus):
  books = corpus / "books"
  write_file(books / ".hidden", "not a document")
  expected = [str(books / "a.txt"), str(books / "b.txt")]
  assert corpus_files.resolve_files(str(books)) == expected  # hidden files left out
  assert corpus_files.resolve_files(f"{books}/*.txt") == expected
  assert corpus_files.resolve_files(f"{books}/b.txt, {books}/a.txt") == expected[::-1]
  with pytest.raises(ValueError, match=r"config.data_files=',' names no file; pass "):
    corpus_files.resolve_files(",")  # not an IndexError further on
  comma = write_file(corpus / "one, two.txt", "a file whose name holds a comma\n")
  assert corpus_files.resolve_files(comma) == [comma]  # "No file matches 'one'" before
  assert corpus_files.resolve_files([comma, expected[0]]) == [comma, expected[0]]


def test_content_fingerprint_sees_other_text_not_a_touch(tmp_path):
  path = write_file(tmp_path / "f.txt", "one\n" * 300_000)  # larger than both ends hashed
  first = corpus_files.content_fingerprint(path)
  os.utime(path, (1, 1))  # touched, copied: the same text
  assert corpus_files.content_fingerprint(path) == first
  write_file(tmp_path / "f.txt", "one\n" * 299_999 + "two\n")  # the same size, the end changed
  assert corpus_files.content_fingerprint(path) != first
  write_file(tmp_path / "g.txt", "one\n")
  assert corpus_files.content_fingerprint(str(tmp_path / "g.txt")).startswith("4:")


def test_parallel_pairs_skip_half_empty_pairs_with_a_warning(tmp_path, caplog):
  tsv = write_file(tmp_path / "p.tsv", "eins\tone\n\t\nzwei\t\ndrei\tthree\n")
  with caplog.at_level(logging.WARNING):
    pairs = corpus_files.parallel_pairs([tsv])
  assert pairs == [("eins", "one", f"{tsv}:1"), ("drei", "three", f"{tsv}:4")]
  (warning,) = [r.getMessage() for r in caplog.records if "empty side" in r.getMessage()]
  assert f"1 pair(s) with an empty side were skipped (first: {tsv}:3)" in warning  # 2 is blank


def test_hold_out_is_seeded_and_drops_train_copies_of_held_out_text():
  docs = [(p, f"f:{i}") for i, p in enumerate(PARAGRAPHS)] + [(PARAGRAPHS[0], "f:copy")]
  train, validation = corpus_files.hold_out(docs, lambda d: d[0], 0.1, seed=3, name="f")
  assert (train, validation) == corpus_files.hold_out(docs, lambda d: d[0], 0.1, 3, "f")
  assert len(validation) == 4  # round(41 * 0.1)
  held = {d[0] for d in validation}
  assert not held & {d[0] for d in train}
  assert len(train) == len(docs) - 4 - sum(d[0] in held for d in docs if d not in validation)
  assert validation != corpus_files.hold_out(docs, lambda d: d[0], 0.1, 4, "f")[1]


@pytest.mark.parametrize("docs,fraction,message", [
    (["x"], 0.1, "f holds 1 document(s), too few for a train and a validation split"),
    (["x", "x", "x"], 0.1, "f: every document equals a held-out one, so train is empty"),
])
def test_hold_out_errors_say_what_to_change(docs, fraction, message):
  with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
    corpus_files.hold_out(docs, lambda d: d, fraction, 0, "f")


def test_content_fingerprint_sees_a_same_length_edit_in_the_middle_of_a_large_file(tmp_path):
  """A 2.8 MB corpus with 'the' replaced by 'XYZ' between its first and last MiB, its mtime
  set back: the prepared dataset, the tokenizer and a resume must all see other text (a hash
  of the first and last MiB did not)."""
  words = ("the cat sat on the mat and the dog ran off\n" * 65_000).encode()
  path = write_file(tmp_path / "big.txt", words)
  os.utime(path, ns=(10**18, 10**18))
  first, key = corpus_files.content_fingerprint(path), corpus_files.fingerprint([path])
  middle = slice((1 << 20) + 100, len(words) - (1 << 20) - 100)
  edited = words[:middle.start] + words[middle].replace(b"the", b"XYZ") + words[middle.stop:]
  assert len(edited) == len(words) and middle.stop - middle.start > 500_000
  with open(path, "r+b") as f:  # in place: the same inode
    f.write(edited)
  os.utime(path, ns=(10**18, 10**18))
  assert corpus_files.content_fingerprint(path) != first
  assert corpus_files.fingerprint([path]) != key


def test_a_record_of_the_first_and_last_mib_still_matches_its_file(tmp_path, caplog):
  """Runs from before whole-file fingerprints recorded a hash of a large file's ends: their
  resume, evaluation and analysis must not read the new fingerprint as other text."""
  import hashlib
  data = os.urandom(3 << 20)
  path = write_file(tmp_path / "big.bin", data)
  legacy = f"{len(data)}:{hashlib.sha1(data[:1 << 20] + data[-(1 << 20):]).hexdigest()[:16]}"
  assert corpus_files.content_fingerprint(path) != legacy
  with caplog.at_level("WARNING"):
    assert corpus_files.same_content(legacy, path)
  assert "first and last MiB only: those match" in caplog.text
  assert corpus_files.same_content(corpus_files.content_fingerprint(path), path)
  text = b"one\n" * 1000
  small = write_file(tmp_path / "small.txt", text)  # up to 2 MiB: the same value as before
  assert corpus_files.content_fingerprint(small) == f"4000:{hashlib.sha1(text).hexdigest()[:16]}"
  write_file(tmp_path / "big.bin", data[:-1] + bytes([data[-1] ^ 1]))  # its last byte changed
  assert not corpus_files.same_content(legacy, path)


def test_fingerprint_changes_with_contents_and_options(tmp_path):
  path = write_file(tmp_path / "f.txt", "one\n")
  first = corpus_files.fingerprint([path], text_split="line")
  assert corpus_files.fingerprint([path], text_split="line") == first
  assert corpus_files.fingerprint([path], text_split="paragraph") != first
  write_file(tmp_path / "f.txt", "one more\n")  # a new size
  assert corpus_files.fingerprint([path], text_split="line") != first


def test_fingerprint_sees_an_edit_that_keeps_the_size_and_the_mtime(tmp_path):
  """The prepared dataset (and the tokenizer trained on it) is keyed by this: an edit in place
  whose size and mtime were restored kept the old text's dataset."""
  path = write_file(tmp_path / "f.txt", "the old text\n")
  os.utime(path, ns=(10**18, 10**18))
  first = corpus_files.fingerprint([path])
  write_file(tmp_path / "f.txt", "the new text\n")
  os.utime(path, ns=(10**18, 10**18))
  assert corpus_files.fingerprint([path]) != first
  os.utime(path, ns=(2 * 10**18, 2 * 10**18))  # a touch: the same text, the same key
  write_file(tmp_path / "f.txt", "the old text\n")
  assert corpus_files.fingerprint([path]) == first


def test_a_held_out_split_of_few_documents_is_said(caplog):
  """The default eval_fraction of a 460-line text held out one paragraph without a word."""
  docs = [f"paragraph {i} of three words" for i in range(100)]
  with caplog.at_level("WARNING"):
    _, validation = corpus_files.hold_out(docs, lambda d: d, 0.01, 0, "f")
  assert len(validation) == 1
  assert "f: a fraction of 0.01 of its 100 documents holds out 1 (5 words)" in caplog.text
  caplog.clear()
  with caplog.at_level("WARNING"):
    corpus_files.hold_out(docs, lambda d: d, 0.3, 0, "f")
  assert "holds out" not in caplog.text


def test_a_symlink_loop_as_a_data_file_is_named(tmp_path):
  """Round 6, item 15: a symlink loop said "No file matches"."""
  (tmp_path / "a").symlink_to(tmp_path / "b")
  (tmp_path / "b").symlink_to(tmp_path / "a")
  with pytest.raises(FileNotFoundError, match=r"a \(config.data_files\) is a symbolic link that "
                     r"leads nowhere \(a loop, or its target is gone\)"):
    corpus_files.resolve_files(str(tmp_path / "a"), "data_files")
