"""A split tokenized once: every example's token ids, memory-mapped, with their offsets.

Training used to read, parse and tokenize every example again each time a batch held it
(about 34 ms a batch of P1's corpus, in Python under the GIL); a store does it once per
(prepared dataset, split, tokenizer) and the pipeline packs batches from it in numpy.

On disk, a directory `<split>-<key hash>` of:
  meta.json        the key, the example count, and per file its dtype, length and sha1
  KEY.ids          the ids of every example of KEY ('inputs', 'targets'), EOS included, back to
                   back: uint16 where the vocabulary fits, else int32 (little-endian)
  KEY.offsets      int64 [examples + 1]: example i is ids[offsets[i]:offsets[i + 1]]
Where: `tokens/` beside the prepared TFDS dataset (its version directory), or, where that
cannot be written (a read-only or gs:// dataset), under TRANSFORMER_TOKEN_CACHE (default
~/.cache/transformer/tokens; a local directory: a store is memory-mapped). An intact store is
opened wherever it lies, a read-only dataset's own included; only a build needs a writable
place. The key names the prepared data (its dataset_info.json and its
files' names, sizes and modification times), the split, how examples are read (fields, a
pair joined for a language model) and the tokenizer's bytes: any change makes a new store.

A store is written into a temporary directory and renamed into place, so readers never see
half of one; a file lock keeps two processes of one host from building it twice, and two hosts
sharing a file system race harmlessly (the loser's rename fails, it opens the winner's). Every
open checks each file's length and sha1 against meta.json: a damaged store is rebuilt, never
read; a file of it cut short while a job reads it ends the job in one line (each batch
asks first, `TokenStore.check_intact`) instead of a bus error. A build killed outright
leaves its temporary directory, which the next build of that directory removes. The build
reads the source in chunks over the host's cores (spawned processes).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import multiprocessing
import os
import shutil
import socket
import sys
import time
import uuid
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

import filelock
import numpy as np
from absl import logging
from tqdm import tqdm

from transformer import storage
from transformer.data.prepared import read_examples
from transformer.errors import ConfigError, RunError

FORMAT = 1
META = "meta.json"
CACHE_ENV = "TRANSFORMER_TOKEN_CACHE"
_HASH_CHUNK = 1 << 24
# Below this many examples a split is tokenized in this process: starting workers (each
# importing TFDS) costs more than they save (the main job's 20,000 synthetic pairs, a second).
_PARALLEL_FROM = 100_000

Example = Mapping[str, Any]


class _Damaged(Exception):
  """A store on disk that does not read back as written."""


def cache_root() -> str:
  """Where stores go when the prepared dataset's directory cannot hold them: a local
  directory (a store is memory-mapped; `gs://...` would be a local folder named 'gs:')."""
  root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache",
                                                   "transformer", "tokens")
  if "://" in root:
    raise ConfigError(f"{CACHE_ENV}={root} is not a local directory; token stores are "
                      "memory-mapped from a local disk: set it to a local path (or unset it "
                      "for ~/.cache/transformer/tokens).")
  return root


def ids_dtype(vocab_size: int) -> np.dtype:
  return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<i4")


@dataclasses.dataclass
class TokenStore:
  """The token ids of one split, for each key: example i's ids are
  ids[key][offsets[key][i]:offsets[key][i + 1]] (EOS included).

  origins: random access to the examples' 'origin' (FILE:LINE), read only for a message.
  """
  keys: tuple[str, ...]
  ids: dict[str, np.ndarray]
  offsets: dict[str, np.ndarray]
  origins: Optional[Sequence[Example]] = dataclasses.field(default=None, repr=False)
  path: Optional[str] = None  # None: held in memory
  _lengths: dict[str, np.ndarray] = dataclasses.field(default_factory=dict, repr=False)
  # (file, device, inode, bytes) of each file mapped: what `check_intact` holds them to.
  _mapped: tuple[tuple[str, int, int, int], ...] = dataclasses.field(default=(), repr=False)

  def check_intact(self) -> None:
    """A one-line RunError where a file this store maps was cut short since it was opened:
    reading its lost end would kill the process with a bus error and no word. (A file
    replaced or removed is no harm: the map holds the old one.) A few stat calls: each batch
    asks before it reads."""
    for file, device, inode, size in self._mapped:
      try:
        now = os.stat(file)
      except OSError:
        continue
      if (now.st_dev, now.st_ino) == (device, inode) and now.st_size < size:
        raise RunError(f"The token store {self.path} was damaged while this run read it "
                       f"({os.path.basename(file)} now holds {now.st_size} bytes, not {size}); "
                       "rerun the same command: it builds the store again and resumes from "
                       "the newest checkpoint.")

  def __len__(self) -> int:
    return len(self.offsets[self.keys[0]]) - 1

  def lengths(self, key: str) -> np.ndarray:
    """int64 [examples]: each example's token count for `key`."""
    if key not in self._lengths:
      self.check_intact()  # reads the whole offsets map, once
      self._lengths[key] = np.diff(self.offsets[key])
    return self._lengths[key]

  def num_tokens(self) -> int:
    """Every token of every key (EOS included)."""
    return int(sum(int(self.offsets[k][-1]) for k in self.keys))

  def __getitem__(self, i: int) -> dict[str, np.ndarray]:
    """Example i as int32 ids per key (the examples' old form, for callers that read one)."""
    return {k: np.asarray(self.ids[k][self.offsets[k][i]:self.offsets[k][i + 1]], np.int32)
            for k in self.keys}

  def origin(self, i: int) -> str:
    """Where example i came from (FILE:LINE of a local corpus, 'NAME example I'), or ''."""
    if self.origins is None:
      return ""
    origin = read_examples(self.origins, [i])[0].get("origin")
    if isinstance(origin, bytes):
      origin = origin.decode("utf-8", "replace")
    return str(origin or "")

  def gather(self, key: str, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """int32 ids of the pieces ids[key][starts[j]:starts[j] + counts[j]], back to back."""
    counts = np.asarray(counts, np.int64)
    total = int(counts.sum())
    if total == 0:
      return np.zeros(0, np.int32)
    ends = np.cumsum(counts)
    where = np.arange(total, dtype=np.int64) + np.repeat(np.asarray(starts, np.int64) -
                                                         (ends - counts), counts)
    return self.ids[key][where].astype(np.int32)


def from_examples(examples: Sequence[Example], keys: Sequence[str], vocab_size: int,
                  origins: Optional[Sequence[Example]] = None) -> TokenStore:
  """An in-memory store of examples (KEY -> int ids), for sources with no prepared dataset."""
  keys = tuple(keys)
  chunk = _encode(examples, keys, 0, len(examples), ids_dtype(vocab_size))
  return TokenStore(keys, {k: chunk[k][1] for k in keys},
                    {k: _offsets(chunk[k][0]) for k in keys},
                    origins=examples if origins is None else origins)


def _offsets(lengths: np.ndarray) -> np.ndarray:
  out = np.zeros(len(lengths) + 1, np.int64)
  np.cumsum(lengths, out=out[1:])
  return out


def _encode(source: Sequence[Example], keys: tuple[str, ...], start: int, stop: int,
            dtype: np.dtype) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """Examples [start, stop) of source -> per key (lengths int64 [m], ids of dtype, joined)."""
  examples = read_examples(source, range(start, stop))
  out = {}
  for k in keys:
    seqs = [np.asarray(ex[k]) for ex in examples]
    lengths = np.array([len(s) for s in seqs], np.int64)
    ids = np.concatenate(seqs) if seqs else np.zeros(0, np.int64)
    if ids.size and (ids.min() < 0 or ids.max() > np.iinfo(dtype).max):
      raise RunError(f"Token ids of {k!r} outside [0, {np.iinfo(dtype).max}] in examples "
                      f"{start}-{stop}; the tokenizer's vocabulary does not match its ids.")
    out[k] = (lengths, ids.astype(dtype))
  return out


# ---- on disk ----

def store_key(prepared: Mapping[str, Any], split: str, reading: Mapping[str, Any],
              tokenizer: bytes) -> dict[str, Any]:
  """What a store is a store of: the prepared data (`prepared_identity`), the split, how its
  examples are read (fields, views) and the tokenizer file's bytes (as a hash)."""
  return {"format": FORMAT, "prepared": dict(prepared), "split": split,
          "reading": dict(reading), "tokenizer": hashlib.sha256(tokenizer).hexdigest()}


def prepared_identity(directory: str, split: str) -> dict[str, Any]:
  """A prepared TFDS dataset's split as files (local or gs://): its dataset_info.json (hashed)
  and the split's files with their sizes and modification times. Preparing it again changes
  it."""
  info = storage.join(directory, "dataset_info.json")
  digest = (hashlib.sha256(storage.as_path(info).read_bytes()).hexdigest()
            if storage.as_path(info).exists() else "")
  base = split.partition("[")[0]  # a sliced split ('train[:90%]') reads its split's files
  files = [[os.path.basename(f), *storage.size_and_mtime(f)]
           for f in storage.glob_files(storage.join(directory, f"*-{base}.*"))]
  home = os.path.abspath(directory) if storage.is_local(directory) else directory
  return {"directory": home, "dataset_info": digest, "files": files}


def _name(key: Mapping[str, Any]) -> str:
  digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
  return f"{key.get('split', 'split')}-{digest}"


def _writable_dir(path: str) -> bool:
  try:
    os.makedirs(path, exist_ok=True)
  except OSError:
    return False
  return os.access(path, os.W_OK | os.X_OK)


def _places(home: Optional[str], key: Mapping[str, Any]) -> list[str]:
  """Where the store may lie: beside a local prepared dataset (home/tokens/NAME), then in
  the cache (cache_root()/NAME)."""
  local = [os.path.join(home, "tokens", _name(key))] if home and "://" not in home else []
  try:
    return local + [os.path.join(cache_root(), _name(key))]
  except ConfigError:  # a cache that is a URL: refused only where a store must go there
    if local:
      return local
    raise


def store_path(home: Optional[str], key: Mapping[str, Any]) -> str:
  """Where the store is built: home/tokens/NAME where home is local and writable, else the
  cache's (cache_root()/NAME)."""
  if home and "://" not in home and _writable_dir(os.path.join(home, "tokens")):
    return os.path.join(home, "tokens", _name(key))
  root = cache_root()
  if not _writable_dir(root):
    raise RunError(f"Neither {home}/tokens nor {root} can be written, so the tokenized split "
                    f"has nowhere to go; set {CACHE_ENV} to a writable local directory.")
  return os.path.join(root, _name(key))


def open_or_build(source: Sequence[Example], keys: Sequence[str], *, vocab_size: int,
                  key: Mapping[str, Any], home: Optional[str], description: str,
                  workers: Optional[int] = None) -> TokenStore:
  """The store of `source` under `key`: opened if built and intact wherever it lies (beside
  the dataset, read-only or not, or in the cache), else built (once, by one process) where
  it can be written, and opened. `source` is random access to examples {KEY: int ids,
  'origin': ...} (it must pickle, for the worker processes, when it is large)."""
  keys = tuple(keys)
  for place in _places(home, key):
    store = _try_open(place, key, keys, source)
    if isinstance(store, TokenStore):
      return store
  path = store_path(home, key)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with filelock.FileLock(path + ".lock"):
    store = _try_open(path, key, keys, source)  # built (or mended) while this one waited
    if isinstance(store, TokenStore):
      return store
    if store is not None:  # damaged: set aside under the lock, so no reader races a rebuild
      logging.warning("The token store %s is damaged (%s); it is built again.", path, store)
      _remove(path)
    _remove_dead_builds(os.path.dirname(path))
    _build(source, keys, vocab_size, key, path, description, workers)
    store = _try_open(path, key, keys, source)
  if not isinstance(store, TokenStore):
    raise RunError(f"The token store {path} was built but does not read back ({store}); "
                   "check the disk it is on and rerun.")
  return store


_HOST = socket.gethostname()


def _temp_name(path: str) -> str:
  """A build's temporary directory beside `path`: PATH.tmp-HOST-PID-RANDOM (who builds it)."""
  return f"{path}.tmp-{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _remove_dead_builds(directory: str) -> None:
  """Removes the temporary directories in `directory` of builds whose process is gone (killed
  with SIGKILL, they stay for good): those of this host (or of an older name without one,
  PATH.tmp-PID-RANDOM) whose PID runs no more. Another host's are left: its PIDs are not
  this host's to ask."""
  with contextlib.suppress(OSError):
    for name in os.listdir(directory):
      owner = name.rpartition(".tmp-")[2].split("-") if ".tmp-" in name else []
      if len(owner) < 2 or not owner[-2].isdigit():
        continue
      host = "-".join(owner[:-2])
      if host in ("", _HOST) and not _alive(int(owner[-2])):
        logging.info("Removing %s, left by a build that was killed.", name)
        shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except OSError:  # another user's process: it runs
    return True
  return True


def _try_open(path: str, key: Mapping[str, Any], keys: tuple[str, ...],
              origins: Sequence[Example]) -> Union[TokenStore, str, None]:
  """The store at path; None where there is none; what is wrong, in words, where it does not
  read back as written (a file cut short, altered or missing, another key). Any other error
  (the disk's, the permissions') is raised: it says nothing of the store."""
  if not os.path.lexists(path):
    return None
  if not os.path.isdir(path):
    return "it is not a directory"
  if not os.path.lexists(os.path.join(path, META)):
    return None
  try:
    return _open(path, key, keys, origins)
  except (_Damaged, ValueError, KeyError, TypeError, FileNotFoundError, IsADirectoryError,
          NotADirectoryError) as e:  # the last two: a file where a directory is, or back
    return f"{type(e).__name__}: {e}"


def _open(path: str, key: Mapping[str, Any], keys: tuple[str, ...],
          origins: Sequence[Example]) -> TokenStore:
  with open(os.path.join(path, META)) as f:
    meta = json.load(f)
  if meta.get("key") != json.loads(json.dumps(key)):
    raise _Damaged("its key is not this split's")
  ids, offsets, mapped = {}, {}, []
  for k in keys:
    for part, target in (("ids", ids), ("offsets", offsets)):
      name = f"{k}.{part}"
      spec = meta["files"][name]
      file = os.path.join(path, name)
      dtype = np.dtype(spec["dtype"])
      if os.path.getsize(file) != spec["length"] * dtype.itemsize:
        raise _Damaged(f"{name} holds {os.path.getsize(file)} bytes, not "
                        f"{spec['length'] * dtype.itemsize}")
      if _sha1(file) != spec["sha1"]:
        raise _Damaged(f"{name} does not match its checksum")
      # A plain ndarray over the map: memmap's own __getitem__ costs a Python call a gather.
      # (An empty file cannot be mapped: no tokens is an empty array.)
      target[k] = np.memmap(file, dtype, mode="r", shape=(spec["length"],)).view(np.ndarray) \
          if spec["length"] else np.zeros(0, dtype)
      if spec["length"]:
        stat = os.stat(file)
        mapped.append((file, stat.st_dev, stat.st_ino, stat.st_size))
  n = meta["examples"]
  for k in keys:
    if len(offsets[k]) != n + 1 or offsets[k][-1] != len(ids[k]):
      raise _Damaged(f"{k}'s offsets do not cover its ids")
  return TokenStore(keys, ids, offsets, origins=origins, path=path, _mapped=tuple(mapped))


def _sha1(file: str) -> str:
  h = hashlib.sha1()
  with open(file, "rb") as f:
    while chunk := f.read(_HASH_CHUNK):
      h.update(chunk)
  return h.hexdigest()


def _remove(path: str) -> None:
  """Moves path aside (readers that opened it keep their maps) and deletes it."""
  aside = f"{path}.damaged-{uuid.uuid4().hex[:8]}"
  with contextlib.suppress(OSError):
    os.rename(path, aside)
  if os.path.isdir(aside) and not os.path.islink(aside):
    shutil.rmtree(aside, ignore_errors=True)
  else:  # a file (or a link) where the store's directory belongs
    with contextlib.suppress(OSError):
      os.unlink(aside)


@contextlib.contextmanager
def _naming(file: str) -> Iterator[None]:
  """An OSError that names no file (a buffered write's, a flush's) raised naming `file`: a
  full disk is then said as the store's disk, not the workdir's."""
  try:
    yield
  except OSError as e:
    if e.filename is None:
      raise OSError(e.errno, e.strerror or str(e), file) from e
    raise


def _chunks(n: int, workers: int) -> list[tuple[int, int]]:
  size = min(65_536, max(2_048, -(-n // (8 * workers))))
  return [(s, min(s + size, n)) for s in range(0, n, size)]


def _encoded_chunks(source: Sequence[Example], keys: tuple[str, ...], dtype: np.dtype,
                    workers: int) -> Iterator[dict[str, tuple[np.ndarray, np.ndarray]]]:
  """Every chunk of the source encoded, in order: in `workers` processes where there are
  several (spawned, not forked: the parent may hold JAX's threads, which a fork would copy
  mid-state); what is left is cancelled if the caller stops early (an error)."""
  chunks = _chunks(len(source), workers)
  if workers <= 1:
    for start, stop in chunks:
      yield _encode(source, keys, start, stop, dtype)
    return
  pool = concurrent.futures.ProcessPoolExecutor(
      workers, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init,
      initargs=(source,))
  try:
    yield from pool.map(_worker_encode, [(keys, s, e, dtype) for s, e in chunks])
  finally:
    pool.shutdown(wait=True, cancel_futures=True)


_WORKER_SOURCE: Any = None


def _worker_init(source: Sequence[Example]) -> None:
  global _WORKER_SOURCE
  _WORKER_SOURCE = source


def _worker_encode(task: tuple) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  keys, start, stop, dtype = task
  return _encode(_WORKER_SOURCE, keys, start, stop, dtype)


def _workers(requested: Optional[int]) -> int:
  """The processes that tokenize: `requested` (None: one per core), never more than the cores
  (more would only share them, each paying its start)."""
  try:
    cores = len(os.sched_getaffinity(0))
  except AttributeError:  # not on Linux
    cores = os.cpu_count() or 1
  return min(requested or cores, cores)


def _build(source: Sequence[Example], keys: tuple[str, ...], vocab_size: int,
           key: Mapping[str, Any], path: str, description: str,
           workers: Optional[int]) -> None:
  """Tokenizes source into a temporary directory beside path, then renames it into place."""
  n, dtype = len(source), ids_dtype(vocab_size)
  workers = _workers(workers) if n >= _PARALLEL_FROM else 1
  logging.info("Tokenizing %s once (%d examples, %d process(es)) into %s.", description, n,
               workers, path)
  start = time.perf_counter()
  tmp = _temp_name(path)
  os.makedirs(tmp)
  try:
    written = _write_ids(source, keys, dtype, workers, tmp)
    meta = {"key": key, "examples": n, "description": description,
            "files": {name: {"dtype": (dtype.str if name.endswith(".ids") else "<i8"),
                             "length": length, "sha1": sha1}
                      for name, (length, sha1) in written.items()}}
    with _naming(os.path.join(tmp, META)), open(os.path.join(tmp, META), "w") as f:
      json.dump(meta, f, indent=1, sort_keys=True)
    try:
      os.rename(tmp, path)
    except OSError:  # another host built it first (a shared file system): theirs stands
      if not os.path.exists(os.path.join(path, META)):
        raise
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  size = sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path))
  ids = sum(length for name, (length, _) in written.items() if name.endswith(".ids"))
  logging.info("Tokenized %s: %s ids, %.1f MB, in %.1f s.", description, f"{ids:,}",
               size / 1e6, time.perf_counter() - start)


def _write_ids(source: Sequence[Example], keys: tuple[str, ...], dtype: np.dtype,
               workers: int, tmp: str) -> dict[str, tuple[int, str]]:
  """Every key's ids and offsets files of `source`, written into `tmp` and synced:
  {file name: (values written, sha1)}. A write that fails names its file (`_naming`)."""
  files: dict[str, Any] = {}
  try:
    for name in (f"{k}.{part}" for k in keys for part in ("ids", "offsets")):
      files[name] = open(os.path.join(tmp, name), "wb")
    hashes = {name: hashlib.sha1() for name in files}
    lengths_seen = {name: 0 for name in files}
    ends = dict.fromkeys(keys, 0)

    def write(name: str, array: np.ndarray) -> None:
      data = array.tobytes()
      with _naming(os.path.join(tmp, name)):
        files[name].write(data)
      hashes[name].update(data)
      lengths_seen[name] += len(array)

    for k in keys:
      write(f"{k}.offsets", np.zeros(1, "<i8"))
    with tqdm(total=len(source), unit="example", desc="tokenize",
              disable=not sys.stderr.isatty(), dynamic_ncols=True) as bar:
      for chunk in _encoded_chunks(source, keys, dtype, workers):
        for k in keys:
          lengths, ids = chunk[k]
          write(f"{k}.ids", ids)
          write(f"{k}.offsets", (ends[k] + np.cumsum(lengths)).astype("<i8"))
          ends[k] += int(lengths.sum())
        bar.update(len(chunk[keys[0]][0]))
    for name, f in files.items():
      with _naming(os.path.join(tmp, name)):
        f.flush()
        os.fsync(f.fileno())
        f.close()
  finally:
    for f in files.values():  # after an error: closed, without a flush that fails again
      with contextlib.suppress(OSError):
        f.close()
  return {name: (lengths_seen[name], hashes[name].hexdigest()) for name in files}
