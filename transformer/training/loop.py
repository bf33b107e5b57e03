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
import itertools
import time
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging
from tqdm import tqdm

from transformer import checkpoint, diagnostics, model_summary, storage
from transformer.data import pipeline
from transformer.errors import NonFiniteLossError, TrainingError, UserError, one_line
from transformer.training import (evaluate, experiment, sharding, steps, stop_signals,
                                  workdir_checks)
from transformer.training.losses import LossOutput, summarize
from transformer.training.writers import MetricWriter, read_metrics

# The splits run_evals writes; at a resumed step they are run again, so their records there are
# dropped first.
EVAL_SPLITS = ("eval", "test", "decode")


def _get_datasets(config: ml_collections.ConfigDict, workdir: str) -> pipeline.Datasets:
  """Process 0 prepares the data (and tokenizer) first; the others then read what it wrote."""
  if jax.process_count() == 1:
    return pipeline.get_datasets(config, workdir=workdir)
  from jax.experimental import multihost_utils
  if jax.process_index() == 0:
    datasets = pipeline.get_datasets(config, workdir=workdir)
  multihost_utils.sync_global_devices("transformer: datasets prepared")
  if jax.process_index() != 0:
    datasets = pipeline.get_datasets(config, workdir=workdir)
  return datasets


PROFILE_DIR = "profile"  # WORKDIR/profile/plugins/profile/<date>/*.xplane.pb, *.trace.json.gz


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str,
                       devices: Optional[Sequence[jax.Device]] = None) -> dict[str, Any]:
  """Trains `config` in `workdir` (resuming if it holds checkpoints); returns the final metrics.

  `devices` defaults to every device of every process (the mesh's data axis). From the end of
  data preparation, SIGTERM and SIGINT save a checkpoint at the step reached and return, with
  final['stopped_by'] naming the signal.
  """
  experiment.validate(config)  # before anything is written
  created = workdir_checks.check_workdir(workdir)
  # One run at a time in a workdir: process 0 holds the lock for the whole job.
  lock = workdir_checks.workdir_lock(workdir) if jax.process_index() == 0 else \
      contextlib.nullcontext()
  try:
    with lock:
      datasets = _get_datasets(config, workdir)
      with stop_signals.StopSignals() as signals:
        return _train(config, workdir, datasets, devices, signals)
  except BaseException as e:
    if created:
      workdir_checks.remove_if_unused(workdir)
    if isinstance(e, Exception) and not isinstance(e, UserError) and workdir_checks.disk_full(e):
      raise workdir_checks.disk_full_error(workdir, e) from None
    raise


def _train(config: ml_collections.ConfigDict, workdir: str, datasets: pipeline.Datasets,
           devices: Optional[Sequence[jax.Device]], signals: stop_signals.StopSignals) -> dict[str, Any]:
  model_config = experiment.model_config(config, datasets.vocab_size)
  identity = workdir_checks.run_identity(config, workdir, jax.process_count())
  resolved = {"experiment": config.to_dict(), "model": model_config.to_dict(),
              workdir_checks.IDENTITY_KEY: identity}
  saved_steps = checkpoint.finished_steps(checkpoint.checkpoint_dir(workdir))
  data_changed = workdir_checks.check_resumable(workdir, config, model_config,
                                                bool(saved_steps), identity)
  workdir_checks.check_steps(workdir, config, saved_steps)

  mesh = sharding.make_mesh(devices, config.fsdp)
  sharding.check_batch_size(config.batch_size, mesh)
  if config.batch_size % (config.grad_accum_steps * mesh.devices.size):
    raise TrainingError(f"batch_size={config.batch_size} must split into grad_accum_steps="
                        f"{config.grad_accum_steps} micro-batches, each divisible by the "
                        f"{mesh.devices.size} devices.")
  if config.bleu_every_steps and config.model_type != "seq2seq":
    raise TrainingError(f"bleu_every_steps={config.bleu_every_steps} needs model_type='seq2seq' "
                        "(BLEU scores translations); set --config.bleu_every_steps=0.")
  model = experiment.build_model(config, model_config)
  built = steps.build_steps(config, model, mesh)
  init_rng, train_rng = jax.random.split(jax.random.PRNGKey(config.seed))
  state = built.init(init_rng)

  resolved["summary"] = model_summary.summarize(state.params, model_config, config.max_len,
                                                decoder_only=config.model_type == "lm")
  if jax.process_index() == 0:
    logging.info("%s", model_summary.format_summary(resolved["summary"]))
  ckpt = checkpoint.Checkpointer(workdir, keep=config.keep_checkpoints,
                                 async_save=config.async_checkpoints)
  train_iter = datasets.train_iter()
  abstract = jax.tree_util.tree_map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
  try:
    restored = ckpt.restore(abstract, data_iter=None if data_changed else train_iter)
  except checkpoint.IncompatibleCheckpointError as e:
    raise TrainingError(f"The checkpoints in {workdir} do not fit this model ({e}); use a new "
                        "--workdir.") from None
  start_step = 0
  primary = jax.process_index() == 0
  if restored is not None:
    state, start_step = restored
    logging.info("Resumed from step %d of %s.", start_step, workdir)
  elif primary:
    workdir_checks.check_history(workdir, config)
  if primary:
    checkpoint.write_config(workdir, resolved)
  writer = MetricWriter(workdir, enabled=primary, resume_step=start_step,
                        rerun_splits=EVAL_SPLITS)

  counts = diagnostics.TokenCounts(model_config.target_vocab_size or model_config.vocab_size)
  # The scale statistics describe the same held-out text at every step (and in every run).
  heldout = [sharding.global_batch(b, mesh) for b in itertools.islice(
      datasets.eval_batches(), config.diagnostics_batches)] if config.diagnostics_every_steps else []
  num_steps = config.num_train_steps
  pending: list[dict[str, jax.Array]] = []  # device metrics since the last log step
  final: dict[str, Any] = {}
  bar = tqdm(total=num_steps, initial=start_step, disable=not primary, unit="step",
             dynamic_ncols=True, desc="train")
  timer = time.perf_counter()

  def flush(step: int) -> dict[str, float]:
    """Host-syncs the pending metrics; stops on a non-finite loss, keeping the last good checkpoint."""
    nonlocal timer, pending
    fetched = sharding.to_host(pending)
    pending = []
    for i, m in enumerate(fetched):
      if not np.isfinite(m["loss_sum"]):
        bad = step - len(fetched) + i + 1
        # The params of step bad-1 gave this loss: set aside every checkpoint from there on.
        for s in ckpt.all_steps():
          if s >= bad - 1:
            ckpt.set_aside(s, "nonfinite")
        good = max(ckpt.all_steps(), default=None)
        resume = f"a restart resumes from step {good}" if good else "no checkpoint is left"
        raise NonFiniteLossError(
            f"Non-finite loss at step {bad}; training stopped, checkpoints from step {bad - 1} "
            f"on were set aside as <step>.nonfinite and {resume}; lower learning_rate or set "
            "grad_clip_norm.")
    elapsed = time.perf_counter() - timer
    total = LossOutput.total(fetched, dtype=np.float64)
    summary = {k: float(v) for k, v in summarize(total).items() if k != "weight_sum"}
    for k in ("learning_rate", "grad_norm", "param_norm"):
      summary[k] = float(fetched[-1][k])
    # The worst single step of the window: loss and gradient-norm spikes show here even
    # when the window's mean hides them.
    summary["loss_step_max"] = max(float(m["loss_sum"]) / max(float(m["weight_sum"]), 1.0)
                                   for m in fetched)
    summary["grad_norm_step_max"] = max(float(m["grad_norm"]) for m in fetched)
    summary["tokens_per_sec"] = float(total.weight_sum) / max(elapsed, 1e-9)
    summary["steps_per_sec"] = len(fetched) / max(elapsed, 1e-9)
    timer = time.perf_counter()
    return summary

  def run_evals(step: int) -> None:
    """The evaluations due at `step`. They follow the step's checkpoint, so a crash during a
    long evaluation or decode loses no training: the resumed run repeats them."""
    nonlocal timer
    is_last = step == num_steps
    if step % config.eval_every_steps == 0 or is_last:
      final["eval"] = steps.evaluate(built.eval, state.params, datasets.eval_batches(), mesh)
      writer.write(step, "eval", final["eval"])
      logging.info("step %d eval %s", step, final["eval"])
      timer = time.perf_counter()  # eval time is not training throughput
    if is_last and datasets.test_batches() is not None:  # scored once, at the end
      final["test"] = steps.evaluate(built.eval, state.params, datasets.test_batches(), mesh)
      writer.write(step, "test", final["test"])
      logging.info("step %d test %s", step, final["test"])
      timer = time.perf_counter()
    if config.bleu_every_steps and (step % config.bleu_every_steps == 0 or is_last):
      decoded = evaluate.decode_eval_split(model, state.params, datasets, mesh)
      final["decode"] = decoded.metrics()
      examples = decoded.examples_markdown(config.num_decode_examples)
      writer.write(step, "decode", final["decode"])
      writer.write_text(step, "decode/examples", examples)
      logging.info("step %d decode %s\n%s", step, final["decode"], examples)
      if is_last and "test" in final:  # the reported BLEU: the test split's, once
        decoded = evaluate.decode_eval_split(model, state.params, datasets, mesh, split="test")
        final["test"].update(decoded.metrics())
        final["bleu_signature"] = decoded.bleu.signature
        writer.write(step, "test", decoded.metrics())
        logging.info("step %d test decode %s (%s)", step, decoded.metrics(),
                     final["bleu_signature"])
      timer = time.perf_counter()

  step = start_step
  failed = True
  profile = experiment.profile_window(config)
  profiling = False
  try:
    if start_step:  # the checkpoint's step may have stopped before or inside its evaluations
      run_evals(start_step)
      if start_step == num_steps:  # nothing left to train: the last window's training metrics
        last = [r for r in read_metrics(workdir, "train") if r["step"] == num_steps]
        final["train"] = {k: v for k, v in last[-1].items() if k not in ("step", "split")} \
            if last else {}
    while step < num_steps:
      if signals.should_stop(step):  # every process asks at every step: they stop together
        break
      if profile and step == profile[0] and primary:
        jax.profiler.start_trace(storage.join(workdir, PROFILE_DIR))
        profiling = True
      host_batch = next(train_iter)
      batch = sharding.global_batch(host_batch, mesh)
      diagnose = config.diagnostics_every_steps and (step + 1) % config.diagnostics_every_steps == 0
      if config.diagnostics_every_steps:
        counts.add(host_batch)
        if step == 0:  # the scales at initialisation, logged as step 0
          writer.write(0, "diagnostics", diagnostics.heldout_scale_diagnostics(
              model, state.params, heldout, counts.frequency()))
      old_params = jax.tree_util.tree_map(jnp.copy, state.params) if diagnose else None  # donated
      state, metrics = built.train(state, batch, train_rng)
      if diagnose:  # gradients at old_params with the step's dropout key
        grads = built.grads(old_params, batch, jax.random.fold_in(train_rng, step))
        writer.write(step + 1, "diagnostics", diagnostics.training_diagnostics(
            model, old_params, state.params, grads, heldout, counts.frequency()))
      pending.append(metrics)
      step += 1
      bar.update(1)
      if profiling and step == profile[0] + profile[1]:
        jax.block_until_ready(state)
        jax.profiler.stop_trace()
        profiling = False
        logging.info("Profiled steps %d-%d into %s.", profile[0] + 1, step,
                     storage.join(workdir, PROFILE_DIR))
      is_last = step == num_steps
      if step % config.log_every_steps == 0 or is_last or step % config.checkpoint_every_steps == 0:
        summary = flush(step)
        if step % config.log_every_steps == 0 or is_last:
          writer.write(step, "train", summary)
          bar.set_postfix(loss=f"{summary['loss']:.3f}", acc=f"{summary['accuracy']:.3f}",
                          tok_s=f"{summary['tokens_per_sec']:.0f}")
          final["train"] = summary
      if step % config.checkpoint_every_steps == 0 or is_last:
        ckpt.save(step, state, data_iter=train_iter, config=resolved)
        writer.flush()  # TensorBoard's events as far as this checkpoint (copied, on gs://)
      run_evals(step)
    if step < num_steps:  # stopped by a signal: save where we are, return cleanly
      if pending:
        flush(step)
      ckpt.save(step, state, data_iter=train_iter, config=resolved)
      logging.warning("%s: saved a checkpoint at step %d in %s; rerun the same command to "
                      "continue.", signals.stopped_by, step, workdir)
      final["preempted_at"] = step
      final["stopped_by"] = signals.stopped_by
    failed = False
  finally:
    bar.close()
    if profiling:  # stopped inside the window: keep what was traced
      jax.profiler.stop_trace()
    _close(ckpt, writer, failed)
  final["step"] = step
  return final


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
