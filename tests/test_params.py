"""load_params: host numpy params of any checkpoint, in any device count, and its model config.

A subprocess with one device reads back what 8 forced CPU devices wrote.
"""

import textwrap

import jax
import numpy as np
import pytest

import script_starter
from conftest import script_env
from test_manager import CONFIG, MODEL, REPO, assert_bitwise_equal, make_state
from transformer import checkpoint as ckpt
from transformer.checkpoint import write_config
from transformer.errors import RunError

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def test_load_params_host_numpy_and_config(tmp_path, mesh):
  state = make_state(mesh)
  with ckpt.Checkpointer(str(tmp_path)) as c:
    c.save(5, make_state(mesh, seed=4), config=CONFIG)
    c.save(6, state)  # config=None reuses the last one
  params, model = ckpt.load_params(str(tmp_path))
  assert model == MODEL
  assert all(type(x) is np.ndarray for x in jax.tree.leaves(params))
  assert_bitwise_equal(params, state.params)
  assert ckpt.load_params(str(tmp_path)).step == 6
  params5, _ = loaded5 = ckpt.load_params(str(tmp_path), step=5)
  assert loaded5.step == 5 and loaded5.params is params5
  assert_bitwise_equal(params5, make_state(mesh, seed=4).params)
  with pytest.raises(FileNotFoundError, match=r"No checkpoint for step 9 .* are \[5, 6\]"):
    ckpt.load_params(str(tmp_path), step=9)


def test_load_params_in_one_device_process(tmp_path, mesh):
  state = make_state(mesh)
  assert len(state.params["dense"]["kernel"].sharding.device_set) == 8
  with ckpt.Checkpointer(str(tmp_path)) as c:
    c.save(1, state, config=CONFIG)
  out = tmp_path / "params.npz"
  script = textwrap.dedent(f"""
      import jax, numpy as np
      from transformer.checkpoint import load_params
      assert jax.device_count() == 1, jax.devices()
      params, model = load_params({str(tmp_path)!r})
      flat = {{jax.tree_util.keystr(p): np.asarray(x).view(np.uint8)
              for p, x in jax.tree_util.tree_flatten_with_path(params)[0]}}
      np.savez({str(out)!r}, **flat)
      print(model.d_model)
  """)
  env = script_env()
  proc = script_starter.run_code(script, env=env, cwd=REPO, timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.strip() == str(MODEL.d_model)
  got = np.load(out)
  want = {jax.tree_util.keystr(p): np.asarray(x)
          for p, x in jax.tree_util.tree_flatten_with_path(state.params)[0]}
  assert sorted(got.files) == sorted(want)
  for k, x in want.items():
    assert got[k].tobytes() == x.tobytes(), k


def test_a_damaged_explicit_step_is_one_line_and_never_substituted(tmp_path, mesh):
  with ckpt.Checkpointer(str(tmp_path)) as c:
    c.save(5, make_state(mesh), config=CONFIG)
    c.save(6, make_state(mesh, seed=4))
  manifest = tmp_path / "checkpoints" / "6" / "state" / "manifest.ocdbt"
  data = bytearray(manifest.read_bytes())
  data[len(data) // 3:len(data) // 3 + 16] = bytes(b ^ 0xFF for b in data[len(data) // 3:
                                                                       len(data) // 3 + 16])
  manifest.write_bytes(bytes(data))
  with pytest.raises(RunError, match=r"^Checkpoint .*/checkpoints/6 cannot be read \(ValueError: "
                     r".*\); pick another --step \(the steps there are \[5, 6\]\), or leave "
                     r"--step out for the newest readable one\.$"):
    ckpt.load_params(str(tmp_path), step=6)
  assert ckpt.load_params(str(tmp_path)).step == 5  # without --step: the newest readable


def test_missing_workdir_message(tmp_path):
  missing = tmp_path / "no_such_run"
  with pytest.raises(FileNotFoundError) as e:
    ckpt.load_params(str(missing))
  msg = str(e.value)
  assert "\n" not in msg and str(missing) in msg and "train" in msg and "path" in msg


def test_model_config_falls_back_to_config_json(tmp_path, mesh):
  write_config(str(tmp_path), CONFIG)
  with ckpt.Checkpointer(str(tmp_path)) as c:
    c.save(1, make_state(mesh))  # no config item in the checkpoint
  loaded = ckpt.load_params(str(tmp_path))  # the model config taken from config.json
  assert loaded.model_config == MODEL and loaded.step == 1


def test_without_any_model_config_the_error_says_how_to_write_one(tmp_path, mesh):
  with ckpt.Checkpointer(str(tmp_path)) as c:
    c.save(1, make_state(mesh))
  with pytest.raises(ValueError, match="has no model config.*write_config"):
    ckpt.load_params(str(tmp_path))
