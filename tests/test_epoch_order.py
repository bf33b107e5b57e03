"""The numpy order is grain's own: `MapDataset.range(n).shuffle(seed).repeat()`, position for
position, across epochs, for sizes around the cipher's block boundaries and edge seeds (the
cipher's round keys come from std::seed_seq: a wrong key schedule changes every order)."""

import grain
import numpy as np
import pytest

from transformer.data.epoch_order import EpochOrder


@pytest.mark.parametrize("n", [1, 2, 3, 10, 37, 255, 256, 257, 4097, 65535, 65536, 65537,
                               70_001, 300_007])
@pytest.mark.parametrize("seed", [0, 3, 2 ** 32 - 2])
def test_the_order_is_grains(n, seed):
  reference = grain.MapDataset.range(n).shuffle(seed=seed).repeat()
  order = EpochOrder(n, seed)
  # Three epochs of a small split; for a large one, samples of positions in three epochs (the
  # last crossing the seed's wrap past 2^32 - 1).
  positions = np.arange(3 * n) if n <= 4097 else np.concatenate(
      [e * n + np.random.default_rng(n).choice(n, 600, replace=False) for e in range(3)])
  assert order[positions].tolist() == [reference[int(q)] for q in positions]


def test_an_epoch_is_a_permutation_and_each_epoch_is_reshuffled():
  order = EpochOrder(1000, 7)
  first, second = order.epoch(0), order.epoch(1)
  assert sorted(first.tolist()) == sorted(second.tolist()) == list(range(1000))
  assert not np.array_equal(first, second)
  assert order[np.array([[999, 1000], [0, 2999]])].tolist() == [[first[999], second[0]],
                                                                [first[0], order.epoch(2)[999]]]

