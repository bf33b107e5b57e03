"""Checkpoint checksums: the same for a sharded array and its host copy, changed by one bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from test_manager import host, make_state
from transformer.checkpoint import checksums


def _reference(x: np.ndarray) -> list[int]:
  """[sum(w), sum(w * (i + 1))] mod 2^32 over the raw words w at flat index i, by hand."""
  words = x.reshape(-1).view({1: np.uint8, 2: np.uint16, 4: np.uint32}[x.dtype.itemsize])
  w = words.astype(np.uint64)
  i = np.arange(1, w.size + 1, dtype=np.uint64)
  return [int(w.sum() % 2**32), int((w * i % 2**32).sum() % 2**32)]


def test_checksums_are_the_formula_for_sharded_and_host_leaves_alike(mesh):
  state = make_state(mesh)
  sharded = checksums.checksums({"params": state.params})
  on_host = checksums.checksums({"params": host(state.params)})
  assert sharded == on_host
  assert set(sharded) == {"params/dense/kernel", "params/dense/bias", "params/embed",
                          "params/scale"}
  for name, leaf in (("params/dense/kernel", state.params["dense"]["kernel"]),
                     ("params/scale", state.params["scale"])):  # 32- and 16-bit words
    assert sharded[name] == _reference(np.asarray(leaf)), name


def test_one_flipped_bit_or_swapped_elements_change_the_checksum():
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  flipped = x.copy()
  flipped.view(np.uint32)[1, 2] ^= 1
  swapped = x.copy()
  swapped[0, 0], swapped[0, 1] = x[0, 1], x[0, 0]  # the same sum: the index weight sees it
  got = [checksums.checksums({"w": a})["w"] for a in (x, flipped, swapped)]
  assert got[0] != got[1] and got[0][0] == got[2][0] and got[0] != got[2]


def test_leaves_without_32_bit_words_and_booleans():
  tree = {"f64": np.ones(3, np.float64), "mask": jnp.array([True, False]), "i8": jnp.int8(-1)}
  got = checksums.checksums(tree)
  assert "f64" not in got  # jax would narrow it: not the saved words
  assert got["mask"] == [1, 1] and got["i8"] == [255, 255]


def test_verify_names_the_damaged_leaves_and_tolerates_missing_records(caplog):
  want = {"a": [1, 2], "b": [3, 4]}
  checksums.verify({"a": [1, 2], "b": [3, 4]}, want, "ckpt/1")
  with pytest.raises(ValueError, match=r"checksum mismatch in \['b'\]"):
    checksums.verify({"a": [1, 2], "b": [3, 5]}, want, "ckpt/1")
  checksums.verify({"a": [9, 9]}, None, "ckpt/1")  # no record: nothing to verify against
  assert checksums.path_str([jax.tree_util.DictKey("params"), jax.tree_util.GetAttrKey("w"),
                             jax.tree_util.SequenceKey(0)]) == "params/w/0"
