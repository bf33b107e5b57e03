"""The Run (transformer.training.run): one setup of model, mesh, steps and state for every
caller; each kind of state it makes, and the checks it makes before building anything."""

import jax
import numpy as np
import pytest

from transformer.errors import ConfigError
from transformer.training import experiment, run


def test_a_fresh_state_comes_from_the_seed_and_an_abstract_one_holds_no_arrays(tiny_config,
                                                                            devices):
  fresh = run.setup(tiny_config, devices[:2])
  again = run.setup(tiny_config, devices[:2])
  for a, b in zip(jax.tree_util.tree_leaves(fresh.state.params),
                  jax.tree_util.tree_leaves(again.state.params)):
    np.testing.assert_array_equal(a, b)
  assert fresh.mesh.devices.size == 2 and fresh.start_step == 0 and fresh.checkpointer is None
  assert fresh.experiment.vocab_from == "the synthetic 'reverse' task"
  abstract = run.setup(tiny_config, devices[:2], state="abstract")
  leaves = jax.tree_util.tree_leaves(abstract.state)
  assert leaves and all(isinstance(x, jax.ShapeDtypeStruct) and x.sharding for x in leaves)
  assert run.setup(tiny_config, devices[:2], state="none").state is None


def test_params_of_a_split_run_are_read_whole_on_one_device(tiny_config, devices):
  """A checkpoint's params are placed replicated, whatever fsdp the run trained with."""
  tiny_config.fsdp = 8
  trained = run.setup(tiny_config, devices)
  host = jax.device_get(trained.state.params)
  read = run.setup(experiment.recorded(trained.config, trained.model_config), devices[:1],
                   params=host)
  assert read.mesh.devices.size == 1 and read.state.opt_state is None
  for a, b in zip(jax.tree_util.tree_leaves(host), jax.tree_util.tree_leaves(read.state.params)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("fields, match", [
    ({"batch_size": 12}, "batch_size=12 is not divisible by the 8 devices"),
    ({"fsdp": 3}, "fsdp=3 must be -1 .* divides the 8 devices"),
    ({"grad_accum_steps": 4}, "must split into grad_accum_steps=4 micro-batches"),
    ({"model_type": "gpt"}, "model_type='gpt' is not one of")])
def test_mistakes_are_one_line_before_anything_is_built(tiny_config, devices, fields, match):
  tiny_config.update(fields)
  with pytest.raises(ConfigError, match=match):
    run.setup(tiny_config, devices)
  if "model_type" not in fields:  # the loop's check before its workdir exists
    exp = experiment.parse(tiny_config)
    with pytest.raises(ConfigError, match=match):
      run.check_devices(exp, devices)
