"""A sweep's stored results and their statistics: metric lookup, mean and spread over seeds,
log-log slopes per seed, correlations over seeds, and the table cells that show them."""

from __future__ import annotations

import fnmatch
import json
import math
from typing import Any, Optional, Sequence

import numpy as np
from scipy import stats as scipy_stats

from transformer import storage
from transformer.research.sweeps.grid import (POINTS_DIR, RESULT_FILE, Point, Sweep,
                                              format_value, short_name)
from transformer.training.failure_rule import FailureRule, layer_grad_norms


def load_results(workdir: str, failure: Optional[FailureRule] = None) -> list[dict[str, Any]]:
  """The result.json of every finished point under workdir, in name order. With a sweep's
  failure rule, each run that finished with finite losses is judged by it as it is read
  (status 'failed' and the reason under 'failure', or 'ok'): the files stay as they are, so
  the rule applies to runs made before it. Without one, each record's own status stands (the
  default rule's, written when the run finished)."""
  root = storage.as_path(storage.join(workdir, POINTS_DIR))
  results = []
  for point in sorted(root.iterdir()) if root.is_dir() else []:
    if (point / RESULT_FILE).is_file():
      result = json.loads((point / RESULT_FILE).read_text())
      if failure and result["status"] in ("ok", "failed"):
        reason = failure_of(result, failure)
        result = {k: v for k, v in result.items() if k != "failure"}
        result.update({"status": "failed", "failure": reason} if reason else {"status": "ok"})
      results.append(result)
  return results


def failure_of(result: dict[str, Any], rule: FailureRule) -> Optional[str]:
  """Why a finished run failed by `rule`, in words, read off its result.json; None if not."""
  losses = dict((int(s), v) for s, v in result.get("curves", {}).get("train/loss", []))
  warmup = result.get("config", {}).get("warmup_steps", 0)
  return rule.judge(losses, layer_grad_norms(result.get("metrics", {}), prefix="final/"),
                    warmup_steps=warmup)


def metric_value(metrics: dict[str, Any], spec: str) -> float:
  """A metric of one point: a key, or 'mean:'/'max:' over the keys matching a pattern, or the
  difference 'A - B' of two such specs (what training changed: 'mean:final/x - mean:init/x')."""
  if " - " in spec:
    first, second = spec.split(" - ", 1)
    return metric_value(metrics, first) - metric_value(metrics, second)
  reduce, _, pattern = spec.rpartition(":")
  values = [float(v) for k, v in metrics.items() if fnmatch.fnmatchcase(k, pattern)]
  values = [v for v in values if math.isfinite(v)]
  if not values:
    return float("nan")
  return float(np.max(values) if reduce == "max" else np.mean(values))


def curve_values(curves: dict[str, list[list[float]]], spec: str) -> dict[int, float]:
  """{step: value} of one run's stored curve: a series name, or 'mean:'/'max:' (default mean)
  over the series matching a pattern at each step they all have (every head of a layer)."""
  reduce, _, pattern = spec.rpartition(":")
  matching = [dict((int(s), v) for s, v in series) for name, series in curves.items()
              if fnmatch.fnmatchcase(name, pattern)]
  if not matching:
    return {}
  steps = sorted(set.intersection(*(set(m) for m in matching)))
  pick = max if reduce == "max" else (lambda v: float(np.mean(v)))
  return {s: pick([m[s] for m in matching]) for s in steps}


def curve_pattern(spec: str) -> str:
  """The series-name pattern of a curve spec (its 'mean:' / 'max:' left off)."""
  return spec.rpartition(":")[2]


def mean_std(values: Sequence[float]) -> tuple[float, float, int]:
  v = np.asarray([x for x in values if math.isfinite(x)], np.float64)
  if v.size == 0:
    return float("nan"), float("nan"), 0
  return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0, int(v.size)


def ordered_groups(points: Sequence[Point],
                   results: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
  """{group: [results]} in the order of `points` (the sweep's grid); others last."""
  order: dict[str, int] = {}
  for i, p in enumerate(points):
    order.setdefault(p.group, i)  # a group's first point: confirm_seeds come after the grid
  groups: dict[str, list[dict[str, Any]]] = {}
  for r in sorted(results, key=lambda r: (order.get(r["group"], len(order)), r["seed"])):
    groups.setdefault(r["group"], []).append(r)
  return groups


def fit_slopes(sweep: Sweep, results: list[dict[str, Any]],
               x_field: str, y_spec: str) -> dict[str, tuple[float, float, int]]:
  """Slope of log y against log x (x = `x_field`), per seed and per setting of the other
  axes: {other settings: (mean slope, std over seeds, seeds)}. A tuned sweep's results are
  to be given at each arm's chosen value (tuning.at_chosen_values)."""
  slopes: dict[str, list[float]] = {}
  for (others, _), xy in fit_points(sweep, results, x_field, y_spec).items():
    if len({x for x, _ in xy}) >= 2:
      x, y = np.log(np.asarray(xy)).T
      slopes.setdefault(others, []).append(float(np.polyfit(x, y, 1)[0]))
  return {k: mean_std(v) for k, v in slopes.items()}


def _fit_candidates(results: list[dict[str, Any]], x_field: str,
                    y_spec: str) -> list[tuple[dict[str, Any], float, bool]]:
  """(result, y, usable) for every finished point that sets x: a log-log fit can use only a
  finite, positive y (a difference spec such as 'final - init' can give y <= 0)."""
  out = []
  for r in results:
    if r["status"] == "ok" and x_field in r["overrides"]:
      y = metric_value(r["metrics"], y_spec)
      out.append((r, y, math.isfinite(y) and y > 0))
  return out


def fit_points(sweep: Sweep, results: list[dict[str, Any]], x_field: str,
               y_spec: str) -> dict[tuple[str, int], list[tuple[float, float]]]:
  """{(other settings, seed): [(x, y), ...]} of the finished points with a positive y. The
  fields that move with x (its axis) are part of x, not other settings."""
  moving = next((set(axis) for axis in sweep.axes if x_field in axis), {x_field})
  per: dict[tuple[str, int], list[tuple[float, float]]] = {}
  for r, y, usable in _fit_candidates(results, x_field, y_spec):
    if usable:
      others = ",".join(f"{short_name(k)}={format_value(v)}" for k, v in r["overrides"].items()
                        if k not in moving)
      per.setdefault((others or "all", r["seed"]), []).append((float(r["overrides"][x_field]), y))
  return per


def fit_left_out(results: list[dict[str, Any]], x_field: str, y_spec: str) -> int:
  """How many finished points that set x fit_points leaves out (y missing, inf or <= 0)."""
  return sum(1 for _, _, usable in _fit_candidates(results, x_field, y_spec) if not usable)


def correlation(xs: Sequence[float], ys: Sequence[float],
                confidence: float = 0.95) -> tuple[float, float, float, int]:
  """(Pearson r, low, high, n) over the pairs where both are finite; the interval is Fisher's
  (tanh of atanh(r) +- z / sqrt(n - 3)), NaN with 3 pairs or fewer."""
  pairs = np.asarray([(x, y) for x, y in zip(xs, ys) if math.isfinite(x) and math.isfinite(y)],
                     np.float64).reshape(-1, 2)
  n = len(pairs)
  if n < 3 or np.ptp(pairs[:, 0]) == 0 or np.ptp(pairs[:, 1]) == 0:
    return math.nan, math.nan, math.nan, n
  r = float(np.corrcoef(pairs.T)[0, 1])
  if n <= 3:
    return r, math.nan, math.nan, n
  z = float(scipy_stats.norm.ppf(0.5 + confidence / 2)) / math.sqrt(n - 3)
  center = math.atanh(min(max(r, -1 + 1e-12), 1 - 1e-12))
  return r, math.tanh(center - z), math.tanh(center + z), n


def welch(samples: Sequence[Sequence[float]],
          confidence: float = 0.95) -> tuple[float, float, float, float, float]:
  """(estimate, low, high, degrees of freedom, two-sided p of 0) of the sum of the means of
  independent samples (signs folded into the values): the estimate is sum_g mean_g, its
  variance sum_g s_g^2 / n_g, and the t quantile's degrees of freedom Welch-Satterthwaite's,
  (sum_g s_g^2 / n_g)^2 / sum_g (s_g^2 / n_g)^2 / (n_g - 1). With two samples a and -b it is
  Welch's unequal-variance interval of mean(a) - mean(b). NaN where a sample has fewer than 2
  values or every sample's variance is 0."""
  groups = [np.asarray([x for x in s if math.isfinite(x)], np.float64) for s in samples]
  estimate = float(sum(g.mean() for g in groups)) if all(g.size for g in groups) else math.nan
  if not groups or any(g.size < 2 for g in groups):
    return estimate, math.nan, math.nan, math.nan, math.nan
  parts = [g.var(ddof=1) / g.size for g in groups]
  var = float(sum(parts))
  if not var > 0:
    return estimate, math.nan, math.nan, math.nan, math.nan
  df = var ** 2 / sum(p ** 2 / (g.size - 1) for p, g in zip(parts, groups))
  half = float(scipy_stats.t.ppf(0.5 + confidence / 2, df)) * math.sqrt(var)
  p = float(2 * scipy_stats.t.sf(abs(estimate) / math.sqrt(var), df))
  return estimate, estimate - half, estimate + half, float(df), p


def cell(mean: float, std: float, n: int) -> str:
  if n == 0:
    return "-"
  # Small values (relative updates, ~1e-3) keep their significant digits.
  spec = ".2e" if 0 < abs(mean) < 0.01 else (".3f" if abs(mean) < 100 else ".1f")
  return f"{mean:{spec}} ± {std:{spec}}" if n > 1 else f"{mean:{spec}}"


# Spikes, counted per log window after warmup (a window's worst step is logged by the loop):
SPIKE_LOSS_JUMP = 0.2  # a step's loss more than 20% above the previous window's mean loss
SPIKE_GRAD_RATIO = 4.0  # a step's gradient norm over 4x the run's median (window-end) norm


def spike_stats(series: dict[str, list[list[float]]], after_step: int) -> dict[str, float]:
  """{'spikes/loss', 'spikes/loss_max_jump', 'spikes/grad_norm', 'spikes/grad_norm_max_ratio'}
  from a run's train curves (loss, loss_step_max, grad_norm, grad_norm_step_max); {} for runs
  logged before the loop recorded per-window maxima."""
  need = ("train/loss", "train/loss_step_max", "train/grad_norm", "train/grad_norm_step_max")
  if not all(k in series for k in need):
    return {}
  mean, worst = (dict(map(tuple, series["train/loss"])),
                 dict(map(tuple, series["train/loss_step_max"])))
  steps = sorted(mean)
  jumps = [worst[s] / mean[prev] - 1.0 for prev, s in zip(steps, steps[1:])
           if s > after_step and s in worst and mean[prev] > 0]
  norms = [v for s, v in series["train/grad_norm"] if s > after_step]
  median = float(np.median(norms)) if norms else float("nan")
  ratios = [v / median for s, v in series["train/grad_norm_step_max"]
            if s > after_step and median > 0]
  return {"spikes/loss": float(sum(j > SPIKE_LOSS_JUMP for j in jumps)),
          "spikes/loss_max_jump": max(jumps, default=float("nan")),
          "spikes/grad_norm": float(sum(r > SPIKE_GRAD_RATIO for r in ratios)),
          "spikes/grad_norm_max_ratio": max(ratios, default=float("nan"))}
