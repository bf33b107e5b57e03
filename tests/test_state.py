"""TrainState: a pure pytree of arrays, so jit, sharding and checkpoints treat it as data."""

import jax
import jax.numpy as jnp
import optax

from transformer.training.state import TrainState


def test_train_state_is_a_pytree_of_its_three_fields_only():
  params = {"w": jnp.ones((2, 3)), "b": jnp.zeros(3)}
  state = TrainState(step=jnp.int32(0), params=params, opt_state=optax.sgd(0.1).init(params))
  leaves = jax.tree_util.tree_leaves(state)
  assert len(leaves) == 3  # step, b, w: sgd without momentum keeps no arrays

  @jax.jit
  def bump(s: TrainState) -> TrainState:
    return s.replace(step=s.step + 1, params=jax.tree.map(lambda p: p + 1, s.params))

  out = bump(state)
  assert isinstance(out, TrainState) and int(out.step) == 1
  assert float(out.params["w"][0, 0]) == 2.0 and int(state.step) == 0  # a new state, not edited
