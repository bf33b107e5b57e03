"""Pure train and eval steps, and `build_steps`: the one place they are made from an experiment
config, so that "loss" means the same thing in training, evaluation, sweeps and benchmarks.

train_step(state, batch, rng) -> (state, metrics); eval_step(params, batch) -> LossOutput sums.
The loss is `losses.cross_entropy` summed over the global batch and divided by its token count,
so the gradient is the same on 1 device or 256 (XLA all-reduces the sums). Gradient
accumulation splits the batch into micro-batches, sums their gradients, and makes one update:
exactly the update of the whole batch, in less memory. On a mesh, micro-batch j is a slice of
every device's own rows (no device computes another's), and gradients take the layout of
their params (`sharding.tree_shardings`: replicated, or split over the fsdp axis).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from transformer import models
from transformer.training import losses, optimizers, sharding
from transformer.training.experiment import Experiment
from transformer.training.optimizers import TrainState

Batch = dict[str, jax.Array]


def init_state(model: nn.Module, tx: optax.GradientTransformation, rng: jax.Array,
               batch: Batch) -> TrainState:
  """Fresh params and optimizer state; `batch` only fixes shapes (any int arrays [B, L])."""
  params = models.init_params(model, rng, batch)
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
    return score(model.logits(params, batch, deterministic=deterministic, rng=rng), targets)
  hidden = model.logits(params, batch, deterministic=deterministic, rng=rng,
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

  total, _ = jax.lax.scan(body, losses.LossOutput.zeros(),
                          (jnp.moveaxis(hidden, 1, 0), jnp.moveaxis(targets, 1, 0)))
  return total


def micro_batches(batch: Batch, num_micro: int, shards: int = 1) -> Batch:
  """Each array [B, ...] -> [num_micro, B / num_micro, ...] such that micro-batch j holds rows
  j*m .. (j+1)*m - 1 of each of the `shards` consecutive blocks of B / shards rows (a device's
  rows on the mesh; m = B / (shards * num_micro)): every device computes only its own rows."""
  def split(x):
    m = x.shape[0] // (shards * num_micro)
    x = x.reshape(shards, num_micro, m, *x.shape[1:])
    return jnp.swapaxes(x, 0, 1).reshape(num_micro, shards * m, *x.shape[3:])
  return jax.tree_util.tree_map(split, batch)


def gather_weights(params: Any, mesh: Mesh, dtype: Any) -> Any:
  """FSDP: every weight whole where the model uses it, in the compute `dtype` (the layers
  cast their float32 params to it at use anyway: gathering after the cast moves half the
  bytes under bfloat16), and its gradient sent back split, in the params' own dtype.

  A plain sharding constraint would carry the same (whole) layout onto the gradient, i.e. an
  all-reduce; the custom backward asks for the params' split layout instead, which XLA meets
  with a reduce-scatter: each device receives only its slice of the summed gradient.
  """
  whole, split = sharding.replicated(mesh), sharding.tree_shardings(params, mesh)
  cast = lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x  # noqa: E731

  @jax.custom_vjp
  def gather(p):
    return jax.lax.with_sharding_constraint(jax.tree_util.tree_map(cast, p), whole)

  def backward(_, grads):
    grads = jax.lax.with_sharding_constraint(grads, split)
    return (jax.tree_util.tree_map(lambda g, x: g.astype(x.dtype), grads, params),)

  gather.defvjp(lambda p: (gather(p), None), backward)
  return gather(params)


def _like_params(tree: Any, mesh: Optional[Mesh]) -> Any:
  """`tree` (params-shaped) constrained to the params' layout on `mesh`; as it is without one."""
  if mesh is None:
    return tree
  return jax.lax.with_sharding_constraint(tree, sharding.tree_shardings(tree, mesh))


def _accumulated(grad_fn: Callable, params: Any, batch: Batch, step_rng: jax.Array,
                 grad_accum_steps: int, mesh: Optional[Mesh]) -> tuple[losses.LossOutput, Any]:
  """(loss sums, gradient sums) over `grad_accum_steps` micro-batches, one scan.

  Micro-batch i draws its dropout from fold_in(step_rng, i); with a mesh each micro-batch
  keeps the devices' own rows and the running gradient sum keeps the params' layout.
  """
  shards = 1 if mesh is None else mesh.devices.size
  micro = micro_batches(batch, grad_accum_steps, shards)
  if mesh is not None:
    micro = jax.lax.with_sharding_constraint(
        micro, NamedSharding(mesh, P(None, sharding.batch_axes(mesh))))

  def accumulate(carry, xs):
    i, mb = xs
    (_, o), g = grad_fn(params, mb, jax.random.fold_in(step_rng, i))
    loss_total, grad_total = jax.tree_util.tree_map(jnp.add, carry, (o, _like_params(g, mesh)))
    return (loss_total, _like_params(grad_total, mesh)), None

  zeros = (losses.LossOutput.zeros(),
           _like_params(jax.tree_util.tree_map(jnp.zeros_like, params), mesh))
  (out, grads), _ = jax.lax.scan(accumulate, zeros, (jnp.arange(grad_accum_steps), micro))
  return out._replace(log_z=None), grads


def make_train_step(model: nn.Module,
                    optimizer: Callable[[jax.Array], optimizers.OptimizerAtPeak], *,
                    label_smoothing: float = 0.0, z_loss: float = 0.0,
                    grad_accum_steps: int = 1, loss_chunk_size: int = 0,
                    mesh: Optional[Mesh] = None) -> Callable[..., tuple[TrainState, dict]]:
  """train_step(state, batch, rng, learning_rate) -> (state, metrics); the step's dropout key
  is fold_in(rng, step). `optimizer(learning_rate)` gives the optimizer and its schedule at
  that peak rate (`optimizers.at_peak`): the rate is an input of the compiled step, so runs
  that differ only in their rate and seed share one compilation.

  metrics: the `losses.LossOutput` sums of the batch (loss_sum, nll_sum, z_loss_sum,
  correct_sum, weight_sum) and grad_norm, param_norm, learning_rate (of this update).
  With `mesh`, gradients are constrained to their params' layout (an fsdp mesh reduce-scatters
  them) and micro-batches to the devices' own rows.
  """
  fsdp = mesh is not None and sharding.fsdp_size(mesh) > 1

  def loss(params, batch, rng):
    if fsdp:
      params = gather_weights(params, mesh, model.config.compute_dtype)
    out = loss_sums(model, params, batch, deterministic=False, rng=rng,
                    label_smoothing=label_smoothing, z_loss=z_loss, chunk_size=loss_chunk_size)
    return out.loss_sum, out  # the sum is differentiated; the sums ride along as metrics

  grad_fn = jax.value_and_grad(loss, has_aux=True)

  def train_step(state: TrainState, batch: Batch, rng: jax.Array, learning_rate: jax.Array):
    tx, learning_rate_fn = optimizer(learning_rate)
    step_rng = jax.random.fold_in(rng, state.step)  # a resumed run repeats an uninterrupted one
    if grad_accum_steps == 1:
      (_, out), grads = grad_fn(state.params, batch, step_rng)
    else:
      out, grads = _accumulated(grad_fn, state.params, batch, step_rng, grad_accum_steps, mesh)
    grads = _like_params(grads, mesh)
    # Mean over the batch's tokens: gradients of sums, divided once by the global count.
    denom = jnp.maximum(out.weight_sum, 1.0)
    grads = jax.tree_util.tree_map(lambda g: g / denom, grads)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    # The loss sums (add them over steps, then `losses.summarize`) and the step's norms.
    metrics = {k: v for k, v in out._asdict().items() if k != "log_z"}
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


def make_grads_fn(model: nn.Module, *, label_smoothing: float = 0.0,
                  z_loss: float = 0.0) -> Callable[[Any, Batch, jax.Array], Any]:
  """grads(params, batch, rng) -> gradient of the batch's mean loss, with dropout key `rng`
  (the train step's gradient without accumulation; for the training diagnostics)."""

  def grads(params: Any, batch: Batch, rng: jax.Array) -> Any:
    def mean_loss(p):
      out = loss_sums(model, p, batch, deterministic=False, rng=rng,
                      label_smoothing=label_smoothing, z_loss=z_loss)
      return out.loss_sum / jnp.maximum(out.weight_sum, 1.0)
    return jax.grad(mean_loss)(params)

  return grads


class OnMesh:
  """A jitted function traced, lowered and called with its mesh in context
  (`jax.sharding.use_abstract_mesh`), so that the model sees the chip it is compiled for
  (`attention.target_platform`: a TPU slice compiled for from a CPU host) and a kernel XLA
  cannot partition runs per device. (The abstract mesh, unlike `jax.set_mesh`, may also be
  entered inside a trace: `jax.eval_shape(steps.init, ...)`.)"""

  def __init__(self, fn: Callable[..., Any], mesh: Mesh, bound: tuple[Any, ...] = ()):
    self.fn, self.mesh, self.bound = fn, mesh, bound  # bound: trailing arguments, passed last

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    with jax.sharding.use_abstract_mesh(self.mesh.abstract_mesh):
      return self.fn(*args, *self.bound, **kwargs)

  def lower(self, *args: Any, **kwargs: Any) -> Any:
    with jax.sharding.use_abstract_mesh(self.mesh.abstract_mesh):
      return self.fn.lower(*args, *self.bound, **kwargs)


class Steps(NamedTuple):
  """What `build_steps` makes of an experiment, every function jit-compiled."""
  train: Callable[..., tuple[TrainState, dict]]  # (state, batch, rng) -> (state, metrics),
                                                 # state donated; the peak rate bound
  eval: Callable[[Any, Batch], losses.LossOutput]  # (params, batch) -> sums
  grads: Callable[[Any, Batch, jax.Array], Any]  # (params, batch, rng) -> grads (diagnostics)
  init: Callable[[jax.Array], TrainState]  # rng -> a fresh state, laid out as state_shardings
  state_shardings: TrainState  # a NamedSharding per array of the state, on the mesh
  optimizer: optax.GradientTransformation
  learning_rate_fn: Callable[[jax.Array], jax.Array]


def build_steps(exp: Experiment, model: nn.Module, mesh: Mesh) -> Steps:
  """The init, train, eval and diagnostics-gradient steps of an experiment on `mesh`.

  Every step takes its loss from `exp.loss` alike: label_smoothing, z_loss and
  loss_chunk_size, so the eval loss is the training objective on held-out data (nll is the
  plain cross-entropy). Batches are split over every device; params, gradients and
  optimizer state are laid out by `sharding.tree_shardings` (replicated on an all-data mesh,
  split over the fsdp axis otherwise); the state is donated to the train step.
  """
  opt = exp.optimization
  tx, lr_fn = optimizers.at_peak(opt, opt.learning_rate)  # for the state and the logs
  loss = dict(label_smoothing=exp.loss.label_smoothing, z_loss=exp.loss.z_loss)
  # Any [1, max_len] rows of the keys the model reads fix the param shapes.
  rows = {k: jnp.ones((1, exp.data.max_len), jnp.int32) for k in model.batch_keys}
  init_fn = functools.partial(init_state, model, tx, batch=rows)
  state_sh = sharding.tree_shardings(jax.eval_shape(init_fn, jax.random.PRNGKey(0)), mesh)
  repl, data = sharding.replicated(mesh), sharding.batch_sharding(mesh)
  train = jax.jit(
      make_train_step(model, functools.partial(optimizers.at_peak, opt),
                      grad_accum_steps=opt.grad_accum_steps,
                      loss_chunk_size=exp.loss.loss_chunk_size, mesh=mesh, **loss),
      in_shardings=(state_sh, data, repl, repl), out_shardings=(state_sh, repl),
      donate_argnums=0)
  # The peak rate travels as an argument (one compilation for every rate), bound here as a
  # host scalar: jit places it (a compile report's mesh may be of absent devices).
  peak = np.float32(opt.learning_rate)
  eval_step = jax.jit(make_eval_step(model, loss_chunk_size=exp.loss.loss_chunk_size, **loss),
                      in_shardings=(state_sh.params, data), out_shardings=repl)
  grads = jax.jit(make_grads_fn(model, **loss))
  init = jax.jit(init_fn, out_shardings=state_sh)
  return Steps(OnMesh(train, mesh, bound=(peak,)),
               *(OnMesh(fn, mesh) for fn in (eval_step, grads, init)), state_sh, tx, lr_fn)


def split_metrics(eval_step: Callable[[Any, Batch], losses.LossOutput], params: Any,
                  batches: Iterable[dict[str, Any]], mesh: Mesh) -> dict[str, float]:
  """`losses.summarize` of the sums over host batches (each process its rows): loss,
  perplexity, accuracy... of a whole split, each example counted once."""
  total = losses.LossOutput.total(
      eval_step(params, sharding.global_batch(batch, mesh)) for batch in batches)
  return {k: float(v) for k, v in sharding.to_host(losses.summarize(total)).items()}
