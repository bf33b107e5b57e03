"""Running a sweep: each unfinished point trained as an ordinary workdir, its result.json
written last (so a point with one is finished and an interrupted sweep resumes where it
stopped; an unfinished point resumes from its own checkpoints).

Result keys: 'eval/*', 'train/*' and 'test/*' (the final metrics; test with a test split;
'decode/bleu' and 'test/bleu' when a seq2seq run scores BLEU), 'init/*' and 'final/*' (the
first and last diagnostics records; 'step_{S}/*' at sweep.at_steps), 'spikes/*'
(stats.spike_stats), 'length_{f}x/loss', 'status' ('ok', 'diverged', or 'failed' with its
'failure' reason: stalled or a dead layer by the sweep's failure rule, which is read again as
the results are read (`stats.load_results`), or else by the default one); beside the metrics,
'test_rows': [NLL sum, tokens] of every test example (`test_rows`), what the report's
intervals read the test set's own sampling error from.
A point being run holds a lock (`filelock`, released by the OS if its process dies), so
several processes on one machine or on machines sharing the directory through a file system
with working locks can work through one grid together (one that finds every remaining point
held waits for them: their results can open more); on a cluster, `launch_lines` gives
the scheduler one command per point instead.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import shlex
import threading
import time
from typing import Any, Callable, Iterable, Optional, Sequence

import jax
import ml_collections
import numpy as np
from absl import logging

from transformer import checkpoint, storage
from transformer.errors import ConfigError, NonFiniteLossError
from transformer.research import benchmarking
from transformer.research.sweeps import report, tuning
from transformer.research.sweeps.grid import (RESULT_FILE, Point, Sweep,
                                              check_sweep, data_inputs, expand, is_finished,
                                              point_config, point_dir,
                                              sweep_for_command)
from transformer.research.sweeps.stats import curve_pattern, failure_of, load_results, spike_stats
from transformer.trained import evaluate, loading
from transformer.training import experiment, loop, run, steps, workdir_checks
from transformer.training.failure_rule import FailureRule
from transformer.training.writers import read_metrics

LOCK_FILE = "running.lock"
# JAX's events (jax.monitoring): a program compiled (or read from the persistent cache), and
# a persistent-cache hit, recorded inside the former's span just before it ends.
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
# How often a process whose remaining points are all held by other processes looks again.
BUSY_POLL_SECONDS = 30.0


class CompileCounter:
  """The programs XLA compiles in this process while `with`-active, by function name, each
  either compiled or read from JAX's persistent compilation cache (`enable_compilation_cache`);
  what a sweep point stores as 'compiled' (a point that differs from an earlier one of its arm
  only in its rate and seed should compile nothing). Compilation runs in the calling thread,
  so a cache hit is the hit event followed by the compile event that encloses it."""

  _active: list["CompileCounter"] = []
  _listening = False

  def __init__(self):
    self.compiled: dict[str, int] = {}
    self.from_cache: dict[str, int] = {}
    self._hit: set[int] = set()  # the threads whose compile in progress was a cache hit

  @classmethod
  def _on_event(cls, event: str, **kwargs: Any) -> None:
    if event == _CACHE_HIT_EVENT:
      for counter in cls._active:
        counter._hit.add(threading.get_ident())

  @classmethod
  def _on_duration(cls, event: str, duration: float, **kwargs: Any) -> None:
    del duration
    if event != _COMPILE_EVENT:
      return
    name, thread = str(kwargs.get("fun_name", "?")), threading.get_ident()
    for counter in cls._active:
      into = counter.from_cache if thread in counter._hit else counter.compiled
      into[name] = into.get(name, 0) + 1
      counter._hit.discard(thread)

  def __enter__(self) -> "CompileCounter":
    if not CompileCounter._listening:  # once per process: JAX keeps listeners for good
      jax.monitoring.register_event_listener(CompileCounter._on_event)
      jax.monitoring.register_event_duration_secs_listener(CompileCounter._on_duration)
      CompileCounter._listening = True
    CompileCounter._active.append(self)
    return self

  def __exit__(self, *exc: Any) -> None:
    CompileCounter._active.remove(self)


def enable_compilation_cache(directory: str) -> None:
  """JAX's persistent compilation cache in `directory` (local or gs://), for every program
  however quickly it compiles: a rerun, a restarted sweep or another point of an arm reads
  its programs from there instead of compiling them."""
  jax.config.update("jax_compilation_cache_dir", directory)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def claim(workdir: str, point: Point) -> Optional[workdir_checks.Lock]:
  """The point's lock, acquired; None when another process holds it. The lock of training
  (workdir_checks.try_lock, the same mechanism) is another file of the point's directory,
  taken inside this one by the same process: they never wait on each other."""
  storage.as_path(point_dir(workdir, point)).mkdir(parents=True, exist_ok=True)
  return workdir_checks.try_lock(storage.join(point_dir(workdir, point), LOCK_FILE))


def _series(workdir: str) -> dict[str, list[list[float]]]:
  """{'{split}/{name}': [[step, value], ...]} of a run's metrics.jsonl ({} where it has none:
  a point that diverged before its first record)."""
  series: dict[str, list[list[float]]] = {}
  for record in read_metrics(workdir):
    split, step = record["split"], record["step"]
    for k, v in record.items():
      if k not in ("split", "step", "first_step") and isinstance(v, (int, float)):
        series.setdefault(f"{split}/{k}", []).append([step, float(v)])
  return series


def length_losses(run_dir: str, factors: Sequence[int]) -> dict[str, float]:
  """{'length_{f}x/loss': eval loss on rows f times the training max_len} of a finished run.

  The eval split is re-cut into longer rows (the model's max_len must allow it: set
  model.max_len in the sweep); positions never seen in training are part of every longer row.
  """
  loaded = loading.load(run_dir)
  r = loaded.as_run()
  out = {}
  for factor in factors:
    max_len = int(loaded.data.max_len * factor)
    if max_len > loaded.model_config.max_len:
      raise ConfigError(f"length factor {factor} needs model.max_len >= {max_len}.")
    exp = experiment.changed(loaded.experiment, max_len=max_len, batch_size=max(
        r.mesh.devices.size, loaded.data.batch_size // factor))
    datasets = evaluate.run_datasets(loaded, exp)
    out[f"length_{factor:g}x/loss"] = steps.split_metrics(r.steps.eval, r.state.params,
                                                     datasets.eval_batches(), r.mesh)["loss"]
  return out


def test_rows(run_dir: str) -> list[list[float]]:
  """[[NLL sum, tokens], ...] of each example of a finished run's test split, in the split's
  order (the rows topping up the last batch left out): the units a paired bootstrap over test
  documents resamples. Their sums are the run's test NLL."""
  loaded = loading.load(run_dir)
  batches = evaluate.run_datasets(loaded).test_batches()
  if batches is None:
    return []

  @jax.jit
  def per_row(params, batch):  # each row scored alone: [B] sums
    one = lambda row: steps.loss_sums(  # noqa: E731
        loaded.model, params, jax.tree_util.tree_map(lambda x: x[None], row))
    out = jax.vmap(one)(batch)
    return out.nll_sum, out.weight_sum

  rows = []
  for batch in batches:
    nll, tokens = jax.device_get(per_row(loaded.params, dict(batch)))
    rows += [[round(float(n), 4), float(t)] for n, t in zip(nll, tokens) if t > 0]
  return rows


def run_point(sweep: Sweep, workdir: str, point: Point) -> dict[str, Any]:
  """Trains `point` (resuming its own checkpoints) and writes its result.json; a run stopped
  by SIGTERM / SIGINT / SIGHUP writes none (status 'stopped': it resumes from its checkpoint).
  The result names the programs the point compiled rather than read from the persistent cache
  ('compiled': {function: count}): a point that differs from an earlier one of its arm only
  in its rate and seed compiles none where the cache is on."""
  with CompileCounter() as counter:
    result = _trained_result(sweep, workdir, point)
  if result["status"] != "stopped":
    result["compiled"] = dict(sorted(counter.compiled.items()))
    storage.write_atomically(storage.join(point_dir(workdir, point), RESULT_FILE),
                             json.dumps(result, sort_keys=True))
  return result


def _trained_result(sweep: Sweep, workdir: str, point: Point) -> dict[str, Any]:
  """`point` trained and measured: its result (run_point writes it)."""
  run_dir = point_dir(workdir, point)
  storage.as_path(run_dir).mkdir(parents=True, exist_ok=True)
  start = time.perf_counter()
  config = point_config(sweep, point)
  # The point is this config: a later run of the sweep reuses the result only while the sweep
  # file still gives the same one (changed_points).
  result: dict[str, Any] = {"name": point.name, "group": point.group,
                            "overrides": dict(point.overrides), "seed": point.seed,
                            "config": checkpoint.to_json(config)}
  if config.dataset != "synthetic" and config.tokenizer.kind == "sentencepiece" and \
      not config.tokenizer.path:
    config.tokenizer.path = tokenizer_path(sweep, workdir, config)
  try:
    final = loop.train_and_evaluate(experiment.parse(config), run_dir)
    result.update(status="ok", step=final.step)
    if final.bleu_signature:  # sacrebleu's, for the report to print beside test/bleu
      result["bleu_signature"] = final.bleu_signature
    if final.stopped_by:  # unfinished: recording it would end the point early
      result.update(status="stopped", stopped_by=final.stopped_by,
                    seconds=time.perf_counter() - start)
      return result
  except NonFiniteLossError as e:  # a finding, not a crash; any other failure stops the sweep
    result.update(status="diverged", message=str(e))
    final = loop.Summary(step=0)  # no figures: the run stopped before its end
  series = _series(run_dir)
  metrics: dict[str, Any] = {}
  for split in ("train", "eval", "test", "decode"):  # decode: the eval split's BLEU
    for k, v in getattr(final, split).items():
      metrics[f"{split}/{k}"] = v
  diag = {k: v for k, v in series.items() if k.startswith("diagnostics/")}
  for k, values in diag.items():
    name = k.partition("/")[2]
    if values[0][0] == 0:
      metrics[f"init/{name}"] = values[0][1]
    if result["status"] == "ok":
      metrics[f"final/{name}"] = values[-1][1]
    for step, value in values:
      if step in sweep.at_steps:
        metrics[f"step_{step:g}/{name}"] = value
  if result["status"] == "ok":
    metrics.update(spike_stats(series, config.warmup_steps))
  if result["status"] == "ok" and sweep.length_factors:
    metrics.update(length_losses(run_dir, list(sweep.length_factors)))
  result["metrics"] = metrics
  if result["status"] == "ok" and config.test_fraction > 0:
    result["test_rows"] = test_rows(run_dir)
  # The curves the report draws, and the losses: result.json stays small enough to commit.
  result["curves"] = {k: v for k, v in series.items()
                      if any(fnmatch.fnmatchcase(k, curve_pattern(c)) for c in sweep.curves)
                      or k in ("train/loss", "eval/loss")}
  if result["status"] == "ok":  # by the sweep's rule (read again later) or the default one
    reason = failure_of(result, sweep.failure or FailureRule())
    if reason:
      result.update(status="failed", failure=reason)
  result["seconds"] = time.perf_counter() - start
  return result


def tokenizer_path(sweep: Sweep, workdir: str, config: ml_collections.ConfigDict) -> str:
  """Where a point's tokenizer is trained (by the first point that needs it) and shared: one
  WORKDIR/tokenizer.model for every point whose tokenizer inputs are those of the sweep's base
  and fixed fields, and WORKDIR/tokenizer-KEY.model for points whose axes change them (a
  vocabulary-size axis gets one tokenizer per size)."""
  def key(c: ml_collections.ConfigDict) -> str:
    return hashlib.sha1(json.dumps(data_inputs(c), sort_keys=True).encode()).hexdigest()[:12]

  own = key(config)
  shared = own == key(point_config(sweep, Point((), sweep.seeds[0])))
  return storage.join(workdir, "tokenizer.model" if shared else f"tokenizer-{own}.model")


def run_order(sweep: Sweep, points: Sequence[Point]) -> list[Point]:
  """`points` in the order a sweep runs them: the points of sweep.first_arms first, arm after
  arm in that order, each arm's choosing seeds before its confirm_seeds (which exist once its
  own choice is complete); then the other arms' choosing seeds before their confirm_seeds (so
  each of them chooses before any of them reports); grid order otherwise."""
  return sorted(points, key=lambda p: order_key(  # sorted() is stable
      sweep, sweep.arm_name(arm_of_point(sweep, p)), p.seed in sweep.confirm_seeds))


def order_key(sweep: Sweep, arm: str, reports: bool) -> tuple[int, int, int]:
  """Where a point of the arm named `arm` runs (`run_order`); `reports`: one of confirm_seeds."""
  if arm in sweep.first_arms:
    return 0, sweep.first_arms.index(arm), int(reports)
  return 1, int(reports), 0


def leases(seconds: Sequence[float], lease_seconds: float) -> int:
  """How many calls of `lease_seconds` (--time_budget) run points of these times in this
  order: a call runs its first point, and starts another only while the call would still end
  within the budget by its longest point so far (`_Budget`)."""
  count, i = 0, 0
  while i < len(seconds):
    count, elapsed, longest = count + 1, seconds[i], seconds[i]
    i += 1
    while i < len(seconds) and elapsed + longest <= lease_seconds:
      elapsed, longest = elapsed + seconds[i], max(longest, seconds[i])
      i += 1
  return count


def arm_key(sweep: Sweep, overrides: Iterable[tuple[str, Any]]) -> frozenset:
  """The arm of a point's overrides (or a result's, as items): every field but the tuned one."""
  return frozenset((k, v) for k, v in overrides if k not in sweep.tune)


class _Budget:
  """The time budget of one run_sweep call: its seconds (None: no budget), when it began and
  the longest point it has run. A point after the first starts only if the call would still
  end within the budget by the longest point so far: a call ends between whole points and
  makes progress however short its budget."""

  def __init__(self, seconds: Optional[float]):
    self.seconds, self.began, self.longest = seconds, time.perf_counter(), 0.0

  def would_overrun(self, name: str, done: int, left: int) -> bool:
    """Whether a next point would end past the budget by the longest so far (logged when so)."""
    elapsed = time.perf_counter() - self.began
    if self.seconds is None or elapsed + self.longest <= self.seconds:
      return False
    logging.warning("Sweep %s: the time budget of %.0f s is spent (%d point(s) run in %.0f s, "
                    "the longest %.0f s); %d point(s) left: rerun the same command to "
                    "continue.", name, self.seconds, done, elapsed, self.longest, left)
    return True


def _claim_or_note(sweep: Sweep, workdir: str, point: Point, busy: set[str],
                   told: set[str]) -> Optional[workdir_checks.Lock]:
  """The point's lock; else None, the point noted busy (and logged once)."""
  lock = claim(workdir, point)
  if lock is None:
    if point.name not in told:
      logging.info("Sweep %s: %s is running in another process; skipped (this process waits "
                   "for it if nothing else is left).", sweep.name, point.name)
      told.add(point.name)
    busy.add(point.name)
  return lock


def _named_points(sweep: Sweep, workdir: str, only: Optional[Iterable[str]]) -> set[str]:
  """The names in `only`, each checked to be a point of the sweep (one line if not)."""
  wanted = set(only or ())
  unknown = wanted - {p.name for p in tuning.points(sweep, load_results(workdir, sweep.failure))} \
      if wanted else set()
  if unknown:
    raise ConfigError(f"No point named {sorted(unknown)[0]!r} in this sweep.")
  return wanted


def run_sweep(sweep: Sweep, workdir: str, only: Optional[Iterable[str]] = None,
              time_budget: Optional[float] = None) -> list[Point]:
  """Runs every unfinished point (or those named in `only`) in order, the points of the
  choosing seeds before those of confirm_seeds; returns the ones run.

  With `time_budget` (seconds), the call ends between whole points (`_Budget`).

  The points are recomputed after each one: a tuned sweep's search grows past an edge once
  an arm's results are in (tuning.py), and points other processes finished are skipped. When
  every remaining point is held by another process, this one waits for them rather than
  ending: their results can open points (a rate chosen, an edge extended, confirming seeds).
  Points named in `only` that another process holds are skipped (nothing they open is named).
  """
  check_sweep(sweep)
  wanted = _named_points(sweep, workdir, only)
  done, budget, first = [], _Budget(time_budget), True
  busy: set[str] = set()  # points another process was running when we looked
  told: set[str] = set()  # the busy points already logged
  while True:
    results = load_results(workdir, sweep.failure)
    points = [p for p in tuning.points(sweep, results) if not wanted or p.name in wanted]
    todo = run_order(sweep, [p for p in points
                             if not is_finished(workdir, p) and p.name not in busy])
    if todo and done and budget.would_overrun(sweep.name, len(done), len(todo)):
      return done
    if first:
      first = False
      logging.info("Sweep %s: %d points, %d finished, %d to run.", sweep.name, len(points),
                   len(points) - len(todo), len(todo))
    if not todo and (not busy or wanted):  # named points held elsewhere are theirs to run
      if len(load_results(workdir)) != len(results):  # one written since opens more points
        continue
      return done
    if not todo:  # all held elsewhere: look again once they may have finished
      if budget.would_overrun(sweep.name, len(done), len(busy)):
        return done
      time.sleep(BUSY_POLL_SECONDS)
      busy.clear()
      continue
    point = todo[0]
    lock = _claim_or_note(sweep, workdir, point, busy, told)
    if lock is None:
      continue
    try:
      if is_finished(workdir, point):  # finished by another process before we claimed it
        continue
      logging.info("Sweep %s: point %s (%d left)", sweep.name, point.name, len(todo))
      result = run_point(sweep, workdir, point)
    finally:
      lock.release()
    if result["status"] == "stopped":
      logging.warning("Sweep %s: stopped by %s in %s; rerun the same command to continue.",
                      sweep.name, result["stopped_by"], point.name)
      return done
    status = result["status"] + (f" ({result['failure']})" if result.get("failure") else "")
    logging.info("Sweep %s: %s %s in %.0f s (%d program(s) compiled)", sweep.name, point.name,
                 status, result["seconds"], sum(result.get("compiled", {}).values()))
    budget.longest = max(budget.longest, result["seconds"])
    done.append(point)


def launch_lines(sweep: Sweep, config_path: str, workdir: str,
                 seeds: Optional[Sequence[int]] = None) -> list[str]:
  """One command per unfinished point (for a cluster), then the aggregation command; `seeds`
  given on the command line go into each (a point of seed 5 is not a point of the file's).
  Every value is quoted for a POSIX shell: a line piped to bash runs that command alone."""
  words = ["python", "scripts/sweep.py", f"--sweep={config_path}", f"--workdir={workdir}"]
  if seeds:
    words.append(f"--seeds={','.join(str(s) for s in seeds)}")
  command = shlex.join(words)
  lines = [f"{command} {shlex.quote(f'--point={p.name}')}"
           for p in tuning.points(sweep, load_results(workdir, sweep.failure))
           if not is_finished(workdir, p)]
  lines.append(f"{command} --aggregate_only")
  return lines


@dataclasses.dataclass(frozen=True)
class Pace:
  """How long a point should take: `seconds(exp, first)` for a point of experiment `exp`
  (`first`: the first of its arm, which compiles) -> (seconds, a qualifier of them or ''), and
  the words the plan's head says of it."""
  seconds: Callable[[experiment.Experiment, bool], tuple[float, str]]
  describe: str


def measured_pace(sweep: Sweep) -> Pace:
  """The benchmark's train step of the sweep's first point on this machine's devices (random
  full-length batches): a point is its steps at that step time, plus one compilation for the
  first of an arm (the others read its programs from the cache)."""
  step = benchmarking.benchmark(experiment.parse(point_config(sweep, expand(sweep)[0])),
                                ["train"], steps=2, repeats=1)
  mfu = f", MFU {step['mfu']:.1%}" if step.get("mfu") else ""
  return Pace(lambda exp, first: (exp.optimization.num_train_steps * step["train_step_seconds"]
                                     + (step["compile_seconds"] if first else 0.0), ""),
              f"at {step['train_step_seconds'] * 1e3:.1f} ms a step on {step['device']}{mfu}, "
              f"and {step['compile_seconds']:.0f} s of compilation an arm; evaluations, "
              "diagnostics and the test split add to it")


def _shape(exp: experiment.Experiment) -> tuple[int, int, int]:
  """(d_model, encoder layers, decoder layers) of an experiment's model."""
  return exp.model.d_model, exp.model.num_encoder_layers, exp.model.num_decoder_layers


def points_pace(directories: Sequence[str]) -> Pace:
  """The pace of points that finished in `directories` (sweep workdirs), whole points as they
  ran (their loop, compilation, evaluations, diagnostics and test split included; a point
  resumed after a stop counts its last call's seconds only, so it looks faster): seconds a
  step, the median over the finished points of each model shape (d_model, layers). A shape
  none of them ran, between two measured shapes in FLOPs a step, takes the pace of the line
  through them in FLOPs ('interp.': a step's time as a fixed cost plus a cost a FLOP); below
  every measured shape, the smallest's pace, an upper bound ('at most': a smaller model in the
  same loop takes no longer); above every measured shape, the largest's pace times the ratio
  of FLOPs a step ('est.')."""
  per_step: dict[tuple, list[float]] = {}
  exps: dict[tuple, experiment.Experiment] = {}
  for directory in directories:
    for r in load_results(directory):
      if r.get("seconds") and r.get("step") and "config" in r:
        exp = experiment.parse(experiment.with_defaults(r["config"]))
        per_step.setdefault(_shape(exp), []).append(r["seconds"] / r["step"])
        exps.setdefault(_shape(exp), exp)
  if not per_step:
    raise ConfigError(f"--pace_from={','.join(directories)} holds no finished point with its "
                      "time; give a sweep workdir whose points ran (or leave it out to measure "
                      "the step here).")
  measured = {shape: float(np.median(v)) for shape, v in per_step.items()}
  flops = {shape: run.step_flops(exps[shape]) for shape in measured}

  def seconds(exp: experiment.Experiment, first: bool) -> tuple[float, str]:
    del first  # a measured point's time holds its compilation where it had one
    shape, steps_ = _shape(exp), exp.optimization.num_train_steps
    if shape in measured:
      return steps_ * measured[shape], ""
    own = run.step_flops(exp)
    larger = [s for s in measured if flops[s] >= own]
    smaller = [s for s in measured if flops[s] < own]
    if larger and smaller:
      low, high = max(smaller, key=flops.get), min(larger, key=flops.get)
      at = (own - flops[low]) / (flops[high] - flops[low])
      return steps_ * (measured[low] + at * (measured[high] - measured[low])), "interp."
    if larger:
      return steps_ * measured[min(larger, key=flops.get)], "at most"
    top = max(measured, key=flops.get)
    return steps_ * measured[top] * own / flops[top], "est."

  counts = ", ".join(f"{measured[s] * 1e3:.1f} ms a step at d_model {s[0]} x {s[1] + s[2]} "
                     f"({len(per_step[s])} points)" for s in sorted(measured))
  return Pace(seconds, f"at the pace of the points finished in {', '.join(directories)}: "
                       f"{counts}; a size not run there: 'interp.' between two sizes run in "
                       "FLOPs a step, 'at most' a larger size's pace, 'est.' beyond the largest")


def plan(sweep: Sweep, workdir: str, pace: Pace, lease_seconds: Optional[float] = None) -> str:
  """The points still to run, in the order run_sweep takes them (`run_order`), each with the
  time it should take at `pace` (`measured_pace`, or `points_pace` of finished points), the
  first point of an arm with its compilation; among them, where they will run, the points that
  open later (each arm's confirm_seeds at its chosen rate, and at most extend_edges more rates
  an edge). With `lease_seconds` (the --time_budget of one leased machine's call), how many
  such calls the points need (`leases`), and how many the first arms' need."""
  results = load_results(workdir, sweep.failure)
  planned = _planned(sweep, workdir, results)
  started = {arm_key(sweep, r["overrides"].items()) for r in results}
  lines, times, now, edge = [], [], 0, 0.0
  for n, (_, point, later) in enumerate(planned, 1):
    exp = experiment.parse(point_config(sweep, point))
    seconds, qualifier = pace.seconds(exp, later is None and
                                      arm_key(sweep, point.overrides) not in started)
    started.add(arm_key(sweep, point.overrides))
    times.append(seconds)
    times_of = f"~{seconds:.0f} s{', ' + qualifier if qualifier else ''}"
    if later is None:
      now += 1
      role = "reports" if point.seed in sweep.confirm_seeds else "chooses"
      d_model, *layers = _shape(exp)
      lines.append(f"{n:3d}. {point.name}  ({role}, d_model {d_model} x {sum(layers)}, "
                   f"{exp.optimization.num_train_steps} steps, {times_of})")
    else:
      edge = max(edge, seconds)
      lines.append(f"{n:3d}. {later.arm},{sweep.tuned_field}=CHOSEN,seed={point.seed}  "
                   f"(reports, once {later.name} has chosen its rate, {times_of})")
  total = sum(t for t, (_, _, later) in zip(times, planned) if later is None)
  later_total = sum(times) - total
  head = (f"Sweep {sweep.name}: {len(results)} point(s) finished, {now} to run now "
          f"(~{total / 60:.1f} min {pace.describe})")
  if len(planned) > now:
    head += (f", and {len(planned) - now} reporting point(s) that open once their arms have "
             f"chosen a rate, listed where they will run (~{later_total / 60:.1f} min; and up "
             f"to {sweep.extend_edges} more rate(s) an edge where an arm's best is on one, "
             f"{len(sweep.seeds)} point(s) a rate)")
  tail = f"In all: {len(planned)} point(s), ~{sum(times) / 3600:.1f} h"
  if lease_seconds:
    tail += _lease_words(sweep, planned, times, lease_seconds)
  if len(planned) > now and sweep.extend_edges:
    tail += f"; each rate an edge adds ~{len(sweep.seeds) * edge / 60:.0f} min"
  return "\n".join([head + ":"] + lines + [tail + "."])


def _planned(sweep: Sweep, workdir: str,
             results: list[dict[str, Any]]) -> list[tuple[tuple, Point, Any]]:
  """(order key, point, None) of each point to run now and (order key, the arm's first point
  with a reporting seed, its tuning.ArmBest) of each reporting point that opens once an arm's
  search is complete, in run order."""
  points = tuning.points(sweep, results)
  planned = [(order_key(sweep, sweep.arm_name(arm_of_point(sweep, p)),
                        p.seed in sweep.confirm_seeds), p, None)
             for p in points if not is_finished(workdir, p)]
  for best in tuning.best_per_arm(sweep, results) if sweep.tune else []:
    if best.complete:
      continue
    first = next(p for p in points if arm_of_point(sweep, p) == best.overrides)
    planned += [(order_key(sweep, best.name, True), Point(first.overrides, seed), best)
                for seed in sweep.confirm_seeds]
  return sorted(planned, key=lambda entry: entry[0])  # stable: grid order within a key


def arm_of_point(sweep: Sweep, point: Point) -> tuple[tuple[str, Any], ...]:
  """A point's arm: its overrides less the tuned field."""
  return tuple(kv for kv in point.overrides if kv[0] not in sweep.tune)


def _lease_words(sweep: Sweep, planned: list[tuple[tuple, Point, Any]], times: list[float],
                 lease_seconds: float) -> str:
  """', N lease(s) of S s' for the plan, and the first arms' share of them."""
  words = f", {leases(times, lease_seconds)} lease(s) of {lease_seconds:.0f} s"
  if sweep.first_arms:
    first = sum(1 for key, _, _ in planned if key[0] == 0)
    words += (f" (the first arms, {' and '.join(sweep.first_arms)}: {first} point(s) in the "
              f"first {leases(times[:first], lease_seconds)} lease(s))")
  return words + " before any edge"


def run_command(config_path: str, workdir: str, *, points: Optional[Sequence[str]] = None,
                seeds: Optional[Sequence[int]] = None, aggregate_only: bool = False,
                print_launch: bool = False, rerun_changed: bool = False,
                time_budget: Optional[float] = None, dry_run: bool = False,
                compilation_cache: Optional[str] = None,
                pace_from: Optional[Sequence[str]] = None,
                lease_seconds: Optional[float] = None) -> str:
  """What scripts/sweep.py does: run the unfinished points (or only aggregate, or list launch
  commands, or print the plan with each point's time at the step measured on this machine,
  or at the pace of the finished points of `pace_from`'s workdirs, and with `lease_seconds`
  the leases of that many seconds it needs), then rebuild the report; returns the text to
  print. `time_budget`: seconds within which the points after the first must be expected to
  end (`_Budget`); `compilation_cache`: JAX's persistent compilation cache there (the one way
  points share their programs: each builds its own jitted functions)."""
  sweep = sweep_for_command(config_path, workdir, seeds)
  for flag, value in (("time_budget", time_budget), ("lease_seconds", lease_seconds)):
    if value is not None and not value > 0:
      raise ConfigError(f"--{flag}={value} must be a number of seconds > 0.")
  if lease_seconds is not None and not dry_run:
    raise ConfigError("--lease_seconds counts the leases of the plan: it goes with --dry_run "
                      "(a run's own limit is --time_budget).")
  if print_launch:
    return "\n".join(launch_lines(sweep, config_path, workdir, sweep.seeds if seeds else None))
  report.check_unchanged(sweep, workdir, rerun_changed and not aggregate_only and not dry_run)
  if dry_run:  # measured without the cache, so that its compile time is a compilation's
    return plan(sweep, workdir, points_pace(pace_from) if pace_from else measured_pace(sweep),
                lease_seconds)
  if compilation_cache:
    enable_compilation_cache(compilation_cache)
  if not aggregate_only:
    run_sweep(sweep, workdir, only=points, time_budget=time_budget)
    if not load_results(workdir):  # stopped (or every point busy elsewhere) before any finished
      return (f"No point of sweep {sweep.name} has finished yet; rerun the same command to "
              "continue it (a stopped point resumes from its checkpoint).")
  return report.rebuild(sweep, config_path, workdir, bool(seeds))
