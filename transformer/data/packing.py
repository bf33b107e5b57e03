"""Examples -> fixed-length rows: padding (one example a row) and packing (several a row).

`PadBatch` is the one place that writes rows. Unpacked, row r holds example r. Packed, row r
holds examples back to back, with `KEY_segmentation` (1, 2, ... per example, 0 = padding)
and `KEY_position` (0, 1, ... restarting at every example), which the models use so that
attention never crosses two examples.

`PackedBatches` packs the training stream so that it stays independent of the process count
and checkpointable. The global batch has `global_rows` rows, and each row index r is a *lane*:
lane r takes the examples at positions r, r + global_rows, r + 2 * global_rows, ... of the
seeded, reshuffled-every-epoch index order (unpacked, that is exactly row r of every global
batch) and fills its rows from them in order. A lane depends on nothing but its own examples,
so a process that owns lanes [a, b) reads only their examples (disjoint from every other
process) and its rows are the rows a one-process run puts at [a, b). The iterator state is
two integers per lane (next example, tokens of it already used): JSON, restored exactly.

Modes: 'pack' puts whole examples into a row while they fit (an example longer than max_len
is truncated, counted, and fills a row alone); 'concat' (language models, one key) cuts the
lane's concatenated examples into rows of exactly max_len tokens: nothing is truncated, and
the piece of an example that continues in the next row starts a new segment at position 0.
"""

from __future__ import annotations

import atexit
import collections
import math
import sys
import threading
import weakref
from typing import Any, Mapping, Sequence

import grain
import numpy as np
from absl import logging

from transformer.data.prepared import read_examples
from transformer.errors import ConfigError

Batch = dict[str, np.ndarray]
Example = Mapping[str, Any]  # KEY -> int32 [length]; optionally 'origin' -> where it came from
PACKING_MODES = ("none", "pack", "concat")


def _origin(ex: Example) -> str:
  origin = ex.get("origin")
  if isinstance(origin, bytes):
    origin = origin.decode("utf-8", "replace")
  return f" (first: {origin})" if origin else ""


class PadBatch:
  """The one place that batches and pads: examples -> {key: int32 [rows, max_len]}.

  Unpacked (`__call__`): one example a row. Missing rows and empty examples ({}) become
  all-zero rows. Packed (`packed`): a list of examples a row, plus segmentation and position.
  A sequence longer than max_len is truncated (its EOS is lost): counted in num_truncated,
  with one warning naming where the first came from and `remedy`, what would keep it whole.
  """

  def __init__(self, keys: Sequence[str], rows: int, max_len: int, *,
               remedy: str = "raise max_len (or use packing='concat' for a language model)"):
    self.keys, self.rows, self.max_len = tuple(keys), rows, max_len
    self.remedy = remedy
    self.num_truncated = 0
    self._lock = threading.Lock()  # grain calls this from its reader threads

  def __getstate__(self):  # picklable for grain worker processes (each then counts its own)
    return {k: v for k, v in self.__dict__.items() if k != "_lock"}

  def __setstate__(self, state):
    self.__dict__.update(state, _lock=threading.Lock())

  def __call__(self, examples: Sequence[Example]) -> Batch:
    """[rows, max_len] arrays for `keys`, row r = examples[r] (fewer examples: zero rows)."""
    return self._write([[ex] if ex else [] for ex in examples], packed=False)

  def packed(self, rows: Sequence[Sequence[Example]]) -> Batch:
    """Like __call__ with several examples a row, plus KEY_segmentation and KEY_position."""
    return self._write(rows, packed=True)

  def _write(self, rows: Sequence[Sequence[Example]], packed: bool) -> Batch:
    if len(rows) > self.rows:
      raise ValueError(f"PadBatch got {len(rows)} rows for {self.rows}.")
    names = [k for k in self.keys]
    if packed:
      names += [f"{k}_{s}" for k in self.keys for s in ("segmentation", "position")]
    batch = {k: np.zeros((self.rows, self.max_len), np.int32) for k in names}
    truncated, first = 0, None
    for r, row in enumerate(rows):
      for k in self.keys:
        at = 0
        for s, ex in enumerate(row, 1):
          seq = ex.get(k)
          if seq is None:
            continue
          if len(seq) > self.max_len:
            truncated += 1
            first = first or ex
            seq = seq[:self.max_len]
          n = len(seq)
          if at + n > self.max_len:
            raise ValueError(f"Packed row {r} overflows max_len={self.max_len} at key {k!r}.")
          batch[k][r, at:at + n] = seq
          if packed:
            batch[f"{k}_segmentation"][r, at:at + n] = s
            batch[f"{k}_position"][r, at:at + n] = np.arange(n)
          at += n
    if truncated:
      with self._lock:
        report = self.num_truncated == 0
        self.num_truncated += truncated
      if report:
        logging.warning("%d sequence(s) longer than max_len=%d were truncated in one batch, their "
                        "EOS lost%s; %s to keep them whole. Reported once; "
                        "PadBatch.num_truncated counts them.", truncated, self.max_len,
                        _origin(first), self.remedy)
    return batch


class PackedBatches(grain.IterDataset):
  """Packed train batches (this process's rows) over an endless shuffled index order.

  source: random access examples (KEY -> int32 [length], EOS included); pad: the PadBatch of
  this process's rows; lanes: the global row indices this process owns (rows of pad);
  prefetch: batches packed ahead in a background thread (0: none).
  """

  def __init__(self, source: Sequence[Example], pad: PadBatch, *, seed: int, global_rows: int,
               lanes: range, mode: str, prefetch: int = 0):
    super().__init__()
    if mode not in ("pack", "concat"):
      raise ConfigError(f"packing={mode!r} is not one of {list(PACKING_MODES)}.")
    if mode == "concat" and len(pad.keys) != 1:
      raise ConfigError("packing='concat' splits examples across rows, which only a language "
                       "model can train on (keys ('targets',)); use packing='pack' for a "
                       "seq2seq dataset, or model_type='lm'.")
    if len(lanes) != pad.rows:
      raise ValueError(f"{len(lanes)} lanes for {pad.rows} rows.")
    self.source, self.pad, self.mode = source, pad, mode
    self.global_rows, self.lanes, self.prefetch = global_rows, lanes, prefetch
    # The same order as the unpacked pipeline: reshuffled every epoch, endless.
    self.order = grain.MapDataset.range(len(source)).shuffle(seed=seed).repeat()

  def __iter__(self) -> grain.DatasetIterator:
    it = _PackedIterator(self)
    return _Prefetch(it, self.prefetch) if self.prefetch else it


class _Prefetch(grain.experimental.ThreadPrefetchDatasetIterator):
  """grain's thread prefetch (its state is that of the last batch handed out), closed at exit.

  Why: an open one left to interpreter shutdown has its thread killed mid-read (a C++
  'terminate called') and prints a traceback; atexit stops the thread while all still works.
  """

  def __init__(self, parent: grain.DatasetIterator, prefetch: int):
    super().__init__(parent, prefetch)
    atexit.register(_close_if_alive, weakref.ref(self))

  def close(self) -> None:
    if not sys.is_finalizing():
      super().close()


def _close_if_alive(ref: "weakref.ref[_Prefetch]") -> None:
  it = ref()
  if it is not None:
    it.close()


class _PackedIterator(grain.DatasetIterator):
  """State: per lane, the lane position of its next example and the tokens of it used."""

  def __init__(self, ds: PackedBatches):
    super().__init__()
    self._ds = ds
    n = len(ds.lanes)
    self._next = [0] * n
    self._used = [0] * n
    # Examples read ahead: _buffers[l][i] is the lane's example at position _next[l] + i.
    # Read-ahead only batches the reads; it never changes what is produced.
    self._buffers: list[collections.deque] = [collections.deque() for _ in range(n)]
    self._examples_per_row = 1.0

  def get_state(self) -> dict[str, Any]:
    return {"next": list(self._next), "used": list(self._used)}

  def set_state(self, state: Mapping[str, Any]) -> None:
    if len(state["next"]) != len(self._next):
      raise ConfigError(f"A packed iterator state for {len(state['next'])} rows cannot restore a "
                       f"process with {len(self._next)} rows; resume with the same process count "
                       "and batch_size.")
    self._next = [int(x) for x in state["next"]]
    self._used = [int(x) for x in state["used"]]
    for b in self._buffers:
      b.clear()

  def __next__(self) -> Batch:
    rows, taken = [], 0
    for lane in range(len(self._next)):
      row = self._concat_row(lane) if self._ds.mode == "concat" else self._pack_row(lane)
      taken += len(row)
      rows.append(row)
    self._examples_per_row = 0.9 * self._examples_per_row + 0.1 * taken / max(len(rows), 1)
    return self._ds.pad.packed(rows)

  def _pack_row(self, lane: int) -> list[Example]:
    """Whole examples while they fit (each counted at most max_len long)."""
    max_len, keys = self._ds.pad.max_len, self._ds.pad.keys
    row, used = [], dict.fromkeys(keys, 0)
    while True:
      ex = self._peek(lane)
      size = {k: min(len(ex[k]), max_len) for k in keys}
      if row and any(used[k] + size[k] > max_len for k in keys):
        return row
      row.append(ex)
      for k in keys:
        used[k] += size[k]
      self._advance(lane)

  def _concat_row(self, lane: int) -> list[Example]:
    """Exactly max_len tokens of the lane's concatenated examples."""
    (key,) = self._ds.pad.keys
    row, space = [], self._ds.pad.max_len
    while space:
      ex = self._peek(lane)
      rest = ex[key][self._used[lane]:]
      piece = rest[:space]
      row.append({key: piece, "origin": ex.get("origin")})
      space -= len(piece)
      if len(piece) == len(rest):
        self._advance(lane)
      else:
        self._used[lane] += len(piece)
    return row

  def _advance(self, lane: int) -> None:
    self._buffers[lane].popleft()
    self._next[lane] += 1
    self._used[lane] = 0

  def _peek(self, lane: int) -> Example:
    if not self._buffers[lane]:
      self._read_ahead()
    return self._buffers[lane][0]

  def _read_ahead(self) -> None:
    """One bulk read topping up every lane's buffer to about two rows' worth of examples.

    Why every lane: one read of many examples costs little more than one of a few (array_record
    reads in parallel, SentencePiece encodes a list at once), so lanes are refilled together.
    """
    ds = self._ds
    ahead = max(4, math.ceil(2 * self._examples_per_row) + 2)
    wanted: list[tuple[int, int]] = []  # (lane, example index)
    for l, buf in enumerate(self._buffers):
      for j in range(self._next[l] + len(buf), self._next[l] + ahead):
        wanted.append((l, int(ds.order[ds.lanes[l] + j * ds.global_rows])))
    examples = read_examples(ds.source, [i for _, i in wanted])
    for (l, _), ex in zip(wanted, examples):
      self._buffers[l].append(ex)
