"""The training order: grain's `MapDataset.range(n).shuffle(seed).repeat()`, an epoch at a time
in numpy.

Grain draws position i of epoch e as `index_shuffle(i, max_index=n - 1, seed=(seed + e) mod
2^32, rounds=4)`: a Simon-like Feistel cipher over the smallest even block of at least 16 bits
that holds n - 1, its round keys drawn from `std::seed_seq{seed}`, walked until the result is
below n (grain/_src/python/experimental/index_shuffle/index_shuffle.cc). Asked index by index
that costs grain a C++ call per position (about 3.5 s for an epoch of 682,724); here a whole
epoch is one vectorised pass (about 0.1 s). `tests/test_epoch_order.py` holds it equal to
grain's own order.
"""

from __future__ import annotations

import collections
import math
import threading

import numpy as np

_U32 = 0xFFFFFFFF


def seed_seq_words(seed: int, count: int) -> list[int]:
  """The `count` 32-bit words `std::seed_seq{seed}.generate` writes (C++ [rand.util.seedseq])."""
  n, v = count, [seed & _U32]
  words = [0x8B8B8B8B] * n
  t = 11 if n >= 623 else 7 if n >= 68 else 5 if n >= 39 else 3 if n >= 7 else (n - 1) // 2
  p = (n - t) // 2
  q = p + t
  m = max(len(v) + 1, n)

  def mix(x: int) -> int:
    return x ^ (x >> 27)

  for k in range(m):
    r1 = 1664525 * mix(words[k % n] ^ words[(k + p) % n] ^ words[(k - 1) % n]) & _U32
    r2 = r1 + (len(v) if k == 0 else k % n + v[k - 1] if k <= len(v) else k % n) & _U32
    words[(k + p) % n] = (words[(k + p) % n] + r1) & _U32
    words[(k + q) % n] = (words[(k + q) % n] + r2) & _U32
    words[k % n] = r2
  for k in range(m, m + n):
    r3 = 1566083941 * mix((words[k % n] + words[(k + p) % n] + words[(k - 1) % n]) & _U32) & _U32
    r4 = (r3 - k % n) & _U32
    words[(k + p) % n] ^= r3
    words[(k + q) % n] ^= r4
    words[k % n] = r4
  return words


def _encrypt(x: np.ndarray, keys: list[int], half: int) -> np.ndarray:
  """One pass of the cipher over uint64 values, words of `half` bits (as std::bitset<half>).
  The words are computed in uint32 where they fit (every block up to 32 bits): half the
  memory traffic of uint64."""
  word = np.uint32 if half <= 16 else np.uint64
  mask = word((1 << half) - 1)

  def rotl(v: np.ndarray, r: int) -> np.ndarray:
    return ((v << word(r)) | (v >> word(half - r))) & mask

  def f(v: np.ndarray) -> np.ndarray:
    return (rotl(v, 1) & rotl(v, 8)) ^ rotl(v, 2)

  left = ((x >> np.uint64(half)) & np.uint64((1 << half) - 1)).astype(word)
  right = (x & np.uint64((1 << half) - 1)).astype(word)
  for k1, k2 in zip(keys[::2], keys[1::2]):
    left ^= f(right)
    left ^= word(k1) & mask
    right ^= f(left)
    right ^= word(k2) & mask
  return (left.astype(np.uint64) << np.uint64(half)) | right.astype(np.uint64)


def index_shuffle(indices: np.ndarray, max_index: int, seed: int, rounds: int = 4) -> np.ndarray:
  """grain's index_shuffle of each of `indices` (each in [0, max_index]), as int64."""
  indices = np.asarray(indices, np.int64)
  if max_index == 0:
    return np.zeros_like(indices)
  block = math.ceil(math.log2(max_index))
  block = max(block + block % 2, 16)
  half = 32 if block > 62 else block // 2
  keys = seed_seq_words(seed & _U32, rounds)
  if block <= _TABLE_BITS:
    return _walk_by_table(indices, max_index, keys, half)
  out = _encrypt(indices.astype(np.uint64), keys, half)
  bad = np.flatnonzero(out > np.uint64(max_index))
  while bad.size:  # cycle-walking: encrypt again until the value is in range
    out[bad] = _encrypt(out[bad], keys, half)
    bad = bad[out[bad] > np.uint64(max_index)]
  return out.astype(np.int64)


# The smallest block (16 bits) is walked through a table of the whole cipher. Why: a small
# split still gets a 16-bit block, so a walk from one index may take thousands of steps
# (65,536 / n on average); a larger block holds at most 4n values and walks in a few passes.
_TABLE_BITS = 16


def _walk_by_table(indices: np.ndarray, max_index: int, keys: list[int],
                   half: int) -> np.ndarray:
  """The cycle walk of each index, through the cipher's table over its whole block: `stay`
  maps a value in range to itself and any other to its successor, and squaring it (stay o
  stay, ...) once per bit of the block reaches the first value in range of any walk (a walk
  is at most the block's size long: the cipher is a permutation whose cycles hold their start)."""
  domain = np.arange(1 << (2 * half), dtype=np.int64)
  table = _encrypt(domain.astype(np.uint64), keys, half).astype(np.int64)
  stay = np.where(domain <= max_index, domain, table)
  for _ in range(2 * half):
    stay = stay[stay]
  # Bits above the block are dropped, as std::bitset does: with n - 1 = 2^16 exactly (a block
  # too small for it), grain's index n - 1 walks as index 0 does.
  return stay[table[indices & (len(domain) - 1)]]


class EpochOrder:
  """order[q] for any q >= 0: the example at position q of the endless shuffled stream
  (epoch q // n reshuffled with seed + epoch). The last few epochs' permutations are kept,
  so a stream that reads an epoch's positions in order computes each epoch once."""

  def __init__(self, n: int, seed: int):
    if n <= 0:
      raise ValueError(f"An order over {n} examples.")
    self.n, self.seed = int(n), int(seed)
    self._epochs: collections.OrderedDict[int, np.ndarray] = collections.OrderedDict()
    # At least 3 epochs, more of a small split (a packed lane's window of examples may span
    # many of its epochs), at most about 32 MB of them.
    self._keep = max(3, min(64, (1 << 22) // self.n))
    self._lock = threading.Lock()  # a prefetch thread and the caller may both ask

  def epoch(self, e: int) -> np.ndarray:
    """The permutation of epoch e: int64 [n]."""
    with self._lock:
      if e in self._epochs:
        self._epochs.move_to_end(e)
        return self._epochs[e]
    perm = index_shuffle(np.arange(self.n), self.n - 1, (self.seed + e) % 2 ** 32)
    with self._lock:
      self._epochs[e] = perm
      while len(self._epochs) > self._keep:
        self._epochs.popitem(last=False)
    return perm

  def __getitem__(self, positions: np.ndarray) -> np.ndarray:
    """Example indices at `positions` (int array of any shape), int64."""
    positions = np.asarray(positions, np.int64)
    epochs, within = np.divmod(positions, self.n)
    if positions.size and epochs.min() == epochs.max():  # one epoch: most batches
      return self.epoch(int(epochs.flat[0]))[within]
    out = np.empty_like(positions)
    for e in np.unique(epochs):
      where = epochs == e
      out[where] = self.epoch(int(e))[within[where]]
    return out
