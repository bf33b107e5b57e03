"""Batches from a token store, in numpy: one example a row (padding) or several (packing).

`PadBatch` is the one place that writes rows. Unpacked, row r holds example r. Packed, row r
holds examples back to back, with `KEY_segmentation` (1, 2, ... per example, 0 = padding)
and `KEY_position` (0, 1, ... restarting at every example), which the models use so that
attention never crosses two examples.

`TrainBatches` packs the training stream so that it stays independent of the process count
and checkpointable. The global batch has `global_rows` rows, and each row index r is a *lane*:
lane r takes the examples at positions r, r + global_rows, r + 2 * global_rows, ... of the
seeded, reshuffled-every-epoch order (`epoch_order`; unpacked, that is exactly row r of every
global batch) and fills its rows from them in order. A lane depends on nothing but its own
examples, so a process that owns lanes [a, b) reads only their examples (disjoint from every
other process) and its rows are the rows a one-process run puts at [a, b). The iterator state
is two integers per lane (next example, tokens of it already used): JSON, restored exactly.
Every lane's row of a batch is found at once, with array operations over a window of each
lane's next examples (their lengths come from the store, no example is read to decide).

Modes: 'pack' puts whole examples into a row while they fit (an example longer than max_len
is truncated, counted, and fills a row alone); 'concat' (language models, one key) cuts the
lane's concatenated examples into rows of exactly max_len tokens: nothing is truncated, and
the piece of an example that continues in the next row starts a new segment at position 0.
"""

from __future__ import annotations

import dataclasses
import queue
import sys
import threading
import weakref
from typing import Any, Iterator, Mapping, Optional, Sequence

import grain
import numpy as np
from absl import logging

from transformer.data.epoch_order import EpochOrder
from transformer.data.token_store import TokenStore
from transformer.errors import ConfigError

Batch = dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Pieces:
  """Spans of examples placed in rows, one entry a piece: `count` ids of example `example`
  from its token `start`, written in row `row` from column `col`, as segment `segment`."""
  row: np.ndarray
  example: np.ndarray
  start: np.ndarray
  count: np.ndarray
  col: np.ndarray
  segment: np.ndarray


class PadBatch:
  """The one place that batches and pads a store's examples: -> {key: int32 [rows, max_len]}.

  Unpacked (`__call__`): one example a row; an index < 0 is an all-zero row. Packed
  (`packed`): pieces of examples a row, plus segmentation and position. A sequence longer
  than max_len is truncated (its EOS is lost): counted in num_truncated, with one warning
  naming where the first came from and `remedy`, what would keep it whole.
  """

  def __init__(self, store: TokenStore, rows: int, max_len: int, *,
               remedy: str = "raise max_len (or use packing='concat' for a language model)"):
    self.store, self.keys, self.rows, self.max_len = store, store.keys, rows, max_len
    self.remedy = remedy
    self.num_truncated = 0
    self._lock = threading.Lock()  # a prefetch thread and the caller may both write batches

  def __call__(self, indices: Sequence[int] | np.ndarray) -> Batch:
    """[rows, max_len] arrays for `keys`: row r = example indices[r] (< 0, or missing: zeros)."""
    indices = np.asarray(indices, np.int64)
    if len(indices) > self.rows:
      raise ValueError(f"PadBatch got {len(indices)} rows for {self.rows}.")
    rows = np.flatnonzero(indices >= 0)
    examples = indices[rows]
    pieces = {}
    for k in self.keys:
      count = np.minimum(self.store.lengths(k)[examples], self.max_len)
      zeros = np.zeros_like(rows)
      pieces[k] = Pieces(rows, examples, zeros, count, zeros, zeros + 1)
    return self._write(pieces, packed=False)

  def packed(self, pieces: Mapping[str, Pieces], *, split: bool = False) -> Batch:
    """Rows of pieces (Pieces per key), plus KEY_segmentation and KEY_position. `split`: the
    pieces may end before their example does by design (concat), which is no truncation."""
    return self._write(pieces, packed=True, split=split)

  def _write(self, pieces: Mapping[str, Pieces], packed: bool, split: bool = False) -> Batch:
    """Every key's pieces written with one gather from the store and one scatter into the
    flat rows (pieces come in row order, each row's from its first column on)."""
    self.store.check_intact()  # a file cut short under this job: one line, not a bus error
    cells = self.rows * self.max_len
    batch, truncated, first = {}, 0, None
    for k in self.keys:
      p = pieces[k]
      if not split:
        cut = np.flatnonzero(self.store.lengths(k)[p.example] > p.count)
        if cut.size:
          truncated += cut.size
          row_example = (int(p.row[cut[0]]), int(p.example[cut[0]]))
          first = row_example if first is None else min(first, row_example)
      ids = self.store.gather(k, self.store.offsets[k][p.example] + p.start, p.count)
      total = len(ids)
      starts = np.cumsum(p.count) - p.count  # each piece's first id in `ids`
      if total == cells:  # the pieces fill every cell, in order (concat): no scatter
        at, out = None, ids
      else:
        at = np.repeat(p.row * self.max_len + p.col - starts, p.count) + np.arange(total)
        out = np.zeros(cells, np.int32)
        out[at] = ids
      batch[k] = out.reshape(self.rows, self.max_len)
      if packed:
        for name, values in (("segmentation", np.repeat(p.segment.astype(np.int32), p.count)),
                             ("position", (np.arange(total) - np.repeat(starts, p.count)
                                           ).astype(np.int32))):
          if at is not None:
            values, scattered = np.zeros(cells, np.int32), values
            values[at] = scattered
          batch[f"{k}_{name}"] = values.reshape(self.rows, self.max_len)
    if packed:  # the keys first, then each key's segmentation and position
      batch = {name: batch[name] for name in [*self.keys, *(
          f"{k}_{s}" for k in self.keys for s in ("segmentation", "position"))]}
    if truncated:
      self._report(truncated, first[1])
    return batch

  def _report(self, truncated: int, first: int) -> None:
    with self._lock:
      report = self.num_truncated == 0
      self.num_truncated += truncated
    if report:
      origin = self.store.origin(first)
      logging.warning("%d sequence(s) longer than max_len=%d were truncated in one batch, their "
                      "EOS lost%s; %s to keep them whole. Reported once; "
                      "PadBatch.num_truncated counts them.", truncated, self.max_len,
                      f" (first: {origin})" if origin else "", self.remedy)


class InOrderBatches:
  """Re-iterable batches of fixed example indices (eval, test): rows [batches, rows] of
  example indices, -1 for a zero row; each pass yields the same batches."""

  def __init__(self, pad: PadBatch, rows: np.ndarray):
    self.pad, self.rows = pad, rows

  def __len__(self) -> int:
    return len(self.rows)

  def __iter__(self) -> Iterator[Batch]:
    for indices in self.rows:
      yield self.pad(indices)


class TrainBatches:
  """This process's training batches over the endless shuffled order: `iter()` gives a fresh,
  checkpointable iterator (get_state/set_state), made `prefetch` batches ahead in a thread.

  mode 'none': batch k's rows are the lanes' examples at positions k * global_rows + lane;
  'pack' and 'concat': each lane fills its rows from its own examples (module docstring).
  """

  def __init__(self, pad: PadBatch, *, seed: int, global_rows: int, lanes: range, mode: str,
               prefetch: int = 0):
    if len(lanes) != pad.rows:
      raise ValueError(f"{len(lanes)} lanes for {pad.rows} rows.")
    self.pad, self.mode, self.prefetch = pad, mode, prefetch
    self.global_rows, self.lanes = global_rows, lanes
    self.order = EpochOrder(len(pad.store), seed)

  def __iter__(self) -> grain.DatasetIterator:
    it = _RowIterator(self) if self.mode == "none" else _PackedIterator(self)
    return Prefetch(it, self.prefetch) if self.prefetch else it


class _RowIterator(grain.DatasetIterator):
  """One example a row. State: {'next_index': the next global batch}."""

  def __init__(self, batches: TrainBatches):
    super().__init__()
    self._b = batches
    self._lanes = np.arange(batches.lanes.start, batches.lanes.stop, dtype=np.int64)
    self._next = 0

  def get_state(self) -> dict[str, Any]:
    return {"next_index": self._next}

  def set_state(self, state: Mapping[str, Any]) -> None:
    self._next = int(state["next_index"])

  def __next__(self) -> Batch:
    b = self._b
    examples = b.order[self._next * b.global_rows + self._lanes]
    self._next += 1
    return b.pad(examples)


class _PackedIterator(grain.DatasetIterator):
  """State: per lane, the lane position of its next example and the tokens of it used."""

  def __init__(self, batches: TrainBatches):
    super().__init__()
    self._b = batches
    n = len(batches.lanes)
    self._lane = np.arange(batches.lanes.start, batches.lanes.stop, dtype=np.int64)
    self._next = np.zeros(n, np.int64)
    self._used = np.zeros(n, np.int64)
    self._window = 4  # examples looked at per lane; grows to what rows take

  def get_state(self) -> dict[str, Any]:
    return {"next": self._next.tolist(), "used": self._used.tolist()}

  def set_state(self, state: Mapping[str, Any]) -> None:
    if len(state["next"]) != len(self._next):
      raise ConfigError(f"A packed iterator state for {len(state['next'])} rows cannot restore a "
                       f"process with {len(self._next)} rows; resume with the same process count "
                       "and batch_size.")
    self._next = np.asarray(state["next"], np.int64)
    self._used = np.asarray(state["used"], np.int64)

  def __next__(self) -> Batch:
    if self._b.mode == "concat":
      return self._b.pad.packed(self._concat(), split=True)
    return self._b.pad.packed(self._pack())

  def _examples(self, window: int) -> np.ndarray:
    """int64 [lanes, window]: each lane's next `window` examples."""
    b = self._b
    steps = self._next[:, None] + np.arange(window)[None, :]
    return b.order[self._lane[:, None] + steps * b.global_rows]

  def _pack(self) -> dict[str, Pieces]:
    """Whole examples while they fit, each counted at most max_len long."""
    pad, max_len = self._b.pad, self._b.pad.max_len
    while True:
      examples = self._examples(self._window)
      sizes = {k: np.minimum(pad.store.lengths(k)[examples], max_len) for k in pad.keys}
      fits = np.ones(examples.shape, bool)
      for size in sizes.values():  # fitting is prefix-closed: sizes are >= 0
        fits &= np.cumsum(size, axis=1) <= max_len
      taken = np.maximum(fits.sum(axis=1), 1)
      if (taken < self._window).all():  # every row closed inside the window
        break
      self._window *= 2
    self._window = max(4, 2 * int(taken.max()))
    lane, j = np.nonzero(np.arange(examples.shape[1])[None, :] < taken[:, None])
    chosen = examples[lane, j]
    pieces = {}
    for k, size in sizes.items():
      col = np.cumsum(size, axis=1) - size
      pieces[k] = Pieces(lane, chosen, np.zeros_like(lane), size[lane, j], col[lane, j], j + 1)
    self._next += taken
    return pieces

  def _concat(self) -> dict[str, Pieces]:
    """Exactly max_len tokens of each lane's concatenated examples."""
    pad, max_len = self._b.pad, self._b.pad.max_len
    (key,) = pad.keys
    while True:
      examples = self._examples(self._window)
      rest = pad.store.lengths(key)[examples]
      rest[:, 0] -= self._used
      ends = np.cumsum(rest, axis=1)
      if (ends[:, -1] >= max_len).all():
        break
      self._window *= 2
    touched = (ends < max_len).sum(axis=1) + 1  # up to the first piece that reaches max_len
    self._window = max(4, 2 * int(touched.max()))
    lane, j = np.nonzero(np.arange(examples.shape[1])[None, :] < touched[:, None])
    col = (ends - rest)[lane, j]
    count = rest[lane, j]
    last = j == touched[lane] - 1
    count[last] = max_len - col[last]
    start = np.where(j == 0, self._used[lane], 0)
    finished = ends[np.arange(len(touched)), touched - 1] == max_len  # the last piece ends it
    last_start = np.where(touched == 1, self._used, 0)
    self._used = np.where(finished, 0, last_start + count[last])
    self._next += touched - 1 + finished
    return {key: Pieces(lane, examples[lane, j], start, count, col, j + 1)}


class Prefetch(grain.DatasetIterator):
  """Batches of `parent` made ahead in a background thread (`size` queued), so that the loop
  never waits on them; its state is that of the last batch handed out, restored exactly.

  Ours, not grain.experimental.ThreadPrefetchDatasetIterator: that one gives the same batches
  and states (tests/test_batch_identity.py passes with it) but, left open at interpreter exit,
  prints an ignored AttributeError from its buffer clearing (grain 0.2.18;
  tests/test_packing.py::test_a_prefetching_iterator_left_open_at_exit_prints_nothing).

  The thread stops when the iterator is closed, collected, or the interpreter exits (then
  while all still works: a daemon thread killed mid-batch at shutdown can print a traceback).
  """

  def __init__(self, parent: grain.DatasetIterator, size: int):
    super().__init__()
    self._inner, self._size = parent, size
    self._handed = parent.get_state()
    self._queue: Optional[queue.Queue] = None
    self._thread: Optional[threading.Thread] = None
    self._stop = threading.Event()
    self._stopper: Optional[weakref.finalize] = None

  def start_prefetch(self) -> None:
    if self._thread is not None:
      return
    self._stop = threading.Event()
    self._queue = queue.Queue(self._size)
    self._thread = threading.Thread(target=_fill, args=(self._inner, self._queue, self._stop),
                                    daemon=True, name="transformer-batches")
    # The thread holds no reference to this iterator: collecting it (or exiting) stops it.
    self._stopper = weakref.finalize(self, self._stop.set)
    self._thread.start()

  def __next__(self) -> Batch:
    self.start_prefetch()
    batch, state, error = self._queue.get()
    if error is not None:
      self._halt()
      raise error
    self._handed = state
    return batch

  def get_state(self) -> dict[str, Any]:
    return dict(self._handed)

  def set_state(self, state: Mapping[str, Any]) -> None:
    self._halt()
    self._inner.set_state(state)
    self._handed = self._inner.get_state()

  def _halt(self) -> None:
    """Stops the thread, drops what it made ahead and puts the parent back at the state of
    the last batch handed out."""
    if self._thread is None:
      return
    self._stopper.detach()
    self._stop.set()
    while self._thread.is_alive():
      try:
        self._queue.get(timeout=0.05)
      except queue.Empty:
        pass
    self._thread = None
    self._inner.set_state(self._handed)

  # Bound here: at interpreter exit grain's __del__ calls close after the module's globals
  # are gone (`sys` is None), and the AttributeError was printed as "Exception ignored".
  _finalizing = staticmethod(sys.is_finalizing)

  def close(self) -> None:
    if not self._finalizing():
      self._halt()


def _fill(parent: Iterator[Batch], out: queue.Queue, stop: threading.Event) -> None:
  """The thread: batches and their states into `out` until `stop` (looked at every 0.1 s
  while the queue is full)."""
  try:
    while not stop.is_set():
      item = (next(parent), parent.get_state(), None)
      while not stop.is_set():
        try:
          out.put(item, timeout=0.1)
          break
        except queue.Full:
          continue
  except BaseException as e:  # noqa: BLE001  (handed to the consumer, raised there)
    while not stop.is_set():
      try:
        out.put((None, None, e), timeout=0.1)
        return
      except queue.Full:
        continue

