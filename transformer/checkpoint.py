"""Checkpoints: an orbax CheckpointManager for training, `load_params` for analysis.

A workdir holds `config.json` and `checkpoints/<step>/` with three orbax items:
  state   the TrainState (sharded jax arrays, OCDBT/zarr3; restored onto the current mesh),
  data    the grain iterator state (grain's orbax handler: one JSON file per process),
  config  the resolved experiment config, with 'model' = ModelConfig.to_dict().
Each step's orbax metadata (`custom_metadata`) also records two uint32 checksums per array
leaf, so a damaged checkpoint is detected on restore even where tensorstore reads it without
an error (in orbax 0.12.8 a byte flipped inside an array's data file reads back silently).

Saves are atomic: orbax writes `<step>.orbax-checkpoint-tmp/` and renames it when every item
is written; a directory with that suffix (a save killed half way) is never listed as a step,
and the writing Checkpointer removes it when it starts.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from typing import Any, Iterable, Mapping, Optional

from etils import epath
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from transformer.config import ModelConfig
from transformer.training.state import TrainState

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"
CONFIG_FILE = "config.json"
_CHECKSUMS_KEY = "checksums"  # in each step's orbax custom_metadata


# ---------------------------------------------------------------------------------------
# config.json
# ---------------------------------------------------------------------------------------
def _jsonable(value: Any) -> Any:
  """A JSON-ready copy: ModelConfig/dataclasses/ConfigDicts to dicts, numpy to Python."""
  if isinstance(value, ModelConfig):
    return _jsonable(value.to_dict())
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    return _jsonable(dataclasses.asdict(value))
  if hasattr(value, "to_dict") and callable(value.to_dict):  # ml_collections.ConfigDict
    return _jsonable(value.to_dict())
  if isinstance(value, Mapping):
    return {str(k): _jsonable(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_jsonable(v) for v in value]
  if isinstance(value, np.ndarray):
    return value.tolist()
  if isinstance(value, np.generic):
    return value.item()
  if value is None or isinstance(value, (bool, int, float, str)):
    return value
  return str(value)  # e.g. a dtype or a callable: recorded, not round-tripped


def write_config(workdir: str, config: Mapping[str, Any]) -> str:
  """Writes `workdir/config.json` (pretty, atomically); returns its path."""
  if "model" not in config:
    raise ValueError("write_config: the config needs a 'model' entry (ModelConfig.to_dict()).")
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, CONFIG_FILE)
  tmp = f"{path}.tmp-{os.getpid()}"
  with open(tmp, "w") as f:
    json.dump(_jsonable(config), f, indent=2, sort_keys=True)
    f.write("\n")
  os.replace(tmp, path)  # never a half-written config.json
  return path


def read_config(workdir: str) -> dict[str, Any]:
  """Reads `workdir/config.json`."""
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(
        f"No {CONFIG_FILE} in {workdir!r}: check the path, or train there first "
        f"(scripts/train.py --workdir={workdir}).")
  with open(path) as f:
    return json.load(f)


# ---------------------------------------------------------------------------------------
# Checksums: order-independent integer sums, so a sharded jax array and its gathered numpy
# copy give the same value, whatever the device count.
# ---------------------------------------------------------------------------------------
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def _path_str(path: Iterable[Any]) -> str:
  """'params/dense/kernel' for a TrainState keypath and for its orbax dict form alike."""
  parts = []
  for k in path:
    for attr in ("key", "name", "idx"):  # DictKey/FlattenedIndexKey, GetAttrKey, SequenceKey
      if hasattr(k, attr):
        parts.append(str(getattr(k, attr)))
        break
    else:
      parts.append(str(k))
  return "/".join(parts)


def _words_jnp(x: jax.Array) -> Optional[jax.Array]:
  """The leaf's raw bits as uint32 words of its own shape; None for an unsupported dtype."""
  if x.dtype == jnp.bool_:
    return x.astype(jnp.uint32)
  if x.dtype.itemsize not in _UINT:
    return None  # 64-bit or 4-bit dtypes: left unverified rather than failing a save
  return jax.lax.bitcast_convert_type(x, _UINT[x.dtype.itemsize]).astype(jnp.uint32)


def _leaf_checksum_jnp(x: jax.Array) -> Optional[jax.Array]:
  """[sum(w), sum(w * (i+1))] mod 2^32 over the leaf's raw words w at flat index i."""
  x = jnp.asarray(x)
  w = _words_jnp(x)
  if w is None:
    return None
  # The flat index from iotas, not a reshape, so a sharded leaf is never relaid out.
  idx = jnp.zeros(x.shape, jnp.uint32)
  stride = 1
  for axis in reversed(range(x.ndim)):
    idx = idx + jax.lax.broadcasted_iota(jnp.uint32, x.shape, axis) * jnp.uint32(stride % 2**32)
    stride *= x.shape[axis]
  return jnp.stack([jnp.sum(w, dtype=jnp.uint32), jnp.sum(w * (idx + 1), dtype=jnp.uint32)])


_checksums_jit = jax.jit(lambda leaves: [_leaf_checksum_jnp(x) for x in leaves])


def _leaf_checksum_np(x: np.ndarray) -> Optional[list[int]]:
  x = np.ascontiguousarray(x)
  if x.dtype == np.bool_:
    w = x.astype(np.uint32)
  elif x.dtype.itemsize in _UINT and x.dtype.kind in "biufcV":  # ml_dtypes bfloat16 is 'V'
    w = x.view(_UINT[x.dtype.itemsize]).astype(np.uint32)
  else:
    return None
  w = w.reshape(-1)
  idx = np.arange(1, w.size + 1, dtype=np.uint64).astype(np.uint32)  # wraps as on device
  return [int(np.sum(w, dtype=np.uint32)), int(np.sum(w * idx, dtype=np.uint32))]


def _checksums(tree: Any) -> dict[str, list[int]]:
  """{'params/dense/kernel': [s1, s2], ...} for every array leaf (device or host)."""
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  on_device = [(p, x) for p, x in leaves if isinstance(x, jax.Array)]
  out = {_path_str(p): _leaf_checksum_np(np.asarray(x))
         for p, x in leaves if not isinstance(x, jax.Array)}
  # One jitted call per device set (a committed single-device step and mesh-sharded params
  # cannot share one computation); then one small host sync.
  groups: dict[Any, list[tuple[Any, jax.Array]]] = {}
  for p, x in on_device:
    groups.setdefault(frozenset(x.sharding.device_set), []).append((p, x))
  for group in groups.values():
    sums = jax.device_get(_checksums_jit([x for _, x in group]))
    out.update({_path_str(p): None if s is None else [int(v) for v in s]
                for (p, _), s in zip(group, sums)})
  return {k: v for k, v in out.items() if v is not None}


def _verify(got: Mapping[str, list[int]], want: Optional[Mapping[str, Any]], where: str) -> None:
  """Raises ValueError on any leaf whose checksum differs from the one saved with it."""
  if not want:
    log.info("Checkpoint %s has no checksums (written by another tool?): not verified.", where)
    return
  common = [k for k in got if k in want]
  if got and not common:
    log.warning("Checkpoint %s: no leaf names match its checksum record; not verified.", where)
  bad = [k for k in common if list(want[k]) != list(got[k])]
  if bad:
    raise ValueError(f"checksum mismatch in {bad[:5]}{' ...' if len(bad) > 5 else ''}: "
                     "the array data is damaged")


def _saved_checksums(step_dir: epath.Path) -> Optional[dict[str, Any]]:
  """The checksums recorded in the step's orbax metadata; None where there are none."""
  try:
    custom = ocp.metadata.get_step_metadata(step_dir).custom_metadata or {}
  except Exception:  # noqa: BLE001  (no readable metadata: the arrays go unverified)
    return None
  return custom.get(_CHECKSUMS_KEY)


# ---------------------------------------------------------------------------------------
# Checkpointer: the training side.
# ---------------------------------------------------------------------------------------
class IncompatibleCheckpointError(ValueError):
  """A readable checkpoint this job cannot use (other model, optimizer or process count).

  Raised at once: restore() falls back to older checkpoints only for damaged ones.
  """


class Checkpointer:
  """Saves and restores (TrainState, grain iterator, config) under `workdir/checkpoints/`.

  Every process of a multi-process job constructs one and calls save/restore alike (orbax
  synchronises and writes the shared files from process 0; each process writes its own
  iterator file). `save` writes whenever it is called: the caller decides the interval.
  """

  def __init__(self, workdir: str, *, keep: Optional[int] = 3, async_save: bool = True):
    if keep is not None and keep < 1:
      raise ValueError(f"Checkpointer(keep={keep}) must be None (keep all) or >= 1.")
    self.workdir = os.fspath(workdir)
    self.directory = epath.Path(self.workdir) / CHECKPOINT_DIR
    options = ocp.CheckpointManagerOptions(
        preservation_policy=ocp.checkpoint_managers.LatestN(keep),
        enable_async_checkpointing=async_save,
        cleanup_tmp_directories=True,  # remove `<step>.orbax-checkpoint-tmp` of a killed save
        create=True,
    )
    self._manager = ocp.CheckpointManager(self.directory, options=options)
    self._config: Optional[dict[str, Any]] = None  # the last config given to save()
    self._corrupt: set[int] = set()  # steps restore() could not read
    self._barriers = 0

  # ---- queries ----
  def all_steps(self) -> list[int]:
    return sorted(self._manager.all_steps())

  def latest_step(self) -> Optional[int]:
    """The newest finished step (it may still be one restore() found damaged)."""
    return self._manager.latest_step()

  def step_path(self, step: int) -> str:
    return os.fspath(self.directory / str(step))

  # ---- save ----
  def save(self, step: int, state: TrainState, *, data_iter: Any = None,
           config: Optional[Mapping[str, Any]] = None, force: bool = False) -> bool:
    """Starts writing checkpoint `step` (async); returns True if a save was started.

    The arrays are copied to host and the iterator state is taken before this returns, so
    the caller may donate `state` and advance `data_iter` at once. `config` (default: the
    last one given) is stored with the step. A step that already exists is left alone and
    False returned, unless `force` (replace it) or restore() found it damaged (then it is
    moved aside to `<step>.corrupt` and rewritten).
    """
    step = int(step)
    if config is not None:
      self._config = _jsonable(config)
    if step in self._manager.all_steps():
      self._manager.wait_until_finished()
      if force:
        log.warning("Replacing checkpoint %s (force=True).", self.step_path(step))
        self._manager.delete(step)
      elif step in self._corrupt:
        self._move_aside(step)
      else:
        log.warning("Checkpoint %s already exists; not saved again (force=True replaces it).",
                    self.step_path(step))
        return False
    items: dict[str, Any] = {"state": ocp.args.StandardSave(state)}
    if data_iter is not None:
      import grain  # local: only a job with an iterator needs grain's orbax handler

      items["data"] = grain.checkpoint.CheckpointSave(data_iter)
    if self._config is not None:
      items["config"] = ocp.args.JsonSave(self._config)
    custom = {_CHECKSUMS_KEY: _checksums(state)}
    saved = self._manager.save(step, args=ocp.args.Composite(**items), force=True,
                               custom_metadata=custom)
    self._corrupt.discard(step)
    return bool(saved)

  def _move_aside(self, step: int) -> None:
    self.set_aside(step, "corrupt")

  def set_aside(self, step: int, reason: str) -> str:
    """Renames step dir `<step>` to `<step>.<reason>`, out of orbax's sight but kept for a
    post-mortem (e.g. 'corrupt', or 'nonfinite' for params that gave a non-finite loss)."""
    self._manager.wait_until_finished()
    src = self.directory / str(step)
    dst = self.directory / f"{step}.{reason}"
    if dst.exists():
      dst = self.directory / f"{step}.{reason}-{int(time.time())}"
    if jax.process_index() == 0:
      log.warning("Moving checkpoint %s aside to %s (%s).", src, dst, reason)
      src.rename(dst)
    self._barriers += 1
    ocp.multihost.sync_global_processes(  # barrier names must be unique
        f"transformer_checkpoint_move_aside_{step}_{self._barriers}")
    self._manager.reload()
    self._corrupt.discard(step)
    return os.fspath(dst)

  # ---- restore ----
  def restore(self, abstract_state: Any, *, data_iter: Any = None,
              step: Optional[int] = None) -> Optional[tuple[TrainState, int]]:
    """The newest readable checkpoint (or `step`) as (state, step); None if there is none.

    `abstract_state`: the TrainState as jax.ShapeDtypeStruct leaves with shardings (or real
    jax arrays), so the state comes back laid out on the current mesh. `data_iter` is set in
    place to the saved position. A damaged checkpoint is skipped with a warning naming it,
    falling back to the previous one; an explicit `step` never falls back.
    """
    abstract_state = _abstract_with_shardings(abstract_state)
    self._manager.wait_until_finished()  # never race our own in-flight save
    self._manager.reload()  # steps written or removed by others
    steps = self.all_steps()
    if step is not None:
      if int(step) not in steps:
        raise FileNotFoundError(
            f"No checkpoint for step {step} in {self.directory}; the steps there are {steps}.")
      return self._restore_step(int(step), abstract_state, data_iter), int(step)
    if not steps:
      return None
    last_error: Optional[BaseException] = None
    for s in reversed(steps):
      try:
        return self._restore_step(s, abstract_state, data_iter), s
      except IncompatibleCheckpointError:
        raise
      except Exception as e:  # noqa: BLE001  (any read failure means: damaged, fall back)
        last_error = e
        self._corrupt.add(s)
        log.warning("Skipping damaged checkpoint %s (%s: %s); falling back to an older one.",
                    self.step_path(s), type(e).__name__, _one_line(e))
    raise RuntimeError(
        f"None of the checkpoints {steps} in {self.directory} could be restored (the last "
        f"error: {type(last_error).__name__}: {_one_line(last_error)}); move {self.directory} "
        "aside to start afresh, or fix the storage they live on.") from last_error

  def _restore_step(self, step: int, abstract_state: Any, data_iter: Any) -> TrainState:
    path = self.directory / str(step)
    same_dtype = _check_compatible(path / "state", abstract_state)
    restored = self._manager.restore(
        step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state)))
    state = restored["state"]
    got = {k: v for k, v in _checksums(state).items() if k in same_dtype}
    _verify(got, _saved_checksums(path), os.fspath(path))
    # The iterator only after the arrays proved good, so a fallback leaves it untouched.
    if data_iter is not None:
      if not (path / "data").exists():
        log.warning("Checkpoint %s holds no data-iterator state: the iterator starts afresh.",
                    path)
      else:
        self._check_data_processes(path / "data")
        import grain

        self._manager.restore(step, args=ocp.args.Composite(
            data=grain.checkpoint.CheckpointRestore(data_iter)))
    return state

  @staticmethod
  def _check_data_processes(data_dir: epath.Path) -> None:
    mine = f"process_{jax.process_index()}-of-{jax.process_count()}.json"
    if not (data_dir / mine).exists():
      found = sorted(p.name for p in data_dir.glob("process_*.json"))
      if found:  # written by another process count: readable, but not by this job
        raise IncompatibleCheckpointError(
            f"{data_dir} holds iterator state for processes {found}, this job is process "
            f"{jax.process_index()} of {jax.process_count()}: restart with the process count "
            "that wrote it, or restore without data_iter.")
      raise FileNotFoundError(f"{data_dir / mine} is missing")

  # ---- lifecycle ----
  def wait_until_finished(self) -> None:
    """Blocks until the in-flight save is on disk (and raises its error, if any)."""
    self._manager.wait_until_finished()
    self._manager.check_for_errors()

  def close(self) -> None:
    self._manager.close()

  def __enter__(self) -> "Checkpointer":
    return self

  def __exit__(self, *exc: Any) -> None:
    self.close()


def _check_compatible(state_dir: epath.Path, abstract_state: Any) -> set[str]:
  """Raises IncompatibleCheckpointError when the saved tree differs from `abstract_state`.

  A changed model or optimizer is the user's to fix, not a damaged checkpoint to skip.
  An unreadable tree record raises its own error, which restore() treats as damage.
  Returns the leaves restored in their saved dtype (orbax casts the others), whose bits
  the checksums can verify.
  """
  leaves = jax.tree_util.tree_flatten_with_path(ocp.PyTreeCheckpointHandler().metadata(
      state_dir).tree)[0]
  saved = {_path_str(p): tuple(getattr(m, "shape", ()) or ()) for p, m in leaves}
  saved_dtype = {_path_str(p): getattr(m, "dtype", None) for p, m in leaves}
  abstract = jax.tree_util.tree_flatten_with_path(abstract_state)[0]
  want = {_path_str(p): tuple(x.shape) for p, x in abstract}
  if saved == want:
    return {k for k, x in ((_path_str(p), x) for p, x in abstract)
            if saved_dtype[k] is not None and np.dtype(saved_dtype[k]) == np.dtype(x.dtype)}
  extra, lacking = sorted(set(saved) - set(want)), sorted(set(want) - set(saved))
  shapes = sorted(k for k in set(saved) & set(want) if saved[k] != want[k])
  detail = "; ".join(f"{name}: {keys[:4]}{' ...' if len(keys) > 4 else ''}" for name, keys in (
      ("only in the checkpoint", extra), ("only in abstract_state", lacking),
      ("different shapes", [f"{k} {saved[k]} vs {want[k]}" for k in shapes])) if keys)
  raise IncompatibleCheckpointError(
      f"Checkpoint {state_dir.parent} was written for another model or optimizer ({detail}); "
      "restore with the config that wrote it, or train in a fresh --workdir.")


def _one_line(e: Optional[BaseException]) -> str:
  text = " ".join(str(e).split())
  return text if len(text) <= 300 else text[:297] + "..."


def _abstract_with_shardings(tree: Any) -> Any:
  def leaf(x: Any) -> Any:
    if isinstance(x, jax.Array):
      return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    if isinstance(x, jax.ShapeDtypeStruct):
      if x.sharding is None:
        raise ValueError(
            "Checkpointer.restore: abstract_state leaves need a sharding (e.g. "
            "jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))), so the "
            "state is restored onto the mesh; for host numpy params use load_params.")
      return x
    return x

  return jax.tree.map(leaf, tree)


# ---------------------------------------------------------------------------------------
# load_params: the analysis side (read only, host numpy, any device count).
# ---------------------------------------------------------------------------------------
def _finished_steps(directory: epath.Path) -> list[int]:
  """Finished steps, as orbax lists them (tmp dirs and `*.corrupt` are not steps)."""
  if not directory.exists():
    return []
  return sorted(m.step for m in ocp.step.standard_name_format().find_all(directory))


def _load_step_params(step_dir: epath.Path) -> tuple[Any, Optional[dict[str, Any]]]:
  """(params as numpy, the step's config item or None) for one step directory."""
  state_dir = step_dir / "state"
  tree = ocp.PyTreeCheckpointHandler().metadata(state_dir).tree
  if not isinstance(tree, Mapping) or "params" not in tree:
    raise ValueError(f"{state_dir} holds no 'params' subtree")
  wanted = {"params": tree["params"]}
  restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), wanted)
  with ocp.PyTreeCheckpointer() as ckptr:
    params = ckptr.restore(state_dir, args=ocp.args.PyTreeRestore(
        item=wanted, restore_args=restore_args, partial_restore=True))["params"]
  want = _saved_checksums(step_dir)
  got = {"params/" + k: v for k, v in _checksums(params).items()}
  _verify(got, {k: v for k, v in (want or {}).items() if k.startswith("params/")},
          os.fspath(step_dir))
  config = None
  if (step_dir / "config").exists():
    config = ocp.JsonCheckpointHandler().restore(step_dir / "config")
  return params, config


def load_params(workdir: str, step: Optional[int] = None) -> tuple[Any, ModelConfig]:
  """The params of the newest readable checkpoint (or `step`) as host numpy, + ModelConfig.

  No mesh, no optimizer state, any device count (the arrays are read whole from the OCDBT
  store whatever sharding wrote them). A damaged newest checkpoint is skipped with a
  warning naming it; an explicit `step` is never substituted.
  """
  workdir = os.fspath(workdir)
  directory = epath.Path(workdir) / CHECKPOINT_DIR
  steps = _finished_steps(directory)
  if not steps:
    raise FileNotFoundError(
        f"No checkpoints in {os.fspath(directory)!r}: check the workdir path, or train there "
        f"first (scripts/train.py --config=... --workdir={workdir}).")
  if step is not None and int(step) not in steps:
    raise FileNotFoundError(
        f"No checkpoint for step {step} in {os.fspath(directory)!r}; the steps there are {steps}.")
  candidates = [int(step)] if step is not None else list(reversed(steps))
  last_error: Optional[BaseException] = None
  for s in candidates:
    step_dir = directory / str(s)
    try:
      params, config = _load_step_params(step_dir)
    except Exception as e:  # noqa: BLE001
      if step is not None:
        raise
      last_error = e
      log.warning("Skipping damaged checkpoint %s (%s: %s); falling back to an older one.",
                  step_dir, type(e).__name__, _one_line(e))
      continue
    if not config or "model" not in config:
      config = read_config(workdir) if os.path.exists(os.path.join(workdir, CONFIG_FILE)) else {}
    if "model" not in config:
      raise ValueError(
          f"Checkpoint {step_dir} has no model config, nor has {workdir}/{CONFIG_FILE}; "
          "write one with transformer.checkpoint.write_config(workdir, {'model': "
          "ModelConfig(...).to_dict()}).")
    return params, ModelConfig.from_dict(config["model"])
  raise ValueError(
      f"None of the checkpoints {steps} in {os.fspath(directory)!r} could be read (the last "
      f"error: {type(last_error).__name__}: {_one_line(last_error)}).")
