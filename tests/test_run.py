"""The Run (transformer.training.run): one setup of model, mesh, steps and state for every
caller; each kind of state it makes, and the checks it makes before building anything."""

import gc

import jax
import numpy as np
import pytest

from transformer import checkpoint
from transformer.errors import ConfigError
from transformer.training import experiment, run


def _leaves_equal(a, b) -> bool:
  return all(np.array_equal(x, y) for x, y in zip(jax.tree_util.tree_leaves(a),
                                                  jax.tree_util.tree_leaves(b)))


def test_a_fresh_state_comes_from_the_seed_and_an_abstract_one_holds_no_arrays(tiny_config,
                                                                            devices):
  exp = experiment.parse(tiny_config)
  mesh = run.device_mesh(exp, devices[:2])
  fresh = run.fresh(exp, mesh)
  assert _leaves_equal(fresh.state.params, run.fresh(exp, mesh).state.params)
  tiny_config.seed += 1  # another seed draws other params (a seed ignored would not)
  assert not _leaves_equal(fresh.state.params,
                           run.fresh(experiment.parse(tiny_config), mesh).state.params)
  assert fresh.mesh.devices.size == 2 and fresh.start_step == 0 and fresh.checkpointer is None
  assert fresh.experiment.vocab_from == "the synthetic 'reverse' task"
  abstract = run.abstract(exp, mesh)
  leaves = jax.tree_util.tree_leaves(abstract.state)
  assert leaves and all(isinstance(x, jax.ShapeDtypeStruct) and x.sharding for x in leaves)
  assert [x.shape for x in leaves] == [x.shape for x in jax.tree_util.tree_leaves(fresh.state)]


def test_params_of_a_split_run_are_read_whole_on_one_device(tiny_config, devices):
  """A checkpoint's params are placed replicated, whatever fsdp the run trained with."""
  tiny_config.fsdp = 8
  trained = run.fresh(experiment.parse(tiny_config), None)
  host = jax.device_get(trained.state.params)
  read = run.for_reading(experiment.recorded(trained.config, trained.model_config), host,
                         devices[:1])
  assert read.mesh.devices.size == 1 and read.state.opt_state is None
  assert _leaves_equal(host, read.state.params)


@pytest.mark.parametrize("fields, match", [
    ({"batch_size": 12}, "batch_size=12 is not divisible by the 8 devices"),
    ({"fsdp": 3}, "fsdp=3 must be -1 .* divides the 8 devices"),
    ({"grad_accum_steps": 4}, "must split into grad_accum_steps=4 micro-batches"),
    ({"model_type": "gpt"}, "model_type='gpt' is not one of")])
def test_mistakes_are_one_line_before_anything_is_built(tiny_config, devices, fields, match):
  tiny_config.update(fields)
  with pytest.raises(ConfigError, match=match):
    run.device_mesh(experiment.parse(tiny_config), devices)


def test_a_chunked_loss_on_gpus_is_one_clear_line(tiny_config):
  """On a GPU the chunked loss costs more than it saves (docs/speed.md): refused with the
  devices, before any mesh or compiling, in one line that names the knob."""
  import types
  tiny_config.loss_chunk_size = 4
  gpus = [types.SimpleNamespace(platform="gpu")] * 8
  with pytest.raises(ConfigError, match=r"^loss_chunk_size=4 makes a GPU step larger") as e:
    run.device_mesh(experiment.parse(tiny_config), gpus)
  assert "\n" not in str(e.value)


def _live_bytes() -> int:
  """The bytes of every array alive on the devices."""
  gc.collect()
  return sum(x.nbytes for x in jax.live_arrays())


def test_a_resume_holds_one_state_not_a_fresh_one_beside_it(tiny_config, tmp_path, devices,
                                                            monkeypatch):
  """Round 7, item 7: `restored` drew a whole fresh state on the devices only to read its
  shapes, so a resume held the state twice at its peak (when the checkpoint is read)."""
  exp = experiment.parse(tiny_config)
  mesh = run.device_mesh(exp, devices[:2])
  saved = run.fresh(exp, mesh)
  state_bytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(saved.state))
  with checkpoint.Checkpointer(str(tmp_path), async_save=False) as ckpt:
    ckpt.save(3, saved.state)
  del saved
  held = []
  restore = checkpoint.Checkpointer.restore

  def measured(self, *args, **kwargs):  # what is alive once the checkpoint is read
    out = restore(self, *args, **kwargs)
    held.append(_live_bytes())
    return out

  monkeypatch.setattr(checkpoint.Checkpointer, "restore", measured)
  before = _live_bytes()
  resumed = run.restored(exp, str(tmp_path), mesh)
  assert resumed.from_checkpoint and resumed.start_step == 3
  assert held[0] - before < 1.5 * state_bytes, (held[0] - before, state_bytes)
  resumed.checkpointer.close()
