"""TrainState: a pure pytree of arrays, so jit, sharding and checkpoints treat it as data."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import serialization

from transformer.training.state import TrainState


def _state():
  params = {"w": jnp.ones((2, 3)), "b": jnp.zeros(3)}
  return TrainState(step=jnp.int32(0), params=params, opt_state=optax.adam(0.1).init(params))


def test_every_field_is_data_so_jit_and_checkpoints_see_the_whole_state():
  """No static field (a model or an optimizer's functions would be one): every leaf is an
  array, and the step, the params and Adam's two moments and count are all of them."""
  assert all(f.metadata.get("pytree_node", True) for f in dataclasses.fields(TrainState))
  state = _state()
  leaves = jax.tree_util.tree_leaves(state)
  assert all(isinstance(x, jax.Array) for x in leaves)
  assert len(leaves) == 1 + 2 + 2 * 2 + 1  # step, params, mu and nu of each, Adam's count


def test_the_state_round_trips_through_its_state_dict():
  """What orbax writes is the state dict; restoring it into a fresh state's structure gives
  the same arrays under the same names (step, params, opt_state)."""
  state = _state()
  saved = serialization.to_state_dict(state)
  assert set(saved) == {"step", "params", "opt_state"}
  bumped = jax.tree.map(lambda x: np.asarray(x) + 1, saved)
  restored = serialization.from_state_dict(_state(), bumped)
  assert isinstance(restored, TrainState) and int(restored.step) == 1
  np.testing.assert_array_equal(restored.params["w"], np.full((2, 3), 2.0))

  @jax.jit
  def bump(s: TrainState) -> TrainState:
    return s.replace(step=s.step + 1)

  assert int(bump(restored).step) == 2 and int(restored.step) == 1  # a new state, not edited
