"""The input pipeline's batches as hashes, for small corpora this module writes: what
tests/test_batch_identity.py holds every pipeline to.

`tests/data/batch_hashes.json` was recorded at e02e0e7 by the pipeline of then, which read
TFDS examples through grain and tokenized them batch by batch, before the token store
replaced it:

  python tests/batch_identity.py --write

For every case (a corpus, a model kind, a packing mode) it holds the hashes of the first train
batches on one process and on process 3 of 4, an iterator state taken mid-stream and the
batches after a restore from it, and every eval and test batch. The corpora are small enough
that the recorded train batches cross at least one epoch boundary (checked when recording).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import pathlib
import sys
import tempfile
from typing import Any

import ml_collections
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
GOLDEN = HERE / "data" / "batch_hashes.json"
SPM_MODEL = HERE / "data" / "identity_spm.model"  # a 320-piece SentencePiece model, committed
TRAIN_BATCHES, SHARD_BATCHES, RESTORE_AT, AFTER_RESTORE = 50, 20, 23, 10

_WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from "
          "at which but have an they you were her she there been one all we their has would "
          "when if so no will more about out up into them can only other new some could time "
          "these two may then do first any my now such like our over man me even most made "
          "after also did many before must through back years where much your way well down "
          "should because each just those people how too little state good very make world "
          "still own see men work long get here between both life being under never day same "
          "another know while last might us great old year off come since against go came "
          "right used take three Kraft Straße naïve café 東京 über").split()


def _sentence(rng: np.random.Generator, longest: int) -> str:
  n = int(rng.integers(1, longest + 1))
  return " ".join(_WORDS[i] for i in rng.integers(0, len(_WORDS), n))


def write_corpora(root: pathlib.Path) -> dict[str, str]:
  """The cases' corpus files under root (the same bytes every time): a text file of
  paragraphs and lines, and a TSV of pairs; a few documents are longer than any row."""
  rng = np.random.default_rng(20261128)
  paragraphs = ["\n".join(_sentence(rng, 14 if i % 37 else 60) for _ in range(rng.integers(1, 4)))
                for i in range(160)]
  pairs = [f"{_sentence(rng, 9 if i % 29 else 30)}\t{_sentence(rng, 11 if i % 31 else 35)}"
           for i in range(240)]
  root.mkdir(parents=True, exist_ok=True)
  (root / "text.txt").write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
  (root / "pairs.tsv").write_text("\n".join(pairs) + "\n", encoding="utf-8")
  return {"text": str(root / "text.txt"), "pairs": str(root / "pairs.tsv")}


def _tokenizer(kind: str) -> dict[str, Any]:
  base = dict(kind="bytes", vocab_size=320, path=None, model_type="unigram",
              character_coverage=1.0, train_examples=100_000)
  if kind == "spm":
    base.update(kind="sentencepiece", path=str(SPM_MODEL))
  return base


# name -> (data fields, model_type, packing modes)
CASES: dict[str, tuple[dict[str, Any], str, tuple[str, ...]]] = {
    "synthetic_seq2seq": (dict(dataset="synthetic", max_len=8), "seq2seq", ("none", "pack")),
    "synthetic_lm": (dict(dataset="synthetic", max_len=12), "lm", ("concat", "pack", "none")),
    "text_bytes_lm": (dict(dataset="text_files", files="text", text_split="line", max_len=48,
                           tokenizer="bytes"), "lm", ("concat", "pack", "none")),
    "text_spm_lm": (dict(dataset="text_files", files="text", text_split="paragraph",
                         max_len=24, tokenizer="spm"), "lm", ("concat", "pack", "none")),
    "pairs_bytes_seq2seq": (dict(dataset="parallel_text", files="pairs", max_len=40,
                                 tokenizer="bytes"), "seq2seq", ("pack", "none")),
    "pairs_spm_lm": (dict(dataset="parallel_text", files="pairs", max_len=40, tokenizer="spm"),
                     "lm", ("concat",)),
}


def config_of(case: str, mode: str, files: dict[str, str], tfds_dir: str
              ) -> ml_collections.ConfigDict:
  """The data config of one case and packing mode (batch 8, seed 3, held-out 5% + test 5%)."""
  fields, model_type, _ = CASES[case]
  cfg = dict(dataset=fields["dataset"], tfds_data_dir=tfds_dir, batch_size=8,
             max_len=fields["max_len"], seed=3, packing=mode, model_type=model_type,
             data_threads=2, data_prefetch=2)
  if fields["dataset"] == "synthetic":
    cfg["synthetic"] = dict(task="reverse", vocab_size=8, min_len=1, max_len=9, num_train=300,
                            num_eval=40, seed=0)
  else:
    cfg.update(data_files=files[fields["files"]], eval_files=None,
               text_split=fields.get("text_split", "line"), eval_fraction=0.05,
               test_fraction=0.05, split_seed=1, data_help=None,
               tokenizer=_tokenizer(fields["tokenizer"]))
  return ml_collections.ConfigDict(cfg)


def batch_hash(batch: dict[str, np.ndarray]) -> str:
  """sha256 of a batch: every key in order with its dtype, shape and bytes."""
  h = hashlib.sha256()
  for k in sorted(batch):
    a = np.ascontiguousarray(batch[k])
    h.update(f"{k}:{a.dtype.str}:{a.shape};".encode())
    h.update(a.tobytes())
  return h.hexdigest()[:24]


def _hashes(batches) -> list[str]:
  return [batch_hash(b) for b in batches]


def _close(it: Any) -> None:
  close = getattr(it, "close", None)
  if close:
    close()


def record(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  """Everything recorded of one case and mode (see the module docstring)."""
  from transformer.data import pipeline

  out: dict[str, Any] = {}
  for name, (index, count, n) in {"p0of1": (0, 1, TRAIN_BATCHES),
                                  "p3of4": (3, 4, SHARD_BATCHES)}.items():
    ds = pipeline.get_datasets(config, workdir=workdir, process_index=index,
                               process_count=count)
    it = ds.train_iter()
    out[f"{name}_train"] = _hashes(itertools.islice(it, n))
    out[f"{name}_state_at_end"] = json.loads(json.dumps(it.get_state()))
    _close(it)
    it = ds.train_iter()
    for _ in range(RESTORE_AT):
      next(it)
    state = json.loads(json.dumps(it.get_state()))  # as a checkpoint holds it
    _close(it)
    restored = ds.train_iter()
    restored.set_state(state)
    out[f"{name}_state_at_{RESTORE_AT}"] = state
    out[f"{name}_after_restore"] = _hashes(itertools.islice(restored, AFTER_RESTORE))
    _close(restored)
    out[f"{name}_eval"] = _hashes(ds.eval_batches())
    test = ds.test_batches()
    out[f"{name}_test"] = None if test is None else _hashes(test)
    if count == 1:
      out["num_train_examples"] = ds.num_train_examples
  return out


def epochs_read(state: dict[str, Any], num_train: int, rows: int = 8) -> float:
  """How far into the endless shuffled order a one-process iterator state has read, in
  epochs: unpacked, its next batch's first position; packed, the furthest lane's."""
  if "next" in state:
    return max(lane + nxt * rows for lane, nxt in enumerate(state["next"])) / num_train
  return state["next_index"] * rows / num_train


def train_spm_model(files: dict[str, str]) -> None:
  """The committed SentencePiece model, trained once on the text corpus (kept after)."""
  from transformer.data.tokenizer import train_sentencepiece

  texts = [line for f in files.values() for line in
           pathlib.Path(f).read_text(encoding="utf-8").replace("\t", "\n").split("\n") if line]
  SPM_MODEL.parent.mkdir(parents=True, exist_ok=True)
  train_sentencepiece(texts, 320, character_coverage=1.0).save(SPM_MODEL)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--write", action="store_true", help=f"write {GOLDEN}")
  args = parser.parse_args()
  with tempfile.TemporaryDirectory() as tmp:
    root = pathlib.Path(tmp)
    files = write_corpora(root / "corpus")
    if not SPM_MODEL.exists():
      train_spm_model(files)
    golden: dict[str, Any] = {}
    for case, (_, _, modes) in CASES.items():
      for mode in modes:
        config = config_of(case, mode, files, str(root / "tfds"))
        got = record(config, str(root / "work" / case / mode))
        assert epochs_read(got["p0of1_state_at_end"], got["num_train_examples"]) > 1, \
            (case, mode)
        golden[f"{case}/{mode}"] = got
        print(case, mode, got["num_train_examples"], "examples,",
              f"{epochs_read(got['p0of1_state_at_end'], got['num_train_examples']):.2f} epochs",
              file=sys.stderr)
  if args.write:
    GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
  else:
    print(json.dumps(golden, sort_keys=True)[:2000])


if __name__ == "__main__":
  main()
