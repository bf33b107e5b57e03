"""A sweep's report from its stored results alone: WORKDIR/results.md, results.csv, plots/."""

from __future__ import annotations

import csv
import os
from typing import Any, Optional

from transformer.errors import ConfigError
from transformer.research.sweeps.grid import POINTS_DIR, Sweep, expand, format_value, short_name
from transformer.research.sweeps.plots import curve_plots, fit_plot
from transformer.research.sweeps.stats import (cell, fit_slopes, load_results, mean_std,
                                               metric_value, ordered_groups)


def aggregate(sweep: Sweep, workdir: str,
              command: Optional[str] = None) -> dict[str, Any]:
  """Writes results.md, results.csv and plots/*.png from the stored result.json files."""
  results = load_results(workdir)
  if not results:
    raise ConfigError(f"No finished points under {os.path.join(workdir, POINTS_DIR)}.")
  groups = ordered_groups(sweep, results)
  fields = [f for axis in sweep.axes for f in axis]
  metrics = list(sweep.metrics)
  rows = []
  for group, members in groups.items():
    ok = [r for r in members if r["status"] == "ok"]
    row = {"group": group, **{short_name(f): members[0]["overrides"].get(f) for f in fields},
           "seeds": len(members), "diverged": len(members) - len(ok)}
    for spec in metrics:
      row[spec] = mean_std([metric_value(r["metrics"], spec) for r in ok])
    rows.append(row)

  expected = len(expand(sweep))
  lines = [f"# {sweep.name}", "", sweep.question, ""]
  if command:
    lines += [f"Made by `{command}` ({len(results)} of {expected} points finished; mean ± "
              "standard deviation over seeds; a diverged seed is left out of the mean).", ""]
  header = [short_name(f) for f in fields] + ["seeds", "diverged"] + metrics
  lines.append("| " + " | ".join(header) + " |")
  lines.append("|" + "---|" * len(header))
  for row in rows:
    cells = [format_value(row[short_name(f)]) for f in fields] + [str(row["seeds"]), str(row["diverged"])]
    cells += [cell(*row[spec]) for spec in metrics]
    lines.append("| " + " | ".join(cells) + " |")
  fits = {}
  for fit in sweep.fits:
    slopes = fit_slopes(sweep, results, fit["x"], fit["y"])
    fits[f"{fit['y']} vs {fit['x']}"] = slopes
    lines += ["", f"Slope of log({fit['y']}) against log({short_name(fit['x'])}), per seed:", "",
              "| other settings | slope | seeds |", "|---|---|---|"]
    lines += [f"| {k} | {cell(*v)} | {v[2]} |" for k, v in slopes.items()]
  plots = curve_plots(sweep, groups, workdir)
  plots += [fit_plot(sweep, results, fit["x"], fit["y"], os.path.join(workdir, "plots"))
            for fit in sweep.fits]
  if plots:
    lines += [""] + [f"![{os.path.basename(p)}](plots/{os.path.basename(p)})" for p in plots]
  with open(os.path.join(workdir, "results.md"), "w") as f:
    f.write("\n".join(lines) + "\n")

  with open(os.path.join(workdir, "results.csv"), "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow([short_name(x) for x in fields] + ["seeds", "diverged"] +
                    [f"{m} {s}" for m in metrics for s in ("mean", "std", "n")])
    for row in rows:
      writer.writerow([row[short_name(x)] for x in fields] + [row["seeds"], row["diverged"]] +
                      [f"{v:.6g}" for m in metrics for v in row[m]])
  return {"rows": rows, "fits": fits, "plots": plots, "points": len(results),
          "expected": expected}
