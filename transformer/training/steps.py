"""Pure train and eval steps: (state, batch, rng) -> (state, metrics), jit-compiled by the loop.

The loss is `losses.cross_entropy` summed over the global batch and divided by its token count,
so the gradient is the same on 1 device or 256 (XLA all-reduces the sums). Gradient
accumulation splits the batch into micro-batches, sums their gradients, and makes one update:
exactly the update of the whole batch, in less memory.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from transformer.models import DecoderOnly
from transformer.training import losses
from transformer.training.state import TrainState

Batch = dict[str, jax.Array]


def apply_model(model: nn.Module, params: Any, batch: Batch, *, deterministic: bool = True,
                rng: Optional[jax.Array] = None, **kwargs: Any) -> jax.Array:
  """The model's logits float[B, L, V] for a batch dict (packed keys passed when present)."""
  rngs = None if rng is None else {"dropout": rng}
  if isinstance(model, DecoderOnly):
    return model.apply({"params": params}, batch["targets"],
                       segmentation=batch.get("targets_segmentation"),
                       position=batch.get("targets_position"), deterministic=deterministic,
                       rngs=rngs, **kwargs)
  return model.apply({"params": params}, batch["inputs"], batch["targets"],
                     inputs_segmentation=batch.get("inputs_segmentation"),
                     targets_segmentation=batch.get("targets_segmentation"),
                     inputs_position=batch.get("inputs_position"),
                     targets_position=batch.get("targets_position"),
                     deterministic=deterministic, rngs=rngs, **kwargs)


def init_state(model: nn.Module, tx: optax.GradientTransformation, rng: jax.Array,
               batch: Batch) -> TrainState:
  """Fresh params and optimizer state; `batch` only fixes shapes (any int arrays [B, L])."""
  if isinstance(model, DecoderOnly):
    params = model.init(rng, batch["targets"])["params"]
  else:
    params = model.init(rng, batch["inputs"], batch["targets"])["params"]
  return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))


def loss_sums(model: nn.Module, params: Any, batch: Batch, *, deterministic: bool = True,
              rng: Optional[jax.Array] = None, label_smoothing: float = 0.0,
              z_loss: float = 0.0, chunk_size: int = 0) -> losses.LossOutput:
  """`losses.cross_entropy` sums of a batch (log_z dropped), from the model's logits.

  chunk_size > 0 never holds the whole [B, L, V] logits: the target axis is cut into slices of
  chunk_size positions, each projected to logits, scored and dropped (and recomputed in the
  backward pass), which keeps a 32k-way softmax in cache. Same sums, less memory traffic.
  """
  targets = batch["targets"]
  score = lambda logits, t: losses.cross_entropy(  # noqa: E731
      logits, t, label_smoothing=label_smoothing, z_loss=z_loss)._replace(log_z=None)
  if not chunk_size or chunk_size >= targets.shape[1]:
    return score(apply_model(model, params, batch, deterministic=deterministic, rng=rng), targets)
  hidden = apply_model(model, params, batch, deterministic=deterministic, rng=rng,
                       return_hidden=True)
  B, L, d = hidden.shape
  n = -(-L // chunk_size)
  pad = n * chunk_size - L  # padded positions have target 0: zero weight
  hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(B, n, chunk_size, d)
  targets = jnp.pad(targets, ((0, 0), (0, pad))).reshape(B, n, chunk_size)

  @jax.checkpoint
  def chunk(h, t):  # h [B, c, d], t [B, c]
    return score(model.apply({"params": params}, h, method=model.project), t)

  def body(total, xs):
    return jax.tree_util.tree_map(jnp.add, total, chunk(*xs)), None

  zeros = losses.LossOutput(*([jnp.zeros((), jnp.float32)] * 5))
  total, _ = jax.lax.scan(body, zeros, (jnp.moveaxis(hidden, 1, 0), jnp.moveaxis(targets, 1, 0)))
  return total


def _sum_loss(model, params, batch, rng, label_smoothing, z_loss, chunk_size):
  out = loss_sums(model, params, batch, deterministic=False, rng=rng,
                  label_smoothing=label_smoothing, z_loss=z_loss, chunk_size=chunk_size)
  return out.loss_sum, out


def make_train_step(model: nn.Module, tx: optax.GradientTransformation,
                    learning_rate_fn: Callable[[jax.Array], jax.Array], *,
                    label_smoothing: float = 0.0, z_loss: float = 0.0,
                    grad_accum_steps: int = 1,
                    loss_chunk_size: int = 0) -> Callable[..., tuple[TrainState, dict]]:
  """train_step(state, batch, rng) -> (state, metrics); the step's dropout key is fold_in(rng, step)."""
  grad_fn = jax.value_and_grad(_sum_loss, argnums=1, has_aux=True)

  def train_step(state: TrainState, batch: Batch, rng: jax.Array):
    step_rng = jax.random.fold_in(rng, state.step)  # a resumed run repeats an uninterrupted one
    if grad_accum_steps == 1:
      (_, out), grads = grad_fn(model, state.params, batch, step_rng, label_smoothing, z_loss,
                                loss_chunk_size)
    else:
      micro = jax.tree_util.tree_map(
          lambda x: x.reshape(grad_accum_steps, x.shape[0] // grad_accum_steps, *x.shape[1:]),
          batch)

      def accumulate(carry, xs):
        i, mb = xs
        (_, o), g = grad_fn(model, state.params, mb, jax.random.fold_in(step_rng, i),
                            label_smoothing, z_loss, loss_chunk_size)
        return jax.tree_util.tree_map(jnp.add, carry, (o, g)), None

      zeros = (losses.LossOutput(*([jnp.zeros((), jnp.float32)] * 5)),
               jax.tree_util.tree_map(jnp.zeros_like, state.params))
      (out, grads), _ = jax.lax.scan(accumulate, zeros,
                                     (jnp.arange(grad_accum_steps), micro))
      out = out._replace(log_z=None)
    # Mean over the batch's tokens: gradients of sums, divided once by the global count.
    denom = jnp.maximum(out.weight_sum, 1.0)
    grads = jax.tree_util.tree_map(lambda g: g / denom, grads)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = losses.summarize(out)
    metrics.update(grad_norm=optax.tree.norm(grads), param_norm=optax.tree.norm(params),
                   learning_rate=learning_rate_fn(state.step))
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics

  return train_step


def make_eval_step(model: nn.Module, *, label_smoothing: float = 0.0, z_loss: float = 0.0,
                   loss_chunk_size: int = 0) -> Callable[[Any, Batch], losses.LossOutput]:
  """eval_step(params, batch) -> LossOutput sums (add them over batches, then `summarize`)."""

  def eval_step(params: Any, batch: Batch) -> losses.LossOutput:
    return loss_sums(model, params, batch, label_smoothing=label_smoothing, z_loss=z_loss,
                     chunk_size=loss_chunk_size)

  return eval_step
