"""A sweep's plots: curves over training steps per group, log-log fits with reference slopes, the
learning-rate curves of a tuned sweep and a difference's trend along an axis."""

from __future__ import annotations

import textwrap
from typing import Any, Optional

import numpy as np

from transformer import storage
from transformer.research.figures import save_figure
from transformer.research.sweeps.grid import Sweep, format_value, short_name
from transformer.research.sweeps.stats import (cell, curve_pattern, curve_values, fit_points,
                                               fit_slopes)
from transformer.research.sweeps.tuning import ArmBest, Trend


def pyplot() -> Any:
  """matplotlib's pyplot drawing to files (Agg), imported only when a plot is made."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  return plt


def save_plot(plt, fig, out_dir: str, file_name: str) -> str:
  """Lays `fig` out, writes it to OUT_DIR/FILE_NAME (local or gs://), closes it: the path."""
  fig.tight_layout()
  storage.as_path(out_dir).mkdir(parents=True, exist_ok=True)
  path = storage.join(out_dir, file_name)
  save_figure(fig, path, dpi=100)
  plt.close(fig)
  return path


def fit_plot(sweep: Sweep, results: list[dict[str, Any]], x_field: str, y_spec: str,
              out_dir: str) -> str:
  """Log-log plot of y against x, one marker per seed, with reference slopes 1 and 2."""
  plt = pyplot()
  fig, ax = plt.subplots(figsize=(6, 4.5))
  by_setting: dict[str, list[tuple[float, float]]] = {}
  for (others, _), xy in fit_points(sweep, results, x_field, y_spec).items():
    by_setting.setdefault(others, []).extend(xy)
  slopes = fit_slopes(sweep, results, x_field, y_spec)
  for others, xy in sorted(by_setting.items()):
    x, y = np.asarray(sorted(xy)).T
    slope = slopes.get(others)
    label = others + (f": slope {cell(*slope)}" if slope else "")
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
  ax.set_xlabel(short_name(x_field))
  ax.set_ylabel(f"{name} ({unit(name)})")
  title = f"{sweep.name}: {y_spec} against {short_name(x_field)}, one marker per seed; line = mean"
  ax.set_title("\n".join(textwrap.wrap(title, 80)), fontsize=9)
  ax.grid(alpha=0.3, which="both")
  ax.legend(fontsize=7)
  return save_plot(plt, fig, out_dir, "fit_" + slug(y_spec) + "_vs_" + short_name(x_field) + ".png")


def slug(spec: str) -> str:
  return "".join(c if c.isalnum() or c in "._-" else "_"
                 for c in spec.replace("*", "all")).strip("_")


def unit(name: str) -> str:
  if any(k in name for k in ("loss", "nll", "entropy", "log_z")):
    return "nats"
  if any(k in name for k in ("ratio", "accuracy", "over_dk", "perplexity", "alignment")):
    return "dimensionless"
  return "activation units"


def curve_plots(sweep: Sweep, groups: dict[str, list[dict[str, Any]]],
                workdir: str) -> list[str]:
  """One PNG per curve: the mean over seeds of each group against steps, shaded min-max."""
  plt = pyplot()
  out_dir = storage.join(workdir, "plots")
  storage.as_path(out_dir).mkdir(parents=True, exist_ok=True)
  paths = []
  for curve in sweep.curves:
    # The legend goes under the axes (one line per group), where it hides no curve.
    fig, ax = plt.subplots(figsize=(7, 4.2 + 0.17 * len(groups)))
    drawn = 0
    for group, members in groups.items():
      runs = [curve_values(r["curves"], curve) for r in members]
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
    split, _, name = curve_pattern(curve).partition("/")
    name = name.replace("*", "all") + (" (max)" if curve.startswith("max:") else "")
    # Long diagnostic names go whole into the wrapped title and by their last part on the axis.
    title = f"{sweep.name}: {name} ({split}); mean over seeds, band = min-max"
    ax.set_title("\n".join(textwrap.wrap(title, 80)), fontsize=9)
    ax.set_xlabel("training step")
    ax.set_ylabel(f"{name if len(name) <= 30 else name.rsplit('/', 1)[-1]} ({unit(name)})")
    if any(k in curve for k in ("loss", "perplexity", "update_ratio", "grad_norm", "absmax",
                                "_var")) and \
        all(v > 0 for g in groups.values() for r in g
            for v in curve_values(r["curves"], curve).values()):
      ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.14))
    paths.append(save_plot(plt, fig, out_dir, slug(curve.replace("/", "_")) + ".png"))
  return paths


def tuning_plot(sweep: Sweep, bests: list[ArmBest], out_dir: str) -> str:
  """sweep.select against the tuned value for every arm (mean ± std over seeds, log x); the
  chosen value circled, values where a seed diverged (or failed by sweep.failure) marked x on
  the top edge. With sweep.contrast, one panel per setting of that field (shared axes)."""
  plt = pyplot()
  field = short_name(sweep.tuned_field)
  panels: dict[str, list[ArmBest]] = {}
  for b in bests:
    key = f"{short_name(sweep.contrast)}={format_value(dict(b.overrides)[sweep.contrast])}" \
        if sweep.contrast else ""
    panels.setdefault(key, []).append(b)
  rows = max(len(p) for p in panels.values())
  fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels) ** 0.5 + 1, 4.4 + 0.17 * rows),
                           sharey=True, squeeze=False)
  finite = [m for b in bests for _, m, _, n, _ in b.curve if n and np.isfinite(m)]
  top = max(finite) if finite else 1.0
  searched = sorted({v for b in bests for v in b.searched})
  for ax, (key, members) in zip(axes[0], panels.items()):
    for b in members:
      pts = [(v, m, s) for v, m, s, n, dead in b.curve if n and not dead and np.isfinite(m)]
      if not pts:
        continue
      x, y, err = np.asarray(pts).T
      line = ax.errorbar(x, y, yerr=err, marker="o", ms=4, capsize=2, label=b.name)[0]
      if b.best is not None:
        at = [m for v, m, _, _, _ in b.curve if v == b.best][0]
        ax.plot([b.best], [at], "o", ms=11, mfc="none", color=line.get_color())
      dead = [v for v, _, _, _, d in b.curve if d]
      if dead:
        ax.plot(dead, [top] * len(dead), "x", color=line.get_color())
    ax.set_xscale("log", base=2)
    ax.set_xticks(searched, [format_value(v) for v in searched], rotation=30)
    ax.minorticks_off()
    ax.set_xlabel(field)
    if key:
      ax.set_title(key, fontsize=9)
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.14))
  name = sweep.select.rsplit("/", 1)[-1]
  axes[0][0].set_ylabel(f"{sweep.select} ({unit(name)})")
  title = (f"{sweep.name}: {sweep.select} against {field} per arm (mean ± std over seeds); "
           f"circle = chosen, x = a seed {sweep.not_ok}")
  fig.suptitle("\n".join(textwrap.wrap(title, 80 * len(panels))), fontsize=9)
  return save_plot(plt, fig, out_dir, f"tuning_{slug(sweep.select)}_vs_{field}.png")


def trend_plot(sweep: Sweep, trends: list[Trend], tokens_per_unit: Optional[int],
               out_dir: str) -> str:
  """Each comparison's paired difference against sweep.trend (tokens seen, when given), log x:
  one small marker per seed, the mean with its 95% interval, the mean fitted line, dashed where
  it runs past the values run towards its zero (an extrapolation; drawn to 1000x the largest
  value at most)."""
  plt = pyplot()
  fig, ax = plt.subplots(figsize=(6.4, 4.6))
  scale = tokens_per_unit or 1
  for t in trends:
    xs = np.asarray(t.xs)
    mean, low, high = np.asarray([t.at[x] for x in t.xs]).T
    err = None if np.isnan(low).any() else [mean - low, high - mean]
    line = ax.errorbar(xs * scale, mean, yerr=err, fmt="o", ms=6, capsize=3,
                       label=f"{t.arm} - {t.baseline} (mean, 95% interval)")[0]
    for by_x in t.by_seed.values():
      ax.plot(xs * scale, [by_x[x] for x in t.xs], ".", color=line.get_color(), alpha=0.5)
    fitted = lambda x: t.intercept + t.slope[0] * np.log10(x)  # noqa: E731
    ax.plot(xs * scale, fitted(xs), "-", color=line.get_color(),
            label=f"line: {t.slope[0]:+.3f} per tenfold")
    c, p = t.power_fit
    if c == c:  # the other shape, over the values run and as far as the line's extension
      far = np.geomspace(xs.min(), max(xs.max(), min(t.zero if t.zero == t.zero else 0,
                                                      1000 * xs.max())), 40)
      ax.plot(far * scale, c * far ** p, ":", color=line.get_color(),
              label=f"power law: x^{p:+.2f} (never 0)")
    if t.zero == t.zero and t.zero > xs.max():
      end = min(t.zero, 1000 * xs.max())
      beyond = np.geomspace(xs.max(), end, 20)
      zero = ("beyond 1e300" if t.zero == np.inf else f"{t.zero * scale / 1e6:.3g} M tokens"
              if tokens_per_unit else f"{t.zero:.3g}")
      ax.plot(beyond * scale, fitted(beyond), "--", color=line.get_color(),
              label=f"extrapolated: 0 at {zero}" + ("" if end == t.zero else " (off the plot)"))
  ax.axhline(0.0, color="gray", lw=0.8)
  ax.set_xscale("log")
  field = short_name(sweep.trend)
  ax.set_xlabel(f"tokens seen ({field} x {tokens_per_unit})" if tokens_per_unit else field)
  name = sweep.report.rsplit("/", 1)[-1]
  ax.set_ylabel(f"difference of {sweep.report} ({unit(name)})")
  title = (f"{sweep.name}: arm minus baseline, each at its own best "
           f"{short_name(sweep.tuned_field)}, against "
           + ("tokens seen" if tokens_per_unit else field)
           + "; dots = seeds; solid: a line in log x, dashed: its extrapolation; dotted: a "
           "power law")
  ax.set_title("\n".join(textwrap.wrap(title, 80)), fontsize=9)
  ax.grid(alpha=0.3, which="both")
  ax.legend(fontsize=7)
  return save_plot(plt, fig, out_dir, f"trend_{slug(sweep.report)}_vs_{field}.png")
