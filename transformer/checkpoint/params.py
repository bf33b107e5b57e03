"""`load_params`: the analysis side of checkpoints (read only, host numpy, any device count)."""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional

from etils import epath
import jax
import numpy as np
import orbax.checkpoint as ocp

from transformer.checkpoint.checksums import (CHECKSUMS_KEY, CONFIG_KEY, checksums,
                                              saved_metadata, verify, verify_json, verify_step)
from transformer.checkpoint.config_file import CONFIG_FILE, read_config
from transformer.checkpoint.step_dirs import (IncompatibleCheckpointError, checkpoint_dir,
                                              finished_steps, newest_readable)
from transformer.config import ModelConfig
from transformer.errors import ConfigError, MissingFileError, RunError, one_line


class LoadedParams(tuple):
  """(params, model_config), unpacked as a pair, with the checkpoint step they came from as
  `.step` and the run's record stored with that step as `.record` (experiment, model and
  identity; config.json's only for a checkpoint that holds none): `params, config =
  load_params(w)`, `load_params(w).step` and `load_params(w).record` all work."""

  def __new__(cls, params: Any, model_config: ModelConfig, step: int,
              record: Optional[dict[str, Any]] = None) -> "LoadedParams":
    loaded = super().__new__(cls, (params, model_config))
    loaded.step, loaded.record = step, dict(record or {})
    return loaded

  @property
  def params(self) -> Any:
    return self[0]

  @property
  def model_config(self) -> ModelConfig:
    return self[1]


def _read_step(step_dir: epath.Path) -> tuple[Any, Optional[dict[str, Any]]]:
  """(params as numpy, the step's config item or None) of one step directory, verified."""
  state_dir = step_dir / "state"
  tree = ocp.PyTreeCheckpointHandler().metadata(state_dir).tree
  if not isinstance(tree, Mapping) or "params" not in tree:
    raise ValueError(f"{state_dir} holds no 'params' subtree")
  wanted = {"params": tree["params"]}
  restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), wanted)
  with ocp.PyTreeCheckpointer() as ckptr:
    restored = ckptr.restore(state_dir, args=ocp.args.PyTreeRestore(
        item=wanted, restore_args=restore_args, partial_restore=True))
  params, custom = restored["params"], saved_metadata(step_dir)
  verify_step(custom, int(step_dir.name))
  want = custom.get(CHECKSUMS_KEY) or {}
  got = {"params/" + k: v for k, v in checksums(params).items()}
  verify(got, {k: v for k, v in want.items() if k.startswith("params/")}, os.fspath(step_dir))
  config = None
  if (step_dir / "config").exists():
    config = ocp.JsonCheckpointHandler().restore(step_dir / "config")
    verify_json(config, custom, CONFIG_KEY, "config item")
  return params, config


def stored_config(workdir: str) -> Optional[dict[str, Any]]:
  """The config stored with the newest checkpoint that holds a readable one; None if none
  does. A run's reference for what it was when config.json is gone."""
  directory = checkpoint_dir(os.fspath(workdir))
  for step in reversed(finished_steps(directory)):
    try:
      config = dict(ocp.JsonCheckpointHandler().restore(directory / str(step) / "config"))
      verify_json(config, saved_metadata(directory / str(step)), CONFIG_KEY, "config item")
      return config
    except Exception:  # noqa: BLE001  (missing or damaged: an older step may hold one)
      continue
  return None


def load_params(workdir: str, step: Optional[int] = None) -> LoadedParams:
  """The params of the newest readable checkpoint (or `step`) as host numpy, + ModelConfig.

  No mesh, no optimizer state, any device count (the arrays are read whole from the OCDBT
  store whatever sharding wrote them). A damaged newest checkpoint is skipped with a
  warning naming it; an explicit `step` is never substituted. The result unpacks as
  (params, model_config) and tells its step as `.step`.
  """
  workdir = os.fspath(workdir)
  directory = checkpoint_dir(workdir)
  steps = finished_steps(directory)
  if not steps:
    raise MissingFileError(
        f"No checkpoints in {os.fspath(directory)!r}: check the workdir path, or train there "
        f"first (scripts/train.py --config=... --workdir={workdir}).")
  if step is not None and int(step) not in steps:
    raise MissingFileError(
        f"No checkpoint for step {step} in {os.fspath(directory)!r}; the steps there are {steps}.")
  read = lambda s: _read_step(directory / str(s))  # noqa: E731
  if step is None:
    (params, config), step = newest_readable(steps, read, os.fspath(directory))
  else:
    step = int(step)
    try:
      params, config = read(step)
    except IncompatibleCheckpointError:
      raise
    except Exception as e:  # noqa: BLE001  (damaged: an explicit step is never substituted)
      raise RunError(f"Checkpoint {os.fspath(directory)}/{step} cannot be read "
                     f"({type(e).__name__}: {one_line(e, 160)}); pick another --step (the steps "
                     f"there are {steps}), or leave --step out for the newest readable one.") \
          from None
  if not config or "model" not in config:
    config = read_config(workdir) if (epath.Path(workdir) / CONFIG_FILE).exists() else {}
  if "model" not in config:
    raise ConfigError(
        f"Checkpoint {directory / str(step)} has no model config, nor has {workdir}/{CONFIG_FILE}; "
        "write one with transformer.checkpoint.write_config(workdir, {'model': "
        "ModelConfig(...).to_dict()}).")
  return LoadedParams(params, ModelConfig.from_dict(config["model"]), step, config)
