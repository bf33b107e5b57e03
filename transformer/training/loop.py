"""The training loop: data -> jitted train_step on the mesh -> logs, evals, checkpoints.

Nothing is lost on a crash: orbax saves the train state, the data iterator and the config
every `checkpoint_every_steps` (asynchronously) and at the end, each before its step's
evaluations (a restart repeats those, so a crash while decoding loses no training); a restart
with the same workdir resumes from the newest good checkpoint and repeats the uninterrupted
run exactly (the step RNG is fold_in(seed, step) and the data iterator is restored). SIGTERM
and SIGINT save at the step reached and return. Between logging steps the host never waits
on the device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import time
from typing import Any, Iterator, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils
from absl import logging
from tqdm import tqdm

from transformer import checkpoint, diagnostics, model_summary, models, storage
from transformer.data import pipeline
from transformer.errors import NonFiniteLossError, UserError, disk_full, one_line
from transformer.training import (experiment, heldout, run, sharding, stop_signals,
                                  workdir_checks)
from transformer.training.failure_rule import FailureRule, layer_grad_norms
from transformer.training.writers import MetricWindow, MetricWriter, read_metrics


def _get_datasets(exp: experiment.Experiment, workdir: str) -> pipeline.Datasets:
  """Process 0 prepares the data (and tokenizer) first; the others then read what it wrote."""
  if jax.process_count() == 1:
    return pipeline.get_datasets(exp.data, workdir=workdir)
  if jax.process_index() == 0:
    datasets = pipeline.get_datasets(exp.data, workdir=workdir)
  multihost_utils.sync_global_devices("transformer: datasets prepared")
  if jax.process_index() != 0:
    datasets = pipeline.get_datasets(exp.data, workdir=workdir)
  return datasets


PROFILE_DIR = "profile"  # WORKDIR/profile/plugins/profile/<date>/*.xplane.pb, *.trace.json.gz


@dataclasses.dataclass(frozen=True)
class Summary:
  """What a run did, as `train_and_evaluate` returns it and scripts/train.py prints it: the
  step it reached and the metrics of its last training window and evaluations ({} where none
  ran)."""
  step: int
  train: Mapping[str, float] = dataclasses.field(default_factory=dict)
  eval: Mapping[str, float] = dataclasses.field(default_factory=dict)
  test: Mapping[str, float] = dataclasses.field(default_factory=dict)  # once, at the end
  decode: Mapping[str, float] = dataclasses.field(default_factory=dict)  # the eval split's BLEU
  bleu_signature: Optional[str] = None  # sacrebleu's, of the test split's BLEU
  stopped_by: Optional[str] = None  # the signal that stopped it before num_train_steps
  failure: Optional[str] = None  # why the finished run failed by the default failure rule

  def lines(self, workdir: str) -> list[str]:
    """What the run did, in a few lines: the held-out figures first, then where its
    checkpoint and metrics are."""
    done = (f"stopped by {self.stopped_by} at step {self.step}" if self.stopped_by
            else f"trained to step {self.step}")
    lines = [f"Run {workdir}: {done}."]
    if self.failure:
      lines.append(f"  FAILED by the default failure rule: {self.failure} (docs/training.md, "
                   "'A run that failed').")
    for m, name in ((self.eval, "held-out"), (self.test, "test")):
      if "accuracy" in m:
        lines.append(f"  {name}: token accuracy {m['accuracy']:.2%}, NLL {m['nll']:.4f}, "
                     f"perplexity {m['perplexity']:.3g}")
    if "bleu" in self.decode:
      d = self.decode
      lines.append(f"  decoded held-out: BLEU {d['bleu']:.2f}, exact {d['exact_match']:.2%} of "
                   f"{int(d['num_examples']):,}")
    lines.append(f"  checkpoint {storage.join(checkpoint.checkpoint_dir(workdir), str(self.step))}"
                 f"; metrics {storage.join(workdir, 'metrics.jsonl')}")
    return lines


def train_and_evaluate(exp: experiment.Experiment, workdir: str,
                       devices: Optional[Sequence[jax.Device]] = None) -> Summary:
  """Trains an experiment (`experiment.parse(config)`: checked once, when it was made) in
  `workdir`, resuming if it holds checkpoints; returns its `Summary`.

  `devices` defaults to every device of every process (the mesh's data axis). From the end of
  data preparation, SIGTERM, SIGINT and SIGHUP save a checkpoint at the step reached and
  return, with the summary's `stopped_by` naming the signal.
  """
  # Every check that needs no data was made when `exp` was parsed; the devices are checked
  # here, before anything is written.
  mesh = run.device_mesh(exp, devices)
  created = workdir_checks.check_workdir(workdir)
  # One run at a time in a workdir: process 0 holds the lock for the whole job.
  lock = workdir_checks.workdir_lock(workdir) if jax.process_index() == 0 else \
      contextlib.nullcontext()
  try:
    with lock:
      # The workdir is checked before data preparation (which may train a tokenizer or
      # build a TFDS dataset).
      data_changed = _check_resume(exp, workdir)
      datasets = _get_datasets(exp, workdir)
      experiment.check_data_vocab(exp, datasets.vocab_size)
      with stop_signals.StopSignals() as signals:
        return _train(exp, workdir, datasets, mesh, data_changed, signals)
  except BaseException as e:
    if created:
      workdir_checks.remove_if_empty(workdir)
    if isinstance(e, Exception) and not isinstance(e, UserError) and disk_full(e):
      raise workdir_checks.disk_full_error(workdir, e, workdir=workdir) from None
    raise


@dataclasses.dataclass
class _Training:
  """What the loop trains with, made by `_setup`: the Run (its state taken out: the train
  step donates it) and the state, which changes with every step."""
  run: run.Run
  state: Any
  workdir: str
  datasets: pipeline.Datasets
  writer: MetricWriter
  train_iter: Any
  train_rng: jax.Array
  resolved: dict[str, Any]  # the config as saved with each checkpoint
  primary: bool  # process 0: it writes the metrics
  diagnostics_batches: list[Any]  # the diagnostics' held-out batches, the same at every step
  counts: diagnostics.TokenCounts


def _check_resume(exp: experiment.Experiment, workdir: str) -> bool:
  """The workdir against this run, before any data is read: its model, data stream and
  steps. True when the data stream changed and allow_data_change lets the run go on
  (workdir_checks.check_resumable)."""
  checkpoints = storage.join(workdir, checkpoint.CHECKPOINT_DIR)
  if storage.as_path(checkpoints).exists():  # else it is made in the workdir, checked writable
    workdir_checks.check_writable(checkpoints, "make it writable, or pass another --workdir",
                                  what="The checkpoint directory")
  saved_steps = checkpoint.finished_steps(checkpoint.checkpoint_dir(workdir))
  # Fewer steps than the newest checkpoint first: said as such, not as a schedule's change.
  workdir_checks.check_steps(workdir, exp.optimization, saved_steps)
  return workdir_checks.check_resumable(
      workdir, exp, bool(saved_steps),
      workdir_checks.run_identity(exp.data, workdir, jax.process_count()))


def _setup(exp: experiment.Experiment, workdir: str, datasets: pipeline.Datasets,
           mesh: jax.sharding.Mesh, data_changed: bool) -> _Training:
  """The Run of `exp` with the newest checkpoint restored (its data position unless
  `data_changed`), or a check that starting afresh loses no history."""
  config = exp.config
  # Taken after the data is prepared: a first run's tokenizer file exists only now.
  identity = workdir_checks.run_identity(exp.data, workdir, jax.process_count())
  resolved = {"experiment": config.to_dict(), "model": exp.model.to_dict(),
              checkpoint.IDENTITY_KEY: identity}
  train_iter = datasets.train_iter()
  r = run.restored(exp, workdir, mesh, data_iter=None if data_changed else train_iter)
  resolved["summary"] = model_summary.summarize(r.model.parameter_groups(r.state.params),
                                                models.row_flops(r.model, exp.data.max_len),
                                                exp.data.max_len)
  primary = jax.process_index() == 0
  if primary:
    logging.info("%s", model_summary.format_summary(resolved["summary"]))
  if r.from_checkpoint:
    logging.info("Resumed from step %d of %s.", r.start_step, workdir)
    history = workdir_checks.resume_history(workdir, exp, r.start_step, identity)
    if history:
      resolved[workdir_checks.CHANGED_ON_RESUME] = history
  elif primary:
    workdir_checks.check_history(workdir, exp.loop)
  if primary:
    checkpoint.write_config(workdir, resolved)
  writer = MetricWriter(workdir, enabled=primary, resume_step=r.start_step,
                        rerun_splits=heldout.EVAL_SPLITS)
  diagnostics_batches = [
      sharding.global_batch(b, r.mesh)
      for b in itertools.islice(datasets.eval_batches(), exp.loop.diagnostics_batches)
  ] if exp.loop.diagnostics_every_steps else []
  counts = diagnostics.TokenCounts(exp.model.target_vocab_size or exp.model.vocab_size)
  return _Training(dataclasses.replace(r, state=None), r.state, workdir, datasets, writer,
                   train_iter, run.rngs(exp)[1], resolved, primary, diagnostics_batches,
                   counts)


def _train(exp: experiment.Experiment, workdir: str, datasets: pipeline.Datasets,
           mesh: jax.sharding.Mesh, data_changed: bool,
           signals: stop_signals.StopSignals) -> Summary:
  job = _setup(exp, workdir, datasets, mesh, data_changed)
  exp = job.run.experiment
  num_steps = exp.optimization.num_train_steps
  latest: dict[str, Any] = {}  # the newest of each kind of figure (Summary's fields)
  window = MetricWindow(functools.partial(_stop_at_nonfinite, job.run.checkpointer))
  bar = tqdm(total=num_steps, initial=job.run.start_step, disable=not job.primary, unit="step",
             dynamic_ncols=True, desc="train")
  profile = _Profile(exp.loop.profile_window(), storage.join(workdir, PROFILE_DIR),
                     job.primary)
  step, failed = job.run.start_step, True
  with _logs_above_the_bar():
    try:
      if step:  # the checkpoint's step may have stopped before or inside its evaluations
        latest.update(_heldout_scores(job, step, window))
        if step == num_steps:  # nothing left to train: the last window's training metrics
          last = [r for r in read_metrics(workdir, "train") if r["step"] == num_steps]
          latest["train"] = {k: v for k, v in last[-1].items() if k not in ("step", "split")} \
              if last else {}
      while step < num_steps:
        if signals.should_stop(step):  # every process asks at every step: they stop together
          break
        profile.step_begins(step)
        began = time.perf_counter()
        metrics, waited = _train_step(job, step)
        window.add(metrics, host_seconds=time.perf_counter() - began, input_seconds=waited)
        if step == job.run.start_step:
          bar.unpause()  # the first step compiles: the rate and ETA count from after it
        step += 1
        bar.update(1)
        profile.step_ended(step, job.state)
        logged = _log_and_save(job, step, window, bar)
        if logged is not None:
          latest["train"] = logged
        latest.update(_heldout_scores(job, step, window))
      if step < num_steps:  # stopped by a signal: save where we are, return cleanly
        window.check(step)  # a non-finite loss in it sets the checkpoints aside instead
        job.run.checkpointer.save(step, job.state, data_iter=job.train_iter, config=job.resolved)
        logging.warning("%s: saved a checkpoint at step %d in %s; rerun the same command to "
                        "continue.", signals.stopped_by, step, workdir)
        latest["stopped_by"] = signals.stopped_by
      failed = False
    finally:
      bar.close()
      profile.close()
      getattr(job.train_iter, "close", lambda: None)()  # its prefetch thread
      _close(job.run.checkpointer, job.writer, failed)
    if job.primary and step == num_steps:  # read off what the run wrote, as a sweep's rule is
      latest["failure"] = _failure(workdir, exp.optimization.warmup_steps)
      if latest["failure"]:
        logging.warning("The run finished but failed by the default failure rule: %s.",
                        latest["failure"])
    return Summary(step, **latest)


def _failure(workdir: str, warmup_steps: int) -> Optional[str]:
  """Why the finished run failed by the default FailureRule (stalled, a dead layer), or None."""
  losses = {r["step"]: r["loss"] for r in read_metrics(workdir, "train")}
  last = (read_metrics(workdir, "diagnostics") or [{}])[-1]
  return FailureRule().judge(losses, layer_grad_norms(last), warmup_steps=warmup_steps)


@contextlib.contextmanager
def _logs_above_the_bar() -> Iterator[None]:
  """While the progress bar shows, absl's log lines go through tqdm.write: each is printed
  above the bar, which is drawn again below it, instead of both sharing a row of stderr."""
  handler = logging.get_absl_handler().python_handler
  stream = handler.stream

  class AboveTheBar:
    def write(self, text: str) -> None:
      tqdm.write(text, file=stream, end="")

    def flush(self) -> None:
      stream.flush()

  handler.setStream(AboveTheBar())
  try:
    yield
  finally:
    handler.setStream(stream)


def _train_step(job: _Training, step: int) -> tuple[dict[str, jax.Array], float]:
  """One step from `step` (and the diagnostics due at it); returns its device metrics and the
  seconds the host waited for its batch."""
  began = time.perf_counter()
  host_batch = next(job.train_iter)
  waited = time.perf_counter() - began
  batch = sharding.global_batch(host_batch, job.run.mesh)
  every = job.run.experiment.loop.diagnostics_every_steps
  diagnose = every and (step + 1) % every == 0
  if every:
    job.counts.add(host_batch)
    if step == 0:  # the scales at initialisation, logged as step 0
      job.writer.write(0, "diagnostics", diagnostics.heldout_scale_diagnostics(
          job.run.model, job.state.params, job.diagnostics_batches, job.counts.frequency()))
  old_params = jax.tree_util.tree_map(jnp.copy, job.state.params) if diagnose else None  # donated
  job.state, metrics = job.run.steps.train(job.state, batch, job.train_rng)
  if diagnose:  # gradients at old_params with the step's dropout key
    grads = job.run.steps.grads(old_params, batch, jax.random.fold_in(job.train_rng, step))
    job.writer.write(step + 1, "diagnostics", diagnostics.training_diagnostics(
        job.run.model, old_params, job.state.params, grads, job.diagnostics_batches,
        job.counts.frequency()))
  return metrics, waited


def _log_and_save(job: _Training, step: int, window: MetricWindow,
                  bar: tqdm) -> Optional[dict[str, float]]:
  """The log line and the checkpoint due at `step` (a checkpoint also checks the window's
  losses: none is saved past a non-finite one); returns the window's training metrics where
  it logged them."""
  exp = job.run.experiment
  is_last = step == exp.optimization.num_train_steps
  log = step % exp.loop.log_every_steps == 0 or is_last
  save = step % exp.loop.checkpoint_every_steps == 0 or is_last
  summary = None
  if log:
    first = window.first_step(step)
    summary = window.summary(step)
    job.writer.write(step, "train", summary, first_step=first)
    bar.set_postfix(loss=f"{summary['loss']:.3f}", acc=f"{summary['accuracy']:.3f}",
                    tok_s=f"{summary['tokens_per_sec']:.0f}")
  elif save:
    window.check(step)  # no checkpoint past a non-finite loss; the window goes on
  if save:
    job.run.checkpointer.save(step, job.state, data_iter=job.train_iter, config=job.resolved)
    job.writer.flush()  # TensorBoard's events as far as this checkpoint (copied, on gs://)
  return summary


def _heldout_scores(job: _Training, step: int, window: MetricWindow) -> dict[str, Any]:
  """The evaluations due at `step`, after its checkpoint (a crash during a long decode loses
  no training: the resumed run repeats them); their time is not training throughput. Returns
  their figures (`heldout.evaluations_due`)."""
  with window.paused():
    r = job.run
    return heldout.evaluations_due(step, r.experiment, r.model, job.state.params, r.steps.eval,
                                   job.datasets, r.mesh, job.writer,
                                   functools.partial(_stop_at_nonfinite, r.checkpointer))


def _stop_at_nonfinite(ckpt: checkpoint.Checkpointer, step: int, what: str,
                       value: float) -> None:
  """Stops the run at a non-finite `what` of `step` ('loss', 'param_norm', or a held-out
  split's loss: 'eval', 'test'), keeping the last good checkpoint: every checkpoint of the
  params that gave it is set aside (a train loss measures the params of the step before;
  a param norm and a held-out loss those of `step`), so no reader or resume takes one."""
  first = step - 1 if what == "loss" else step
  # The step's own save may be in flight (a held-out loss's): finished first, so that it is
  # listed and set aside. Its failure (a full disk) is the closing's to warn of: this stop,
  # the first error, is the one said.
  with contextlib.suppress(Exception):
    ckpt.wait_until_finished()
  for s in ckpt.all_steps():
    if s >= first:
      ckpt.set_aside(s, "nonfinite")
  good = max(ckpt.all_steps(), default=None)
  resume = f"a restart resumes from step {good}" if good else "no checkpoint is left"
  said = {"loss": f"Non-finite loss at step {step}",
          "param_norm": f"Non-finite parameter norm after step {step} ({value}: the update "
                        "diverged)"}.get(
              what, f"Non-finite held-out loss at step {step} (the {what} split's: {value})")
  raise NonFiniteLossError(
      f"{said}; training stopped, checkpoints from step {first} on were set aside as "
      f"<step>.nonfinite and {resume}; lower learning_rate or set grad_clip_norm.")


class _Profile:
  """jax.profiler's trace of config.profile_steps (START, COUNT) on process 0, into `directory`;
  a run stopped inside the window keeps what was traced."""

  def __init__(self, window: Optional[tuple[int, int]], directory: str, primary: bool):
    self.window = window if primary else None
    self.directory, self.active = directory, False

  def step_begins(self, step: int) -> None:
    if self.window and step == self.window[0]:
      jax.profiler.start_trace(self.directory)
      self.active = True

  def step_ended(self, step: int, state: Any) -> None:
    if self.active and step == self.window[0] + self.window[1]:
      jax.block_until_ready(state)
      self.close()
      logging.info("Profiled steps %d-%d into %s.", self.window[0] + 1, step, self.directory)

  def close(self) -> None:
    if self.active:
      jax.profiler.stop_trace()
      self.active = False


def _close(ckpt: checkpoint.Checkpointer, writer: MetricWriter, failed: bool) -> None:
  """Waits for the last save, then closes the checkpointer and the metric writer (the writer
  also when the save failed, so nothing of it is retried at exit). The first error is raised
  (a full disk becomes one line in train_and_evaluate); after a training error, which is the
  one reported, theirs are warnings."""
  def close_checkpointer() -> None:
    ckpt.wait_until_finished()
    ckpt.close()

  errors = []
  for close in (close_checkpointer, writer.close):
    try:
      close()
    except Exception as e:  # noqa: BLE001
      errors.append(e)
  if errors and not failed:
    raise errors[0]
  for e in errors:
    logging.warning("Closing the checkpointer or the metric writer after the error failed too: "
                    "%s", one_line(e))
