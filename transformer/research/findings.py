"""The findings page's generated parts, read from the committed sweeps:

  headline  what dropping sqrt(d_model) costs (no scale minus the paper, test NLL, each arm at
            its own best rate, paired by seed) against width and against training length
  balance   W1's reading: each no-scale arm's cost against the paper against its token/PE
            ratio at init, one curve per width (d_model 64, 128 at 4 layers; M9 at 256)

Each point is a row of its sweep's own paired table (`tuning.paired_differences`: the seeds the
sweep reports, with the test set's sampling error where its runs stored their test rows; the
intention-to-treat rows, failed runs counted, where the sweep fixes a failure rule), so the
page says nothing its sweeps' results.md do not. A sweep whose arms have not chosen a rate
yet (a sweep still running) contributes the arms that have. `fill` writes the tables between the
page's markers; `scripts/findings.py` is the one command.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Optional, Sequence

from transformer import storage
from transformer.errors import ConfigError
from transformer.research.sweeps import plots, tuning
from transformer.research.sweeps.grid import load_sweep
from transformer.research.sweeps.stats import load_results, mean_std, metric_value
from transformer.training import experiment

HEADLINE = "headline.png"
BALANCE = "balance.png"
INIT_RATIO = "init/decoder/embed/ratio"
MIN_SEEDS = 3  # every sweep read here reports 3 or more seeds: fewer is a sweep still running


@dataclasses.dataclass(frozen=True)
class Series:
  """One line of a figure: the (arm, baseline) row of each sweep, at its x."""
  label: str
  axis: str  # 'width' (x = d_model) or 'length' (x = steps)
  points: tuple[tuple[float, str, str, str], ...]  # (x, sweep name, arm, baseline)


def _e5(d: int) -> tuple[float, str, str, str]:
  return (d, "e5_width", f"d_model={d},d_ff={4 * d},embed_scale=none",
          f"d_model={d},d_ff={4 * d},embed_scale=sqrt_d")


def _w1_sweeps(configs_dir: str) -> dict[int, str]:
  """{d_model: W1's sweep at that width (M9's at 256)}, as the W1 sweep file declares it."""
  return experiment.load_module(os.path.join(configs_dir, "w1_d64.py")).SWEEP_OF_WIDTH


def _series(configs_dir: str) -> tuple[Series, ...]:
  return (
      Series("2 layers, 400 steps (E5)", "width", tuple(_e5(d) for d in (32, 64, 128))),
      Series("4 layers, 1200 steps, d_k 64 (W1; 256: M9)", "width",
             tuple((d, name, "no_scale", "paper") for d, name in _w1_sweeps(configs_dir).items())),
      Series("2 layers, 1200 steps (M4)", "width",
             ((64, "m4_penalty_vs_steps", "no_scale@1200", "paper@1200"),)),
      Series("d_model 64, 2 layers (M4)", "length",
             tuple((n, "m4_penalty_vs_steps", f"no_scale@{n}", f"paper@{n}")
                   for n in (400, 1200, 3000))),
  )


def _balance_series(configs_dir: str) -> tuple[Series, ...]:
  """W1's no-scale arms, each against the paper of its width."""
  return tuple(
      Series(f"d_model {d}, 4 layers", "ratio",
             tuple((d, name, arm, "paper") for arm in ("no_scale", "ratio_matched", "pe_down")))
      for d, name in _w1_sweeps(configs_dir).items())


@dataclasses.dataclass(frozen=True)
class Point:
  series: str
  axis: str
  x: float  # d_model, steps, or (balance) the arm's token/PE ratio at init
  sweep: str
  paired: tuning.Paired
  arm: str = ""
  failed: int = 0  # reporting seeds of the arm or its baseline that failed (counted: ITT)


@dataclasses.dataclass(frozen=True)
class _Table:
  """A sweep's paired rows (intention to treat where it fixes a failure rule: every reporting
  run counted, as such a sweep declares its headline), each arm's failed reporting seeds and
  its mean token/PE ratio at init over its reported runs."""
  paired: dict[tuple[str, str], tuning.Paired]
  init_ratio: dict[str, float]
  failed: dict[str, int]


def _read(sweep_name: str, configs_dir: str, sweeps_dir: str) -> Optional[_Table]:
  """A sweep's table from its committed results; None if none are there."""
  workdir = storage.join(sweeps_dir, sweep_name)
  if not storage.as_path(storage.join(workdir, "points")).is_dir():  # local or gs://
    return None
  sweep = load_sweep(os.path.join(configs_dir, f"{sweep_name}.py"))
  results = load_results(workdir, sweep.failure)
  bests = tuning.best_per_arm(sweep, results)
  ratios = {}
  for best in bests:
    runs = [r for r in tuning.at_chosen_values(sweep, results, [best])
            if r.get("status") == "ok" and r["seed"] in best.report_by_seed]
    ratios[best.name] = mean_std([metric_value(r["metrics"], INIT_RATIO) for r in runs])[0]
  rows = tuning.paired_differences(sweep, bests, itt=bool(sweep.failure))
  return _Table({(p.arm, p.baseline): p for p in rows}, ratios,
                {b.name: len(b.failed_seeds) for b in bests})


def _points(series: Sequence[Series], configs_dir: str, sweeps_dir: str) -> list[Point]:
  """Every point of `series` whose sweep has both arms at a chosen rate, MIN_SEEDS reported."""
  tables: dict[str, Optional[_Table]] = {}
  out = []
  for s in series:
    for x, sweep, arm, baseline in s.points:
      if sweep not in tables:
        tables[sweep] = _read(sweep, configs_dir, sweeps_dir)
      table = tables[sweep]
      row = table.paired.get((arm, baseline)) if table else None
      if row is None or row.seeds < MIN_SEEDS:
        continue
      if s.axis == "ratio":
        x = table.init_ratio.get(arm, math.nan)
      failed = table.failed.get(arm, 0) + table.failed.get(baseline, 0)
      out.append(Point(s.label, s.axis, x, sweep, row, arm, failed))
  return out


def headline_points(configs_dir: str = "configs/sweeps",
                    sweeps_dir: str = "docs/sweeps") -> list[Point]:
  return _points(_series(configs_dir), configs_dir, sweeps_dir)


def table(found: Sequence[Point], x_name: str) -> str:
  """Points as a markdown table (links relative to docs/)."""
  lines = [f"| series | arm | {x_name} | minus the paper, test NLL (nats) | 95% interval | seeds "
           "| from |", "|---|---|---|---|---|---|---|"]
  for p in found:
    low, high = p.paired.interval
    seeds = f"{p.paired.seeds}" + (f" ({p.failed} failed, counted)" if p.failed else "")
    lines.append(f"| {p.series} | {p.arm} | {p.x:.3g} | {p.paired.mean:+.3f} | "
                 f"[{low:+.3f}, {high:+.3f}] | {seeds} | "
                 f"[{p.sweep}](sweeps/{p.sweep}/results.md) |")
  return "\n".join(lines)


def _draw(ax, found: Sequence[Point], by: str) -> None:
  """One line per `by` ('series' or 'arm' groups) with 95% error bars."""
  for label in dict.fromkeys(getattr(p, by) for p in found):
    mine = sorted((p for p in found if getattr(p, by) == label), key=lambda p: p.x)
    err = [[p.paired.mean - p.paired.interval[0] for p in mine],
           [p.paired.interval[1] - p.paired.mean for p in mine]]
    ax.errorbar([p.x for p in mine], [p.paired.mean for p in mine], yerr=err, marker="o",
                capsize=3, label=label, linestyle="-" if len(mine) > 1 else "none")
  ax.axhline(0.0, color="grey", linewidth=0.8)
  ax.legend(fontsize=8)


def headline_figure(found: Sequence[Point], out_dir: str) -> str:
  """Two panels, the cost against d_model and against steps; returns the file's path."""
  plt = plots.pyplot()
  fig, (wide, long) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
  _draw(wide, [p for p in found if p.axis == "width"], "series")
  _draw(long, [p for p in found if p.axis == "length"], "series")
  wide.set_xscale("log", base=2)
  wide.set_xticks([32, 64, 128, 256], ["32", "64", "128", "256"])
  long.set_xscale("log")
  long.set_xticks([400, 1200, 3000], ["400", "1200", "3000"])
  long.minorticks_off()
  wide.set_xlabel("d_model")
  long.set_xlabel("training steps (32 x 64 tokens each; 1030 steps = 1 epoch)")
  wide.set_ylabel("no scale minus the paper, test NLL (nats)")
  fig.suptitle("What dropping sqrt(d_model) costs, each arm at its own best rate (95% intervals; "
               "Shakespeare, post-LN decoder-only LM, 2-core CPU, float32)", fontsize=9)
  return plots.save_plot(plt, fig, out_dir, HEADLINE)


def balance_figure(found: Sequence[Point], out_dir: str) -> str:
  """The cost against the paper of each no-scale arm against its token/PE ratio at init, one
  curve per width (W1's reading 2); returns the file's path."""
  plt = plots.pyplot()
  fig, ax = plt.subplots(figsize=(6, 4))
  _draw(ax, found, "series")
  for p in found:
    ax.annotate(p.arm, (p.x, p.paired.mean), fontsize=6, xytext=(3, 3),
                textcoords="offset points")
  ax.set_xscale("log")
  ax.set_xlabel("token/PE RMS ratio at init (measured)")
  ax.set_ylabel("arm minus the paper, test NLL (nats)")
  ax.set_title("W1: the cost of the balance at each width (4 layers, 1200 steps)", fontsize=9)
  return plots.save_plot(plt, fig, out_dir, BALANCE)


def headline(out_dir: str, configs_dir: str = "configs/sweeps",
             sweeps_dir: str = "docs/sweeps") -> str:
  """Writes OUT_DIR/headline.png and returns its table."""
  found = headline_points(configs_dir, sweeps_dir)
  headline_figure(found, out_dir)
  return table(found, "d_model or steps")


def balance(out_dir: str, configs_dir: str = "configs/sweeps",
            sweeps_dir: str = "docs/sweeps") -> str:
  """Writes OUT_DIR/balance.png and returns its table."""
  found = _points(_balance_series(configs_dir), configs_dir, sweeps_dir)
  balance_figure(found, out_dir)
  return table(found, "token/PE ratio at init")


def fill(page: str, blocks: dict[str, str]) -> str:
  """`page` with the text between each '<!-- NAME -->' and '<!-- /NAME -->' replaced by
  blocks[NAME]; a marker missing from the page is an error (the page and script disagree)."""
  for name, block in blocks.items():
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    if start not in page or end not in page:
      raise ConfigError(f"The page has no {start} ... {end} block for the generated {name}.")
    head, _, rest = page.partition(start)
    _, _, tail = rest.partition(end)
    page = f"{head}{start}\n{block.strip()}\n{end}{tail}"
  return page
