"""One Run: everything a caller needs to train, evaluate, benchmark or compile an experiment,
made in one place from its config.

  run = setup(config)                                  # checked (experiment.parse); fresh state
  run = setup(exp, workdir=W, restore=True, data_iter=it)   # the newest checkpoint of W
  run = setup(exp, devices=target, state="abstract")        # shapes only: compile for W's pod

The training loop, evaluation, the sweep runner, the benchmark, the compile report and the
reading of a checkpoint (`training.loading`) all take their model, mesh, steps and state from
here (a decode-only read and the decoding benchmark through its `build_model` and
`random_model`); nothing else builds one (tests/test_architecture.py walks the package).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import jax
import ml_collections
import numpy as np

from transformer import checkpoint, model_kinds, models
from transformer.attention import step_kernel
from transformer.config import ModelConfig
from transformer.errors import ConfigError, TrainingError
from transformer.model_summary import train_flops
from transformer.training import experiment, sharding, steps
from transformer.training.state import TrainState

STATES = ("init", "abstract", "none")


@dataclasses.dataclass(frozen=True)
class Run:
  """What a run trains, evaluates or compiles with."""
  experiment: experiment.Experiment
  model: models.ModelKind
  mesh: jax.sharding.Mesh
  steps: steps.Steps  # jitted init, train, eval and gradient steps on the mesh
  # The TrainState on the mesh: fresh, restored, given params (no optimizer state), abstract
  # (jax.ShapeDtypeStruct leaves with their shardings), or None (state='none').
  state: Any
  start_step: int = 0  # the step of the restored checkpoint; 0 for a fresh state
  restored: bool = False  # whether the state is a checkpoint's (a step-0 one included)
  checkpointer: Optional[checkpoint.Checkpointer] = None  # the workdir's, when one was given

  @property
  def config(self) -> ml_collections.FrozenConfigDict:
    return self.experiment.config

  @property
  def model_config(self) -> ModelConfig:
    return self.experiment.model


def build_model(model_type: str, model_config: ModelConfig) -> models.ModelKind:
  """The model of an experiment's model_type (`model_kinds`): Transformer(config) for
  'seq2seq', DecoderOnly(config) for 'lm', or the class a 'package.module:Class' names, which
  must answer every question of `models.ModelKind`."""
  model = model_kinds.model_class(model_type)(model_config)
  missing = [name for name in models.ModelKind.__annotations__.keys() | {
      n for n in vars(models.ModelKind) if not n.startswith("_")} if not hasattr(model, name)]
  if missing:
    raise ConfigError(f"model_type={model_type!r} lacks {', '.join(sorted(missing))} of "
                      "transformer.models.ModelKind; every model kind answers them all.")
  return model


def random_model(model_type: str, model_config: ModelConfig,
                 seed: int = 0) -> tuple[models.ModelKind, Any]:
  """(model, fresh params from PRNGKey(seed)) on the default device: a model to time or
  inspect without an experiment (the decoding benchmark)."""
  model = build_model(model_type, model_config)
  rows = {k: np.ones((1, 8), np.int32) for k in model.batch_keys}
  return model, jax.jit(models.init_params, static_argnums=0)(model, jax.random.PRNGKey(seed),
                                                               rows)


def step_flops(config: ml_collections.ConfigDict | experiment.Experiment) -> float:
  """Analytic train FLOPs of one step of an experiment (model_summary's formula: 3 x the
  forward pass of batch_size rows of max_len), from its config alone."""
  exp = experiment.parse(config)
  model = build_model(exp.config.model_type, exp.model)
  return train_flops(models.row_flops(model, exp.config.max_len), exp.config.batch_size)


def rngs(config: ml_collections.ConfigDict) -> tuple[jax.Array, jax.Array]:
  """(init key, training key) of an experiment: both from its seed."""
  init_rng, train_rng = jax.random.split(jax.random.PRNGKey(config.seed))
  return init_rng, train_rng


def setup(config: ml_collections.ConfigDict | experiment.Experiment,
          devices: Optional[Sequence[Any]] = None, *, state: str = "init",
          workdir: Optional[str] = None, restore: bool = False, data_iter: Any = None,
          params: Any = None) -> Run:
  """The Run of an experiment on `devices` (default: every device of every process; attached
  or not). A config is checked first (`experiment.parse`), so a mistake is one line before
  anything is built; an `Experiment` was checked when it was made.

  state: 'init' (fresh, from the seed), 'abstract' (shapes and shardings only: what compiling
  for an absent target needs), 'none' (model, mesh and steps alone). `params` instead: a
  checkpoint read for evaluation (host arrays, placed replicated; no optimizer state), with
  its recorded experiment (`experiment.recorded`). `workdir`: the run's Checkpointer; with
  restore=True the newest readable checkpoint replaces the fresh state (and its data position
  `data_iter`'s).
  """
  if state not in STATES:
    raise ValueError(f"state={state!r} is not one of {STATES}.")
  if restore and (workdir is None or state != "init" or params is not None):
    raise ValueError("restore=True restores into a fresh state: it needs a workdir, "
                     "state='init' and no params.")
  exp = experiment.parse(config)
  config = exp.config
  if params is None:
    check_devices(exp, devices)
  # Given params are placed whole on every device (a read needs no split layout), so a run
  # trained with fsdp=8 is read on one device.
  mesh = sharding.make_mesh(devices, config.fsdp if params is None else 1)
  model = build_model(config.model_type, exp.model)
  _check_decodes(config, model)
  built = steps.build_steps(config, model, mesh)
  ckpt = None if workdir is None else checkpoint.Checkpointer(
      workdir, keep=config.keep_checkpoints, async_save=config.async_checkpoints)
  start, fresh, restored = 0, None, False
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
      fresh, start, restored = _restored(fresh, ckpt, data_iter, workdir)
  return Run(exp, model, mesh, built, fresh, start, restored, ckpt)


def _check_decodes(config: ml_collections.ConfigDict, model: models.ModelKind) -> None:
  """BLEU during training needs a model that decodes from its rows (`decoding_source`): one
  line for a model kind of one's own that does not (the built-in LM is refused by validate)."""
  rows = {k: np.ones((1, 2), np.int32) for k in model.batch_keys}
  if config.bleu_every_steps and model.decoding_source(rows) is None:
    raise ConfigError(f"bleu_every_steps={config.bleu_every_steps} needs a model that decodes "
                      f"from its rows' source, and {config.model_type!r} decodes from none; set "
                      "--config.bleu_every_steps=0.")


def check_devices(exp: ml_collections.ConfigDict | experiment.Experiment,
                  devices: Optional[Sequence[Any]] = None) -> None:
  """The run `exp` asks for fits `devices` (default: every device of every process): the
  fsdp axis divides them, the global batch splits over them and into grad_accum_steps
  micro-batches that split over them too, and an explicit attention kernel runs on their
  platform for the rows' shapes (`attention.step_kernel`). Before any mesh, workdir or data
  exists."""
  exp = experiment.parse(exp)
  config = exp.config
  n = len(jax.devices() if devices is None else devices)
  sharding.fsdp_axis(config.fsdp, n)
  sharding.check_batch_size(config.batch_size, n)
  if config.batch_size % (config.grad_accum_steps * n):
    raise ConfigError(f"batch_size={config.batch_size} must split into grad_accum_steps="
                      f"{config.grad_accum_steps} micro-batches, each divisible by the "
                      f"{n} devices.")
  with jax.set_mesh(sharding.make_mesh(devices, config.fsdp)):  # their platform, attached or not
    step_kernel(exp.model, config.max_len)


def _restored(state: TrainState, ckpt: checkpoint.Checkpointer, data_iter: Any,
              workdir: str) -> tuple[TrainState, int, bool]:
  """(the newest readable checkpoint's state, its step, True) laid out as `state`, with its
  data position restored into `data_iter` (unless None); (state, 0, False) where there is
  none."""
  abstract = jax.tree_util.tree_map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
  try:
    restored = ckpt.restore(abstract, data_iter=data_iter)
  except checkpoint.IncompatibleCheckpointError as e:
    raise TrainingError(f"The checkpoints in {workdir} do not fit this model ({e}); use a new "
                        "--workdir.") from None
  return (state, 0, False) if restored is None else (*restored, True)
