"""The pipeline makes the batches it made before the token store, bit for bit, in every packing
mode: the hashes and iterator states recorded at e02e0e7 (tests/batch_identity.py), for six
small corpora (synthetic pairs, text and TSV pairs through bytes and SentencePiece, read as
pairs and as one stream), on one process and as process 3 of 4, across an epoch boundary,
after a restore from a state that code checkpointed, and for every eval and test batch."""

import itertools
import json

import pytest

import batch_identity as bi
from transformer.data import pipeline

GOLDEN = json.loads(bi.GOLDEN.read_text())
CASES = sorted(GOLDEN)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
  root = tmp_path_factory.mktemp("identity")
  return bi.write_corpora(root / "corpus"), str(root / "tfds"), root


def _datasets(corpora, case_mode, index, count):
  files, tfds_dir, root = corpora
  case, mode = case_mode.split("/")
  config = bi.config_of(case, mode, files, tfds_dir)
  return pipeline.get_datasets(config, workdir=str(root / "work" / case / mode),
                               process_index=index, process_count=count)


def _close(it):
  getattr(it, "close", lambda: None)()


@pytest.mark.parametrize("case_mode", CASES)
def test_the_same_batches_and_states_as_the_grain_pipeline(corpora, case_mode):
  want = GOLDEN[case_mode]
  for name, (index, count, n) in {"p0of1": (0, 1, bi.TRAIN_BATCHES),
                                  "p3of4": (3, 4, bi.SHARD_BATCHES)}.items():
    ds = _datasets(corpora, case_mode, index, count)
    it = ds.train_iter()
    got = [bi.batch_hash(b) for b in itertools.islice(it, n)]
    first_wrong = next((i for i, (a, b) in enumerate(zip(got, want[f"{name}_train"]))
                        if a != b), None)
    assert first_wrong is None, f"{name}: train batch {first_wrong} differs"
    assert json.loads(json.dumps(it.get_state())) == want[f"{name}_state_at_end"]
    _close(it)
    # The state that code wrote mid-stream restores here to the same next batches, and this
    # pipeline writes that state at that point.
    restored = ds.train_iter()
    restored.set_state(want[f"{name}_state_at_{bi.RESTORE_AT}"])
    assert [bi.batch_hash(b) for b in itertools.islice(restored, bi.AFTER_RESTORE)] == \
        want[f"{name}_after_restore"]
    _close(restored)
    it = ds.train_iter()
    for _ in range(bi.RESTORE_AT):
      next(it)
    assert json.loads(json.dumps(it.get_state())) == want[f"{name}_state_at_{bi.RESTORE_AT}"]
    _close(it)
    assert [bi.batch_hash(b) for b in ds.eval_batches()] == want[f"{name}_eval"]
    test = ds.test_batches()
    assert (None if test is None else [bi.batch_hash(b) for b in test]) == want[f"{name}_test"]
  assert bi.epochs_read(want["p0of1_state_at_end"], want["num_train_examples"]) > 1
