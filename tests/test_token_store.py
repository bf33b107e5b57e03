"""The token store: what the tokenizer gives, built once however many processes ask, a new
one for another tokenizer or corpus, never read when damaged, and off a read-only dataset."""

import itertools
import json
import logging
import os
import subprocess
import sys
import threading

import ml_collections
import numpy as np
import pytest

import batch_identity as bi
from conftest import REPO, read_only, script_env
from transformer.data import pipeline, text, token_store
from transformer.data.tokenizer import SentencePieceTokenizer


def _config(files, tfds_dir, tokenizer="spm", **overrides):
  config = bi.config_of("text_spm_lm", "concat", files, tfds_dir)
  config.tokenizer = ml_collections.ConfigDict(bi._tokenizer(tokenizer))
  config.update(overrides)
  return config


@pytest.fixture
def corpus(tmp_path):
  return bi.write_corpora(tmp_path / "corpus"), str(tmp_path / "tfds")


def _stores(tfds_dir):
  """{store directory name: meta} of every store under a TFDS dir."""
  found = {}
  for root, dirs, _ in os.walk(tfds_dir):
    for d in dirs:
      meta = os.path.join(root, d, token_store.META)
      if os.path.exists(meta):
        found[os.path.join(os.path.relpath(root, tfds_dir), d)] = json.load(open(meta))
  return found


def _hashes(ds, n=6):
  return [bi.batch_hash(b) for b in itertools.islice(ds.train_iter(), n)] + \
      [bi.batch_hash(b) for b in ds.eval_batches()]


def test_a_store_holds_the_tokenizers_ids_of_every_example(corpus):
  files, tfds_dir = corpus
  config = _config(files, tfds_dir, model_type="seq2seq", dataset="parallel_text",
                   data_files=files["pairs"], packing="pack")
  ds = pipeline.get_datasets(config, process_index=0, process_count=1)
  store = ds._train_store
  assert store.path and store.path.startswith(tfds_dir) and store.keys == ("inputs", "targets")
  assert store.ids["inputs"].dtype == np.uint16  # 320 pieces fit
  splits = text.open_splits(config)
  tokenizer = SentencePieceTokenizer(bi.SPM_MODEL.read_bytes())
  source = text.TokenizedSource(splits.train, splits.fields, tokenizer, "pairs")
  assert len(store) == len(source) == ds.num_train_examples
  for i in range(len(source)):
    for k in store.keys:
      np.testing.assert_array_equal(store[i][k], source[i][k])
  assert ds.count_train_tokens() == sum(len(source[i][k]) for i in range(len(source))
                                        for k in store.keys)
  assert store.origin(0).startswith(files["pairs"] + ":")


def test_workers_build_the_store_a_single_process_builds(corpus, monkeypatch, tmp_path):
  """Spawned worker processes (a large split's build) write the same store, chunk by chunk."""
  files, tfds_dir = corpus
  config = _config(files, tfds_dir)
  alone = pipeline.get_datasets(config, process_index=0, process_count=1)._train_store
  splits = text.open_splits(config)
  source = text.TokenizedSource(splits.train, splits.fields,
                                SentencePieceTokenizer(bi.SPM_MODEL.read_bytes()), "text")
  pools = []

  class Pool(token_store.concurrent.futures.ProcessPoolExecutor):
    def __init__(self, *args, **kwargs):
      pools.append(args[0])
      super().__init__(*args, **kwargs)

  monkeypatch.setattr(token_store.concurrent.futures, "ProcessPoolExecutor", Pool)
  monkeypatch.setattr(token_store, "_PARALLEL_FROM", 10)
  monkeypatch.setattr(token_store, "_chunks", lambda n, w: [(s, min(s + 7, n))
                                                            for s in range(0, n, 7)])
  key = {"a": "key of the test's own"}
  built = token_store.open_or_build(source, ("targets",), vocab_size=320, key=key,
                                    home=str(tmp_path), description="test", workers=2)
  assert pools == [2]  # the build ran in two worker processes
  assert built.path.startswith(str(tmp_path)) and built.path != alone.path
  for part in ("ids", "offsets"):
    np.testing.assert_array_equal(getattr(built, part)["targets"], getattr(alone, part)["targets"])


_RACE = """
import json, sys
import batch_identity as bi
from transformer.data import pipeline
files = json.loads(sys.argv[1])
config = bi.config_of("text_bytes_lm", "concat", files, sys.argv[2])
ds = pipeline.get_datasets(config, process_index=0, process_count=1)
print(json.dumps({"path": ds._train_store.path, "hashes": [bi.batch_hash(b) for b in ds.eval_batches()]}))
"""


def test_two_processes_building_at_once_get_one_good_store(corpus):
  files, tfds_dir = corpus
  config = bi.config_of("text_bytes_lm", "concat", files, tfds_dir)
  text.open_splits(config)  # the TFDS dataset prepared; both processes build its stores
  env = {**script_env(), "PYTHONPATH": f"{REPO / 'tests'}:{REPO}"}
  procs = [subprocess.Popen([sys.executable, "-c", _RACE, json.dumps(files), tfds_dir],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
           for _ in range(2)]
  outs = [p.communicate(timeout=300) for p in procs]
  assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
  got = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
  assert got[0] == got[1]
  stores = _stores(tfds_dir)
  assert len(stores) == 3  # train, validation, test: one store each, no leftovers
  assert not [d for root, dirs, _ in os.walk(tfds_dir) for d in dirs if ".tmp-" in d]


def test_two_builds_racing_to_one_path_leave_the_first(tmp_path):
  """Without the lock (two hosts on one file system), the second rename finds the first's
  store and keeps it."""
  examples = [{"targets": np.arange(3, 3 + i % 7 + 1, dtype=np.int32)} for i in range(50)]
  path = str(tmp_path / "tokens" / "train-x")
  os.makedirs(os.path.dirname(path))
  errors = []

  def build():
    try:
      token_store._build(examples, ("targets",), 64, {"k": 1}, path, "race", 1)
    except Exception as e:  # noqa: BLE001
      errors.append(e)

  threads = [threading.Thread(target=build) for _ in range(2)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors
  store = token_store._open(path, {"k": 1}, ("targets",), examples)
  assert store[49]["targets"].tolist() == examples[49]["targets"].tolist()
  assert os.listdir(tmp_path / "tokens") == ["train-x"]


def test_another_tokenizer_or_corpus_gets_a_new_store(corpus, tmp_path):
  files, tfds_dir = corpus
  first = pipeline.get_datasets(_config(files, tfds_dir), process_index=0, process_count=1)
  bytes_ = pipeline.get_datasets(_config(files, tfds_dir, tokenizer="bytes"), process_index=0,
                                 process_count=1)
  assert first._train_store.path != bytes_._train_store.path
  assert bytes_._train_store[0]["targets"].tolist() != first._train_store[0]["targets"].tolist()
  # Another text in the file: another prepared dataset, so another store.
  with open(files["text"], "a", encoding="utf-8") as f:
    f.write("\nOne more paragraph of text.\n")
  changed = pipeline.get_datasets(_config(files, tfds_dir), process_index=0, process_count=1)
  assert changed._train_store.path != first._train_store.path
  assert len(changed._train_store) == len(first._train_store) + 1
  # The same dataset prepared again (its files rewritten): the key changes with them.
  home = os.path.dirname(os.path.dirname(changed._train_store.path))
  for name in os.listdir(home):
    if "-train." in name:
      os.utime(os.path.join(home, name), ns=(1, 1))
  again = pipeline.get_datasets(_config(files, tfds_dir), process_index=0, process_count=1)
  assert again._train_store.path != changed._train_store.path


@pytest.mark.parametrize("damage", ["truncate", "flip a byte", "empty meta"])
def test_a_damaged_store_is_built_again_never_read(corpus, caplog, damage):
  files, tfds_dir = corpus
  config = _config(files, tfds_dir)
  good = pipeline.get_datasets(config, process_index=0, process_count=1)
  expected = _hashes(good)
  path = good._train_store.path
  ids = os.path.join(path, "targets.ids")
  if damage == "truncate":
    with open(ids, "r+b") as f:
      f.truncate(os.path.getsize(ids) - 2)
  elif damage == "flip a byte":
    with open(ids, "r+b") as f:
      f.seek(100)
      byte = f.read(1)
      f.seek(100)
      f.write(bytes([byte[0] ^ 0xFF]))
  else:
    open(os.path.join(path, token_store.META), "w").close()
  with caplog.at_level(logging.WARNING):
    rebuilt = pipeline.get_datasets(config, process_index=0, process_count=1)
  assert rebuilt._train_store.path == path
  assert [r for r in caplog.records if "is damaged" in r.getMessage() and path in r.getMessage()]
  assert _hashes(rebuilt) == expected


def test_a_read_only_dataset_keeps_its_stores_in_the_cache(corpus, tmp_path, monkeypatch):
  files, tfds_dir = corpus
  config = _config(files, tfds_dir)
  text.open_splits(config)  # prepared while writable
  monkeypatch.setenv(token_store.CACHE_ENV, str(tmp_path / "cache"))
  with read_only(tfds_dir):
    ds = pipeline.get_datasets(config, process_index=0, process_count=1)
    expected = _hashes(ds)
  assert ds._train_store.path.startswith(str(tmp_path / "cache"))
  assert not _stores(tfds_dir)
  again = pipeline.get_datasets(config, process_index=0, process_count=1)
  assert _hashes(again) == expected


def test_a_dataset_on_gs_keeps_its_stores_in_the_local_cache(tmp_path, monkeypatch):
  """Every file operation of a store is local: a gs:// dataset's store is built in the cache."""
  monkeypatch.setenv(token_store.CACHE_ENV, str(tmp_path / "cache"))
  path = token_store.store_path("gs://bucket/tfds/text_files/x/1.0.0", {"split": "train"})
  assert path.startswith(str(tmp_path / "cache"))
