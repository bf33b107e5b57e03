"""Checkpointer: round trips, retention, iterator state, damaged and interrupted saves.

A fake param tree and optax adam state stand in for a model; 8 forced CPU devices (conftest)
shard it. test_params and test_checksums reuse these states.
"""

import gc
import logging
import pathlib
import shutil
import textwrap

import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import script_starter
from conftest import read_only, script_env
from transformer import checkpoint as ckpt
from transformer.errors import RunError
from transformer.config import ModelConfig
from transformer.training.optimizers import TrainState

MODEL = ModelConfig(vocab_size=64, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                    num_decoder_layers=1, max_len=32)
CONFIG = {"model": MODEL.to_dict(), "batch_size": 8, "learning_rate": 1e-3, "dataset": "fake"}
REPO = pathlib.Path(__file__).resolve().parents[1]

# After a failed read orbax abandons coroutines and tensorstore callbacks on its closed
# event loop; they surface, harmlessly, as "unraisable" exceptions whenever GC runs.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def make_state(mesh, seed=0):
  """A TrainState sharded over 'data' (some leaves split, some replicated), adam stepped once."""
  k = jax.random.split(jax.random.key(seed), 4)
  params = {
      "dense": {"kernel": jax.random.normal(k[0], (64, 128)),  # big enough for its own data file
                "bias": jax.random.normal(k[1], (128,))},
      "embed": jax.random.normal(k[2], (32, 4)),
      "scale": jax.random.normal(k[3], (8,)).astype(jnp.bfloat16),
  }
  specs = {"dense": {"kernel": P("data", None), "bias": P()}, "embed": P("data"), "scale": P()}
  params = jax.tree.map(lambda x, s: jax.device_put(x, NamedSharding(mesh, s)), params, specs)
  opt = optax.adam(1e-2)
  opt_state = opt.init(params)
  grads = jax.tree.map(lambda x: jnp.ones_like(x) * 0.5, params)
  updates, opt_state = opt.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  return TrainState(step=jnp.asarray(seed + 1, jnp.int32), params=params, opt_state=opt_state)


def abstract(state):
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)


def host(tree):
  return jax.tree.map(np.asarray, tree)


def assert_bitwise_equal(a, b):
  la, lb = jax.tree.leaves(host(a)), jax.tree.leaves(host(b))
  assert jax.tree.structure(host(a)) == jax.tree.structure(host(b))
  for x, y in zip(la, lb):
    assert x.dtype == y.dtype and x.shape == y.shape
    assert x.tobytes() == y.tobytes()


def data_iter():
  return iter(grain.MapDataset.range(100).batch(4).to_iter_dataset())


def test_round_trip_bitwise_and_sharded(tmp_path, mesh):
  state = make_state(mesh)
  expected = host(state)
  with ckpt.Checkpointer(str(tmp_path), async_save=True) as c:
    assert c.restore(abstract(state)) is None  # nothing yet
    assert c.save(7, state, config=CONFIG)
    # The save is async, but it has copied the arrays: donating them now must be safe.
    jax.tree.map(lambda x: x.delete(), state)
    c.wait_until_finished()
    assert c.latest_step() == 7 and c.all_steps() == [7]
    assert not c.save(7, make_state(mesh, seed=3))  # an existing step is not rewritten
  with ckpt.Checkpointer(str(tmp_path)) as c:  # a fresh process would do this
    template = make_state(mesh)
    restored, step = c.restore(abstract(template))
  assert step == 7
  assert_bitwise_equal(restored, expected)
  for r, t in zip(jax.tree.leaves(restored), jax.tree.leaves(template)):
    assert r.sharding == t.sharding  # back on the mesh as asked
  assert isinstance(restored, TrainState)


def test_a_save_into_a_directory_made_read_only_is_one_line_at_once(tmp_path, mesh):
  """orbax's thread that makes the step directory failed while the others waited 5 minutes
  for its signal, then 4 tracebacks: the save refuses first, naming the directory."""
  with ckpt.Checkpointer(str(tmp_path), async_save=True) as c:
    assert c.save(1, make_state(mesh), config=CONFIG)
    c.wait_until_finished()
    with read_only(c.directory):
      with pytest.raises(RunError, match=r"^Cannot save checkpoint 2: .*checkpoints "
                         r"is not writable \(a read-only file system or no write permission\)"):
        c.save(2, make_state(mesh, seed=2))
    assert c.all_steps() == [1]


def test_an_async_save_that_failed_is_named_by_its_own_step_once(tmp_path, mesh, monkeypatch):
  """checkpoints/ made read-only while step 30 was written: the run ended at the next save
  naming checkpoint 40, and the close logged the same error again."""
  with ckpt.Checkpointer(str(tmp_path), async_save=True) as c:
    assert c.save(1, make_state(mesh), config=CONFIG)
    c.wait_until_finished()
    failed = ValueError('PERMISSION_DENIED: Error writing local file "checkpoints/1/x": '
                        "Read-only file system [os_error_code='30']")

    def check_for_errors():
      raise failed

    monkeypatch.setattr(c._manager, "check_for_errors", check_for_errors)
    with pytest.raises(RunError, match=r"^Cannot save checkpoint 1: .*checkpoints is not "
                       r"writable \(Read-only file system\); make it writable"):
      c.save(2, make_state(mesh, seed=2))
    c.wait_until_finished()  # said once: the close after it is quiet
    failed = ValueError("something else went wrong")  # any other error is raised as it is
    with pytest.raises(ValueError, match="something else"):
      c.wait_until_finished()
    monkeypatch.undo()


def test_force_replaces_and_explicit_step(tmp_path, mesh):
  with ckpt.Checkpointer(str(tmp_path), async_save=False) as c:
    c.save(1, make_state(mesh, seed=1))
    c.save(2, make_state(mesh, seed=2))
    assert c.save(2, make_state(mesh, seed=5), force=True)
    restored, step = c.restore(abstract(make_state(mesh)), step=1)
    assert step == 1
    assert_bitwise_equal(restored, make_state(mesh, seed=1))
    assert_bitwise_equal(c.restore(abstract(make_state(mesh)))[0], make_state(mesh, seed=5))
    with pytest.raises(FileNotFoundError, match="step 9"):
      c.restore(abstract(make_state(mesh)), step=9)


def test_keep_newest_n(tmp_path, mesh):
  state = make_state(mesh)
  with ckpt.Checkpointer(str(tmp_path), keep=2) as c:
    for step in (10, 20, 30, 40):
      assert c.save(step, state)
    c.wait_until_finished()
    assert c.all_steps() == [30, 40]
  on_disk = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit())
  assert on_disk == ["30", "40"]


def test_data_iterator_round_trip(tmp_path, mesh):
  state = make_state(mesh)
  it = data_iter()
  for _ in range(3):
    next(it)
  with ckpt.Checkpointer(str(tmp_path)) as c:
    c.save(3, state, data_iter=it)
    expected = [next(it) for _ in range(2)]  # advancing right after save must not leak in
    for _ in range(5):
      next(it)
    c.wait_until_finished()
    assert (tmp_path / "checkpoints/3/data/process_0-of-1.json").exists()  # one file a process
    fresh = data_iter()
    _, step = c.restore(abstract(state), data_iter=fresh)
  assert step == 3
  for want in expected:
    np.testing.assert_array_equal(next(fresh), want)
  np.testing.assert_array_equal(expected[0], np.arange(12, 16))


def _data_files(step_dir: pathlib.Path) -> list[pathlib.Path]:
  """The array data files of a step's state (OCDBT's d/ folders), largest first: how orbax
  splits the arrays over them varies from save to save (one to several files), and a small
  split leaves a metadata file (_sharding) the largest of the folder."""
  files = [p for p in (step_dir / "state").rglob("d/*") if p.is_file()]
  assert files, f"no OCDBT data files under {step_dir}/state"
  return sorted(files, key=lambda p: p.stat().st_size, reverse=True)


def _corrupt(step_dir, how):
  if how == "delete_manifest":
    (step_dir / "state" / "manifest.ocdbt").unlink()
  elif how == "garbage_metadata":
    (step_dir / "state" / "_METADATA").write_bytes(b"\x00garbage" * 20)
  elif how == "truncate_data":
    f = _data_files(step_dir)[0]
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
  elif how == "flip_byte_in_data":  # tensorstore reads this silently: only the checksums see it
    for f in _data_files(step_dir):  # the middle byte of each, so that the arrays' are hit
      b = bytearray(f.read_bytes())
      b[len(b) // 2] ^= 0x5A
      f.write_bytes(bytes(b))
  elif how == "delete_data_iterator":
    (step_dir / "data" / "process_0-of-1.json").unlink()
  # Round 6, items 2-4: files that had no checksum, a lost metadata file, a renamed step.
  elif how == "edit_data_iterator":  # one character: another position in the data
    f = step_dir / "data" / "process_0-of-1.json"
    assert '"next_index": 2' in f.read_text()
    f.write_text(f.read_text().replace('"next_index": 2', '"next_index": 3'))
  elif how == "delete_data_folder":
    shutil.rmtree(step_dir / "data")
  elif how == "edit_config_item":
    f = step_dir / "config" / "metadata"
    assert '"batch_size": 8' in f.read_text()
    f.write_text(f.read_text().replace('"batch_size": 8', '"batch_size": 9'))
  elif how in ("delete_step_metadata", "truncate_step_metadata"):
    f = step_dir / "_CHECKPOINT_METADATA"
    f.unlink() if how.startswith("delete") else f.write_bytes(f.read_bytes()[:10])
  elif how == "copied_from_older":  # cp -a checkpoints/1 checkpoints/2
    shutil.rmtree(step_dir)
    shutil.copytree(step_dir.parent / "1", step_dir)
  else:
    raise ValueError(how)


_READ_BY_LOAD_PARAMS = ("delete_manifest", "garbage_metadata", "truncate_data",
                        "flip_byte_in_data", "edit_config_item", "delete_step_metadata",
                        "truncate_step_metadata", "copied_from_older")


@pytest.mark.parametrize(
    "how", ["delete_manifest", "garbage_metadata", "truncate_data", "flip_byte_in_data",
            "delete_data_iterator", "edit_data_iterator", "delete_data_folder", "edit_config_item",
            "delete_step_metadata", "truncate_step_metadata", "copied_from_older"])
def test_damaged_newest_is_skipped(tmp_path, mesh, caplog, how):
  old, new = make_state(mesh, seed=1), make_state(mesh, seed=2)
  it = data_iter()
  with ckpt.Checkpointer(str(tmp_path), async_save=False) as c:
    next(it)
    c.save(1, old, data_iter=it, config=CONFIG)
    next(it)
    c.save(2, new, data_iter=it)
  bad = tmp_path / "checkpoints" / "2"
  _corrupt(bad, how)
  if how == "edit_config_item":  # what a resume compares itself with: step 1's, unedited
    assert ckpt.stored_config(str(tmp_path))["batch_size"] == 8
  fresh = data_iter()
  with ckpt.Checkpointer(str(tmp_path)) as c, caplog.at_level(logging.WARNING):
    restored, step = c.restore(abstract(old), data_iter=fresh)
    assert step == 1
    assert_bitwise_equal(restored, old)
    np.testing.assert_array_equal(next(fresh), np.arange(4, 8))  # the iterator of step 1
    assert any(r.levelno == logging.WARNING and str(bad) in r.getMessage()
               for r in caplog.records), caplog.text
    # Training goes on from step 1 and reaches step 2 again: the damaged dir moves aside.
    assert c.save(2, new, config=CONFIG)
    c.wait_until_finished()
    assert_bitwise_equal(c.restore(abstract(old))[0], new)
  assert (tmp_path / "checkpoints" / "2.corrupt").is_dir()
  if how in _READ_BY_LOAD_PARAMS:  # load_params reads no iterator state
    caplog.clear()
    _corrupt(bad, how)
    with caplog.at_level(logging.WARNING):
      params, _ = ckpt.load_params(str(tmp_path))
    assert_bitwise_equal(params, old.params)
    assert str(bad) in caplog.text
  gc.collect()  # orbax's abandoned coroutines from the failed reads: here, not in a later test


def test_interrupted_save_is_not_a_checkpoint(tmp_path):
  """SIGKILL while an async save commits: orbax's tmp dir is left and never listed."""
  script = textwrap.dedent(f"""
      import os, signal
      import jax.numpy as jnp
      from orbax.checkpoint._src.path import atomicity
      from transformer.checkpoint import Checkpointer
      from transformer.training.optimizers import TrainState
      c = Checkpointer({str(tmp_path)!r}, async_save=True)
      state = lambda v: TrainState(step=jnp.int32(v), opt_state=(),
                                   params={{"w": jnp.full((4,), v, jnp.float32)}})
      c.save(1, state(1), config={{"model": {{"d_model": 8, "num_heads": 2}}}})
      c.wait_until_finished()
      async def die(self, *a, **k):  # the moment all data is written, before the rename
        os.kill(os.getpid(), signal.SIGKILL)
      atomicity.AtomicRenameTemporaryPath.finalize = die
      c.save(2, state(2))
      c.wait_until_finished()
      print("not killed")
  """)
  env = script_env()
  proc = script_starter.run_code(script, env=env, cwd=REPO, timeout=120)
  assert proc.returncode == -9, proc.stdout + proc.stderr
  leftovers = [p.name for p in (tmp_path / "checkpoints").iterdir()]
  assert "1" in leftovers and "2" not in leftovers
  assert any(n.startswith("2.orbax-checkpoint-tmp") for n in leftovers), leftovers
  params, model = ckpt.load_params(str(tmp_path))
  np.testing.assert_array_equal(params["w"], np.ones(4, np.float32))
  assert model.d_model == 8
  one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  template = TrainState(step=jax.ShapeDtypeStruct((), jnp.int32, sharding=one),
                        params={"w": jax.ShapeDtypeStruct((4,), jnp.float32, sharding=one)},
                        opt_state=())
  with ckpt.Checkpointer(str(tmp_path)) as c:
    assert c.all_steps() == [1]
    restored, step = c.restore(template)
    assert step == 1 and int(restored.step) == 1
    assert c.save(2, restored.replace(step=jnp.int32(2)))  # the step is free to save again
    c.wait_until_finished()
    assert c.all_steps() == [1, 2]
  assert not any(".orbax-checkpoint-tmp" in p.name for p in (tmp_path / "checkpoints").iterdir())


def test_changed_model_is_an_error_not_damage(tmp_path, mesh, caplog):
  with ckpt.Checkpointer(str(tmp_path), async_save=False) as c:
    c.save(1, make_state(mesh))
    c.save(2, make_state(mesh))
    other = make_state(mesh)
    other = other.replace(params={**other.params, "extra": jnp.zeros(3)})
    with caplog.at_level(logging.WARNING), pytest.raises(
        ckpt.IncompatibleCheckpointError, match="another model") as e:
      c.restore(abstract(other))
    assert "extra" in str(e.value) and "\n" not in str(e.value)
    assert "Skipping" not in caplog.text  # no fallback to step 1
    # Another dtype is a cast orbax does, not damage (those leaves skip the checksums).
    bf16 = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, jnp.bfloat16, sharding=x.sharding)
        if x.dtype == jnp.float32 else x, abstract(make_state(mesh)))
    restored, step = c.restore(bf16)
    assert step == 2 and restored.params["embed"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(
        np.asarray(restored.params["embed"]),
        np.asarray(make_state(mesh).params["embed"]).astype(jnp.bfloat16))
