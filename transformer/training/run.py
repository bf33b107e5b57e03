"""One Run: everything a caller needs to train, evaluate, benchmark or compile an experiment,
made in one place from its config.

  run = setup(config)                                  # validated; a fresh state
  run = setup(config, workdir=W, restore=True, data_iter=it)   # the newest checkpoint of W
  run = setup(config, devices=target, state="abstract")        # shapes only: compile for W's pod

The training loop, evaluation, the sweep runner, the benchmark, the compile report and the
reading of a checkpoint (`training.loading`) all take their model, mesh, steps and state from
here; nothing else builds one (tests/test_architecture.py walks the package to check).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import jax
import ml_collections
import numpy as np

from transformer import checkpoint, model_kinds, models
from transformer.config import ModelConfig
from transformer.errors import ConfigError, TrainingError
from transformer.training import experiment, sharding, steps
from transformer.training.state import TrainState

STATES = ("init", "abstract", "none")


@dataclasses.dataclass(frozen=True)
class Run:
  """What a run trains, evaluates or compiles with."""
  config: ml_collections.ConfigDict  # the experiment
  model_config: ModelConfig
  model: models.ModelKind
  mesh: jax.sharding.Mesh
  steps: steps.Steps  # jitted init, train, eval and gradient steps on the mesh
  # The TrainState on the mesh: fresh, restored, given params (no optimizer state), abstract
  # (jax.ShapeDtypeStruct leaves with their shardings), or None (state='none').
  state: Any
  start_step: int = 0  # the step of the restored checkpoint; 0 for a fresh state
  checkpointer: Optional[checkpoint.Checkpointer] = None  # the workdir's, when one was given
  vocab_from: str = ""  # where the vocabulary size came from (data.settings.planned_vocab_size)


def build_model(model_type: str, model_config: ModelConfig) -> models.ModelKind:
  """The model of an experiment's model_type (`model_kinds`): Transformer(config) for
  'seq2seq', DecoderOnly(config) for 'lm', or the class a 'package.module:Class' names."""
  return model_kinds.model_class(model_type)(model_config)


def random_model(model_type: str, model_config: ModelConfig,
                 seed: int = 0) -> tuple[models.ModelKind, Any]:
  """(model, fresh params from PRNGKey(seed)) on the default device: a model to time or
  inspect without an experiment (the decoding benchmark)."""
  model = build_model(model_type, model_config)
  rows = {k: np.ones((1, 8), np.int32) for k in model.batch_keys}
  return model, jax.jit(models.init_params, static_argnums=0)(model, jax.random.PRNGKey(seed),
                                                               rows)


def rngs(config: ml_collections.ConfigDict) -> tuple[jax.Array, jax.Array]:
  """(init key, training key) of an experiment: both from its seed."""
  init_rng, train_rng = jax.random.split(jax.random.PRNGKey(config.seed))
  return init_rng, train_rng


def setup(config: ml_collections.ConfigDict, devices: Optional[Sequence[Any]] = None, *,
          state: str = "init", workdir: Optional[str] = None, restore: bool = False,
          data_iter: Any = None, params: Any = None,
          model_config: Optional[ModelConfig] = None) -> Run:
  """The Run of `config` on `devices` (default: every device of every process; attached or
  not). Validated first (`experiment.validate`, which gives the model config), so a mistake
  is one line before anything is built; a caller that has validated passes the model config
  it got.

  state: 'init' (fresh, from the seed), 'abstract' (shapes and shardings only: what compiling
  for an absent target needs), 'none' (model, mesh and steps alone). `params` instead: a
  checkpoint read for evaluation (host arrays, placed replicated; no optimizer state), with
  its recorded `model_config`. `workdir`: the run's
  Checkpointer; with restore=True the newest readable checkpoint replaces the fresh state
  (and its data position `data_iter`'s).
  """
  if state not in STATES:
    raise ValueError(f"state={state!r} is not one of {STATES}.")
  vocab_from = "the caller's model config"
  if model_config is None:
    model_config, vocab_from = experiment.validate(config)
  if params is None:
    check_devices(config, devices)
  # Given params are placed whole on every device (a read needs no split layout), so a run
  # trained with fsdp=8 is read on one device.
  mesh = sharding.make_mesh(devices, config.fsdp if params is None else 1)
  model = build_model(config.model_type, model_config)
  built = steps.build_steps(config, model, mesh)
  ckpt = None if workdir is None else checkpoint.Checkpointer(
      workdir, keep=config.keep_checkpoints, async_save=config.async_checkpoints)
  start, fresh = 0, None
  if params is not None:
    fresh = TrainState(step=None, params=jax.device_put(params, sharding.replicated(mesh)),
                       opt_state=None)
  elif state == "abstract":
    fresh = jax.tree_util.tree_map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
        jax.eval_shape(built.init, rngs(config)[0]), built.state_shardings)
  elif state == "init":
    fresh = built.init(rngs(config)[0])
    if restore:
      fresh, start = _restored(fresh, ckpt, data_iter, workdir)
  return Run(config, model_config, model, mesh, built, fresh, start, ckpt, vocab_from)


def check_devices(config: ml_collections.ConfigDict,
                  devices: Optional[Sequence[Any]] = None) -> None:
  """The mesh the config asks for fits `devices` (default: every device of every process):
  the fsdp axis divides them, and the global batch splits over them and into grad_accum_steps
  micro-batches that split over them too. Before any mesh, workdir or data exists."""
  n = len(jax.devices() if devices is None else devices)
  sharding.fsdp_axis(config.fsdp, n)
  sharding.check_batch_size(config.batch_size, n)
  if config.batch_size % (config.grad_accum_steps * n):
    raise ConfigError(f"batch_size={config.batch_size} must split into grad_accum_steps="
                      f"{config.grad_accum_steps} micro-batches, each divisible by the "
                      f"{n} devices.")


def _restored(state: TrainState, ckpt: checkpoint.Checkpointer, data_iter: Any,
              workdir: str) -> tuple[TrainState, int]:
  """(the newest readable checkpoint's state, its step) laid out as `state`, with its data
  position restored into `data_iter` (unless None); (state, 0) where there is none."""
  abstract = jax.tree_util.tree_map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
  try:
    restored = ckpt.restore(abstract, data_iter=data_iter)
  except checkpoint.IncompatibleCheckpointError as e:
    raise TrainingError(f"The checkpoints in {workdir} do not fit this model ({e}); use a new "
                        "--workdir.") from None
  return (state, 0) if restored is None else restored
