"""One Run: everything a caller needs to train, evaluate, benchmark or compile an experiment
(an `experiment.Experiment`, checked when it was parsed), made in one place, by one of four
named constructors:

  r = run.fresh(exp)                                # a fresh state from the seed
  r = run.restored(exp, W, mesh, data_iter=it)      # W's newest checkpoint (fresh where none)
  r = run.abstract(exp, run.device_mesh(exp, pod))  # shapes only: compile for an absent pod
  r = run.for_reading(recorded_exp, params)         # a checkpoint's params, to evaluate

`device_mesh` checks that an experiment fits its devices and lays them out; the loop asks it
before any workdir exists and hands the mesh on.

The training loop, evaluation, the sweep runner, the benchmark, the compile report and the
reading of a checkpoint (`trained.loading`) all take their model, mesh, steps and state from
here (a decode-only read and the decoding benchmark through its `build_model` and
`random_model`); nothing else builds one (tests/test_architecture.py walks the package).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import jax
import numpy as np

from transformer import checkpoint, models
from transformer.attention import step_kernel
from transformer.config import ModelConfig
from transformer.errors import ConfigError, TrainingError
from transformer.model_summary import train_flops
from transformer.training import experiment, sharding, steps
from transformer.training.optimizers import TrainState

@dataclasses.dataclass(frozen=True)
class Run(experiment.OfExperiment):
  """What a run trains, evaluates or compiles with."""
  experiment: experiment.Experiment
  model: models.ModelKind
  mesh: jax.sharding.Mesh
  steps: steps.Steps  # jitted init, train, eval and gradient steps on the mesh
  # The TrainState on the mesh: fresh, restored, given params (no optimizer state), or
  # abstract (jax.ShapeDtypeStruct leaves with their shardings).
  state: Any
  start_step: int = 0  # the step of the restored checkpoint; 0 for a fresh state
  from_checkpoint: bool = False  # whether the state is a checkpoint's (a step-0 one included)
  checkpointer: Optional[checkpoint.Checkpointer] = None  # the workdir's, when one was given


def build_model(model_type: str, model_config: ModelConfig) -> models.ModelKind:
  """The model of an experiment's model_type (`model_kinds`): Transformer(config) for
  'seq2seq', DecoderOnly(config) for 'lm', or the class a 'package.module:Class' names, which
  must answer every question of `models.ModelKind`."""
  return models.model_class(model_type)(model_config)


def random_model(model_type: str, model_config: ModelConfig,
                 seed: int = 0) -> tuple[models.ModelKind, Any]:
  """(model, fresh params from PRNGKey(seed)) on the default device: a model to time or
  inspect without an experiment (the decoding benchmark)."""
  model = build_model(model_type, model_config)
  rows = {k: np.ones((1, 8), np.int32) for k in model.batch_keys}
  return model, models.init_params(model, jax.random.PRNGKey(seed), rows)


def step_flops(exp: experiment.Experiment) -> float:
  """Analytic train FLOPs of one step of an experiment (model_summary's formula: 3 x the
  forward pass of batch_size rows of max_len), from its config alone."""
  model = build_model(exp.data.model_type, exp.model)
  return train_flops(models.row_flops(model, exp.data.max_len), exp.data.batch_size)


def rngs(exp: experiment.Experiment) -> tuple[jax.Array, jax.Array]:
  """(init key, training key) of an experiment: both from its seed."""
  init_rng, train_rng = jax.random.split(jax.random.PRNGKey(exp.data.seed))
  return init_rng, train_rng


def _built(exp: experiment.Experiment, mesh: jax.sharding.Mesh
           ) -> tuple[models.ModelKind, steps.Steps]:
  model = build_model(exp.data.model_type, exp.model)
  return model, steps.build_steps(exp, model, mesh)


def fresh(exp: experiment.Experiment, mesh: Optional[jax.sharding.Mesh] = None) -> Run:
  """The Run of `exp` on `mesh` (default: `device_mesh(exp)`, every device of every process)
  with a fresh state drawn from its seed."""
  mesh = device_mesh(exp) if mesh is None else mesh
  model, built = _built(exp, mesh)
  return Run(exp, model, mesh, built, built.init(rngs(exp)[0]))


def restored(exp: experiment.Experiment, workdir: str,
             mesh: Optional[jax.sharding.Mesh] = None, data_iter: Any = None) -> Run:
  """The Run of `exp` with `workdir`'s Checkpointer and its newest readable checkpoint's
  state (its data position restored into `data_iter`, unless None); a fresh state where the
  workdir holds none. The checkpoint is read into the abstract state's shapes and shardings:
  no fresh state is drawn to read them off, so a resume holds one state, not two."""
  mesh = device_mesh(exp) if mesh is None else mesh
  run = abstract(exp, mesh)
  ckpt = checkpoint.Checkpointer(workdir, keep=exp.loop.keep_checkpoints,
                                 async_save=exp.loop.async_checkpoints)
  try:
    found = ckpt.restore(run.state, data_iter=data_iter)
  except checkpoint.IncompatibleCheckpointError as e:
    raise TrainingError(f"The checkpoints in {workdir} do not fit this model ({e}); use a new "
                        "--workdir.") from None
  if found is None:  # drawn only now: the state a fresh run starts from
    return dataclasses.replace(run, state=run.steps.init(rngs(exp)[0]), checkpointer=ckpt)
  state, step = found
  return dataclasses.replace(run, state=state, start_step=step, from_checkpoint=True,
                             checkpointer=ckpt)


def abstract(exp: experiment.Experiment, mesh: jax.sharding.Mesh) -> Run:
  """The Run of `exp` on `mesh` (`device_mesh(exp, devices)`: devices attached or not) with
  its state as shapes and shardings only (jax.ShapeDtypeStruct leaves): what compiling for an
  absent target needs."""
  model, built = _built(exp, mesh)
  shapes = jax.tree_util.tree_map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
      jax.eval_shape(built.init, rngs(exp)[0]), built.state_shardings)
  return Run(exp, model, mesh, built, shapes)


def for_reading(exp: experiment.Experiment, params: Any,
                devices: Optional[Sequence[Any]] = None) -> Run:
  """The Run of a checkpoint's `params` (host arrays; no optimizer state) under its recorded
  experiment (`experiment.recorded`), for evaluation: placed whole on every one of `devices`
  (default: all), so a run trained with fsdp=8 is read on one device."""
  mesh = sharding.make_mesh(devices, 1)
  model, built = _built(exp, mesh)
  state = TrainState(step=None, params=jax.device_put(params, sharding.replicated(mesh)),
                     opt_state=None)
  return Run(exp, model, mesh, built, state)


def device_mesh(exp: experiment.Experiment, devices: Optional[Sequence[Any]] = None
                ) -> jax.sharding.Mesh:
  """The mesh `exp` trains on over `devices` (default: every device of every process),
  after checking that the run fits them: the fsdp axis divides them, the global batch splits
  over them and into grad_accum_steps micro-batches that split over them too, an explicit
  attention kernel runs on their platform for the rows' shapes (`attention.step_kernel`), and
  a chunked loss is not asked of a GPU. The loop asks before any workdir or data exists."""
  data, loop = exp.data, exp.loop
  accum, chunk = exp.optimization.grad_accum_steps, exp.loss.loss_chunk_size
  devices = jax.devices() if devices is None else devices
  n = len(devices)
  sharding.fsdp_axis(loop.fsdp, n)
  sharding.check_batch_size(data.batch_size, n)
  if data.batch_size % (accum * n):
    raise ConfigError(f"batch_size={data.batch_size} must split into grad_accum_steps="
                      f"{accum} micro-batches, each divisible by the "
                      f"{n} devices.")
  if chunk and devices[0].platform in ("gpu", "cuda"):
    raise ConfigError(
        f"loss_chunk_size={chunk} makes a GPU step larger and slower, not "
        "smaller: each chunk casts the output embedding again and accumulates its own float32 "
        "gradient of it (docs/speed.md); set --chunk=0 on GPUs.")
  mesh = sharding.make_mesh(devices, loop.fsdp)
  with jax.set_mesh(mesh):  # their platform, attached or not
    step_kernel(exp.model, data.max_len)
  return mesh
