"""What a workdir must hold for a run to go on in it, checked before training starts.

A run continues only with its own model and data stream (the files it read, its tokenizer,
its process count: the run's identity, recorded with config.json and every checkpoint); only
one run at a time trains in a workdir (a lock held for the life of the run); it does not
restart from step 0 over the history of a run whose checkpoints were removed; a full disk is
said as such.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import time
from typing import Any, Iterator, Optional, Union

import filelock
from absl import logging

from transformer import checkpoint, storage
from transformer.config import ModelConfig
from transformer.data import corpus_files, local_corpora
from transformer.data import tokenizer as tokenizers
from transformer.errors import ConfigError, TrainingError, disk_full, full_file, one_line
from transformer.records import flat_fields
from transformer.training import experiment, fields, optimizer_settings, writers

LOCK_FILE = "train.lock"  # WORKDIR/train.lock, held by the run training there
HOLDER_SUFFIX = ".holder"  # beside a lock: who holds it (pid, host, since when)


_WORKDIR_FIX = "pass a --workdir you can write to"


def check_workdir(workdir: str) -> bool:
  """Makes the workdir if needed and checks that it is writable; True if it was made here."""
  created = not storage.as_path(workdir).exists()
  check_writable(workdir, _WORKDIR_FIX)
  for name in (writers.METRICS_FILE, checkpoint.CONFIG_FILE):  # files the run writes there
    if storage.as_path(storage.join(workdir, name)).is_dir():
      raise ConfigError(f"{storage.join(workdir, name)} is a directory, where the run writes its "
                        f"{name} file; move it away, or pass another --workdir.")
  return created


def check_writable(directory: str, fix: str = _WORKDIR_FIX, what: str = "Workdir") -> None:
  """Makes `directory` if needed; a one-line TrainingError naming it as `what` and ending in
  `fix` unless a file can be written there (a full disk said as such). The probe file never
  stays behind."""
  probe = storage.as_path(directory) / f".write-test-{os.getpid()}"
  try:
    probe.parent.mkdir(parents=True, exist_ok=True)
    probe.write_text("ok")
  except OSError as e:
    if disk_full(e):  # the directory is named, not the probe file that is removed below
      raise disk_full_error(directory, OSError(e.errno, e.strerror)) from None
    raise TrainingError(f"{what} {directory} is not writable ({e.strerror or one_line(e, 160)}); "
                        f"{fix}.") from None
  finally:
    with contextlib.suppress(OSError):
      if probe.exists():
        probe.unlink()


# ---- one run at a time ----

def try_lock(path: str) -> Optional[Lock]:
  """The exclusive lock at `path`, taken without waiting, its holder written beside it
  (`path` + HOLDER_SUFFIX); None while another process holds it. Its release removes both
  files: a run that ended leaves no lock behind.

  The OS releases the lock when its process dies, so a killed run never leaves it taken. The
  lock works on a local disk and on shared file systems whose locks work (NFSv4, Lustre).
  An object store (gs://) has no lock that its holder's death releases, so there this takes
  none and returns a lock that holds nothing (a warning says so): one run per gs:// workdir is
  the user's to keep.
  """
  if not storage.is_local(path):
    logging.warning("%s: an object store has no file lock; nothing stops a second run from "
                    "writing to this workdir at the same time.", path)
    return _NoLock()
  lock = filelock.FileLock(path, thread_local=False)
  try:
    lock.acquire(timeout=0)
  except filelock.Timeout:
    return None
  try:
    storage.write_atomically(path + HOLDER_SUFFIX, json.dumps(
        {"pid": os.getpid(), "host": socket.gethostname(),
         "since": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n")
  except BaseException:  # a full disk: not left held by a process that goes on (a sweep)
    lock.release()
    raise
  return HeldLock(lock, path)


class HeldLock:
  """A taken lock whose release first removes its holder file and its own name. Removed while
  still held, so no other process can take the name's old file meanwhile; one that opened it
  just before sees an unlinked file and does not count it as taken (filelock >= 3.21)."""

  def __init__(self, lock: filelock.BaseFileLock, path: str):
    self._lock, self._path = lock, path

  @property
  def is_locked(self) -> bool:
    return self._lock.is_locked

  def release(self) -> None:
    try:
      for name in (self._path + HOLDER_SUFFIX, self._path):
        with contextlib.suppress(FileNotFoundError):
          os.unlink(name)
    finally:
      self._lock.release()


class _NoLock:
  """What try_lock returns on an object store: nothing to release."""

  is_locked = False

  def release(self) -> None:
    pass


Lock = Union[HeldLock, _NoLock]  # what try_lock takes


def lock_holder(path: str) -> str:
  """Who holds the lock at `path`, in words, as its holder wrote it."""
  try:
    holder = json.loads(storage.as_path(path + HOLDER_SUFFIX).read_text())
    return f"process {holder['pid']} on {holder['host']}, since {holder['since']}"
  except (OSError, ValueError, KeyError, TypeError):
    return "a process that has not said who it is"


@contextlib.contextmanager
def workdir_lock(workdir: str) -> Iterator[None]:
  """Holds WORKDIR/train.lock for the life of a run; a second run there is refused in one
  line naming the holder. (A sweep point's own lock is another file: no deadlock.)"""
  path = storage.join(workdir, LOCK_FILE)
  lock = try_lock(path)
  if lock is None:
    raise TrainingError(f"Workdir {workdir} is in use by another run ({lock_holder(path)}); "
                        "wait for it to end, or pass another --workdir.")
  try:
    yield
  finally:
    lock.release()


def remove_if_empty(workdir: str) -> None:
  """Removes a workdir left empty (a released lock removes its files) or holding only the
  tokenizer.json its data preparation wrote (a few bytes, written again from the config by a
  rerun): a failed first attempt leaves no workdir behind. (A trained tokenizer.model stays:
  a rerun reuses it.)"""
  path = storage.as_path(workdir)
  left = list(path.iterdir()) if path.is_dir() else None
  if left is None or not all(p.name == tokenizers.JSON_FILE and p.is_file() for p in left):
    return
  with contextlib.suppress(OSError):  # an object store has no directory left to remove
    for p in left:
      p.unlink()
    path.rmdir()


# ---- the run's identity ----



def _fingerprinted() -> tuple[str, ...]:
  """The fields whose files' content is fingerprinted: the paths the text is read from."""
  return tuple(k for k in fields.paths() if k in fields.names(fields.Role.SOURCE))


def run_identity(data: fields.Data, workdir: str, process_count: int) -> dict[str, Any]:
  """What the saved data position and the vocabulary mean beyond the config fields: the
  process count (one iterator state per process), each data file's content fingerprint,
  and the hash of the workdir's tokenizer file. Taken once the data has been read."""
  identity: dict[str, Any] = {"process_count": process_count,
                              "tokenizer": tokenizers.file_hash(workdir)}
  if data.dataset in local_corpora.LOCAL:
    for field in _fingerprinted():
      if getattr(data, field):
        identity[field] = {f: corpus_files.content_fingerprint(f)
                           for f in corpus_files.resolve_files(getattr(data, field), field)}
  return identity


def reference_config(workdir: str) -> Optional[dict[str, Any]]:
  """What the workdir's run was: the config stored with its newest readable checkpoint (a
  record no one edits), else config.json (a run that has no checkpoint yet)."""
  stored = checkpoint.stored_config(workdir)
  if stored is not None:
    return stored
  if storage.as_path(workdir).joinpath(checkpoint.CONFIG_FILE).exists():
    return checkpoint.read_config(workdir)
  return None


def check_resumable(workdir: str, exp: experiment.Experiment, has_checkpoints: bool,
                    identity: Optional[dict[str, Any]] = None) -> bool:
  """A workdir's run continues only with its own model and, once it has checkpoints, its own
  settings, schedule, data stream and tokenizer; a change goes on only under its allow_* flag,
  and every change accepted is named in one warning (and recorded by `resume_history`). True
  when the data stream changed and allow_data_change lets the run go on anyway (its data
  iterator then starts afresh)."""
  saved_config = reference_config(workdir)
  if not saved_config:
    return False
  if not has_checkpoints:  # nothing is resumed: only the model is held to its record
    model = model_changes(saved_config, exp.model)
    if model and not exp.loop.allow_model_change:
      raise _refusal(workdir, ResumeChanges(model, [], []), exp, saved_config)
    return False
  optimizer = saved_config.get("experiment", {}).get("optimizer")
  if optimizer and optimizer != exp.optimization.optimizer:  # its state has another structure
    raise TrainingError(
        f"Workdir {workdir} was trained with optimizer={optimizer!r}, whose state its "
        f"checkpoints hold; this run asks for {exp.optimization.optimizer!r}: resume with "
        f"--config.optimizer={optimizer}, or use a new --workdir.")
  changes = resume_changes(saved_config, exp, identity or {})
  if changes.refused(exp.loop):
    raise _refusal(workdir, changes, exp, saved_config)
  if changes.recorded():
    logging.warning("%s", _accepted(workdir, changes))
  return bool(changes.data)


@dataclasses.dataclass(frozen=True)
class ResumeChanges:
  """What a resume changes, in words ('FIELD OLD -> NEW'), by the flag that lets it go on:
  the model (allow_model_change), the other settings (allow_config_change; num_train_steps
  among them under a schedule that decays over it) and the data stream (allow_data_change)."""
  model: list[str]
  settings: list[str]
  data: list[str]

  def refused(self, loop: fields.Loop) -> list[str]:
    """The kinds of change ('model', 'settings', 'data') whose allow_* flag is not set."""
    return [kind for kind, flag in _FLAGS.items()
            if getattr(self, kind) and not getattr(loop, flag)]

  def recorded(self) -> list[str]:
    """Every change, as the record of the run's history lists it: a model field as
    'model.FIELD', a seed's change saying what else it draws."""
    seed = " (the data order and the dropout masks)"  # fold_in(seed, step) keys the dropout
    return ([f"model.{c}" for c in self.model] + self.settings +
            [c + seed if c.startswith("seed ") else c for c in self.data])


_FLAGS = {"model": "allow_model_change", "settings": "allow_config_change",
          "data": "allow_data_change"}
_KINDS = {"model": "a different model", "settings": "other settings",
          "data": "another data stream"}


def model_changes(saved_config: dict[str, Any], model_config: ModelConfig) -> list[str]:
  """The model fields whose values differ from the recorded run's, in words."""
  saved, new = saved_config.get("model", {}), model_config.to_dict()
  return [f"{k} {saved.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(saved) | set(new))
          if k in new and _normal(saved.get(k)) != _normal(new.get(k))]


def _kind(field: str, role: Optional[fields.Role], exp: experiment.Experiment) -> Optional[str]:
  """Which flag a change of `field` (declared with `role`; None: undeclared) needs: 'data'
  for the data stream (the saved iterator position would mean other examples), 'settings'
  for what the run computes (num_train_steps too where the schedule decays over it: another
  length is another schedule), None for how long it trains, how it is watched, saved and
  laid out."""
  if role in (fields.Role.SOURCE, fields.Role.STREAM):
    return "data"
  if role in (fields.Role.RESUMABLE, fields.Role.INERT):
    decaying = exp.optimization.schedule in optimizer_settings.DECAYING_SCHEDULES
    return "settings" if field == "num_train_steps" and decaying else None
  return "settings"  # Role.COMPUTES, or a field no section declares


def resume_changes(saved_config: dict[str, Any], exp: experiment.Experiment,
                   identity: dict[str, Any]) -> ResumeChanges:
  """Everything this run changes of the workdir's recorded run (`ResumeChanges`): each field
  that differs, by its declared role (`_kind`); a field the record predates counts as its
  default (`experiment.with_defaults`); beside the fields, the data's identity."""
  roles = {k: f.metadata["role"] for k, f in fields.declared().items() if "." not in k}
  before = flat_fields(experiment.with_defaults(saved_config.get("experiment", {})))
  now = flat_fields(exp.config)
  changes: dict[str, list[str]] = {"settings": [], "data": []}
  for k in sorted(set(before) | set(now)):
    top = k.partition(".")[0]
    kind = None if top == "model" else _kind(top, roles.get(top), exp)
    if kind and _normal(before.get(k)) != _normal(now.get(k)):
      changes[kind].append(f"{k} {before.get(k)!r} -> {now.get(k)!r}")
  return ResumeChanges(model_changes(saved_config, exp.model), changes["settings"],
                       changes["data"] + identity_changes(saved_config, exp, identity))


def _refusal(workdir: str, changes: ResumeChanges, exp: experiment.Experiment,
             saved_config: dict[str, Any]) -> TrainingError:
  """The one line that refuses the changes whose flag is not set: all of them at once (a
  max_len is the model's and the data's), the kind's own words where one kind is refused."""
  refused = changes.refused(exp.loop)
  if len(refused) > 1:
    what = "; ".join(f"{_KINDS[k]} ({', '.join(getattr(changes, k))})" for k in refused)
    flags = " and ".join(f"--config.{_FLAGS[k]}=True" for k in refused)
    return TrainingError(
        f"Workdir {workdir} holds another run: {what}; resume with the same settings, use a "
        f"new --workdir, or pass {flags} to go on (the checkpoints' record then lists the "
        f"changes under {CHANGED_ON_RESUME}).")
  if refused == ["model"]:
    return TrainingError(
        f"Workdir {workdir} holds a run of a different model (changed: "
        f"{', '.join(changes.model)}); use a new --workdir, or pass "
        "--config.allow_model_change=True to resume it anyway.")
  if refused == ["settings"] and all(c.startswith("num_train_steps ") for c in changes.settings):
    steps = saved_config.get("experiment", {}).get("num_train_steps")
    return TrainingError(
        f"Workdir {workdir} was trained on the {exp.optimization.schedule!r} schedule, which "
        f"decays over num_train_steps={steps}: num_train_steps="
        f"{exp.optimization.num_train_steps} would change its "
        "rate from the resumed step on, another schedule in one run's history; to extend runs, "
        "train on a schedule that does not decay (--config.schedule=constant or rsqrt, in a "
        "new --workdir), or pass --config.allow_config_change=True to go on (the checkpoints' "
        f"record then lists the change under {CHANGED_ON_RESUME}).")
  if refused == ["settings"]:
    return TrainingError(
        f"Workdir {workdir} was trained with other settings ({', '.join(changes.settings)}); "
        "resuming would mix two runs in one history: resume with the same settings, use a new "
        "--workdir, or pass --config.allow_config_change=True to go on (config.json then "
        "names the changes).")
  return TrainingError(
      f"Workdir {workdir} was trained with another data stream ({', '.join(changes.data)}); "
      "its saved position in the data would point elsewhere; resume with the same settings "
      "and files, use a new --workdir, or pass --config.allow_data_change=True to go on from "
      "its params with the data read afresh.")


def _accepted(workdir: str, changes: ResumeChanges) -> str:
  """The one warning that names every change a resume goes on with, under its flag."""
  said = {"model": "", "settings": ": resuming with this run's",
          "data": ": its params resumed, the data read from the start"}
  parts = [f"{_KINDS[k]} ({'; '.join(getattr(changes, k))}; {_FLAGS[k]}=True{said[k]})"
           for k in _FLAGS if getattr(changes, k)]
  seed = any(c.startswith("seed ") for c in changes.data)
  return (f"Workdir {workdir} was trained otherwise: {', '.join(parts)}"
          + ("; the seed also draws the dropout masks, so the steps from here on drop other "
             "units than the recorded run's would have" if seed else "")
          + f"; the checkpoints' record lists the changes under {CHANGED_ON_RESUME}.")


CHANGED_ON_RESUME = "changed_on_resume"  # a config's record of settings changed on resuming


def resume_history(workdir: str, exp: experiment.Experiment, step: int,
                   identity: Optional[dict[str, Any]] = None) -> list[dict[str, Any]]:
  """The changes made at each resume of `workdir`'s run (under any allow_* flag), this one's
  at `step` included: [{'step': S, 'changes': ['FIELD OLD -> NEW', ...]}, ...]; the model's
  changes as 'model.FIELD', the data stream's (given this run's `identity`, `run_identity`)
  beside the settings'."""
  saved = reference_config(workdir) or {}
  history = list(saved.get(CHANGED_ON_RESUME, []))
  if not saved:
    return history
  changes = resume_changes(saved, exp, identity or {}).recorded()
  return history + [{"step": step, "changes": changes}] if changes else history


def identity_changes(saved_config: dict[str, Any], exp: experiment.Experiment,
                     identity: dict[str, Any]) -> list[str]:
  """What differs between the data identity (`run_identity`) a workdir's run recorded and
  this run's, in words ([] if nothing): the process count, the tokenizer file, the data
  files' content where their names are the same."""
  changes = []
  recorded = saved_config.get(checkpoint.IDENTITY_KEY, {})
  if "process_count" in recorded and "process_count" in identity and \
      recorded["process_count"] != identity["process_count"]:
    changes.append(f"process count {recorded['process_count']} -> {identity['process_count']}")
  if recorded.get("tokenizer") and identity.get("tokenizer") and \
      recorded["tokenizer"] != identity["tokenizer"]:
    changes.append(f"the workdir's tokenizer file is not the one it was trained with "
                   f"({recorded['tokenizer']} -> {identity['tokenizer']})")
  named = saved_config.get("experiment", {})
  if all(named.get(f) == getattr(exp.data, f) for f in _fingerprinted()):  # the same names
    changes += file_changes(recorded, identity)
  return changes


def changed_data_files(recorded: dict[str, Any], data: fields.Data, workdir: str) -> list[str]:
  """The data files of a run's recorded identity (`run_identity`) that hold other text now, in
  words ([] if none or if the run recorded none): what a reader of its held-out split must
  refuse."""
  if not any(field in recorded for field in _fingerprinted()):
    return []
  return file_changes(recorded, run_identity(data, workdir, process_count=1))


def file_changes(recorded: dict[str, Any], identity: dict[str, Any]) -> list[str]:
  """The data files that appeared, went or hold other content between two identities."""
  changes = []
  for field in _fingerprinted():
    if field in recorded and field in identity:
      changes += _file_changes(field, recorded[field], identity[field])
  return changes


def _file_changes(field: str, before: dict[str, str], now: dict[str, str]) -> list[str]:
  """The files of `field` that appeared, went or hold other content, at most three named."""
  changed = [f"{f} changed" for f in sorted(set(before) & set(now))
             if before[f] != now[f] and not corpus_files.same_content(before[f], f)]
  changed += [f"{f} removed" for f in sorted(set(before) - set(now))]
  changed += [f"{f} added" for f in sorted(set(now) - set(before))]
  if not changed:
    return []
  more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
  return [f"{field}: {', '.join(changed[:3])}{more}"]


def check_steps(workdir: str, optimization: fields.Optimization, saved_steps: list[int]) -> None:
  """Refuses a run whose workdir already holds a checkpoint past num_train_steps: there is
  nothing to train, and a silent success would pass off the longer run as this one."""
  newest, steps = max(saved_steps, default=0), optimization.num_train_steps
  if newest > steps:
    go_on = f"pass --config.num_train_steps={newest} or more to continue it"
    if optimization.schedule in optimizer_settings.DECAYING_SCHEDULES:  # its own length only
      recorded = (reference_config(workdir) or {}).get("experiment", {})
      go_on = (f"pass --config.num_train_steps={recorded.get('num_train_steps', newest)} (the "
               f"length its {optimization.schedule!r} schedule decays over) to continue it")
    raise TrainingError(
        f"Workdir {workdir} holds a checkpoint at step {newest}, past num_train_steps={steps}; "
        f"{go_on}, score it with scripts/evaluate.py --workdir={workdir}, or train {steps} "
        "steps in a new --workdir.")


def check_history(workdir: str, loop: fields.Loop) -> None:
  """Refuses to start from step 0 over the metrics of a run whose checkpoints are gone.

  A run killed before its first checkpoint committed restarts (its metrics are rewritten
  alike); a save waits for the one before, so records past twice checkpoint_every_steps
  mean that a checkpoint existed and was removed.
  """
  logged = writers.last_step(workdir)
  directory = storage.as_path(workdir) / checkpoint.CHECKPOINT_DIR
  set_aside = directory.is_dir() and any(
      p.name.endswith((".corrupt", ".nonfinite")) for p in directory.iterdir())
  if logged > 2 * loop.checkpoint_every_steps and not set_aside:
    raise TrainingError(
        f"Workdir {workdir} holds metrics up to step {logged} but no checkpoint (was "
        f"{directory} emptied?); training from step 0 would overwrite that history: move "
        f"{storage.join(workdir, writers.METRICS_FILE)} aside, or use a new --workdir.")
  if logged:
    logging.warning("No checkpoint in %s: training from step 0; the metrics logged up to step "
                    "%d are written again.", workdir, logged)


def _normal(v: Any) -> Any:
  return list(v) if isinstance(v, tuple) else v


def disk_full_error(directory: str, e: BaseException,
                    workdir: Optional[str] = None) -> TrainingError:
  """A full disk in one line: the disk of the file the error names (a TFDS directory, a token
  cache, ...), else of `directory`; given the run's `workdir`, what a rerun starts from."""
  then = ""
  if workdir is not None:
    saved = checkpoint.finished_steps(checkpoint.checkpoint_dir(workdir))
    then = (": it resumes from the newest readable checkpoint" if saved else
            ": it starts from step 0, as no checkpoint was saved")
  return TrainingError(f"No space left on the disk of {full_file(e) or directory} "
                       f"({one_line(e, 160)}); free space and rerun the same command{then}.")
