"""Input pipelines: each split tokenized once into a token store, batches made from it in numpy.

`get_datasets(config, workdir=...)` gives host-local numpy batches: every process draws the
same global batches of example indices and reads only its own batch_size // process_count
rows of each, so the stream does not depend on the process count and no two processes read
one example. Train: shuffled (seeded, reshuffled every epoch, grain's order), repeated
forever, checkpointable iterator, made ahead in a background thread; packed when
config.packing is 'pack' or 'concat' (packing.TrainBatches, the same property). Eval: every
example exactly once, one a row, the last batch topped up with all-zero rows (zero tokens =
zero weight), the same number of batches on every process so that a multi-host jitted eval
step never waits on a process that has run out.

A dataset is a name in SOURCES (synthetic, text_files, parallel_text) or a standard TFDS
name (text.STANDARD) -> Sources: random-access splits of id examples, their tokenizer, and
where they were prepared. Each split is then read and tokenized once into a `token_store`
beside the prepared data (splits held only in memory get a store in memory), and every batch
is gathered from the store: the example reading, parsing and tokenizing that each batch used
to repeat is done once per dataset and tokenizer.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

import numpy as np

from transformer import model_kinds, storage
from transformer.data import fields, synthetic, text, token_store
from transformer.data.packing import InOrderBatches, PadBatch, TrainBatches
from transformer.data.prepared import read_examples
from transformer.data.token_store import TokenStore
from transformer.data.tokenizer import (SyntheticTokenizer, Tokenizer, get_tokenizer,
                                        save_to_workdir)
from transformer.errors import ConfigError

Batch = dict[str, np.ndarray]
Example = Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Prepared:
  """Where a dataset's splits were prepared, so that their token stores live beside them:
  `home`, its TFDS version directory; `splits`, each role's ('train', 'eval', 'test') split
  name there; `reading`, how examples are read from it (part of each store's key)."""
  home: str
  splits: Mapping[str, str]
  reading: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Sources:
  """What a dataset provides: random-access splits of id examples, their tokenizer, and
  where they were prepared (None: held in memory only)."""
  train: Sequence[Example]
  eval: Sequence[Example]
  tokenizer: Tokenizer
  keys: tuple[str, ...] = ("inputs", "targets")
  test: Optional[Sequence[Example]] = None  # held out for reporting (config.test_fraction)
  prepared: Optional[Prepared] = None


def _synthetic_sources(data: fields.Data, workdir: str | None) -> Sources:
  s = data.synthetic
  builder = synthetic.build_synthetic(data.tfds_data_dir,
                                      **{k: s[k] for k in synthetic.DEFAULTS if k in s})
  tokenizer = SyntheticTokenizer(builder.builder_config.task, builder.builder_config.vocab_size)
  if workdir:
    save_to_workdir(tokenizer, workdir)  # decoding reads every run's tokenizer the same way
  return Sources(train=builder.as_data_source("train"), eval=builder.as_data_source("validation"),
                 tokenizer=tokenizer,
                 prepared=Prepared(str(builder.data_dir), {"train": "train", "eval": "validation"},
                                   {"fields": "inputs, targets (ids)"}))


def _text_sources(data: fields.Data, workdir: str | None) -> Sources:
  splits = text.open_splits(data)
  tokenizer = get_tokenizer(
      data.tokenizer, workdir=workdir, corpus_name=f"the train split of {splits.name}",
      train_texts=lambda: text.training_texts(splits, data.tokenizer.train_examples,
                                              text.split_seed(data)))
  return Sources(
      train=text.TokenizedSource(splits.train, splits.fields, tokenizer, f"{splits.name} train"),
      eval=text.TokenizedSource(splits.eval, splits.fields, tokenizer, f"{splits.name} eval"),
      tokenizer=tokenizer, keys=tuple(splits.fields),
      test=None if splits.test is None else
      text.TokenizedSource(splits.test, splits.fields, tokenizer, f"{splits.name} test"),
      prepared=None if splits.home is None else
      Prepared(splits.home, splits.split_names, {"fields": dict(splits.fields), **splits.reading}))


SourcesFn = Callable[[fields.Data, Optional[str]], Sources]
SOURCES: dict[str, SourcesFn] = {
    "synthetic": _synthetic_sources,
    "text_files": _text_sources,
    "parallel_text": _text_sources,
}


def _sources(data: fields.Data, workdir: str | None) -> Sources:
  if data.dataset in SOURCES:
    return SOURCES[data.dataset](data, workdir)
  if text.is_standard(data.dataset):
    return _text_sources(data, workdir)
  raise ConfigError(f"Unknown dataset {data.dataset!r}; known datasets: "
                   f"{', '.join(sorted(SOURCES) + list(text.STANDARD))} (any "
                   "wmtNN_translate/xx-yy too).")


class ConcatForLM:
  """A seq2seq source read as a language-model source: {'targets': inputs ++ targets}."""

  def __init__(self, source: Sequence[Example]):
    self.source = source

  def __len__(self) -> int:
    return len(self.source)

  def _join(self, ex: Example) -> Example:
    joined = {"targets": np.concatenate([ex["inputs"], ex["targets"]])}
    if "origin" in ex:
      joined["origin"] = ex["origin"]
    return joined

  def __getitem__(self, i: int) -> Example:
    return self._join(self.source[i])

  def __getitems__(self, indices: Sequence[int]) -> list[Example]:
    return [self._join(ex) for ex in read_examples(self.source, indices)]


# The roles of a dataset's splits, each tokenized into a store of its own.
ROLES = ("train", "eval", "test")


@dataclasses.dataclass(frozen=True)
class Datasets:
  """Host-local train and eval batches of one dataset, and its tokenizer."""
  vocab_size: int  # the model vocabulary (reserved ids included) = tokenizer.vocab_size
  num_train_examples: int  # whole train split, all processes
  num_eval_examples: int  # whole eval split, all processes
  num_eval_batches: int  # per process; equal on every process
  batch_size: int  # host-local rows per batch
  max_len: int
  input_key_names: tuple[str, ...]  # 'inputs' and/or 'targets' (no packing keys)
  tokenizer: Tokenizer  # encode/decode of this dataset; saved in the workdir
  packing: str  # 'none', 'pack' or 'concat' (train batches only; eval is one example a row)
  _train: TrainBatches = dataclasses.field(repr=False)
  _eval: InOrderBatches = dataclasses.field(repr=False)
  _test: Optional[InOrderBatches] = dataclasses.field(default=None, repr=False)
  _train_store: Optional[TokenStore] = dataclasses.field(default=None, repr=False)

  def train_iter(self) -> Iterator[Batch]:
    """A fresh iterator from the start; checkpoint it with get_state()/set_state()."""
    return iter(self._train)

  def eval_batches(self) -> Iterable[Batch]:
    """Re-iterable: each pass yields the same num_eval_batches batches."""
    return self._eval

  def count_train_tokens(self) -> int:
    """Tokens of the whole train split (every key, EOS included), from its token store:
    with packing='concat' a training step consumes batch_size * max_len of them."""
    return self._train_store.num_tokens()

  def test_batches(self) -> Optional[Iterable[Batch]]:
    """The test split's batches, like eval_batches(); None without one (test_fraction = 0)."""
    return self._test

  def decode_ids(self, ids: Any) -> str:
    """Human-readable text of one id sequence (stops at EOS), for logs."""
    return self.tokenizer.decode(ids)


def get_datasets(config: Any, *, workdir: str | None = None,
                 process_index: int | None = None,
                 process_count: int | None = None) -> Datasets:
  """Builds the pipelines of the dataset `fields.of(config)` names, for this process.

  Reads every field of the data section (transformer.data.fields.Data): the dataset and its
  options, batch_size (global), max_len (row length), seed, model_type, packing, data_threads
  and data_prefetch. A text dataset's tokenizer is loaded from, or trained and saved into,
  workdir (or tokenizer.path); the synthetic one is saved there too.
  """
  data = fields.of(config)
  if process_index is None or process_count is None:
    import jax  # only here, so the data code never initialises a backend it does not need
    process_index = jax.process_index() if process_index is None else process_index
    process_count = jax.process_count() if process_count is None else process_count
  if not 0 <= process_index < process_count:
    raise ConfigError(f"process_index={process_index} is outside [0, {process_count}).")
  if data.batch_size <= 0 or data.batch_size % process_count:
    raise ConfigError(f"batch_size={data.batch_size} must be a positive multiple of the "
                     f"process count {process_count}; set batch_size to a multiple of it.")
  local_batch = data.batch_size // process_count
  sources = _as_the_kind_reads(data, _sources(data, workdir))
  num_train, num_eval = len(sources.train), len(sources.eval)
  if num_train < process_count:
    raise ConfigError(f"Dataset {data.dataset!r} has {num_train} train examples, fewer than "
                     f"the {process_count} processes; use a larger dataset.")
  stores = {role: _store(data, sources, role) for role in ROLES
            if getattr(sources, role) is not None}
  # Each process's rows of every global batch (lanes): see packing.TrainBatches, _in_order.
  lanes = range(process_index * local_batch, (process_index + 1) * local_batch)
  train = TrainBatches(PadBatch(stores["train"], local_batch, data.max_len),
                       seed=data.seed, global_rows=data.batch_size, lanes=lanes,
                       mode=data.packing, prefetch=data.data_prefetch)
  evaluation = _in_order(data, stores["eval"], lanes)
  test = _in_order(data, stores["test"], lanes) if "test" in stores else None
  return Datasets(vocab_size=sources.tokenizer.vocab_size, num_train_examples=num_train,
                  num_eval_examples=num_eval, num_eval_batches=len(evaluation),
                  batch_size=local_batch, max_len=data.max_len,
                  input_key_names=sources.keys, tokenizer=sources.tokenizer, packing=data.packing,
                  _train=train, _eval=evaluation, _test=test, _train_store=stores["train"])


def _store(data: fields.Data, sources: Sources, role: str) -> TokenStore:
  """The token store of split `role`: beside the prepared dataset (built there once), or in
  memory for splits that were never prepared as files (held in memory, or TFDS's mock data)."""
  source = getattr(sources, role)
  if sources.prepared is None or not storage.as_path(sources.prepared.home).is_dir():
    return token_store.from_examples(read_examples(source, range(len(source))), sources.keys,
                                     sources.tokenizer.vocab_size, origins=source)
  prepared = sources.prepared
  split = prepared.splits[role]
  key = token_store.store_key(token_store.prepared_identity(prepared.home, split), split,
                              {**prepared.reading, "keys": list(sources.keys)},
                              sources.tokenizer.to_bytes())
  return token_store.open_or_build(
      source, sources.keys, vocab_size=sources.tokenizer.vocab_size, key=key,
      home=prepared.home, description=f"the {split} split of {data.dataset}",
      workers=data.data_threads or None)


def _as_the_kind_reads(data: fields.Data, sources: Sources) -> Sources:
  """The sources as data.model_type's batches hold them (`model_kinds`): one line for a kind
  that reads a row the data lacks; a pair read as one stream by a kind that reads one row."""
  kind = model_kinds.get(data.model_type)
  kind.check_rows(sources.keys, data.dataset)
  if set(sources.keys) == set(kind.batch_keys):
    return sources
  prepared = sources.prepared and dataclasses.replace(
      sources.prepared, reading={**sources.prepared.reading, "joined": "inputs ++ targets"})
  return dataclasses.replace(
      sources, train=ConcatForLM(sources.train), eval=ConcatForLM(sources.eval),
      test=None if sources.test is None else ConcatForLM(sources.test), keys=kind.batch_keys,
      prepared=prepared)


# Eval and test examples are never cut into rows (each is scored from its start), whatever
# the training's packing: only a longer max_len keeps a long one whole.
_EVAL_REMEDY = ("raise max_len (eval and test examples are scored one a row, from their "
                "start, whatever the packing)")


def _in_order(data: fields.Data, store: TokenStore, lanes: range) -> InOrderBatches:
  """Eval (and test): global batches over the split in order, topped up with -1 (= zero
  rows); each process reads its rows, so every example is seen exactly once, on exactly one
  process."""
  num_batches = -(-len(store) // data.batch_size)
  indices = np.full(num_batches * data.batch_size, -1, np.int64)
  indices[:len(store)] = np.arange(len(store))
  rows = indices.reshape(num_batches, data.batch_size)[:, lanes.start:lanes.stop]
  return InOrderBatches(PadBatch(store, len(lanes), data.max_len, remedy=_EVAL_REMEDY), rows)


def measure_throughput(config: Any, seconds: float, *,
                       workdir: str | None = None) -> dict[str, float]:
  """Host input pipeline alone: iterate train batches for `seconds`, count non-pad tokens.

  One process reading the whole global batch (process_count=1), no device work. Returns
  tokens_per_sec and batches_per_sec (non-pad tokens of every key, inputs and targets), plus
  batches, tokens, seconds, fill (non-pad fraction of the rows) and setup_seconds (dataset
  preparation, tokenizer, token stores where not yet built, first batch; not in the rates).
  """
  start = time.perf_counter()
  datasets = get_datasets(config, workdir=workdir, process_index=0, process_count=1)
  it = datasets.train_iter()
  next(it)  # threads started, first reads done: the steady state is what is measured
  setup = time.perf_counter() - start
  batches = tokens = cells = 0
  start = time.perf_counter()
  while True:
    batch = next(it)
    for k in datasets.input_key_names:
      tokens += int(np.count_nonzero(batch[k]))
      cells += batch[k].size
    batches += 1
    elapsed = time.perf_counter() - start
    if elapsed >= seconds:
      break
  getattr(it, "close", lambda: None)()
  return {"tokens_per_sec": tokens / elapsed, "batches_per_sec": batches / elapsed,
          "batches": batches, "tokens": tokens, "seconds": elapsed,
          "fill": tokens / max(cells, 1), "setup_seconds": setup}
