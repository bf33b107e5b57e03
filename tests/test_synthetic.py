"""The synthetic TFDS tasks: determinism, EOS, correct targets, held-out split kept out of train."""

import logging
import pathlib

import numpy as np
import pytest

from conftest import read_only
from transformer import cli
from transformer.data import synthetic
from transformer.errors import ConfigError
from transformer.data.synthetic import SyntheticConfig
from transformer.token_ids import EOS_ID as EOS, NUM_RESERVED

SMALL = dict(vocab_size=8, min_len=1, max_len=6, num_train=200, num_eval=40, seed=0)


def _cfg(task, **kw):
  return SyntheticConfig.make(task=task, **{**SMALL, "digits": 3, **kw})


def _body(seq):
  """The sequence without its final EOS, as a list."""
  return [int(t) for t in seq[:-1]]


def _number(ids):
  assert ids and (ids[0] != NUM_RESERVED or len(ids) == 1), f"leading zero in {ids}"
  return int("".join(str(t - NUM_RESERVED) for t in ids))


def _mtimes(path):
  return {p.name: p.stat().st_mtime_ns for p in pathlib.Path(str(path)).iterdir()}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return tmp_path_factory.mktemp("tfds")


@pytest.mark.parametrize("task", synthetic.TASKS)
def test_deterministic_by_seed(task):
  a, b, c = synthetic.generate(_cfg(task)), synthetic.generate(_cfg(task)), synthetic.generate(
      _cfg(task, seed=1))
  for split in ("train", "validation"):
    for x, y in zip(a[split], b[split]):
      np.testing.assert_array_equal(x["inputs"], y["inputs"])
      np.testing.assert_array_equal(x["targets"], y["targets"])
  assert any(x["inputs"].tobytes() != z["inputs"].tobytes()
             for x, z in zip(a["train"], c["train"]))


@pytest.mark.parametrize("task", synthetic.TASKS)
def test_examples_are_eos_terminated_and_correct(task):
  cfg = _cfg(task)
  splits = synthetic.generate(cfg)
  assert [len(splits["train"]), len(splits["validation"])] == [200, 40]
  vocab = synthetic.vocab_size_for(task, cfg.vocab_size)
  for ex in splits["train"] + splits["validation"]:
    for seq in ex.values():
      assert seq.dtype == np.int32 and seq[-1] == EOS
      assert np.all(seq[:-1] >= NUM_RESERVED) and np.all(seq < vocab)  # no pad/eos/unk inside
    x, y = _body(ex["inputs"]), _body(ex["targets"])
    if task == "addition":
      plus = x.index(NUM_RESERVED + 10)
      a, b = _number(x[:plus]), _number(x[plus + 1:])
      assert max(a, b) < 10 ** cfg.digits and _number(y) == a + b
    else:
      assert SMALL["min_len"] <= len(x) <= SMALL["max_len"]
      assert y == {"copy": x, "reverse": x[::-1], "sort": sorted(x)}[task]


@pytest.mark.parametrize("task", synthetic.TASKS)
def test_validation_is_distinct_and_kept_out_of_train(task):
  # A tiny space (2 symbols, lengths 1..4: 30 inputs; addition 1 digit: 100) forces collisions.
  cfg = _cfg(task, vocab_size=2, min_len=1, max_len=4, num_eval=12, digits=1)
  splits = synthetic.generate(cfg)
  held_out = [ex["inputs"].tobytes() for ex in splits["validation"]]
  assert len(set(held_out)) == len(held_out)
  assert not set(held_out) & {ex["inputs"].tobytes() for ex in splits["train"]}


def test_too_small_space_and_bad_params_raise():
  with pytest.raises(ValueError, match="distinct inputs"):
    synthetic.generate(_cfg("copy", vocab_size=2, min_len=1, max_len=2, num_eval=4))
  with pytest.raises(ValueError, match="Unknown synthetic task"):
    _cfg("multiply")
  with pytest.raises(ValueError, match="max_len"):
    _cfg("copy", min_len=5, max_len=4)


def test_names_encode_params_and_vocab():
  assert _cfg("copy", vocab_size=32, min_len=4, max_len=16, num_train=10000,
              num_eval=500).name == "copy-v32-l4_16-n10000_500-s0"
  # Parameters addition ignores do not change its name.
  assert _cfg("addition", vocab_size=5).name == _cfg("addition").name == "addition-d3-n200_40-s0"
  assert synthetic.vocab_size_for("copy", 32) == 35
  assert synthetic.vocab_size_for("addition", 32) == 14


def test_to_text():
  assert synthetic.to_text([4, 5, 13, 12, 1, 0], "addition") == "12+9"
  assert synthetic.to_text(np.array([[3, 4, 2, 5, 1, 7]]), "copy") == "a b <unk> c"
  assert synthetic.to_text([3 + 60, 0, 0], "sort") == "#60"


@pytest.mark.parametrize("task", ["reverse", "addition"])
def test_builder_matches_generate_and_is_reused(data_dir, task, caplog, monkeypatch):
  # TFDS logs through absl's logger: its level is set here, since a test before this one in
  # the same process may have raised absl's verbosity (as the scripts' flags do), and the
  # scripts' filter is taken off it (a run_script before this test installed it).
  absl_logger = logging.getLogger("absl")
  monkeypatch.setattr(absl_logger, "filters",
                      [f for f in absl_logger.filters if f is not cli.known_tfds_chatter])
  with caplog.at_level(logging.INFO, logger="absl"):
    builder = synthetic.build_synthetic(data_dir, task=task, **SMALL)
  # One config per parameter set, by design: TFDS's "custom data configuration" warning says
  # nothing to act on, and the scripts' log filter drops it (importing transformer.data
  # changes no logger).
  chatter = [r for r in caplog.records if "custom data" in r.getMessage()]
  assert chatter and not any(cli.known_tfds_chatter(r) for r in chatter)
  mtimes = _mtimes(builder.data_path)
  expected = synthetic.generate(builder.builder_config)
  for split in ("train", "validation"):
    src = builder.as_data_source(split)
    got = sorted((ex["inputs"].tobytes(), ex["targets"].tobytes()) for ex in src)
    want = sorted((ex["inputs"].tobytes(), ex["targets"].tobytes()) for ex in expected[split])
    assert got == want  # TFDS reorders examples on write; the multiset is the same
  again = synthetic.build_synthetic(data_dir, task=task, **SMALL)
  assert again.data_path == builder.data_path
  assert _mtimes(again.data_path) == mtimes  # not regenerated


def test_a_dataset_not_prepared_in_a_read_only_tfds_dir_is_one_line(tmp_path):
  """TFDS's OSError on its downloads/ folder before: now what is missing and what to pass."""
  with read_only(tmp_path):
    with pytest.raises(ConfigError, match=rf"^The dataset reverse-\S+ is not prepared in its TFDS "
                       rf"directory and {tmp_path}\S* cannot be written \((Read-only file "
                       r"system|Permission denied)\); pass a --config.tfds_data_dir you can write "
                       "to"):
      synthetic.build_synthetic(str(tmp_path), task="reverse", **SMALL)
