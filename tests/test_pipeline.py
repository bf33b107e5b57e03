"""The grain pipelines: host sharding, padding, eval coverage, determinism, iterator state."""

import itertools
import json
import logging

import ml_collections
import numpy as np
import pytest

from transformer.data import pipeline, settings
from transformer.token_ids import EOS_ID
from transformer.data.pipeline import Sources
from transformer.data.tokenizer import SyntheticTokenizer

NUM_FAKE = 37  # odd, so shards and eval batches come out uneven


def _config(data_dir, **overrides):
  cfg = ml_collections.ConfigDict(dict(
      dataset="synthetic",
      synthetic=dict(task="reverse", vocab_size=8, min_len=1, max_len=6, num_train=200,
                     num_eval=50, seed=0),
      tfds_data_dir=str(data_dir), batch_size=8, max_len=8, seed=0))
  cfg.update(overrides)
  return cfg


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return tmp_path_factory.mktemp("tfds")


@pytest.fixture
def fake(monkeypatch):
  """A registered dataset whose example i has inputs [i + 3, EOS]: rows name their example."""
  def examples(n):
    return [{"inputs": np.array([i + 3, 1], np.int32), "targets": np.array([i + 3, i + 3, 1],
                                                                               np.int32)}
            for i in range(n)]
  monkeypatch.setitem(pipeline.SOURCES, "fake", lambda cfg, workdir: Sources(
      train=examples(NUM_FAKE), eval=examples(NUM_FAKE),
      tokenizer=SyntheticTokenizer("copy", NUM_FAKE)))
  return lambda **kw: _config(None, dataset="fake", **kw)


def _ids(batch):
  """Example ids of the non-zero rows (or packed segments) of a fake batch."""
  if "inputs_segmentation" in batch:
    return [int(t) - 3 for row, seg in zip(batch["inputs"], batch["inputs_segmentation"])
            for t, first in zip(row, np.diff(seg, prepend=0)) if first > 0]
  return [int(r[0]) - 3 for r in batch["inputs"] if r.any()]


def _take(it, n):
  return list(itertools.islice(it, n))


def _assert_same(xs, ys):
  assert len(xs) == len(ys)
  for x, y in zip(xs, ys):
    assert x.keys() == y.keys()
    for k in x:
      np.testing.assert_array_equal(x[k], y[k])


def test_synthetic_batches(data_dir, tmp_path):
  ds = pipeline.get_datasets(_config(data_dir), workdir=str(tmp_path), process_index=1,
                             process_count=2)
  assert (ds.vocab_size, ds.batch_size, ds.num_eval_examples) == (11, 4, 50)
  assert ds.tokenizer.vocab_size == 11 and ds.packing == "none"
  assert (tmp_path / "tokenizer.json").exists()  # decoding loads it like any other
  assert ds.input_key_names == ("inputs", "targets")
  for batch in _take(ds.train_iter(), 3) + list(ds.eval_batches()):
    assert set(batch) == {"inputs", "targets"}
    for row in itertools.chain(batch["inputs"], batch["targets"]):
      assert row.dtype == np.int32 and row.shape == (8,)
      n = int(np.count_nonzero(row))
      assert np.all(row[n:] == 0) and (n == 0 or row[n - 1] == EOS_ID)
    x, y = batch["inputs"][0], batch["targets"][0]
    k = int(np.count_nonzero(x)) - 1
    np.testing.assert_array_equal(y[:k], x[:k][::-1])  # reverse task
  assert ds.decode_ids([3, 4, 1, 0]) == "a b"


def test_default_process_is_jax_process(data_dir):
  ds = pipeline.get_datasets(_config(data_dir))
  assert ds.batch_size == 8 and ds.num_eval_batches == 7


def test_train_deterministic_by_seed_and_reshuffled_each_epoch(fake):
  first = pipeline.get_datasets(fake(batch_size=1), process_index=0, process_count=1)
  again = pipeline.get_datasets(fake(batch_size=1), process_index=0, process_count=1)
  other = pipeline.get_datasets(fake(batch_size=1, seed=1), process_index=0, process_count=1)
  a = _take(first.train_iter(), 2 * NUM_FAKE)
  _assert_same(a, _take(again.train_iter(), 2 * NUM_FAKE))
  ids = [i for b in a for i in _ids(b)]
  assert ids[:NUM_FAKE] != [i for b in _take(other.train_iter(), NUM_FAKE) for i in _ids(b)]
  epoch1, epoch2 = ids[:NUM_FAKE], ids[NUM_FAKE:]
  assert sorted(epoch1) == sorted(epoch2) == list(range(NUM_FAKE))  # each epoch: all once
  assert epoch1 != epoch2  # reshuffled


def test_processes_read_disjoint_rows_covering_the_split(fake):
  # 36 examples = 9 global batches of 4 (2 rows per process): one epoch, no straddling.
  per_process = []
  for p in range(2):
    ds = pipeline.get_datasets(fake(batch_size=4), process_index=p, process_count=2)
    per_process.append([_ids(b) for b in _take(ds.train_iter(), NUM_FAKE // 4)])
  first, second = ([i for rows in batches for i in rows] for batches in per_process)
  assert not set(first) & set(second)  # disjoint
  assert len(set(first + second)) == len(first + second) == NUM_FAKE - 1
  # The union of the two processes' rows is, batch by batch, what one process reads.
  alone = pipeline.get_datasets(fake(batch_size=4), process_index=0, process_count=1)
  assert [_ids(b) for b in _take(alone.train_iter(), NUM_FAKE // 4)] == [
      a + b for a, b in zip(*per_process)]


@pytest.mark.parametrize("count,batch_size,packing", [
    (1, 5, "none"), (1, 64, "none"), (2, 2, "none"), (2, 6, "pack"), (4, 16, "pack")])
def test_eval_covers_every_example_once(fake, count, batch_size, packing):
  ids, num_batches = [], set()
  for p in range(count):
    ds = pipeline.get_datasets(fake(batch_size=batch_size, packing=packing), process_index=p,
                               process_count=count)
    batches = list(ds.eval_batches())
    assert len(batches) == ds.num_eval_batches
    num_batches.add(len(batches))
    assert all(b["inputs"].shape == (batch_size // count, 8) for b in batches)
    ids += [i for b in batches for i in _ids(b)]
    _assert_same(batches, list(ds.eval_batches()))  # re-iterable, same again
  assert sorted(ids) == list(range(NUM_FAKE))
  assert len(num_batches) == 1  # every process runs the same number of eval steps


def test_eval_of_synthetic_split_is_disjoint_from_train(data_dir):
  # Tiny space (30 inputs) so that a leak would show; one process reads everything.
  cfg = _config(data_dir, batch_size=16)
  cfg.synthetic.update(vocab_size=2, min_len=1, max_len=4, num_eval=12)
  ds = pipeline.get_datasets(cfg, process_index=0, process_count=1)
  held_out = [r.tobytes() for b in ds.eval_batches() for r in b["inputs"] if r.any()]
  assert len(held_out) == len(set(held_out)) == 12
  train = {r.tobytes() for b in _take(ds.train_iter(), 200 // 16) for r in b["inputs"]}
  assert not train & set(held_out)


@pytest.mark.parametrize("packing", ["none", "pack"])
def test_iterator_state_round_trip(data_dir, packing):
  cfg = _config(data_dir, packing=packing)
  it = pipeline.get_datasets(cfg, process_index=0, process_count=2).train_iter()
  _take(it, 30)  # past an epoch of the 100-example shard
  state = it.get_state()
  json.dumps(state)  # checkpointable as JSON (what grain's orbax handler writes)
  expected = _take(it, 5)
  restored = pipeline.get_datasets(cfg, process_index=0, process_count=2).train_iter()
  restored.set_state(state)
  _assert_same(_take(restored, 5), expected)


def test_truncation_is_counted_and_warned_once(data_dir, caplog):
  cfg = _config(data_dir, max_len=3)
  ds = pipeline.get_datasets(cfg, process_index=0, process_count=1)
  with caplog.at_level(logging.WARNING):
    batches = _take(ds.train_iter(), 5)
  assert all(b["inputs"].shape == (8, 3) for b in batches)
  assert sum("truncated" in r.getMessage() for r in caplog.records) == 1


def test_a_concat_run_is_not_advised_to_use_concat(fake, caplog):
  """Under packing='concat' only eval and test rows can be cut: the warning says so."""
  ds = pipeline.get_datasets(fake(model_type="lm", packing="concat", max_len=4),
                             process_index=0, process_count=1)
  with caplog.at_level(logging.WARNING):
    list(ds.eval_batches())
  [message] = [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]
  assert "eval and test examples" in message and "packing='concat'" not in message


def test_planned_vocab_size_is_the_one_the_data_gives(data_dir):
  """What the benchmark and compile report build without data is what training builds."""
  cfg = _config(data_dir, model=dict(vocab_size=None), tokenizer=dict(kind="sentencepiece"))
  assert settings.planned_vocab_size(cfg) == (pipeline.get_datasets(cfg).vocab_size,
                                              "the synthetic 'reverse' task")
  cfg.dataset = "text_files"
  cfg.tokenizer.kind = "bytes"
  assert settings.planned_vocab_size(cfg) == (259, "the byte tokenizer")
  cfg.tokenizer.update(kind="sentencepiece", vocab_size=500)
  assert settings.planned_vocab_size(cfg) == (500, "tokenizer.vocab_size")


def test_packed_processes_read_disjoint_examples_and_match_one_process(fake):
  per_process = []
  for p in range(2):
    ds = pipeline.get_datasets(fake(batch_size=4, packing="pack"), process_index=p,
                               process_count=2)
    per_process.append([_ids(b) for b in _take(ds.train_iter(), 2)])
  alone = pipeline.get_datasets(fake(batch_size=4, packing="pack"), process_index=0,
                                process_count=1)
  one = [_ids(b) for b in _take(alone.train_iter(), 2)]
  assert one == [a + b for a, b in zip(*per_process)]
  first, second = ({i for rows in batches for i in rows} for batches in per_process)
  assert not first & second
  assert sum(len(rows) for rows in one) > 2 * 4  # several examples a row


def test_measure_throughput_counts_non_pad_tokens(fake):
  out = pipeline.measure_throughput(fake(batch_size=4, packing="pack"), 0.2)
  assert out["batches"] >= 1 and out["tokens_per_sec"] > 0 and out["batches_per_sec"] > 0
  assert out["tokens"] <= out["batches"] * 2 * 4 * 8 and 0 < out["fill"] <= 1


def test_errors(data_dir):
  with pytest.raises(ValueError, match="Unknown dataset 'nope'; known datasets: .*synthetic"):
    pipeline.get_datasets(_config(data_dir, dataset="nope"), process_index=0, process_count=1)
  with pytest.raises(ValueError, match="batch_size=9 must be a positive multiple"):
    pipeline.get_datasets(_config(data_dir, batch_size=9), process_index=0, process_count=2)
  # The packing mode is an experiment's setting, checked when it is parsed.
  with pytest.raises(ValueError, match="packing='tight' is not one of"):
    settings.check_data_config(_config(data_dir, packing="tight"))
  with pytest.raises(ValueError, match="packing='concat' splits examples across rows"):
    settings.check_data_config(_config(data_dir, packing="concat", model_type="seq2seq"))


def test_count_train_tokens_sums_every_key_of_every_train_example(fake):
  ds = pipeline.get_datasets(fake(batch_size=4), process_index=0, process_count=1)
  assert ds.count_train_tokens() == NUM_FAKE * (2 + 3)  # inputs [i + 3, EOS], targets 3 ids
