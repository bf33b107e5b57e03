"""A sweep's report from its stored results alone: WORKDIR/results.md, results.csv, plots/."""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
from typing import Any, Optional, Sequence

from absl import logging

from transformer import storage
from transformer.errors import ConfigError
from transformer.research.sweeps import tuning
from transformer.research.sweeps.grid import (POINTS_DIR, UNSET, Sweep, arm_label, arm_of,
                                              arms, axis_fields, expand, format_value,
                                              point_config, short_name)
from transformer.research.sweeps.plots import curve_plots, fit_plot, trend_plot, tuning_plot
from transformer.research.sweeps.stats import (cell, correlation, fit_left_out, fit_slopes,
                                               load_results, mean_std, metric_value,
                                               ordered_groups)
from transformer.records import flat_fields, to_json
from transformer.training import experiment, fields
from transformer.training.failure_rule import FailureRule


def changed_points(sweep: Sweep, results: Sequence[dict[str, Any]]) -> list[str]:
  """The finished points of the grid whose stored config differs from the one the sweep file
  gives them now (its inert fields aside), each in words with its first changed
  fields. Results from before configs were stored are taken as they are."""
  grid = {p.name: p for p in tuning.points(sweep, results)}
  inert = fields.names(fields.Role.INERT)
  changed = []
  for result in results:
    if "config" not in result or result["name"] not in grid:
      continue
    # A field added since the run reads at its default: the run as it ran (with_defaults).
    before = flat_fields(experiment.with_defaults(result["config"]).to_dict())
    now = flat_fields(to_json(point_config(sweep, grid[result["name"]])))
    differ = sorted(k for k in set(before) | set(now)
                    if before.get(k) != now.get(k) and k not in inert)
    if differ:
      words = [f"{k} {before.get(k)!r} -> {now.get(k)!r}" for k in differ[:3]]
      changed.append(f"{result['name']} ({', '.join(words)})")
  return changed


def check_unchanged(sweep: Sweep, workdir: str, rerun_changed: bool = False) -> None:
  """Refuses to reuse (or report) points run with another config than the sweep file gives
  them now; with `rerun_changed`, removes those points so that they run again."""
  changed = changed_points(sweep, load_results(workdir))
  if not changed:
    return
  if not rerun_changed:
    raise ConfigError(
        f"{len(changed)} finished point(s) of sweep {sweep.name} in {workdir} were run with "
        f"another config than the sweep file gives them now: {'; '.join(changed[:2])}"
        f"{' ...' if len(changed) > 2 else ''}; pass --rerun_changed to run them again, or "
        "use a new --workdir.")
  for name in changed:
    name = name.partition(" (")[0]
    logging.warning("Sweep %s: %s was run with another config; running it again.", sweep.name,
                    name)
    storage.as_path(storage.join(workdir, POINTS_DIR, name)).rmtree()


def rebuild(sweep: Sweep, path: str, workdir: str, seeds_given: bool = False) -> str:
  """What `scripts/sweep.py --aggregate_only` does, and a run ends with: the report rebuilt from
  the stored results of the points the sweep file still gives (`check_unchanged`); returns
  results.md's text. Imports no jax: a report is rebuilt where nothing trains."""
  check_unchanged(sweep, workdir)
  command = f"python scripts/sweep.py --sweep={path} --workdir=WORKDIR"
  if seeds_given:
    command += f" --seeds={','.join(str(s) for s in sweep.seeds)}"
  summary = aggregate(sweep, workdir, command=command)
  logging.info("%d of %d points finished; tables in %s/results.md", summary["points"],
               summary["expected"], workdir)
  return storage.as_path(storage.join(workdir, "results.md")).read_text()


def aggregate(sweep: Sweep, workdir: str,
              command: Optional[str] = None) -> dict[str, Any]:
  """Writes results.md, results.csv and plots/*.png from the stored result.json files."""
  results, points = grid_results(sweep, workdir)
  if not sweep.failure and any(r["status"] == "failed" for r in results):
    # Judged by the default rule as each run finished (training/failure_rule.py): the tables
    # count them, and say by which rule, as they do a sweep's own.
    sweep = dataclasses.replace(sweep, failure=FailureRule())
  groups = ordered_groups(points, results)
  fields = axis_fields(sweep) + list(sweep.tune)
  failed = sweep.not_ok
  rows = _rows(groups, fields, list(sweep.metrics), failed)
  lines = [f"# {sweep.name}", "", sweep.question, ""]
  if command:
    lines += [f"Made by `{command}` ({len(results)} of {len(points)} points finished; mean ± "
              f"standard deviation over seeds; a {failed} seed is left out of the mean).",
              ""]
  if sweep.failure:
    lines += [f"The failure rule, fixed before the runs: {sweep.failure.describe()}. A failed "
              "run is never chosen, is left out of every mean"
              + (" but the intention-to-treat figures" if _itt_value(sweep) is not None else "")
              + " and is counted in the 'failed' column of its arm and value.", ""]
  lines += _grid_table(rows, fields, list(sweep.metrics), failed)
  lines += _failed_lines(results)
  bests = tuning.best_per_arm(sweep, results) if sweep.tune else []
  # A fit across arms reads each arm at its own chosen value, as the tables do.
  fit_results = tuning.at_chosen_values(sweep, results, bests) if sweep.tune else results
  fits = {f"{fit['y']} vs {fit['x']}": fit_slopes(sweep, fit_results, fit["x"], fit["y"])
          for fit in sweep.fits}
  lines += _fit_lines(sweep, fit_results, fits)
  paired, trends, more = _comparisons(sweep, results, bests, fit_results)
  lines += more
  plots = _plots(sweep, workdir, _curve_groups(sweep, groups, bests), bests, trends, fit_results)
  if plots:
    lines += [""] + [f"![{os.path.basename(p)}](plots/{os.path.basename(p)})" for p in plots]
  storage.write_atomically(storage.join(workdir, "results.md"), "\n".join(lines) + "\n")
  storage.write_atomically(storage.join(workdir, "results.csv"),
                           _csv(rows, fields, list(sweep.metrics), failed))
  itt = tuning.paired_differences(sweep, bests, itt=True) if sweep.failure and bests else []
  return {"rows": rows, "fits": fits, "plots": plots, "points": len(results),
          "expected": len(points), "bests": bests, "paired": paired, "trends": trends,
          "itt_paired": itt}


def grid_results(sweep: Sweep, workdir: str) -> tuple[list[dict[str, Any]], list[Any]]:
  """The stored results of the grid's points (a point the grid no longer holds is left out)
  and the grid's points as the results make them; one line if there are none."""
  results = load_results(workdir, sweep.failure)
  if not results:
    raise ConfigError(f"No finished points under {storage.join(workdir, POINTS_DIR)}.")
  points = tuning.points(sweep, results)
  grid = {p.name for p in points}
  results = [r for r in results if r["name"] in grid]
  if not results:
    raise ConfigError(f"None of the finished points under {storage.join(workdir, POINTS_DIR)} "
                      f"is a point of sweep {sweep.name} as its file now stands.")
  return results, points


def _rows(groups: dict[str, list[dict]], fields: list[str], metrics: list[str],
          failed: str = "diverged") -> list[dict[str, Any]]:
  """One row per group of points (a setting, all its seeds): its settings, seed counts and
  each metric's mean, std and count over the seeds that finished."""
  rows = []
  for group, members in groups.items():
    ok = [r for r in members if r["status"] == "ok"]
    row = {"group": group, **{short_name(f): members[0]["overrides"].get(f, UNSET)
                              for f in fields},
           "seeds": len(members), failed: len(members) - len(ok)}
    for spec in metrics:
      row[spec] = mean_std([metric_value(r["metrics"], spec) for r in ok])
    rows.append(row)
  return rows


def _grid_table(rows: list[dict[str, Any]], fields: list[str], metrics: list[str],
                failed: str = "diverged") -> list[str]:
  header = [short_name(f) for f in fields] + ["seeds", failed] + metrics
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for row in rows:
    cells = ["-" if v is UNSET else format_value(v) for v in (row[short_name(f)] for f in fields)]
    cells += [str(row["seeds"]), str(row[failed])] + [cell(*row[spec]) for spec in metrics]
    lines.append("| " + " | ".join(cells) + " |")
  return lines


def _failed_lines(results: list[dict[str, Any]]) -> list[str]:
  """Each run that finished but failed by the sweep's rule, with the rule's reason."""
  failed = [r for r in results if r["status"] == "failed"]
  if not failed:
    return []
  return ["", "Failed by the rule:", ""] + [f"- {r['name']}: {r['failure']}" for r in failed]


def _fit_lines(sweep: Sweep, fit_results: list[dict[str, Any]],
               fits: dict[str, dict[str, tuple[float, float, int]]]) -> list[str]:
  lines = []
  for fit in sweep.fits:
    slopes = fits[f"{fit['y']} vs {fit['x']}"]
    where = f", each arm at its chosen {short_name(sweep.tuned_field)}" if sweep.tune else ""
    left_out = fit_left_out(fit_results, fit["x"], fit["y"])  # said, never dropped silently
    note = f" ({left_out} finished points left out: y missing or <= 0)" if left_out else ""
    lines += ["", f"Slope of log({fit['y']}) against log({short_name(fit['x'])}), per seed{where}"
              f"{note}:", "", "| other settings | slope | seeds |", "|---|---|---|"]
    lines += [f"| {k} | {cell(*v)} | {v[2]} |" for k, v in slopes.items()]
  return lines


def _comparisons(sweep: Sweep, results: list[dict[str, Any]], bests: list[tuning.ArmBest],
                 fit_results: list[dict[str, Any]]):
  """(paired differences, trends, their report lines): a tuned sweep's arms each at its
  chosen value, or a fixed sweep's arms against its baseline or within its contrast."""
  paired, trends, lines = [], [], []
  if sweep.tune:
    paired = tuning.paired_differences(sweep, bests)
    lines += _tuning_lines(sweep, bests, paired)
    if sweep.trend:
      trends = tuning.trend(sweep, bests)
      lines += _trend_lines(sweep, trends)
    if sweep.correlations:
      lines += _correlation_lines(sweep, fit_results, bests)
    if sweep.sensitivity_cap is not None:
      lines += _sensitivity_lines(sweep, tuning.sensitivity(sweep, results, sweep.sensitivity_cap),
                                  paired)
    for metric in sweep.also_report:  # the same choices, another reported metric
      other = dataclasses.replace(sweep, report=metric)
      lines += _also_lines(other, tuning.best_per_arm(other, results),
                           "each at its own best value")
  elif sweep.baseline or sweep.contrast or sweep.pairs:  # fixed settings, paired by seed
    fixed = tuning.fixed_arms(sweep, results)
    paired = tuning.paired_differences(sweep, fixed)
    if sweep.arm_names:
      lines += ["", "Arms: " + "; ".join(f"**{n}** = {arm_label(a)}"
                                         for n, a in zip(sweep.arm_names, arms(sweep))) + "."]
    itt = _itt_lines(sweep, fixed, "each arm at its fixed settings")
    lines += [""] + itt[:-1] if itt else []
    lines += _paired_lines(sweep, paired, "each arm at its fixed settings")
    for metric in sweep.also_report:
      other = dataclasses.replace(sweep, report=metric)
      lines += _also_lines(other, tuning.fixed_arms(other, results),
                           "each arm at its fixed settings")
  return paired, trends, lines


def _curve_groups(sweep: Sweep, groups: dict[str, list[dict]],
                  bests: list[tuning.ArmBest]) -> dict[str, list[dict]]:
  """The groups whose curves are drawn: a tuned sweep's arms at their chosen values only (the
  whole grid would be unreadable), named by the sweep's short names where it gives them."""
  if not sweep.tune:
    return groups
  field = short_name(sweep.tuned_field)
  chosen = {f"{b.arm},{field}={format_value(b.best)}".removeprefix("base,"):
            f"{b.name}, {field}={format_value(b.best)}" if sweep.arm_names else None
            for b in bests if b.best is not None}
  return {chosen[g] or g: m for g, m in groups.items() if g in chosen}


def _plots(sweep: Sweep, workdir: str, curve_groups: dict[str, list[dict]],
           bests: list[tuning.ArmBest], trends: list[tuning.Trend],
           fit_results: list[dict[str, Any]]) -> list[str]:
  plots = curve_plots(sweep, curve_groups, workdir)
  if bests:
    plots.append(tuning_plot(sweep, bests, storage.join(workdir, "plots")))
  if trends:
    plots.append(trend_plot(sweep, trends, tokens_per_unit(sweep),
                            storage.join(workdir, "plots")))
  plots += [fit_plot(sweep, fit_results, fit["x"], fit["y"], storage.join(workdir, "plots"))
            for fit in sweep.fits]
  return plots


def _csv(rows: list[dict[str, Any]], fields: list[str], metrics: list[str],
         failed: str = "diverged") -> str:
  table = io.StringIO(newline="")
  writer = csv.writer(table)
  writer.writerow([short_name(x) for x in fields] + ["seeds", failed] +
                  [f"{m} {s}" for m in metrics for s in ("mean", "std", "n")])
  for row in rows:
    writer.writerow(["" if row[short_name(x)] is UNSET else row[short_name(x)] for x in fields] +
                    [row["seeds"], row[failed]] +
                    [f"{v:.6g}" for m in metrics for v in row[m]])
  return table.getvalue()


def _seed_list(seeds) -> str:
  return ", ".join(str(s) for s in seeds)


def _tuning_lines(sweep: Sweep, bests: list[tuning.ArmBest],
                  paired: list[tuning.Paired]) -> list[str]:
  """The tables of a tuned sweep: each arm at its best value, and paired differences."""
  field = short_name(sweep.tuned_field)
  lines = ["", f"## Each arm at its own best {field}", ""]
  if sweep.arm_names:
    lines += ["Arms: " + "; ".join(f"**{b.name}** = {b.arm}" for b in bests) + ".", ""]
  lines += [
           f"Chosen on {sweep.select} (lowest mean over seeds; a value where a seed "
           f"{sweep.not_ok} is never chosen), reported on {sweep.report}. 'edge': the best is an "
           "end of the values searched, so the optimum may lie beyond; 'searching': values still "
           "to run; 'fixed': run at one given value, not searched."
           + (f" The choice uses seeds {_seed_list(sweep.seeds)}; seeds "
              f"{_seed_list(sweep.confirm_seeds)} are run at the chosen value only and "
              + (f"are the only seeds {sweep.report} and the differences use (seeds that did "
                 "not choose the value)." if sweep.fresh_report else
                 f"join {sweep.report} and the differences.") if sweep.confirm_seeds else ""),
           ""]
  lines += _itt_lines(sweep, bests, "each at its own best value")
  lines += [f"| arm | {field} searched | best {field} | {sweep.select} | {sweep.report} | seeds |",
            "|---|---|---|---|---|---|"]
  for b in bests:
    searched = ", ".join(format_value(v) for v in b.searched)
    failed = f" ({_seed_list(b.failed_seeds)} failed)" if b.failed_seeds else ""
    lines.append(f"| {b.name} | {searched} | {_best_cell(b)} | {cell(*b.select)} | "
                 f"{cell(*b.report)} | {b.report[2]}{failed} |")
  return lines + _paired_lines(sweep, paired, "each at its own best value")


def _best_cell(b: tuning.ArmBest) -> str:
  """An arm's chosen value with its flags: edge, fixed, searching ('-': none yet)."""
  flag = " (edge)" if b.on_edge else " (fixed)" if len(b.searched) == 1 else ""
  flag += "" if b.complete else " (searching)"
  return "-" if b.best is None else format_value(b.best) + flag


def _itt_value(sweep: Sweep) -> Optional[float]:
  """What a run without a finite sweep.report counts as in the intention-to-treat figures, or
  None where the report has none: no failure rule, no arms compared (an untuned sweep without
  a baseline, contrast or pairs), or no such value (tuning.itt_missing)."""
  if not sweep.failure or not (sweep.tune or sweep.baseline or sweep.contrast or sweep.pairs):
    return None
  return tuning.itt_missing(sweep)


def _itt_lines(sweep: Sweep, bests: list[tuning.ArmBest], how: str) -> list[str]:
  """A sweep with a failure rule: each arm's intention-to-treat figure and its paired
  differences, the headline, then the line that heads the figure over the runs that did not
  fail; none without a failure rule."""
  missing = _itt_value(sweep)
  if missing is None:
    return []
  whence = ("declared in the sweep (itt_missing)" if sweep.itt_missing is not None else
            "ln of the model's vocabulary size, the uniform model's NLL (itt_missing's default)")
  best = f"best {short_name(sweep.tuned_field)} | " if sweep.tune else ""
  lines = [f"Intention to treat (ITT), the headline figure: every reporting run counts, a "
           f"failed one too, at its recorded {sweep.report} where that is finite, else at "
           f"{missing:.4f}, {whence}. The figure after it, over the runs that did not fail, "
           "leaves a failed run out, so it reports an arm over its better runs.", "",
           f"| arm | {best}{sweep.report}, ITT | runs | failed: counted at |",
           "|---|" + "---|" * (4 if sweep.tune else 3)]
  for b in bests:
    counted = "; ".join(f"seed {s}: {b.itt_by_seed[s]:.3f} ("
                        + ("no finite figure" if s in b.itt_missing_seeds else "recorded") + ")"
                        for s in b.failed_seeds if s in b.itt_by_seed) or "-"
    chosen = _best_cell(b) + " | " if sweep.tune else ""
    lines.append(f"| {b.name} | {chosen}{cell(*b.itt)} | {b.itt[2]} | {counted} |")
  lines += _paired_lines(dataclasses.replace(sweep, report=f"{sweep.report} (ITT)"),
                         tuning.paired_differences(sweep, bests, itt=True), how)
  return lines + ["", "Over the runs that did not fail (a failed run left out):", ""]


def _sensitivity_lines(sweep: Sweep, by_arm: dict[str, dict[int, float]],
                       paired: list[tuning.Paired]) -> list[str]:
  """Each arm's learning-rate sensitivity, and its paired differences for the same pairs as
  the reported metric's."""
  grid = ", ".join(format_value(v) for v in sorted(sweep.tune[sweep.tuned_field]))
  lines = ["", f"## Learning-rate sensitivity over {short_name(sweep.tuned_field)} {grid}", "",
           f"Per seed of {_seed_list(sweep.seeds)}: the mean over these values of {sweep.select} "
           f"(a diverged run, or one above {sweep.sensitivity_cap:g}, counts as "
           f"{sweep.sensitivity_cap:g}) minus its lowest value over them (Wortsman et al. 2023). "
           "Lower: the loss stays nearer its best over a wider range of rates. Every value "
           "counts and none is chosen.", "", "| arm | sensitivity | seeds |", "|---|---|---|"]
  lines += [f"| {name} | {cell(*mean_std(list(v.values())))} | {len(v)} |"
            for name, v in by_arm.items()]
  pairs = [tuning.paired(p.arm, p.baseline, by_arm.get(p.arm, {}), by_arm.get(p.baseline, {}))
           for p in paired]
  return lines + _paired_lines(dataclasses.replace(sweep, report="sensitivity"),
                               [p for p in pairs if p.seeds], "over the same values")


def tokens_per_unit(sweep: Sweep) -> Optional[int]:
  """Tokens one unit of sweep.trend stands for: batch_size x max_len a step when the trend is
  num_train_steps of a language model on packed rows ('concat': every position a token); else
  None (padded rows hold fewer tokens than positions)."""
  if sweep.trend != "num_train_steps":
    return None
  config = point_config(sweep, expand(sweep)[0])
  if config.packing != "concat":  # (only a language model's rows can be cut from a stream)
    return None
  return int(config.batch_size * config.max_len)


def interval_cell(low: float, high: float) -> str:
  """A 95% interval's cell; '-' without one (fewer than 2 seeds)."""
  return f"[{low:+.4f}, {high:+.4f}]" if low == low and high == high else "-"


def _trend_lines(sweep: Sweep, trends: list[tuning.Trend]) -> list[str]:
  """Each comparison's difference at each value of sweep.trend, and its fitted lines."""
  if not trends:
    return []
  field, per = short_name(sweep.trend), tokens_per_unit(sweep)
  at = lambda x: format_value(x) + (f" ({x * per / 1e6:.3g} M tokens)" if per else "")  # noqa: E731
  lines = ["", f"## The difference against {field}", "",
           f"The paired differences of {sweep.report} above (arm minus baseline, each at its own "
           f"best {short_name(sweep.tuned_field)} at each {field}; seeds that have every "
           f"{field}), and a line a + b log10({field}) fitted to each seed's differences by "
           "least squares. 'zero at': where the mean line (the mean of the seeds' lines) and "
           "each seed's line reach 0, a point estimate without an interval. Beyond the largest "
           f"{field} run it is an extrapolation: a line is one of many shapes that few points "
           "fit. The other shape: a power law d = c x^p, log d fitted per seed (seeds whose "
           "differences are all above 0), which never reaches 0; 'RMS off' is the distance of "
           "the mean differences from each shape fitted to them, the one hint these few points "
           "give of which they follow."
           + (f" Tokens: {field} x {per} (batch_size x max_len, packed rows)." if per else ""),
           "", f"| arm | baseline | {field} | difference | 95% interval | seeds |",
           "|---|---|---|---|---|---|"]
  for t in trends:
    lines += [f"| {t.arm} | {t.baseline} | {at(x)} | {mean:+.4f} | {interval_cell(low, high)} | "
              f"{len(t.by_seed)} |" for x, (mean, low, high) in sorted(t.at.items())]
  lines += ["", f"| arm | baseline | slope per tenfold {field} | 95% interval | seeds | "
            "zero at | zero at, per seed | power-law exponent p (95%, seeds) | RMS off: line, "
            "power law |", "|---|---|---|---|---|---|---|---|---|"]
  for t in trends:
    mean, low, high, n = t.slope
    lines.append(f"| {t.arm} | {t.baseline} | {mean:+.4f} | {interval_cell(low, high)} | {n} | "
                 f"{_zero_cell(t.zero, t.xs, per)} | "
                 + "; ".join(f"{s}: {_zero_cell(z, t.xs, per)}" for s, z in t.zero_by_seed.items())
                 + (f" | {t.power[0]:+.3f} {interval_cell(t.power[1], t.power[2])}, {t.power[3]} | "
                    if t.power[3] else " | - (a difference is not above 0) | ")
                 + f"{t.residual_line:.4f}, "
                 + (f"{t.residual_power:.4f} |" if t.residual_power == t.residual_power else "- |"))
  return lines


def _zero_cell(zero: float, xs: list[float], per: Optional[int]) -> str:
  """Where a fitted line reaches 0, in the field's units (and tokens), and whether that lies
  within the values run or is extrapolated."""
  if zero != zero:
    return "no zero: the line moves away from 0 or is flat"
  if zero == math.inf:
    return "beyond 1e300 (a nearly flat line)"
  where = "extrapolated" if zero > max(xs) else "within the values run"
  return f"{zero:.3g}" + (f" = {zero * per / 1e6:.3g} M tokens" if per else "") + f" ({where})"


def _also_lines(sweep: Sweep, bests: list[tuning.ArmBest], how: str) -> list[str]:
  """sweep.report of each arm (at its chosen value when tuned) and its paired differences."""
  lines = ["", f"### {sweep.report}", "", f"| arm | {sweep.report} | seeds |", "|---|---|---|"]
  lines += [f"| {b.name} | {cell(*b.report)} | {b.report[2]} |" for b in bests]
  return lines + _paired_lines(sweep, tuning.paired_differences(sweep, bests), how)


def _correlation_lines(sweep: Sweep, at_chosen: list[dict[str, Any]],
                       bests: list[tuning.ArmBest]) -> list[str]:
  """sweep.correlations over seeds: each arm at its chosen value, then its runs pooled."""
  names = {b.arm: b.name for b in bests}
  lines = []
  for c in sweep.correlations:
    lines += ["", f"Pearson r of {c['y']} against {c['x']} over seeds, each arm at its chosen "
              f"{short_name(sweep.tuned_field)} (every seed run there), with a 95% Fisher "
              "interval:", "", "| arm | r | 95% interval | runs |", "|---|---|---|---|"]
    by_arm: dict[str, list[tuple[float, float]]] = {}
    for r in at_chosen:
      if r["status"] == "ok":
        arm = arm_label(arm_of(sweep, r["overrides"]) or ())
        by_arm.setdefault(names.get(arm, arm), []).append(
            (metric_value(r["metrics"], c["x"]), metric_value(r["metrics"], c["y"])))
    by_arm["all arms pooled"] = [xy for pairs in by_arm.values() for xy in pairs]
    for arm, pairs in by_arm.items():
      r, low, high, n = correlation(*zip(*pairs)) if pairs else (math.nan,) * 3 + (0,)
      lines.append(f"| {arm} | {r:+.3f} | {interval_cell(low, high)} | {n} |")
  return lines


def _paired_lines(sweep: Sweep, paired: list[tuning.Paired], how: str) -> list[str]:
  """The table of paired differences (none: no lines)."""
  if not paired:
    return []
  with_test = any(math.isfinite(p.test_se) for p in paired)
  lines = ["", f"Paired differences of {sweep.report}, arm minus baseline, {how}, by seed: "
           "mean and 95% t-interval. 'not settled': the interval holds 0."]
  if with_test:
    lines[-1] += (" Where the runs stored each test example's NLL, the verdict's interval also "
                  "holds the test set's sampling error (the s.e. of a paired bootstrap over test "
                  "examples, to first order, added in quadrature to the seeds').")
  if sweep.holm_family:
    lines[-1] += (f" Holm: still significant when the {len(sweep.holm_family)} comparisons the "
                  "sweep declares its family ("
                  + "; ".join(f"{a} minus {b}" for a, b in sweep.holm_family)
                  + ") are one family at 5% (Holm 1979); the others are exploratory, not "
                  "corrected ('exploratory' in the Holm column).")
  else:
    lines[-1] += (f" Holm: still significant when the table's {len(paired)} comparisons are "
                  "one family at 5% (Holm 1979).")
  head = ["arm", "baseline", "difference", "95% interval"]
  head += ["test-set s.e.", "95% interval with test set"] if with_test else []
  head += ["seeds", "p", "Holm", "verdict"]
  lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for p, kept in zip(paired, tuning.family_holm(sweep, paired)):
    cells = [p.arm, p.baseline, f"{p.mean:+.4f}", interval_cell(p.low, p.high)]
    if with_test:
      cells += [f"{p.test_se:.4f}" if math.isfinite(p.test_se) else "-", interval_cell(*p.interval)
                if math.isfinite(p.test_se) else "-"]
    cells += [str(p.seeds), f"{p.p_value:.2g}" if math.isfinite(p.p_value) else "-",
              "exploratory" if kept is None else "kept" if kept else "-", p.verdict]
    lines.append("| " + " | ".join(cells) + " |")
  return lines
