"""Each arm at its own best value of a tuned field (the learning rate), chosen on validation,
reported on a held-out test split, and compared with a baseline arm paired by seed.

An arm is one setting of the sweep's axes. Its searched values start as sweep.tune's grid (or
its own, sweep.arm_values; a single value is run there and not searched); when
every seed of every searched value is stored and the best lies on an end of the grid, one more
value a grid step beyond that end is searched (at most sweep.extend_edges a side). The search
is computed from the stored results alone, so every process of a sweep and a fresh clone of
committed results agree on it, and an unfinished search continues where it stopped.

The best value has the lowest mean of sweep.select over seeds; a value where a seed diverged
is never chosen. Differences between arms are per seed (same seed: same initialisation draws,
data order and splits), summarised by their mean and a 95% t-interval; a difference whose
interval holds 0 is "not settled", whatever its sign. Where the points stored the NLL of each
test example ('test_rows'), the interval also holds the test set's own sampling error (every
seed is scored on the same test set: `test_set_se`), and each sweep's comparisons are one family
for a Holm correction (`holm`), or the comparisons its holm_family names are (`family_holm`; the
others exploratory).

Intention to treat (a sweep with a failure rule): the figure above leaves a failed reporting
run out, so an arm that fails more often is reported over its better runs. The ITT figure
(`ArmBest.itt_by_seed`, `paired_differences(itt=True)`) counts every reporting run at the
chosen value, failed or not: at its recorded sweep.report where that is finite (a stalled
run, or one with a dead layer, scored its test split), else at sweep.itt_missing, by default
ln of the model's output vocabulary size, the NLL of the uniform model, which predicts nothing
(`itt_missing`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Sequence

import numpy as np
from scipy import stats as scipy_stats

from transformer.research.sweeps.grid import (NLL_REPORTS, Overrides, Point, Sweep, arm_label,
                                              arm_of, arms, contrast_references, expand,
                                              point_config)
from transformer.research.sweeps.stats import mean_std, metric_value
from transformer.training import experiment


@dataclasses.dataclass(frozen=True)
class ArmBest:
  """One arm's search and its chosen value (None before any value has all its seeds)."""
  arm: str
  overrides: tuple[tuple[str, Any], ...]  # the arm's axis settings
  name: str  # sweep.arm_names' name of the arm, else its label
  searched: tuple[float, ...]
  best: Optional[float]
  on_edge: bool  # the best is the smallest or largest value searched
  complete: bool  # every searched value has every seed stored
  select: tuple[float, float, int]  # mean, std, seeds of sweep.select at the best value
  report: tuple[float, float, int]  # the same of sweep.report
  report_by_seed: dict[int, float]
  curve: tuple[tuple[float, float, float, int, int], ...]  # (value, mean, std, ok, not ok)
  # {seed: [[NLL sum, tokens], ...] per test example} of the reported runs that stored them.
  rows_by_seed: dict[int, list] = dataclasses.field(default_factory=dict)
  # Reporting seeds whose run at the chosen value failed (diverged, or by sweep.failure): the
  # reported figure is over the others, and the tables say which failed.
  failed_seeds: tuple[int, ...] = ()
  # Intention to treat (sweeps with a failure rule; {} otherwise): sweep.report of every
  # reporting run, failed or not (`_itt`), its test rows where stored, and the seeds counted
  # at sweep.itt_missing (no finite figure recorded).
  itt_by_seed: dict[int, float] = dataclasses.field(default_factory=dict)
  itt_rows_by_seed: dict[int, list] = dataclasses.field(default_factory=dict)
  itt_missing_seeds: tuple[int, ...] = ()

  @property
  def itt(self) -> tuple[float, float, int]:
    """Mean, std and runs of the intention-to-treat figure."""
    return mean_std(list(self.itt_by_seed.values()))


@dataclasses.dataclass(frozen=True)
class Paired:
  """arm - baseline of sweep.report, each at its own best value, over their common seeds
  (arms by their display names)."""
  arm: str
  baseline: str
  mean: float
  low: float  # 95% t-interval over seeds; NaN with fewer than 2 seeds
  high: float
  seeds: int
  test_se: float = math.nan  # the test set's sampling error of the mean (NaN: rows not stored)

  @property
  def seed_se(self) -> float:
    """The standard error over seeds (from the t-interval's half-width)."""
    return (self.high - self.low) / 2 / _t_quantile(self.seeds)

  @property
  def interval(self) -> tuple[float, float]:
    """The 95% interval the verdict reads: over seeds and, where stored, the test set."""
    if not math.isfinite(self.test_se):
      return self.low, self.high
    half = _t_quantile(self.seeds) * math.hypot(self.seed_se, self.test_se)
    return self.mean - half, self.mean + half

  @property
  def p_value(self) -> float:
    """Two-sided p of 'no difference' on the interval's t statistic (seeds - 1 d.o.f.)."""
    low, high = self.interval
    se = (high - low) / 2 / _t_quantile(self.seeds)
    if not se > 0:
      return math.nan
    return float(2 * scipy_stats.t.sf(abs(self.mean) / se, self.seeds - 1))

  @property
  def verdict(self) -> str:
    return verdict(*self.interval)


def verdict(low: float, high: float) -> str:
  """A difference's 95% interval in words: above 0, below it, or holding it (not settled)."""
  if not (math.isfinite(low) and math.isfinite(high)):
    return "not settled (too few seeds)"
  return "higher" if low > 0 else "lower" if high < 0 else "not settled"


def _t_quantile(seeds: int, confidence: float = 0.95) -> float:
  return float(scipy_stats.t.ppf(0.5 + confidence / 2, seeds - 1)) if seeds > 1 else math.nan


def test_set_se(arm_rows: Sequence[Sequence[Sequence[float]]],
                baseline_rows: Sequence[Sequence[Sequence[float]]]) -> float:
  """The test set's sampling error of a paired difference of test NLL averaged over seeds.

  arm_rows, baseline_rows: per seed, [NLL sum, tokens] of each test example, one test set (the
  same examples in the same order) for every run. The difference is a ratio of sums over the
  examples, D = sum_r u_r / sum_r n_r with u_r the seed-mean difference of example r's NLL
  sums; its variance under resampling the examples (a paired bootstrap over test documents) is,
  to first order, R / (R - 1) * sum_r (u_r - D n_r)^2 / (sum_r n_r)^2. NaN when the runs were
  not scored on one test set.
  """
  runs = [np.asarray(r, np.float64) for r in (*arm_rows, *baseline_rows)]
  if not arm_rows or len(arm_rows) != len(baseline_rows) or not runs[0].size or any(
      r.shape != runs[0].shape or not np.array_equal(r[:, 1], runs[0][:, 1]) for r in runs):
    return math.nan
  half = len(arm_rows)
  u = np.mean([a[:, 0] - b[:, 0] for a, b in zip(runs[:half], runs[half:])], axis=0)
  n = runs[0][:, 1]
  rows, total = len(n), n.sum()
  if rows < 2:
    return math.nan
  d = u.sum() / total
  return float(math.sqrt(rows / (rows - 1) * np.sum((u - d * n) ** 2)) / total)


def holm(paired: Sequence["Paired"], alpha: float = 0.05) -> list[bool]:
  """Which comparisons stay significant at family-wise level `alpha` (Holm 1979): the p-values
  in ascending order, the k-th (from 0) tested at alpha / (m - k) until the first that fails."""
  return _holm([x.p_value for x in paired], alpha)


def family_holm(sweep: Sweep, paired: Sequence["Paired"],
                alpha: float = 0.05) -> list[Optional[bool]]:
  """`holm` over sweep.holm_family's comparisons alone, a family of their number (one not in
  `paired` yet counts as not significant); None for every other comparison (exploratory).
  Without a holm_family, `holm` over all of `paired`."""
  if not sweep.holm_family:
    return list(holm(paired, alpha))
  family = [tuple(pair) for pair in sweep.holm_family]
  members = [x for x in paired if (x.arm, x.baseline) in family]
  kept = _holm([x.p_value for x in members] + [1.0] * (len(family) - len(members)), alpha)
  by_name = {(x.arm, x.baseline): k for x, k in zip(members, kept)}
  return [by_name.get((x.arm, x.baseline)) for x in paired]


def _holm(p_values: Sequence[float], alpha: float) -> list[bool]:
  p = [v if math.isfinite(v) else 1.0 for v in p_values]
  keep = [False] * len(p)
  for k, i in enumerate(sorted(range(len(p)), key=p.__getitem__)):
    if p[i] > alpha / (len(p) - k):
      break
    keep[i] = True
  return keep


def itt_missing(sweep: Sweep) -> Optional[float]:
  """What a reporting run without a finite sweep.report counts as in the intention-to-treat
  figure: sweep.itt_missing where declared; else, where sweep.report is an NLL, ln of the
  output vocabulary size of the sweep's first point (the uniform model's NLL); else None (no
  ITT figure: check_sweep asks a sweep with a failure rule to declare one)."""
  if sweep.itt_missing is not None:
    return float(sweep.itt_missing)
  if sweep.report not in NLL_REPORTS:
    return None
  config = point_config(sweep, expand(sweep)[0])
  return math.log(experiment.parse(config).model.output_vocab_size)


def _itt(sweep: Sweep, runs: Sequence[dict]) -> dict[str, Any]:
  """ArmBest's intention-to-treat fields over `runs` (every reporting run of an arm, failed or
  not): {seed: sweep.report, or itt_missing(sweep) where it is not finite}, the test rows of
  those that stored them, and the seeds counted at itt_missing. Empty without a failure rule
  (or without a value to count a missing figure at)."""
  recorded = {r["seed"]: metric_value(r.get("metrics", {}), sweep.report) for r in runs}
  missing = tuple(sorted(s for s, v in recorded.items() if not math.isfinite(v)))
  fill = itt_missing(sweep) if missing and sweep.failure else None
  if not sweep.failure or not runs or (missing and fill is None):
    return {}
  return dict(itt_by_seed={s: fill if s in missing else v for s, v in sorted(recorded.items())},
              itt_rows_by_seed={r["seed"]: r["test_rows"] for r in runs if r.get("test_rows")
                                and sweep.report in NLL_REPORTS},
              itt_missing_seeds=missing)


def _round(value: float) -> float:
  return float(f"{value:.6g}")  # extended values keep short names: 0.001, not 0.0010000000000000002


def _step(values: Sequence[float]) -> float:
  """The grid's factor between neighbours (geometric mean of the ratios)."""
  v = sorted(values)
  return (v[-1] / v[0]) ** (1.0 / (len(v) - 1))


def _by_value(sweep: Sweep, results: list[dict[str, Any]],
              seeds: Optional[Sequence[int]] = None) -> dict[str, dict[float, list[dict]]]:
  """{arm label: {tuned value: [results of `seeds` (default the sweep's seeds)]}}."""
  field, seeds = sweep.tuned_field, set(sweep.seeds if seeds is None else seeds)
  out: dict[str, dict[float, list[dict]]] = {}
  for r in results:
    overrides = r["overrides"]
    arm = arm_of(sweep, overrides)  # in the axes' order: result.json sorts its keys
    if field not in overrides or r["seed"] not in seeds or arm is None:
      continue
    out.setdefault(arm_label(arm), {}).setdefault(_round(overrides[field]), []).append(r)
  return out


def _score(sweep: Sweep, members: list[dict]) -> float:
  """Mean of sweep.select over seeds; +inf if a seed diverged or has no finite value."""
  values = [metric_value(r["metrics"], sweep.select) if r["status"] == "ok" else math.inf
            for r in members]
  return float(np.mean(values)) if values and all(math.isfinite(v) for v in values) else math.inf


def _search(sweep: Sweep, arm: Overrides,
            stored: dict[float, list[dict]]) -> tuple[list[float], bool]:
  """An arm's searched values and whether all of them have every seed stored."""
  values = sorted(_round(v) for v in sweep.tune_values(arm))
  low, high = 0, 0
  while True:
    if any(len(stored.get(v, [])) < len(sweep.seeds) for v in values):
      return values, False
    if len(values) == 1:  # one value given: a fixed rate, not a search
      return values, True
    factor = _step(values)
    scores = [_score(sweep, stored[v]) for v in values]
    best = values[int(np.argmin(scores))] if any(math.isfinite(s) for s in scores) else values[0]
    if best == values[0] and low < sweep.extend_edges:
      values.insert(0, _round(values[0] / factor))
      low += 1
    elif best == values[-1] and high < sweep.extend_edges and math.isfinite(min(scores)):
      values.append(_round(values[-1] * factor))
      high += 1
    else:
      return values, True


def searched_values(sweep: Sweep, results: list[dict[str, Any]]) -> dict[str, list[float]]:
  """{arm label: the tuned values searched for it so far} (sweep.tune's grid, extended)."""
  stored = _by_value(sweep, results)
  return {arm_label(a): _search(sweep, a, stored.get(arm_label(a), {}))[0] for a in arms(sweep)}


def points(sweep: Sweep, results: list[dict[str, Any]]) -> list[Point]:
  """The sweep's points given what is stored: a tuned sweep's arms with their extensions, and
  its confirm_seeds at the chosen value of each arm whose search is complete."""
  if not sweep.tune:
    return expand(sweep)
  bests = best_per_arm(sweep, results)
  return expand(sweep, {b.arm: list(b.searched) for b in bests},
                {b.arm: b.best for b in bests if b.complete and b.best is not None})


def best_per_arm(sweep: Sweep, results: list[dict[str, Any]]) -> list[ArmBest]:
  """Each arm's search and its best value, in grid order."""
  stored = _by_value(sweep, results)
  confirming = _by_value(sweep, results, sweep.confirm_seeds)
  out = []
  for arm in arms(sweep):
    label = arm_label(arm)
    by_value = stored.get(label, {})
    values, complete = _search(sweep, arm, by_value)
    curve, best, best_score = [], None, math.inf
    for v in values:
      members = by_value.get(v, [])
      ok = [r for r in members if r["status"] == "ok"]
      mean, std, n = mean_std([metric_value(r["metrics"], sweep.select) for r in ok])
      curve.append((v, mean, std, n, len(members) - len(ok)))
      if len(members) == len(sweep.seeds) and _score(sweep, members) < best_score:
        best, best_score = v, _score(sweep, members)
    chosen = [r for r in by_value.get(best, []) if r["status"] == "ok"]
    confirming_runs = confirming.get(label, {}).get(best, []) if complete else []
    # fresh_report: only seeds that took no part in the choice, so it cannot favour them.
    reporting = ([] if sweep.fresh_report else by_value.get(best, [])) + confirming_runs
    reported = [r for r in reporting if r["status"] == "ok"]
    failed = sorted(r["seed"] for r in reporting if r["status"] != "ok")
    by_seed = {r["seed"]: metric_value(r["metrics"], sweep.report) for r in reported}
    rows = {r["seed"]: r["test_rows"] for r in reported if r.get("test_rows")
            and sweep.report in NLL_REPORTS}
    out.append(ArmBest(
        arm=label, overrides=arm, name=sweep.arm_name(arm), searched=tuple(values), best=best,
        on_edge=best is not None and len(values) > 1 and best in (values[0], values[-1]),
        complete=complete,
        select=mean_std([metric_value(r["metrics"], sweep.select) for r in chosen]),
        report=mean_std(list(by_seed.values())), report_by_seed=by_seed, curve=tuple(curve),
        rows_by_seed=rows, failed_seeds=tuple(failed), **_itt(sweep, reporting)))
  return out


def at_chosen_values(sweep: Sweep, results: list[dict[str, Any]],
                     bests: Sequence[ArmBest]) -> list[dict[str, Any]]:
  """The results of each arm at its chosen value, the tuned field left out of their overrides:
  what a fit across arms reads (each arm at its own best rate, not one shared rate)."""
  field = sweep.tuned_field
  chosen = {b.arm: b.best for b in bests if b.best is not None}
  out = []
  for r in results:
    arm = arm_of(sweep, r["overrides"])
    arm = None if arm is None else arm_label(arm)
    if arm in chosen and _round(r["overrides"].get(field, math.nan)) == _round(chosen[arm]):
      out.append({**r, "overrides": {k: v for k, v in r["overrides"].items() if k != field}})
  return out


def fixed_arms(sweep: Sweep, results: list[dict[str, Any]]) -> list[ArmBest]:
  """An untuned sweep's arms in the form of `best_per_arm` (nothing searched): sweep.report by
  seed of each arm's finished runs, for `paired_differences` against sweep.baseline or within
  sweep.contrast; with a failure rule, the intention-to-treat figure of all of them (`_itt`)."""
  by_arm: dict[str, list[dict]] = {}
  for r in results:
    arm = arm_of(sweep, r["overrides"])
    if arm is not None and r["seed"] in sweep.seeds and not (
        set(sweep.tune) & set(r["overrides"])):
      by_arm.setdefault(arm_label(arm), []).append(r)
  out = []
  for arm in arms(sweep):
    label = arm_label(arm)
    runs = by_arm.get(label, [])
    members = [r for r in runs if r["status"] == "ok"]
    by_seed = {r["seed"]: metric_value(r["metrics"], sweep.report) for r in members}
    select = mean_std([metric_value(r["metrics"], sweep.select) for r in members])
    out.append(ArmBest(arm=label, overrides=arm, name=sweep.arm_name(arm), searched=(),
                       best=None, on_edge=False, complete=len(members) == len(sweep.seeds),
                       select=select, report=mean_std(list(by_seed.values())),
                       report_by_seed=by_seed, curve=(),
                       failed_seeds=tuple(sorted(r["seed"] for r in runs if r not in members)),
                       **_itt(sweep, runs)))
  return out


def t_interval(differences: Sequence[float],
               confidence: float = 0.95) -> tuple[float, float, float]:
  """(mean, low, high): the two-sided t-interval of the mean of paired differences."""
  d = np.asarray(differences, np.float64)
  if d.size == 0:
    return math.nan, math.nan, math.nan
  if d.size < 2:
    return float(d.mean()), math.nan, math.nan
  half = scipy_stats.t.ppf(0.5 + confidence / 2, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size)
  return float(d.mean()), float(d.mean() - half), float(d.mean() + half)


def _baselines(sweep: Sweep, bests: list[ArmBest]) -> dict[str, ArmBest]:
  """{arm: the arm it is compared with}: with sweep.contrast, `grid.contrast_references`; else
  sweep.baseline (default the first arm)."""
  if sweep.contrast:
    by_arm = {b.overrides: b for b in bests}
    refs = contrast_references(sweep, list(by_arm))
    return {b.arm: by_arm[refs[b.overrides]] for b in bests if b.overrides in refs}
  base = next(b for b in bests if b.arm == (sweep.baseline or bests[0].arm))
  return {b.arm: base for b in bests}


def _compared(sweep: Sweep, bests: list[ArmBest]) -> list[tuple[ArmBest, ArmBest]]:
  """(arm, baseline) of every comparison: each arm against its baseline (see _baselines; an
  untuned sweep only with a baseline or contrast), then sweep.pairs; in a tuned sweep only
  arms that have both chosen a value. A pair that repeats an earlier comparison is listed once."""
  against_baseline = bool(bests) and bool(sweep.tune or sweep.baseline or sweep.contrast)
  baselines = _baselines(sweep, bests) if against_baseline else {}
  by_name = {b.name: b for b in bests}
  pairs = [(b, baselines.get(b.arm)) for b in bests]
  pairs += [(by_name[arm], by_name[base]) for arm, base in sweep.pairs]
  kept = [(b, base) for b, base in pairs if base is not None and base is not b
          and not (sweep.tune and (b.best is None or base.best is None))]
  names = [(b.name, base.name) for b, base in kept]
  return [p for i, p in enumerate(kept) if names[i] not in names[:i]]


def paired_differences(sweep: Sweep, bests: list[ArmBest], itt: bool = False) -> list[Paired]:
  """Every comparison of `_compared`, paired by seed; `itt`: of the intention-to-treat
  figures (every reporting run counted)."""
  def figures(b: ArmBest) -> tuple[dict[int, float], dict[int, list]]:
    return (b.itt_by_seed, b.itt_rows_by_seed) if itt else (b.report_by_seed, b.rows_by_seed)
  return [paired(b.name, base.name, figures(b)[0], figures(base)[0], figures(b)[1],
                 figures(base)[1]) for b, base in _compared(sweep, bests)]


def paired(arm: str, baseline: str, arm_by_seed: dict[int, float],
           baseline_by_seed: dict[int, float], arm_rows: Optional[dict[int, list]] = None,
           baseline_rows: Optional[dict[int, list]] = None) -> Paired:
  """arm - baseline over their common seeds with a finite difference: mean and 95% interval,
  and the test set's sampling error where every one of those seeds stored its test rows."""
  seeds = [s for s in sorted(set(arm_by_seed) & set(baseline_by_seed))
           if math.isfinite(arm_by_seed[s] - baseline_by_seed[s])]
  diffs = [arm_by_seed[s] - baseline_by_seed[s] for s in seeds]
  arm_rows, baseline_rows = arm_rows or {}, baseline_rows or {}
  with_rows = all(s in arm_rows and s in baseline_rows for s in seeds)
  se = (test_set_se([arm_rows[s] for s in seeds], [baseline_rows[s] for s in seeds])
        if with_rows else math.nan)
  return Paired(arm, baseline, *t_interval(diffs), len(diffs), se)


def sensitivity(sweep: Sweep, results: list[dict[str, Any]],
                cap: float) -> dict[str, dict[int, float]]:
  """{arm name: {seed: learning-rate sensitivity}} over sweep.seeds (Wortsman et al. 2023): the
  mean over sweep.tune's grid of min(sweep.select, cap) minus its smallest value over the grid,
  a diverged run counting as `cap` (the loss of knowing nothing: about the loss at init). Read
  on the grid alone, not an arm's extensions, so every arm is measured over the same range; a
  seed missing a value of the grid has no figure yet. No value is chosen, so no seed is
  reported on a choice it made."""
  stored = _by_value(sweep, results)
  grid = sorted(_round(v) for v in sweep.tune[sweep.tuned_field])
  out = {}
  for arm in arms(sweep):
    by_value = stored.get(arm_label(arm), {})
    losses: dict[int, dict[float, float]] = {}
    for v in grid:
      for r in by_value.get(v, []):
        loss = metric_value(r["metrics"], sweep.select) if r["status"] == "ok" else math.inf
        losses.setdefault(r["seed"], {})[v] = min(loss, cap) if math.isfinite(loss) else cap
    out[sweep.arm_name(arm)] = {
        seed: float(np.mean([c[v] for v in grid]) - min(c.values()))
        for seed, c in sorted(losses.items()) if len(c) == len(grid)}
  return out


@dataclasses.dataclass(frozen=True)
class Trend:
  """One comparison's paired difference (arm - baseline of sweep.report, each at its own best
  value) against the numeric axis field sweep.trend, with a line d = a + b log10(x) fitted by
  least squares to each seed's differences."""
  arm: str  # the arm's settings other than the trend field
  baseline: str
  by_seed: dict[int, dict[float, float]]  # {seed: {x: difference}}, seeds with every x only
  at: dict[float, tuple[float, float, float]]  # {x: mean, 95% interval of the difference}
  slope: tuple[float, float, float, int]  # b per tenfold of x: mean, 95% interval, seeds
  intercept: float  # a of the mean line (the mean of the seeds' lines)
  zero: float  # x where the mean line reaches 0; NaN: it moves away from 0 or is flat
  zero_by_seed: dict[int, float]  # the same of each seed's line
  # The other shape: d = c x^p, log d fitted per seed (seeds whose differences are all > 0);
  # p: mean, 95% interval, seeds; and (c, p) fitted to the mean differences (NaN if one is <= 0).
  power: tuple[float, float, float, int]
  power_fit: tuple[float, float]
  # RMS distance of the mean differences from the line and from the power law fitted to them
  # (least squares, log space for the power law): which shape the points favour.
  residual_line: float
  residual_power: float

  @property
  def xs(self) -> list[float]:
    return sorted(self.at)


def _zero(a: float, b: float, xs: Sequence[float]) -> float:
  """x with a + b log10(x) = 0, if the line heads for 0 from its value at the smallest of xs
  (so the zero lies above it); else NaN. inf past float range (a nearly flat line)."""
  at_start = a + b * math.log10(min(xs))
  if not (math.isfinite(b) and at_start * b < 0):
    return math.nan
  exponent = -a / b
  return math.inf if exponent > 300 else float(10.0 ** exponent)


def trend(sweep: Sweep, bests: list[ArmBest]) -> list[Trend]:
  """The paired differences of `_compared`, grouped over sweep.trend's values: one Trend per
  comparison of the other settings, each seed's line fitted over the values it has all of
  (a comparison no seed has two values of yet is left out)."""
  field = sweep.trend
  groups: dict[tuple[str, str], dict[int, dict[float, float]]] = {}
  for b, base in _compared(sweep, bests):
    arm, ref = dict(b.overrides), dict(base.overrides)
    if field not in arm or arm[field] != ref.get(field):
      continue  # a pair across trend values is no point of a trend
    x = float(arm.pop(field))
    ref.pop(field)
    key = (arm_label(tuple(arm.items())), arm_label(tuple(ref.items())))
    for seed in set(b.report_by_seed) & set(base.report_by_seed):
      d = b.report_by_seed[seed] - base.report_by_seed[seed]
      if math.isfinite(d):
        groups.setdefault(key, {}).setdefault(seed, {})[x] = d
  out = []
  for (arm, ref), by_seed in groups.items():
    xs = sorted({x for d in by_seed.values() for x in d})
    full = {s: d for s, d in sorted(by_seed.items()) if len(d) == len(xs)}
    if len(xs) < 2 or not full:
      continue
    log_x = np.log10(xs)
    lines = {s: np.polyfit(log_x, [d[x] for x in xs], 1) for s, d in full.items()}
    intercept = float(np.mean([a for _, a in lines.values()]))
    slope = t_interval([b for b, _ in lines.values()])
    mean = np.asarray([np.mean([d[x] for d in full.values()]) for x in xs])
    powers = [np.polyfit(log_x, np.log10([d[x] for x in xs]), 1)[0]
              for d in full.values() if all(d[x] > 0 for x in xs)]
    power_fit, residual_power = (math.nan, math.nan), math.nan
    if (mean > 0).all():
      p, log_c = np.polyfit(log_x, np.log10(mean), 1)
      power_fit = (float(10 ** log_c), float(p))
      residual_power = float(np.sqrt(np.mean((mean - power_fit[0] * np.power(xs, p)) ** 2)))
    residual_line = float(np.sqrt(np.mean((mean - (intercept + slope[0] * log_x)) ** 2)))
    out.append(Trend(arm, ref, full, {x: t_interval([d[x] for d in full.values()]) for x in xs},
                     (*slope, len(full)), intercept, _zero(intercept, slope[0], xs),
                     {s: _zero(float(a), float(b), xs) for s, (b, a) in lines.items()},
                     (*t_interval(powers), len(powers)), power_fit, residual_line,
                     residual_power))
  return out
