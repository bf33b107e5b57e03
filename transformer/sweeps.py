"""Sweeps: a grid of experiment configs and seeds, run one point after another, then tabulated.

A sweep file (configs/sweeps/*.py) is code: its get_sweep() returns a `Sweep`:
  name, question    what the sweep measures (heads the report)
  base              the experiment config every point starts from (a configs/*.py path)
  fixed             {dotted field: value} applied to every point
  axes              a list of {dotted field: [values]}; fields of one axis move together
                    (zipped), the axes are crossed (product)
  seeds             config.seed of each repeat (initialisation, dropout, data order)
  metrics           what the table shows: result keys (below), fnmatch patterns allowed;
                    'max:PATTERN' / 'mean:PATTERN' reduce the matching keys (default mean)
  curves            '{split}/{name}' series of metrics.jsonl plotted over steps per group
  fits              [{x: dotted field, y: metric}]: slope of log y against log x per seed
  length_factors    optional: after training, eval loss at these multiples of max_len
Result keys: 'eval/*' and 'train/*' (the final metrics), 'init/*' and 'final/*' (the first
and last diagnostics records), 'length_{f}x/loss', 'status' ('ok' or 'diverged').

Layout: WORKDIR/points/NAME/ holds a point's run and its result.json, written last, so a
point with a result.json is finished and an interrupted sweep resumes where it stopped (an
unfinished point resumes from its own checkpoints). A point being run holds a lock file, so
several processes (or machines sharing the directory) can work through one sweep together. `aggregate` reads only the result.json
files and writes WORKDIR/results.md, results.csv and plots/*.png.
"""

from __future__ import annotations

import csv
import dataclasses
import fnmatch
import itertools
import json
import math
import os
import socket
import textwrap
import time
from typing import Any, Iterable, Optional, Sequence

import importlib.util

import ml_collections
import numpy as np
from absl import logging

from transformer.config import _FLOAT_OK
from transformer.training import experiment

POINTS_DIR = "points"
RESULT_FILE = "result.json"
LOCK_FILE = "running.lock"  # host and pid of the process running the point


@dataclasses.dataclass(frozen=True)
class Sweep:
  """A grid of experiment configs (fields documented in the module docstring)."""

  name: str
  question: str
  base: str
  axes: tuple[dict[str, list[Any]], ...]
  seeds: tuple[int, ...] = (0, 1, 2)
  fixed: dict[str, Any] = dataclasses.field(default_factory=dict)
  metrics: tuple[str, ...] = ("eval/loss",)
  curves: tuple[str, ...] = ("eval/loss",)
  fits: tuple[dict[str, str], ...] = ()
  length_factors: tuple[float, ...] = ()


def load_sweep(path: str) -> Sweep:
  """get_sweep() of a sweep file; one-line errors for a missing or malformed file."""
  if not os.path.isfile(path):
    raise ValueError(f"Sweep file {path} does not exist; pass one of configs/sweeps/*.py.")
  spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  if not hasattr(module, "get_sweep"):
    raise ValueError(f"{path} has no get_sweep() function.")
  sweep = module.get_sweep()
  check_sweep(sweep)
  return sweep


@dataclasses.dataclass(frozen=True)
class Point:
  """One run of a sweep: overrides {dotted field: value}, seed included."""

  overrides: tuple[tuple[str, Any], ...]
  seed: int

  @property
  def group(self) -> str:
    """The name without the seed: points differing only in seed share it."""
    return ",".join(f"{_short(k)}={_fmt(v)}" for k, v in self.overrides) or "base"

  @property
  def name(self) -> str:
    return f"{self.group},seed={self.seed}".replace("/", "_")


def _short(field: str) -> str:
  return field.rsplit(".", 1)[-1]


def _fmt(value: Any) -> str:
  return f"{value:g}" if isinstance(value, float) else str(value)


def check_sweep(sweep: Sweep) -> None:
  """Raises ValueError with one line for a malformed sweep."""
  if not isinstance(sweep, Sweep):
    raise ValueError(f"get_sweep() must return a transformer.sweeps.Sweep, not {type(sweep)}.")
  if not sweep.seeds:
    raise ValueError("The sweep has no seeds.")
  if not os.path.isfile(sweep.base):
    raise ValueError(f"base={sweep.base!r} is not a file (run from the repository root).")
  for axis in sweep.axes:
    lengths = {len(v) for v in axis.values()}
    if len(lengths) != 1:
      raise ValueError(f"The fields of one axis move together and need equally many values: "
                       f"{dict(axis)}.")
  base = experiment.load_config(sweep.base)
  for field in list(sweep.fixed.keys()) + [f for a in sweep.axes for f in a]:
    _get_parent(base, field)  # raises on an unknown field


def expand(sweep: Sweep) -> list[Point]:
  """Every point of the grid: the product of the axes (each axis zipped), times the seeds."""
  per_axis = []
  for axis in sweep.axes:
    fields = list(axis.keys())
    per_axis.append([tuple(zip(fields, values)) for values in zip(*(axis[f] for f in fields))])
  points = []
  for combo in itertools.product(*per_axis):
    overrides = tuple(kv for axis_values in combo for kv in axis_values)
    points.extend(Point(overrides, int(seed)) for seed in sweep.seeds)
  names = [p.name for p in points]
  if len(set(names)) != len(names):
    raise ValueError("Two points of the sweep have the same name; give axes distinct values.")
  return points


def _get_parent(config: ml_collections.ConfigDict, field: str):
  *path, leaf = field.split(".")
  node = config
  for part in path:
    if part not in node:
      raise ValueError(f"The experiment config has no field {field!r}.")
    node = node[part]
  if leaf not in node:
    raise ValueError(f"The experiment config has no field {field!r}.")
  return node, leaf


def set_field(config: ml_collections.ConfigDict, field: str, value: Any) -> None:
  """config.a.b = value for field 'a.b' (model scale fields take numbers as strings)."""
  node, leaf = _get_parent(config, field)
  if field.startswith("model.") and leaf in _FLOAT_OK and value is not None:
    value = str(value)
  node[leaf] = value


def point_config(sweep: Sweep, point: Point) -> ml_collections.ConfigDict:
  """The experiment config of `point`: base, then `fixed`, then the point's overrides and seed."""
  config = experiment.load_config(sweep.base)
  for field, value in sweep.fixed.items():
    set_field(config, field, value)
  for field, value in point.overrides:
    set_field(config, field, value)
  config.seed = point.seed
  return config


def point_dir(workdir: str, point: Point) -> str:
  return os.path.join(workdir, POINTS_DIR, point.name)


def is_finished(workdir: str, point: Point) -> bool:
  return os.path.isfile(os.path.join(point_dir(workdir, point), RESULT_FILE))


# ---------------------------------------------------------------------------------------
# Running.
# ---------------------------------------------------------------------------------------
def _series(workdir: str) -> dict[str, list[list[float]]]:
  """{'{split}/{name}': [[step, value], ...]} of a run's metrics.jsonl."""
  from transformer.training.writers import read_metrics

  series: dict[str, list[list[float]]] = {}
  for record in read_metrics(workdir):
    split, step = record["split"], record["step"]
    for k, v in record.items():
      if k not in ("split", "step") and isinstance(v, (int, float)):
        series.setdefault(f"{split}/{k}", []).append([step, float(v)])
  return series


def length_losses(run_dir: str, factors: Sequence[int]) -> dict[str, float]:
  """{'length_{f}x/loss': eval loss on rows f times the training max_len} of a finished run.

  The eval split is re-cut into longer rows (the model's max_len must allow it: set
  model.max_len in the sweep); positions never seen in training are part of every longer row.
  """
  import jax

  from transformer import inference
  from transformer.data import pipeline
  from transformer.training import loop, sharding, steps

  loaded = inference.load(run_dir)
  mesh = sharding.make_mesh()
  params = jax.device_put(loaded.params, sharding.replicated(mesh))
  eval_step = jax.jit(steps.make_eval_step(loaded.model))
  out = {}
  for factor in factors:
    exp = ml_collections.ConfigDict(loaded.experiment.to_dict())
    exp.max_len = int(loaded.experiment.max_len * factor)
    if exp.max_len > loaded.model.config.max_len:
      raise ValueError(f"length factor {factor} needs model.max_len >= {exp.max_len}.")
    exp.batch_size = max(mesh.devices.size, loaded.experiment.batch_size // factor)
    datasets = pipeline.get_datasets(exp, workdir=run_dir)
    out[f"length_{factor:g}x/loss"] = loop.evaluate(eval_step, params, datasets, mesh)["loss"]
  return out


def run_point(sweep: Sweep, workdir: str, point: Point) -> dict[str, Any]:
  """Trains `point` (resuming its own checkpoints) and writes its result.json."""
  from transformer.training import loop

  run_dir = point_dir(workdir, point)
  os.makedirs(run_dir, exist_ok=True)
  start = time.perf_counter()
  result: dict[str, Any] = {"name": point.name, "group": point.group,
                            "overrides": dict(point.overrides), "seed": point.seed}
  config = point_config(sweep, point)
  if config.dataset != "synthetic" and config.tokenizer.kind == "sentencepiece" and \
      not config.tokenizer.path:
    # One vocabulary for the whole sweep, trained by its first point.
    config.tokenizer.path = os.path.join(workdir, "tokenizer.model")
  try:
    final = loop.train_and_evaluate(config, run_dir)
    result.update(status="ok", step=final.get("step"))
  except loop.TrainingError as e:  # a non-finite loss is a finding, not a crash
    result.update(status="diverged", message=str(e))
    final = {}
  series = _series(run_dir)
  metrics: dict[str, Any] = {}
  for split in ("train", "eval"):
    for k, v in final.get(split, {}).items():
      metrics[f"{split}/{k}"] = v
  diag = {k: v for k, v in series.items() if k.startswith("diagnostics/")}
  for k, values in diag.items():
    name = k[len("diagnostics/"):]
    if values[0][0] == 0:
      metrics[f"init/{name}"] = values[0][1]
    if result["status"] == "ok":
      metrics[f"final/{name}"] = values[-1][1]
  if result["status"] == "ok" and sweep.length_factors:
    metrics.update(length_losses(run_dir, list(sweep.length_factors)))
  result["metrics"] = metrics
  result["curves"] = series
  result["seconds"] = time.perf_counter() - start
  path = os.path.join(run_dir, RESULT_FILE)
  with open(path + ".tmp", "w") as f:
    json.dump(result, f, sort_keys=True)
  os.replace(path + ".tmp", path)
  return result


def run_sweep(sweep: Sweep, workdir: str,
              only: Optional[Iterable[str]] = None) -> list[Point]:
  """Runs every unfinished point (or those named in `only`) in order; returns the ones run."""
  check_sweep(sweep)
  points = expand(sweep)
  if only:
    wanted = set(only)
    unknown = wanted - {p.name for p in points}
    if unknown:
      raise ValueError(f"No point named {sorted(unknown)[0]!r} in this sweep.")
    points = [p for p in points if p.name in wanted]
  todo = [p for p in points if not is_finished(workdir, p)]
  logging.info("Sweep %s: %d points, %d finished, %d to run.", sweep.name, len(points),
               len(points) - len(todo), len(todo))
  done = []
  for i, point in enumerate(todo):
    if is_finished(workdir, point) or not _claim(workdir, point):
      logging.info("Sweep %s: %s is finished or running in another process; skipped.",
                   sweep.name, point.name)
      continue
    try:
      logging.info("Sweep %s: point %d/%d %s", sweep.name, i + 1, len(todo), point.name)
      result = run_point(sweep, workdir, point)
    finally:
      os.remove(os.path.join(point_dir(workdir, point), LOCK_FILE))
    logging.info("Sweep %s: %s %s in %.0f s", sweep.name, point.name, result["status"],
                 result["seconds"])
    done.append(point)
  return done


def _claim(workdir: str, point: Point) -> bool:
  """Takes the point's lock file, so that several sweep processes can share one grid; a lock
  left by a process of this host that no longer runs is taken over."""
  path = os.path.join(point_dir(workdir, point), LOCK_FILE)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  for _ in range(2):
    try:
      fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
      try:
        with open(path) as f:
          host, pid = f.read().split()
        alive = host != socket.gethostname() or _pid_alive(int(pid))
      except (OSError, ValueError):
        alive = False
      if alive:
        return False
      os.remove(path)  # stale
      continue
    with os.fdopen(fd, "w") as f:
      f.write(f"{socket.gethostname()} {os.getpid()}")
    return True
  return False


def _pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def launch_lines(sweep: Sweep, config_path: str, workdir: str) -> list[str]:
  """One command per unfinished point (for a cluster), then the aggregation command."""
  lines = [f"python scripts/sweep.py --config={config_path} --workdir={workdir} "
           f"--point='{p.name}'" for p in expand(sweep) if not is_finished(workdir, p)]
  lines.append(f"python scripts/sweep.py --config={config_path} --workdir={workdir} "
               "--aggregate_only")
  return lines


# ---------------------------------------------------------------------------------------
# Aggregation (stored results only).
# ---------------------------------------------------------------------------------------
def load_results(workdir: str) -> list[dict[str, Any]]:
  root = os.path.join(workdir, POINTS_DIR)
  results = []
  for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    path = os.path.join(root, name, RESULT_FILE)
    if os.path.isfile(path):
      with open(path) as f:
        results.append(json.load(f))
  return results


def metric_value(metrics: dict[str, Any], spec: str) -> float:
  """A metric of one point: a key, or 'mean:'/'max:' over the keys matching a pattern."""
  reduce, _, pattern = spec.rpartition(":")
  values = [float(v) for k, v in metrics.items() if fnmatch.fnmatchcase(k, pattern)]
  values = [v for v in values if math.isfinite(v)]
  if not values:
    return float("nan")
  return float(np.max(values) if reduce == "max" else np.mean(values))


def _mean_std(values: Sequence[float]) -> tuple[float, float, int]:
  v = np.asarray([x for x in values if math.isfinite(x)], np.float64)
  if v.size == 0:
    return float("nan"), float("nan"), 0
  return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0, int(v.size)


def _ordered_groups(sweep: Sweep, results: list[dict[str, Any]]):
  """{group: [results]} in the sweep's grid order."""
  order = {p.group: i for i, p in enumerate(expand(sweep))}
  groups: dict[str, list[dict[str, Any]]] = {}
  for r in sorted(results, key=lambda r: (order.get(r["group"], len(order)), r["seed"])):
    groups.setdefault(r["group"], []).append(r)
  return groups


def fit_slopes(sweep: Sweep, results: list[dict[str, Any]],
               x_field: str, y_spec: str) -> dict[str, tuple[float, float, int]]:
  """Slope of log y against log x (x = `x_field`), per seed and per setting of the other
  axes: {other settings: (mean slope, std over seeds, seeds)}."""
  slopes: dict[str, list[float]] = {}
  for (others, _), xy in _fit_points(results, x_field, y_spec).items():
    if len({x for x, _ in xy}) >= 2:
      x, y = np.log(np.asarray(xy)).T
      slopes.setdefault(others, []).append(float(np.polyfit(x, y, 1)[0]))
  return {k: _mean_std(v) for k, v in slopes.items()}


def _fit_points(results: list[dict[str, Any]], x_field: str,
                y_spec: str) -> dict[tuple[str, int], list[tuple[float, float]]]:
  """{(other settings, seed): [(x, y), ...]} of the finished points with a positive y."""
  per: dict[tuple[str, int], list[tuple[float, float]]] = {}
  for r in results:
    if r["status"] != "ok" or x_field not in r["overrides"]:
      continue
    others = ",".join(f"{_short(k)}={_fmt(v)}" for k, v in r["overrides"].items() if k != x_field)
    y = metric_value(r["metrics"], y_spec)
    if math.isfinite(y) and y > 0:
      per.setdefault((others or "all", r["seed"]), []).append((float(r["overrides"][x_field]), y))
  return per


def _fit_plot(sweep: Sweep, results: list[dict[str, Any]], x_field: str, y_spec: str,
              out_dir: str) -> str:
  """Log-log plot of y against x, one marker per seed, with reference slopes 1 and 2."""
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6, 4.5))
  by_setting: dict[str, list[tuple[float, float]]] = {}
  for (others, _), xy in _fit_points(results, x_field, y_spec).items():
    by_setting.setdefault(others, []).extend(xy)
  slopes = fit_slopes(sweep, results, x_field, y_spec)
  for others, xy in sorted(by_setting.items()):
    x, y = np.asarray(sorted(xy)).T
    slope = slopes.get(others)
    label = others + (f": slope {_cell(*slope)}" if slope else "")
    points = ax.plot(x, y, "o", alpha=0.6, label=label)[0]
    xs = np.unique(x)
    means = np.exp([np.log(y[x == v]).mean() for v in xs])
    ax.plot(xs, means, "-", color=points.get_color())
  if by_setting:
    x0 = min(x for xy in by_setting.values() for x, _ in xy)
    y0 = np.exp(np.mean([np.log(y) for xy in by_setting.values() for x, y in xy if x == x0]))
    xs = np.asarray([x0, max(x for xy in by_setting.values() for x, _ in xy)])
    for power, style in ((1, ":"), (2, "--")):
      ax.plot(xs, y0 * (xs / x0) ** power, style, color="gray", label=f"slope {power} (reference)")
  ax.set_xscale("log", base=2)
  ax.set_yscale("log")
  name = y_spec.rsplit("/", 1)[-1]
  ax.set_xlabel(_short(x_field))
  ax.set_ylabel(f"{name} ({_unit(name)})")
  title = f"{sweep.name}: {y_spec} against {_short(x_field)}, one marker per seed; line = mean"
  ax.set_title("\n".join(textwrap.wrap(title, 80)), fontsize=9)
  ax.grid(alpha=0.3, which="both")
  ax.legend(fontsize=7)
  fig.tight_layout()
  path = os.path.join(out_dir, "fit_" + _slug(y_spec) + "_vs_" + _short(x_field) + ".png")
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def _slug(spec: str) -> str:
  return "".join(c if c.isalnum() or c in "._-" else "_"
                 for c in spec.replace("*", "all")).strip("_")


def _cell(mean: float, std: float, n: int) -> str:
  if n == 0:
    return "-"
  # Small values (relative updates, ~1e-3) keep their significant digits.
  spec = ".2e" if 0 < abs(mean) < 0.01 else (".3f" if abs(mean) < 100 else ".1f")
  return f"{mean:{spec}} ± {std:{spec}}" if n > 1 else f"{mean:{spec}}"


def aggregate(sweep: Sweep, workdir: str,
              command: Optional[str] = None) -> dict[str, Any]:
  """Writes results.md, results.csv and plots/*.png from the stored result.json files."""
  results = load_results(workdir)
  if not results:
    raise ValueError(f"No finished points under {os.path.join(workdir, POINTS_DIR)}.")
  groups = _ordered_groups(sweep, results)
  fields = [f for axis in sweep.axes for f in axis]
  metrics = list(sweep.metrics)
  rows = []
  for group, members in groups.items():
    ok = [r for r in members if r["status"] == "ok"]
    row = {"group": group, **{_short(f): members[0]["overrides"].get(f) for f in fields},
           "seeds": len(members), "diverged": len(members) - len(ok)}
    for spec in metrics:
      row[spec] = _mean_std([metric_value(r["metrics"], spec) for r in ok])
    rows.append(row)

  expected = len(expand(sweep))
  lines = [f"# {sweep.name}", "", sweep.question, ""]
  if command:
    lines += [f"Made by `{command}` ({len(results)} of {expected} points finished; mean ± "
              "standard deviation over seeds; a diverged seed is left out of the mean).", ""]
  header = [_short(f) for f in fields] + ["seeds", "diverged"] + metrics
  lines.append("| " + " | ".join(header) + " |")
  lines.append("|" + "---|" * len(header))
  for row in rows:
    cells = [_fmt(row[_short(f)]) for f in fields] + [str(row["seeds"]), str(row["diverged"])]
    cells += [_cell(*row[spec]) for spec in metrics]
    lines.append("| " + " | ".join(cells) + " |")
  fits = {}
  for fit in sweep.fits:
    slopes = fit_slopes(sweep, results, fit["x"], fit["y"])
    fits[f"{fit['y']} vs {fit['x']}"] = slopes
    lines += ["", f"Slope of log({fit['y']}) against log({_short(fit['x'])}), per seed:", "",
              "| other settings | slope | seeds |", "|---|---|---|"]
    lines += [f"| {k} | {_cell(*v)} | {v[2]} |" for k, v in slopes.items()]
  plots = _plots(sweep, groups, workdir)
  plots += [_fit_plot(sweep, results, fit["x"], fit["y"], os.path.join(workdir, "plots"))
            for fit in sweep.fits]
  if plots:
    lines += [""] + [f"![{os.path.basename(p)}](plots/{os.path.basename(p)})" for p in plots]
  with open(os.path.join(workdir, "results.md"), "w") as f:
    f.write("\n".join(lines) + "\n")

  with open(os.path.join(workdir, "results.csv"), "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow([_short(x) for x in fields] + ["seeds", "diverged"] +
                    [f"{m} {s}" for m in metrics for s in ("mean", "std", "n")])
    for row in rows:
      writer.writerow([row[_short(x)] for x in fields] + [row["seeds"], row["diverged"]] +
                      [f"{v:.6g}" for m in metrics for v in row[m]])
  return {"rows": rows, "fits": fits, "plots": plots, "points": len(results),
          "expected": expected}


def _unit(name: str) -> str:
  if any(k in name for k in ("loss", "nll", "entropy", "log_z")):
    return "nats"
  if any(k in name for k in ("ratio", "accuracy", "over_dk", "perplexity")):
    return "dimensionless"
  return "activation units"


def _plots(sweep: Sweep, groups: dict[str, list[dict[str, Any]]],
           workdir: str) -> list[str]:
  """One PNG per curve: the mean over seeds of each group against steps, shaded min-max."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  out_dir = os.path.join(workdir, "plots")
  os.makedirs(out_dir, exist_ok=True)
  paths = []
  for curve in sweep.curves:
    # The legend goes under the axes (one line per group), where it hides no curve.
    fig, ax = plt.subplots(figsize=(7, 4.2 + 0.17 * len(groups)))
    drawn = 0
    for group, members in groups.items():
      runs = [dict((int(s), v) for s, v in r["curves"].get(curve, [])) for r in members]
      runs = [r for r in runs if r]
      if not runs:
        continue
      steps = sorted(set.intersection(*(set(r) for r in runs)))
      if not steps:
        continue
      values = np.asarray([[r[s] for s in steps] for r in runs])
      mean = values.mean(axis=0)
      line, = ax.plot(steps, mean, label=f"{group} (n={len(runs)})")
      if len(runs) > 1:
        ax.fill_between(steps, values.min(axis=0), values.max(axis=0), alpha=0.2,
                        color=line.get_color())
      drawn += 1
    if not drawn:
      plt.close(fig)
      continue
    split, _, name = curve.partition("/")
    # Long diagnostic names go whole into the wrapped title and by their last part on the axis.
    title = f"{sweep.name}: {name} ({split}); mean over seeds, band = min-max"
    ax.set_title("\n".join(textwrap.wrap(title, 80)), fontsize=9)
    ax.set_xlabel("training step")
    ax.set_ylabel(f"{name if len(name) <= 30 else name.rsplit('/', 1)[-1]} ({_unit(name)})")
    if any(k in curve for k in ("loss", "perplexity", "update_ratio", "grad_norm", "absmax",
                                "_var")) and \
        all(v > 0 for g in groups.values() for r in g for _, v in r["curves"].get(curve, [])):
      ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.14))
    fig.tight_layout()
    path = os.path.join(out_dir, curve.replace("/", "_") + ".png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    paths.append(path)
  return paths
