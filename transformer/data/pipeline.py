"""Grain input pipelines over TFDS data sources (array_record, no TensorFlow).

`get_datasets(config, workdir=...)` gives host-local numpy batches: every process draws the
same global batches of example indices and reads only its own batch_size // process_count
rows of each, so the stream does not depend on the process count and no two processes read
one example. Train: shuffled (seeded, reshuffled every epoch), repeated forever, checkpointable
iterator; packed when config.packing is 'pack' or 'concat' (packing.PackedBatches, the same
property). Eval: every example exactly once, one a row, the last batch topped up with
all-zero rows (zero tokens = zero weight), the same number of batches on every process so
that a multi-host jitted eval step never waits on a process that has run out.

A dataset is a name in SOURCES (synthetic, text_files, parallel_text) or a standard TFDS
name (text.STANDARD) -> Sources: two random-access splits of id examples plus the tokenizer.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import grain
import ml_collections
import numpy as np

from transformer import model_kinds, storage
from transformer.data import packing, settings, synthetic, text
from transformer.data.packing import PadBatch
from transformer.data.prepared import read_examples
from transformer.data.tokenizer import (ByteTokenizer, SentencePieceTokenizer,
                                        SyntheticTokenizer, Tokenizer, check_sentencepiece_size,
                                        get_tokenizer, save_to_workdir)
from transformer.errors import ConfigError

Batch = dict[str, np.ndarray]
Example = Mapping[str, Any]
@dataclasses.dataclass(frozen=True)
class Sources:
  """What a dataset provides: random-access splits of id examples and their tokenizer."""
  train: Sequence[Example]
  eval: Sequence[Example]
  tokenizer: Tokenizer
  keys: tuple[str, ...] = ("inputs", "targets")
  test: Optional[Sequence[Example]] = None  # held out for reporting (config.test_fraction)


def _synthetic_sources(config: ml_collections.ConfigDict, workdir: str | None) -> Sources:
  s = config.synthetic
  kwargs = {k: s[k] for k in ("vocab_size", "min_len", "max_len", "digits", "num_train",
                              "num_eval", "seed") if k in s}
  builder = synthetic.build_synthetic(config.get("tfds_data_dir"), task=s.task, **kwargs)
  tokenizer = SyntheticTokenizer(s.task, builder.builder_config.vocab_size)
  if workdir:
    save_to_workdir(tokenizer, workdir)  # decoding reads every run's tokenizer the same way
  return Sources(train=builder.as_data_source("train"), eval=builder.as_data_source("validation"),
                 tokenizer=tokenizer)


def _text_sources(config: ml_collections.ConfigDict, workdir: str | None) -> Sources:
  splits = text.open_splits(config)
  tokenizer = get_tokenizer(
      config.tokenizer, workdir=workdir, corpus_name=f"the train split of {splits.name}",
      train_texts=lambda: text.training_texts(splits, config.tokenizer.train_examples,
                                              text.split_seed(config)))
  return Sources(
      train=text.TokenizedSource(splits.train, splits.fields, tokenizer, f"{splits.name} train"),
      eval=text.TokenizedSource(splits.eval, splits.fields, tokenizer, f"{splits.name} eval"),
      tokenizer=tokenizer, keys=tuple(splits.fields),
      test=None if splits.test is None else
      text.TokenizedSource(splits.test, splits.fields, tokenizer, f"{splits.name} test"))


SourcesFn = Callable[[ml_collections.ConfigDict, Optional[str]], Sources]
SOURCES: dict[str, SourcesFn] = {
    "synthetic": _synthetic_sources,
    "text_files": _text_sources,
    "parallel_text": _text_sources,
}


def _sources(config: ml_collections.ConfigDict, workdir: str | None) -> Sources:
  if config.dataset in SOURCES:
    return SOURCES[config.dataset](config, workdir)
  if text.is_standard(config.dataset):
    return _text_sources(config, workdir)
  raise ConfigError(f"Unknown dataset {config.dataset!r}; known datasets: "
                   f"{', '.join(sorted(SOURCES) + list(text.STANDARD))} (any "
                   "wmtNN_translate/xx-yy too).")


class ReadBatch:
  """Example indices -> padded batch: one bulk read, then PadBatch. Indices < 0 = zero rows."""

  def __init__(self, source: Sequence[Example], pad: PadBatch):
    self.source, self.pad = source, pad

  def __call__(self, indices: Sequence[int]) -> Batch:
    return self.pad(read_examples(self.source, [i for i in indices if i >= 0]))


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


def _ceil_div(a: int, b: int) -> int:
  return -(-a // b)


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
  _train: grain.IterDataset = dataclasses.field(repr=False)
  _eval: grain.IterDataset = dataclasses.field(repr=False)
  _test: Optional[grain.IterDataset] = dataclasses.field(default=None, repr=False)
  _train_source: Sequence[Example] = dataclasses.field(default=(), repr=False)

  def train_iter(self) -> grain.DatasetIterator:
    """A fresh iterator from the start; checkpoint it with get_state()/set_state()."""
    return iter(self._train)

  def eval_batches(self) -> Iterable[Batch]:
    """Re-iterable: each pass yields the same num_eval_batches batches."""
    return self._eval

  def count_train_tokens(self) -> int:
    """Tokens of the whole train split (every key, EOS included), read and tokenized once:
    with packing='concat' a training step consumes batch_size * max_len of them."""
    source, total = self._train_source, 0
    for start in range(0, len(source), 1024):  # in bulk: tokenizers encode batches faster
      examples = read_examples(source, range(start, min(start + 1024, len(source))))
      total += sum(len(ex[k]) for ex in examples for k in self.input_key_names)
    return total

  def test_batches(self) -> Optional[Iterable[Batch]]:
    """The test split's batches, like eval_batches(); None without one (test_fraction = 0)."""
    return self._test

  def decode_ids(self, ids: Any) -> str:
    """Human-readable text of one id sequence (stops at EOS), for logs."""
    return self.tokenizer.decode(ids)


def get_datasets(config: ml_collections.ConfigDict, *, workdir: str | None = None,
                 process_index: int | None = None,
                 process_count: int | None = None) -> Datasets:
  """Builds the pipelines of config.dataset for this process.

  Reads config.dataset and its options (synthetic.*, data_files, eval_files, text_split,
  eval_fraction, source_lang, target_lang, train_split, eval_split, tokenizer.*),
  tfds_data_dir, batch_size (global), max_len (row length), seed, model_type, and optionally
  packing (default 'none'), data_threads (reader threads, default 2) and data_prefetch
  (batches buffered, default 4). A text dataset's tokenizer is loaded from, or trained and
  saved into, workdir (or tokenizer.path); the synthetic one is saved there too.
  """
  mode = config.get("packing") or "none"
  if mode not in packing.PACKING_MODES:
    raise ConfigError(f"packing={mode!r} is not one of {list(packing.PACKING_MODES)}.")
  if process_index is None or process_count is None:
    import jax  # only here, so the data code never initialises a backend it does not need
    process_index = jax.process_index() if process_index is None else process_index
    process_count = jax.process_count() if process_count is None else process_count
  if not 0 <= process_index < process_count:
    raise ConfigError(f"process_index={process_index} is outside [0, {process_count}).")
  if config.batch_size <= 0 or config.batch_size % process_count:
    raise ConfigError(f"batch_size={config.batch_size} must be a positive multiple of the "
                     f"process count {process_count}; set batch_size to a multiple of it.")
  local_batch = config.batch_size // process_count
  sources = _as_the_kind_reads(config, _sources(config, workdir))
  num_train, num_eval = len(sources.train), len(sources.eval)
  if num_train < process_count:
    raise ConfigError(f"Dataset {config.dataset!r} has {num_train} train examples, fewer than "
                     f"the {process_count} processes; use a larger dataset.")
  read = grain.ReadOptions(num_threads=settings.read_setting(config, "data_threads"),
                           prefetch_buffer_size=settings.read_setting(config, "data_prefetch"))
  # Each process's rows of every global batch (lanes): see _train_batches and _in_order.
  lanes = range(process_index * local_batch, (process_index + 1) * local_batch)
  train = _train_batches(config, sources, mode, lanes, read)
  evaluation, num_batches = _in_order(config, sources, sources.eval, lanes, read)
  test = None if sources.test is None else _in_order(config, sources, sources.test, lanes,
                                                     read)[0]
  return Datasets(vocab_size=sources.tokenizer.vocab_size, num_train_examples=num_train,
                  num_eval_examples=num_eval, num_eval_batches=num_batches,
                  batch_size=local_batch, max_len=config.max_len,
                  input_key_names=sources.keys, tokenizer=sources.tokenizer, packing=mode,
                  _train=train, _eval=evaluation, _test=test, _train_source=sources.train)


def _as_the_kind_reads(config: ml_collections.ConfigDict, sources: Sources) -> Sources:
  """The sources as config.model_type's batches hold them (`model_kinds`): one line for a kind
  that reads a row the data lacks; a pair read as one stream by a kind that reads one row."""
  if not config.get("model_type"):
    return sources
  kind = model_kinds.get(config.model_type)
  kind.check_rows(sources.keys, config.dataset)
  if set(sources.keys) == set(kind.batch_keys):
    return sources
  return dataclasses.replace(
      sources, train=ConcatForLM(sources.train), eval=ConcatForLM(sources.eval),
      test=None if sources.test is None else ConcatForLM(sources.test), keys=kind.batch_keys)


def _train_batches(config: ml_collections.ConfigDict, sources: Sources, mode: str,
                   lanes: range, read: grain.ReadOptions) -> Any:
  """The training stream of this process's rows.

  Pipelines run over example indices and read each batch in bulk (see ReadBatch). Global
  batches of indices are drawn identically on every process (same seed), and each process
  reads only its own rows of each: so the training stream is the same whatever the process
  count (a 2-host run sees the batches of a 1-host run), and processes never share an
  example. repeat() reshuffles every epoch; batches may straddle epochs.
  """
  train_pad = PadBatch(sources.keys, len(lanes), config.max_len)
  if mode == "none":
    rows = slice(lanes.start, lanes.stop)
    return (grain.MapDataset.range(len(sources.train))
            .shuffle(seed=config.seed).repeat()
            .batch(config.batch_size, drop_remainder=True)
            .map(lambda indices: indices[rows])
            .map(ReadBatch(sources.train, train_pad))
            .to_iter_dataset(read))
  # The same lanes (global rows), each filled from its own examples: see packing.py.
  return packing.PackedBatches(sources.train, train_pad, seed=config.seed,
                               global_rows=config.batch_size, lanes=lanes, mode=mode,
                               prefetch=settings.read_setting(config, "data_prefetch"))


# Eval and test examples are never cut into rows (each is scored from its start), whatever
# the training's packing: only a longer max_len keeps a long one whole.
_EVAL_REMEDY = ("raise max_len (eval and test examples are scored one a row, from their "
                "start, whatever the packing)")


def _in_order(config: ml_collections.ConfigDict, sources: Sources, source: Sequence[Example],
              lanes: range, read: grain.ReadOptions) -> tuple[grain.IterDataset, int]:
  """Eval (and test): global batches over the split in order, topped up with -1 (= zero
  rows); each process reads its rows, so every example is seen exactly once, on exactly one
  process. Returns the batches and their number."""
  num_batches = _ceil_div(len(source), config.batch_size)
  indices = np.full(num_batches * config.batch_size, -1, np.int64)
  indices[:len(source)] = np.arange(len(source))
  rows = indices.reshape(num_batches, config.batch_size)[:, lanes.start:lanes.stop]
  return (grain.MapDataset.source(rows)
          .map(ReadBatch(source, PadBatch(sources.keys, len(lanes), config.max_len,
                                          remedy=_EVAL_REMEDY)))
          .to_iter_dataset(read)), num_batches


def measure_throughput(config: ml_collections.ConfigDict, seconds: float, *,
                       workdir: str | None = None) -> dict[str, float]:
  """Host input pipeline alone: iterate train batches for `seconds`, count non-pad tokens.

  One process reading the whole global batch (process_count=1), no device work. Returns
  tokens_per_sec and batches_per_sec (non-pad tokens of every key, inputs and targets), plus
  batches, tokens, seconds, fill (non-pad fraction of the rows) and setup_seconds (dataset
  preparation, tokenizer, first batch; not in the rates).
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
  close = getattr(it, "close", None)
  if close:
    close()
  return {"tokens_per_sec": tokens / elapsed, "batches_per_sec": batches / elapsed,
          "batches": batches, "tokens": tokens, "seconds": elapsed,
          "fill": tokens / max(cells, 1), "setup_seconds": setup}
