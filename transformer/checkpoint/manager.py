"""Checkpointer: the training side of checkpoints, an orbax CheckpointManager.

A workdir holds `config.json` and `checkpoints/<step>/` with three orbax items:
  state   the train state (sharded jax arrays, OCDBT/zarr3; restored onto the current mesh),
  data    the grain iterator state (grain's orbax handler: one JSON file per process),
  config  the resolved experiment config, with 'model' = ModelConfig.to_dict().
Each step's orbax metadata also records the array checksums (`checkpoint.checksums`).

Saves are atomic: orbax writes `<step>.orbax-checkpoint-tmp/` and renames it when every item
is written; a directory with that suffix (a save killed half way) is never listed as a step,
and the writing Checkpointer removes it when it starts.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Mapping, Optional

from etils import epath
import jax
import numpy as np
from jax.experimental import multihost_utils
import orbax.checkpoint as ocp

from transformer.checkpoint.checksums import (CHECKSUMS_KEY, CONFIG_KEY, DATA_KEY, STEP_KEY,
                                              checksums, json_digest, path_str, saved_metadata,
                                              verify, verify_json, verify_step)
from transformer.checkpoint.config_file import to_json
from transformer.checkpoint.step_dirs import (IncompatibleCheckpointError, checkpoint_dir,
                                              newest_readable)
from transformer import storage
from transformer.errors import ConfigError, MissingFileError, RunError, disk_full, not_writable

log = logging.getLogger(__name__)


class Checkpointer:
  """Saves and restores (TrainState, grain iterator, config) under `workdir/checkpoints/`.

  Every process of a multi-process job constructs one and calls save/restore alike (orbax
  synchronises and writes the shared files from process 0; each process writes its own
  iterator file). `save` writes whenever it is called: the caller decides the interval.
  """

  def __init__(self, workdir: str, *, keep: Optional[int] = 3, async_save: bool = True):
    if keep is not None and keep < 1:
      raise ConfigError(f"Checkpointer(keep={keep}) must be None (keep all) or >= 1.")
    self.workdir = os.fspath(workdir)
    self.directory = checkpoint_dir(self.workdir)
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
    self._saving: Optional[int] = None  # the step of the last save started
    self._reported: Optional[int] = None  # a failed save already raised as one line

  # ---- queries ----
  def all_steps(self) -> list[int]:
    return sorted(self._manager.all_steps())

  def latest_step(self) -> Optional[int]:
    """The newest finished step (it may still be one restore() found damaged)."""
    return self._manager.latest_step()

  def step_path(self, step: int) -> str:
    return os.fspath(self.directory / str(step))

  # ---- save ----
  def save(self, step: int, state: Any, *, data_iter: Any = None,
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
      self._config = to_json(config)
    # A failure of the previous (async) save is named as its own; orbax's save would wait for
    # it anyway.
    self._check_last_save(wait=True)
    self._check_writable(step)  # before a replaced step is deleted or moved aside
    if step in self._manager.all_steps():
      self._manager.wait_until_finished()
      if force:
        log.warning("Replacing checkpoint %s (force=True).", self.step_path(step))
        self._manager.delete(step)
      elif step in self._corrupt:
        self.set_aside(step, "corrupt")
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
    custom: dict[str, Any] = {CHECKSUMS_KEY: checksums(state), STEP_KEY: step}
    if self._config is not None:
      custom[CONFIG_KEY] = json_digest(self._config)
    if data_iter is not None:
      custom[DATA_KEY] = _data_digests(data_iter.get_state())
    self._saving = step
    saved = self._manager.save(step, args=ocp.args.Composite(**items), force=True,
                               custom_metadata=custom)
    self._corrupt.discard(step)
    return bool(saved)

  def _check_last_save(self, wait: bool = False) -> None:
    """Raises the error of the last save (after waiting for it, with `wait`): where the
    checkpoint directory could not be written, one RunError naming that save's step, raised
    once; a full disk or anything else as orbax raised it."""
    try:
      if wait:
        self._manager.wait_until_finished()
      self._manager.check_for_errors()
    except Exception as e:  # noqa: BLE001  (sorted: a directory that cannot be written, else raised)
      why = not_writable(e)
      if why is None or disk_full(e):
        raise
      if self._reported == self._saving:  # already said, when the next save asked
        return
      self._reported = self._saving
      raise self._unwritable(self._saving, why) from None

  def _unwritable(self, step: Optional[int], why: str) -> RunError:
    return RunError(f"Cannot save checkpoint {step}: {os.fspath(self.directory)} is not "
                    f"writable ({why}); make it writable and rerun the same command to resume "
                    "from the newest checkpoint.")

  def _check_writable(self, step: int) -> None:
    """A one-line RunError now where the checkpoint directory cannot be written (made
    read-only, its permissions taken): orbax's thread that makes the step's directory would
    fail while the others wait minutes for it."""
    directory = os.fspath(self.directory)
    if storage.is_local(directory) and os.path.isdir(directory) and \
        not os.access(directory, os.W_OK | os.X_OK):  # (a missing one: orbax's error says so)
      raise self._unwritable(step, "a read-only file system or no write permission")

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
              step: Optional[int] = None) -> Optional[tuple[Any, int]]:
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
        raise MissingFileError(
            f"No checkpoint for step {step} in {self.directory}; the steps there are {steps}.")
      return self._restore_step(int(step), abstract_state, data_iter), int(step)
    if not steps:
      return None
    return newest_readable(steps, lambda s: self._restore_step(s, abstract_state, data_iter),
                           os.fspath(self.directory), on_damaged=self._corrupt.add)

  def _restore_step(self, step: int, abstract_state: Any, data_iter: Any) -> Any:
    path = self.directory / str(step)
    same_dtype = check_compatible(path / "state", abstract_state)
    restored = self._manager.restore(
        step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state)))
    state = restored["state"]
    custom = saved_metadata(path)
    got = {k: v for k, v in checksums(state).items() if k in same_dtype}
    verify(got, custom.get(CHECKSUMS_KEY), os.fspath(path))
    verify_step(custom, step)
    if (path / "config").exists():
      verify_json(ocp.JsonCheckpointHandler().restore(path / "config"), custom, CONFIG_KEY,
                  "config item")
    # The iterator only after the arrays proved good, so a fallback leaves it untouched.
    if data_iter is not None:
      if not (path / "data").exists():
        if custom.get(DATA_KEY):  # saved with one: its folder is gone
          raise ValueError("its data-iterator folder is missing")
        log.warning("Checkpoint %s holds no data-iterator state: the iterator starts afresh.",
                    path)
      else:
        mine = self._check_data_processes(path / "data")
        verify_json(json.loads((path / "data" / mine).read_text()), custom, DATA_KEY,
                    f"data-iterator state {mine}", mine)
        import grain

        self._manager.restore(step, args=ocp.args.Composite(
            data=grain.checkpoint.CheckpointRestore(data_iter)))
    return state

  @staticmethod
  def _check_data_processes(data_dir: epath.Path) -> str:
    """The name of this process's iterator file in `data_dir`, which must hold it."""
    mine = f"process_{jax.process_index()}-of-{jax.process_count()}.json"
    if not (data_dir / mine).exists():
      found = sorted(p.name for p in data_dir.glob("process_*.json"))
      if found:  # written by another process count: readable, but not by this job
        raise IncompatibleCheckpointError(
            f"{data_dir} holds iterator state for processes {found}, this job is process "
            f"{jax.process_index()} of {jax.process_count()}: restart with the process count "
            "that wrote it, or restore without data_iter.")
      raise FileNotFoundError(f"{data_dir / mine} is missing")
    return mine

  # ---- lifecycle ----
  def wait_until_finished(self) -> None:
    """Blocks until the in-flight save is on disk (and raises its error, if any)."""
    self._check_last_save(wait=True)

  def close(self) -> None:
    self._manager.close()

  def __enter__(self) -> "Checkpointer":
    return self

  def __exit__(self, *exc: Any) -> None:
    self.close()


def check_compatible(state_dir: epath.Path, abstract_state: Any) -> set[str]:
  """Raises IncompatibleCheckpointError when the saved tree differs from `abstract_state`.

  A changed model or optimizer is the user's to fix, not a damaged checkpoint to skip.
  An unreadable tree record raises its own error, which restore() treats as damage.
  Returns the leaves restored in their saved dtype (orbax casts the others), whose bits
  the checksums can verify.
  """
  leaves = jax.tree_util.tree_flatten_with_path(ocp.PyTreeCheckpointHandler().metadata(
      state_dir).tree)[0]
  saved = {path_str(p): tuple(getattr(m, "shape", ()) or ()) for p, m in leaves}
  saved_dtype = {path_str(p): getattr(m, "dtype", None) for p, m in leaves}
  abstract = jax.tree_util.tree_flatten_with_path(abstract_state)[0]
  want = {path_str(p): tuple(x.shape) for p, x in abstract}
  if saved == want:
    return {k for k, x in ((path_str(p), x) for p, x in abstract)
            if saved_dtype[k] is not None and np.dtype(saved_dtype[k]) == np.dtype(x.dtype)}
  extra, lacking = sorted(set(saved) - set(want)), sorted(set(want) - set(saved))
  shapes = sorted(k for k in set(saved) & set(want) if saved[k] != want[k])
  detail = "; ".join(f"{name}: {keys[:4]}{' ...' if len(keys) > 4 else ''}" for name, keys in (
      ("only in the checkpoint", extra), ("only in abstract_state", lacking),
      ("different shapes", [f"{k} {saved[k]} vs {want[k]}" for k in shapes])) if keys)
  raise IncompatibleCheckpointError(
      f"Checkpoint {state_dir.parent} was written for another model or optimizer ({detail}); "
      "restore with the config that wrote it, or train in a fresh --workdir.")


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


def _data_digests(state: Any) -> dict[str, str]:
  """{'process_I-of-N.json': sha256 of process I's iterator state} for every process (each
  writes its own file; process 0 records them all in the step's metadata)."""
  mine = np.frombuffer(bytes.fromhex(json_digest(state)), np.uint32)
  count = jax.process_count()
  every = multihost_utils.process_allgather(mine) if count > 1 else mine[None]
  return {f"process_{i}-of-{count}.json": np.asarray(row, np.uint32).tobytes().hex()
          for i, row in enumerate(np.asarray(every).reshape(count, -1))}
