"""The train state: a pure pytree (no callables), so it checkpoints and shards as data."""

from typing import Any

import flax
import jax


@flax.struct.dataclass
class TrainState:
  """step: int32 scalar; params: the model's param tree; opt_state: optax state for them."""

  step: jax.Array
  params: Any
  opt_state: Any
