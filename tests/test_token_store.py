"""The token store: what the tokenizer gives, built once however many processes ask, a new
one for another tokenizer or corpus, never read when damaged, and off a read-only dataset."""

import errno
import itertools
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading

import ml_collections
import numpy as np
import pytest

import batch_identity as bi
import script_starter
from conftest import REPO, read_only, script_env
from transformer import errors
from transformer.data import pipeline, text, token_store
from transformer.data.tokenizer import SentencePieceTokenizer
from transformer.training import workdir_checks


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
print(json.dumps({"path": ds._train_store.path,
                  "hashes": [bi.batch_hash(b) for b in ds.eval_batches()]}))
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


_EXAMPLES = [{"targets": np.arange(3, 3 + i % 7 + 1, dtype=np.int32)} for i in range(50)]


def _build(home, key="round 7"):
  return token_store.open_or_build(_EXAMPLES, ("targets",), vocab_size=64, key={"k": key},
                                   home=str(home), description="test")


def test_a_full_disk_during_a_build_names_the_stores_disk(tmp_path, monkeypatch):
  """Round 7, item 6: the build writes buffered, and its OSError named no file, so a full
  disk was said as the workdir's."""
  real_open = open

  class Full:
    def __init__(self, f):
      self.f = f

    def write(self, data):
      raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
      return getattr(self.f, name)

  def full_open(path, mode="r", *args, **kwargs):
    f = real_open(path, mode, *args, **kwargs)
    return Full(f) if str(path).endswith(".ids") and "w" in mode else f

  monkeypatch.setattr(token_store, "open", full_open, raising=False)
  with pytest.raises(OSError) as e:
    _build(tmp_path / "ds")
  tokens = tmp_path / "ds" / "tokens"
  assert errors.full_file(e.value).startswith(f"{tokens}/")
  assert str(workdir_checks.disk_full_error("/w", e.value)).startswith(
      f"No space left on the disk of {tokens}/")
  assert not [n for n in os.listdir(tokens) if ".tmp-" in n]


_CUT_SHORT = """
import os, sys
import numpy as np
from transformer.data import token_store
from transformer.data.packing import PadBatch
from transformer.errors import RunError
examples = [{"targets": np.arange(3, 3 + i % 7 + 1, dtype=np.int32)} for i in range(50)]
store = token_store.open_or_build(examples, ("targets",), vocab_size=64, key={"k": 1},
                                  home=sys.argv[1], description="test")
pad = PadBatch(store, 4, 8)
pad(np.arange(4))
os.truncate(os.path.join(store.path, "targets.ids"), 0)  # cut short under the running job
try:
  pad(np.arange(46, 50))
except RunError as e:
  print(e)
  sys.exit(1)
"""


def test_a_store_cut_short_under_a_running_job_ends_it_in_one_line(tmp_path):
  """A store file truncated while a job read it killed the job with a bus error (exit 135),
  no message, the steps since the last checkpoint lost; a rerun rebuilds it."""
  proc = script_starter.run_code(_CUT_SHORT, [tmp_path], env=script_env(), cwd=os.getcwd())
  assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
  [line] = proc.stdout.splitlines()
  assert re.fullmatch(rf"The token store {tmp_path}/tokens/\S+ was damaged while this run read "
                      r"it \(targets.ids now holds 0 bytes, not \d+\); rerun the same command: it "
                      r"builds the store again and resumes from the newest checkpoint.", line)
  assert _build(tmp_path, key=1)[49]["targets"].tolist() == _EXAMPLES[49]["targets"].tolist()


def test_an_intact_store_is_used_wherever_it_lies_read_only_or_not(tmp_path, monkeypatch):
  """An intact store beside a read-only dataset was never used: it was built again in the
  cache, and the run refused where no cache could be written."""
  built = _build(tmp_path / "ds")
  (tmp_path / "not a directory").write_text("x")
  monkeypatch.setenv(token_store.CACHE_ENV, str(tmp_path / "not a directory" / "cache"))
  with read_only(tmp_path / "ds"):
    store = _build(tmp_path / "ds")
  assert store.path == built.path and store[49]["targets"].tolist() == [3]


def test_the_temporary_folders_of_killed_builds_go_with_the_next_build(tmp_path):
  """A build killed with SIGKILL left its <store>.tmp-PID-uuid folder for good."""
  tokens = tmp_path / "tokens"
  killed = subprocess.Popen([sys.executable, "-c", "pass"])
  killed.wait()  # a PID that runs no more
  dead = [tokens / f"train-x.tmp-{killed.pid}-0123abcd",  # the name builds gave before
          tokens / f"train-y.tmp-{socket.gethostname()}-{killed.pid}-4567cdef"]
  alive = [tokens / f"train-z.tmp-{os.getpid()}-89abcdef",  # a build that still runs
           tokens / f"train-z.tmp-another-host-{killed.pid}-89abcdef"]  # not ours to ask
  for d in dead + alive:
    d.mkdir(parents=True)
  _build(tmp_path)
  assert not any(d.exists() for d in dead) and all(d.exists() for d in alive)


def test_a_cache_on_an_object_store_is_one_line(tmp_path, monkeypatch):
  """TRANSFORMER_TOKEN_CACHE=gs://bucket/x made a local ./gs:/bucket/x folder and used it."""
  monkeypatch.chdir(tmp_path)
  monkeypatch.setenv(token_store.CACHE_ENV, "gs://bucket/x")
  with pytest.raises(errors.ConfigError, match=r"^TRANSFORMER_TOKEN_CACHE=gs://bucket/x is not "
                     r"a local directory; .*set it to a local path"):
    token_store.open_or_build(_EXAMPLES, ("targets",), vocab_size=64, key={"k": 1},
                              home="gs://bucket/tfds", description="test")
  assert os.listdir(tmp_path) == []


def test_a_cache_on_an_object_store_is_refused_only_where_a_store_must_go_there(tmp_path,
                                                                              monkeypatch):
  """Beside a writable local dataset the cache is never needed: a gs:// value does not end
  the run there."""
  monkeypatch.setenv(token_store.CACHE_ENV, "gs://bucket/x")
  store = token_store.open_or_build(_EXAMPLES, ("targets",), vocab_size=64, key={"k": 1},
                                    home=str(tmp_path / "tfds"), description="test")
  assert len(store) == len(_EXAMPLES)
  assert os.listdir(tmp_path / "tfds" / "tokens")


def test_a_meta_json_that_is_a_directory_is_a_damaged_store(tmp_path, caplog):
  """It was an IsADirectoryError traceback."""
  built = _build(tmp_path)
  os.remove(os.path.join(built.path, token_store.META))
  os.mkdir(os.path.join(built.path, token_store.META))
  with caplog.at_level(logging.WARNING):
    store = _build(tmp_path)
  assert "is damaged (IsADirectoryError" in caplog.text
  assert store.path == built.path and store[49]["targets"].tolist() == [3]
