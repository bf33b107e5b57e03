"""Question 5's variance argument read where its premise holds, from committed sweep results.

The argument: q and k with independent components of mean 0 and variance 1 give Var(q.k) =
d_k, so 1/sqrt(d_k) gives unit-variance logits; its premise is that a layer norm keeps q and
k near unit variance. That premise can hold only where the attention's input is a layer
norm's output: a post-LN model's layers 1 and up (layer 0 reads sqrt(d)E + PE, so it tests
the embedding's scale) and every layer of a pre-LN model (or of one with `embed_norm`).

`report()` reads docs/sweeps/NAME/points/*/result.json (stats.load_results) and the sweep's
file, configs/sweeps/NAME.py (grid.load_sweep; its base config from the working directory, as
the runner reads it); neither imports jax.

Each arm (one setting of the axes) is read at the rate the sweep runner chose for it
(tuning.best_per_arm: among the rates it searched, the grid and its edge extensions, the lowest
mean of `select`, the validation loss, over the choosing seeds, a rate where one of them is
missing or failed never chosen, ties to the smaller; an 'ok' run without diagnostics counts in
that choice but is not read here). E6 chooses on seed 0 alone and every arm chose 1e-2; the
figures are then the 'ok' runs with diagnostics at the chosen value of the choosing seeds and
`confirm_seeds` (E6: seeds 0-4), of `confirm_seeds` alone with `fresh_report` (M3, M7: seeds
3-5).

Every statistic is the mean over a layer's heads of the diagnostics' per-head value
(transformer/diagnostics.py): raw_var_within (Var(q.k) across one query's keys, before the
attention scale), qk_var_over_dk_within (that over d_k), qk_alignment, logit_var_within (what
the softmax sees, after the scale), and `mean_square`, each head's qk_var_over_dk_within /
qk_alignment: about the mean square of q's components times that of k's (the premise's "unit
variance" part, 1 when it holds; alignment is the "independent" part). d_k is read off the
same heads (raw_var_within / qk_var_over_dk_within). Where a sweep varies d_k (an axis moves
model.head_dim, num_heads or d_model), the slope of log Var(q.k) against log d_k is fitted
per seed across the d_k arms of one setting, each at its own chosen rate, and summarised by
its mean and a 95% t-interval over seeds; the argument predicts 1.

  python -m transformer.research.variance_argument [SWEEPS_DIR [CONFIGS_DIR]]
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import sys
from typing import Any, Optional, Sequence

import numpy as np

from transformer import recipes
from transformer.config import ModelConfig
from transformer.research.sweeps import grid, stats, tuning
from transformer.research.sweeps.grid import Sweep
from transformer.training import experiment

SWEEPS = ("e6_head_dim", "e5_width", "e3_pre_ln", "m3_no_additive_pe", "m7_rope_tying")
DK_FIELDS = frozenset({"model.head_dim", "model.num_heads", "model.d_model"})
STATS = ("raw_var_within", "qk_var_over_dk_within", "qk_alignment", "logit_var_within",
         "mean_square")
PHASES = ("init", "final")
READINGS = ("init", "trained", "trained - init")
CONFIDENCE = 0.95
EMBEDDING_INPUT = "embedding sum: the embedding's scale, not the argument's premise"
NORM_INPUT = "layer norm output"


@dataclasses.dataclass(frozen=True)
class Run:
  """One finished point: its arm, rate, seed, the model fields read here, its head means and
  its result.json (what the rate's choice reads)."""
  arm: tuple[tuple[str, Any], ...]  # the axis settings, in the axes' order (grid.arm_of)
  rate: Optional[float]
  seed: int
  ok: bool  # 'ok', with diagnostics
  model: dict[str, Any]  # norm_position, embed_norm, attention_scale: override, fixed or base
  d_k: int
  layers: dict[tuple[str, int], dict[str, float]]  # {(stack, layer): {"init/STAT": head mean}}
  result: dict[str, Any]  # its result.json, as the sweep runner reads it


@dataclasses.dataclass(frozen=True)
class SlopeRow:
  """One reading's slopes of log Var(q.k) against log d_k, one per seed."""
  sweep: str
  layer: tuple[str, int]
  normalised: bool  # the layer's input is a layer norm's output
  setting: str
  scale: str  # the setting's attention_scale
  reading: str  # one of READINGS
  seeds: tuple[int, ...]
  slopes: tuple[float, ...]  # float[seeds]
  left_out: tuple[int, ...] = ()  # seeds whose change was not positive at every d_k


@dataclasses.dataclass(frozen=True)
class LevelRow:
  """One layer of one arm (and d_k): each STATS value at init and trained over seeds."""
  sweep: str
  layer: tuple[str, int]
  normalised: bool
  setting: str
  scale: str
  d_k: int
  values: dict[str, tuple[float, ...]]  # {"init/STAT": float[seeds]}


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE
               ) -> tuple[float, float, float, float, int]:
  """(mean, std, low, high, n) of the finite values (float[n]): mean +- t_{n-1} std / sqrt(n);
  NaN bounds (and std) below two values."""
  finite = [x for x in values if math.isfinite(x)]
  mean, std, n = stats.mean_std(finite)
  _, low, high = tuning.t_interval(finite, confidence)
  return mean, std if n > 1 else math.nan, low, high, n


def log_slope(d_k: Sequence[float], var: Sequence[float]) -> float:
  """Least-squares slope of log var against log d_k (float[n] each, two distinct d_k or more),
  the fit the sweep report makes (stats.fit_slopes)."""
  return float(np.polyfit(np.log(np.asarray(d_k, np.float64)),
                          np.log(np.asarray(var, np.float64)), 1)[0])


def _moving(sweep: Sweep) -> tuple[str, ...]:
  """The fields of the axis that sets d_k; () where none does."""
  return next((tuple(axis) for axis in sweep.axes if DK_FIELDS & set(axis)), ())


def _base_model(base: str) -> dict[str, Any]:
  """The model fields of a sweep's base config: ModelConfig's defaults under its recipe, then
  what the config sets."""
  model = experiment.load_config(base).model
  defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
  return {**defaults, **recipes.get(model.recipe),
          **{k: v for k, v in model.items() if v is not None and k != "recipe"}}


def _head_means(metrics: dict[str, float]) -> dict[tuple[str, int], dict[str, float]]:
  """{(stack, layer): {"PHASE/STAT": mean over heads}} of the self-attention diagnostics."""
  heads: dict[tuple[str, int], dict[str, dict[str, dict[str, float]]]] = {}
  for key, value in metrics.items():
    parts = key.split("/")  # PHASE/STACK/layer_I/self_attention/head_H/STAT
    if (len(parts) == 6 and parts[0] in PHASES and parts[2].startswith("layer_")
        and parts[3] == "self_attention" and parts[4].startswith("head_")):
      layer = heads.setdefault((parts[1], int(parts[2][6:])), {})
      layer.setdefault(parts[0], {}).setdefault(parts[4], {})[parts[5]] = float(value)
  out: dict[tuple[str, int], dict[str, float]] = {}
  for layer, phases in heads.items():
    for phase, by_head in phases.items():
      for stat in STATS:
        values = [_head_stat(h, stat) for h in by_head.values()]
        finite = [v for v in values if math.isfinite(v)]
        out.setdefault(layer, {})[f"{phase}/{stat}"] = (float(np.mean(finite)) if finite
                                                        else math.nan)
  return out


def _head_stat(head: dict[str, float], stat: str) -> float:
  """One head's STAT; mean_square is Var(q.k)/d_k over the alignment (see the docstring)."""
  if stat == "mean_square":
    alignment = head.get("qk_alignment", math.nan)
    return head.get("qk_var_over_dk_within", math.nan) / alignment if alignment else math.nan
  return head.get(stat, math.nan)


def _run(result: dict[str, Any], sweep: Sweep, base: dict[str, Any]) -> Run:
  """A Run from one result.json's contents."""
  overrides = result["overrides"]
  model = {f: overrides.get(f"model.{f}", sweep.fixed.get(f"model.{f}", base[f]))
           for f in ("norm_position", "embed_norm", "attention_scale")}
  layers = _head_means(result["metrics"])
  first = layers[min(layers)] if layers else {}
  # d_k from the heads themselves: qk_var_over_dk_within is raw_var_within / d_k.
  ratio = first.get("init/raw_var_within", math.nan) / first.get("init/qk_var_over_dk_within",
                                                                 math.nan)
  rate = overrides.get(sweep.tuned_field) if sweep.tuned_field else None
  return Run(arm=grid.arm_of(sweep, overrides),
             rate=None if rate is None else float(f"{rate:.6g}"), seed=int(result["seed"]),
             # a run without diagnostics counts in the choice of its rate, never read here
             ok=result["status"] == "ok" and math.isfinite(ratio), model=model,
             d_k=int(round(ratio)) if math.isfinite(ratio) else 0, layers=layers,
             result=result)


def read_runs(workdir: str, sweep: Sweep) -> list[Run]:
  """Every finished point of the sweep in workdir (docs/sweeps/NAME) that belongs to one of
  its arms (`grid.arm_of`), in name order; the sweep's failure rule judges each as it is read."""
  base = _base_model(sweep.base)
  runs = [_run(r, sweep, base) for r in stats.load_results(workdir, sweep.failure)]
  return [r for r in runs if r.arm is not None]


def reported_runs(runs: Sequence[Run], sweep: Sweep
                  ) -> dict[tuple[tuple[str, Any], ...], tuple[Optional[float], list[Run]]]:
  """{arm: (its chosen rate, its reported 'ok' runs in seed order)}; untuned: every 'ok' run."""
  arms: dict[tuple[tuple[str, Any], ...], list[Run]] = {}
  for r in runs:
    arms.setdefault(r.arm, []).append(r)
  if sweep.tuned_field is None:
    return {arm: (None, sorted((r for r in members if r.ok), key=lambda r: r.seed))
            for arm, members in arms.items()}
  chosen = {b.overrides: b.best for b in tuning.best_per_arm(sweep, [r.result for r in runs])
            if b.best is not None}
  seeds = set(sweep.confirm_seeds) | (set() if sweep.fresh_report else set(sweep.seeds))
  return {arm: (chosen[arm], sorted((r for r in members if r.ok and r.rate == chosen[arm]
                                     and r.seed in seeds), key=lambda r: r.seed))
          for arm, members in arms.items() if arm in chosen}


def _label(arm: tuple[tuple[str, Any], ...], leave_out: Sequence[str] = ()) -> str:
  """'qkv_init=xavier, attention_scale=inv_sqrt_dk' (fields short, `leave_out` left out)."""
  parts = [f"{f.rpartition('.')[2]}={v}" for f, v in arm if f not in leave_out]
  return ", ".join(parts) or "all"


def _normalised(run: Run, layer: int) -> bool:
  """Whether the layer's attention reads a norm's output (pre-LN, or past a post-LN layer 0)."""
  return run.model["norm_position"] == "pre" or layer > 0 or bool(run.model["embed_norm"])


def _reading(run: Run, layer: tuple[str, int], reading: str) -> float:
  """Raw within-row Var(q.k) of one reading: init, trained, or what training added."""
  values = run.layers[layer]
  init, final = values["init/raw_var_within"], values["final/raw_var_within"]
  return {"init": init, "trained": final, "trained - init": final - init}[reading]


def _settings(reported: dict, sweep: Sweep) -> dict[str, list[list[Run]]]:
  """{setting label: [each d_k arm's reported runs]}: the arms a fit across d_k reads."""
  settings: dict[str, list[list[Run]]] = {}
  for arm, (_, runs) in reported.items():
    if runs:
      settings.setdefault(_label(arm, _moving(sweep)), []).append(runs)
  return settings


def _seed_slopes(by_seed: dict[int, list[Run]], layer: tuple[str, int],
                 reading: str) -> tuple[dict[int, float], list[int]]:
  """({seed: slope}, seeds left out): a reading's log must exist at every d_k of a seed."""
  fits, left = {}, []
  for seed, runs in sorted(by_seed.items()):
    ys = [_reading(r, layer, reading) for r in runs]
    if all(math.isfinite(y) and y > 0 for y in ys):
      fits[seed] = log_slope([r.d_k for r in runs], ys)
    else:
      left.append(seed)
  return fits, left


def slope_rows(reported: dict, sweep: Sweep) -> list[SlopeRow]:
  """Each setting's slopes across d_k, per layer and reading, one per seed: a seed counts
  where it has a reported run at every d_k of its setting. A reading is fitted only where it
  is positive at every d_k of every such seed (its log is taken: this is what makes
  'trained - init' meaningful, the change an increase everywhere, not a noisy difference
  near 0); otherwise its row has no slopes and left_out names the seeds."""
  rows = []
  for setting, arms in _settings(reported, sweep).items():
    first = arms[0][0]
    if len({runs[0].d_k for runs in arms}) < 2:
      continue  # d_k does not vary across this setting's arms: levels only
    by_seed: dict[int, list[Run]] = {}
    for runs in arms:
      for r in runs:
        by_seed.setdefault(r.seed, []).append(r)
    full = {s: rs for s, rs in by_seed.items() if len(rs) == len(arms)}
    for layer in sorted(first.layers):
      for reading in READINGS:
        fits, left = _seed_slopes(full, layer, reading)
        fits = {} if left else fits  # a change not positive somewhere: no slope of its log
        rows.append(SlopeRow(sweep.name, layer, _normalised(first, layer[1]), setting,
                             first.model["attention_scale"], reading, tuple(fits),
                             tuple(fits.values()), tuple(left)))
  return rows


def level_rows(reported: dict, sweep: Sweep) -> list[LevelRow]:
  """Each arm's per-layer levels over its reported seeds, ordered by layer, then setting."""
  rows = []
  for arm, (_, runs) in reported.items():
    if not runs:
      continue
    first = runs[0]
    for layer in first.layers:
      values = {f"{p}/{s}": tuple(r.layers[layer][f"{p}/{s}"] for r in runs)
                for p in PHASES for s in STATS}
      rows.append(LevelRow(sweep.name, layer, _normalised(first, layer[1]),
                           _label(arm, _moving(sweep)), first.model["attention_scale"],
                           first.d_k, values))
  return sorted(rows, key=lambda r: (r.layer, r.setting, -r.d_k))


def _num(x: float) -> str:
  if not math.isfinite(x):
    return "-"
  return f"{x:.2e}" if 0 < abs(x) < 0.01 else (f"{x:.3f}" if abs(x) < 100 else f"{x:.1f}")


def _mean_std(values: Sequence[float]) -> str:
  mean, std, _, _, n = t_interval(values)
  return "-" if n == 0 else (_num(mean) if n == 1 else f"{_num(mean)} ± {_num(std)}")


def _interval(values: Sequence[float]) -> str:
  _, _, low, high, _ = t_interval(values)
  return f"[{_num(low)}, {_num(high)}]" if math.isfinite(low) else "-"


def _holds_one(row: SlopeRow) -> Optional[bool]:
  _, _, low, high, _ = t_interval(row.slopes)
  return None if not math.isfinite(low) else low <= 1.0 <= high


def _layer_name(layer: tuple[str, int], stacks: int) -> str:
  return f"{layer[1]}" if stacks == 1 else f"{layer[0]} {layer[1]}"


def _seed_list(seeds: Sequence[int]) -> str:
  s = sorted(seeds)
  if s and s == list(range(s[0], s[-1] + 1)) and len(s) > 2:
    return f"{s[0]}-{s[-1]}"
  return ", ".join(map(str, s))


def _slope_table(rows: Sequence[SlopeRow]) -> list[str]:
  """Markdown: one line per layer, setting and reading."""
  stacks = len({r.layer[0] for r in rows})
  lines = ["| layer | its input | setting | reading | slope per seed | mean ± std over seeds "
           "| 95% t-interval | holds 1 |", "|---|---|---|---|---|---|---|---|"]
  for r in sorted(rows, key=lambda r: (r.layer, r.setting, READINGS.index(r.reading))):
    per_seed = ", ".join(f"{_num(v)} (seed {s})" for s, v in zip(r.seeds, r.slopes))
    if r.left_out:
      per_seed = (f"not read: {r.reading} Var(q.k) is not positive at every d_k in seed(s) "
                  f"{_seed_list(r.left_out)}")
    holds = _holds_one(r)
    lines.append(f"| {_layer_name(r.layer, stacks)} | {_input(r)} | {r.setting} | {r.reading} "
                 f"| {per_seed or '-'} | {_mean_std(r.slopes)} | {_interval(r.slopes)} | "
                 f"{'-' if holds is None else ('yes' if holds else 'no')} |")
  return lines


def _input(row: SlopeRow | LevelRow) -> str:
  return NORM_INPUT if row.normalised else EMBEDDING_INPUT


def _pair(row: LevelRow, stat: str) -> str:
  return f"{_mean_std(row.values[f'init/{stat}'])} / {_mean_std(row.values[f'final/{stat}'])}"


def _level_table(rows: Sequence[LevelRow]) -> list[str]:
  """Markdown: one line per layer, setting and d_k; every cell init / trained."""
  stacks = len({r.layer[0] for r in rows})
  lines = ["| layer | its input | setting | d_k | Var(q.k)/d_k | q-k alignment | mean square "
           "(Var(q.k)/d_k ÷ alignment) | logit variance the softmax sees | seeds |",
           "|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    seeds = len(r.values["final/raw_var_within"])
    lines.append(f"| {_layer_name(r.layer, stacks)} | {_input(r)} | {r.setting} | {r.d_k} | "
                 f"{_pair(r, 'qk_var_over_dk_within')} | {_pair(r, 'qk_alignment')} | "
                 f"{_pair(r, 'mean_square')} | {_pair(r, 'logit_var_within')} | {seeds} |")
  return lines


def _rates_lines(reported: dict, sweep: Sweep) -> list[str]:
  """Which rate each arm chose (a sentence if all chose one, else a table) and the seeds."""
  seeds = sorted({r.seed for _, runs in reported.values() for r in runs})
  fresh = " (fresh_report: the choosing seeds left out)" if sweep.fresh_report else ""
  if sweep.tuned_field is None:
    return [f"Untuned; figures over seeds {_seed_list(seeds)}.", ""]
  field = sweep.tuned_field.rpartition(".")[2]
  rates = {arm: rate for arm, (rate, _) in reported.items()}
  how = (f"Each arm's {field} is the one with the lowest mean {sweep.select} over seed(s) "
         f"{_seed_list(sweep.seeds)}; figures are the runs at it, seeds "
         f"{_seed_list(seeds)}{fresh}.")
  if len(set(rates.values())) == 1:
    return [f"{how} Every arm chose {next(iter(rates.values())):g}.", ""]
  return [how, "", f"| arm | chosen {field} |", "|---|---|"] + [
      f"| {_label(arm)} | {rate:g} |" for arm, rate in rates.items()] + [""]


def _title(sweep: Sweep, runs: Sequence[Run]) -> str:
  norms = "/".join(f"{n}-LN" for n in sorted({r.model["norm_position"] for r in runs}))
  d_ks = sorted({r.d_k for r in runs})
  moved = ", ".join(f.rpartition(".")[2] for f in _moving(sweep))
  varied = (f"d_k {', '.join(map(str, d_ks))}, moved by {moved}" if len(d_ks) > 1
            else f"d_k {d_ks[0]} fixed: levels only")
  if len(d_ks) > 1 and "model.d_model" in _moving(sweep):
    varied += ": the width moves with d_k, so its slopes mix the two"
  return f"### {sweep.name} ({norms}; {varied})"


def _where(row: SlopeRow | LevelRow) -> str:
  return f"{row.sweep} layer {row.layer[1]} ({row.setting})"


def _sides(rows: Sequence[SlopeRow]) -> dict[str, list[SlopeRow]]:
  """The rows whose interval holds 1, lies below it and lies above it (none: no interval)."""
  out: dict[str, list[SlopeRow]] = {"hold": [], "below": [], "above": []}
  for r in rows:
    _, _, low, high, _ = t_interval(r.slopes)
    if math.isfinite(low):
      out["hold" if low <= 1.0 <= high else ("below" if high < 1.0 else "above")].append(r)
  return out


def _slope_item(row: SlopeRow) -> str:
  return f"{_where(row)} {_num(t_interval(row.slopes)[0])} {_interval(row.slopes)}"


def _slope_sentences(premise: Sequence[SlopeRow], contrast: Sequence[SlopeRow]) -> str:
  """Which slopes' 95% intervals hold 1, by reading: named where the premise can hold,
  counted at post-LN layer 0."""
  parts = []
  for reading in READINGS:
    rows = [r for r in premise if r.reading == reading and r.slopes]
    if not rows:
      continue
    sides = _sides(rows)
    named = [name + "; ".join(map(_slope_item, sides[side])) for side, name in
             (("hold", ""), ("below", "below 1: "), ("above", "above 1: ")) if sides[side]]
    parts.append(f"{reading}, {len(sides['hold'])} of {len(rows)} hold 1 ({'; '.join(named)})")
  counts = []
  for reading in READINGS:
    rows = [r for r in contrast if r.reading == reading and r.slopes]
    if rows:
      counts.append(f"{len(_sides(rows)['hold'])} of {len(rows)} {reading}")
  out = ("Where the premise can hold (the attention reads a layer norm's output), the 95% "
         "t-intervals of the slopes of log Var(q.k) against log d_k: " + "; ".join(parts) + "."
         if parts else "No sweep read here varies d_k at a layer whose input is normalised.")
  if counts:
    out += (" For contrast, at post-LN layer 0 (the embedding's scale, not the argument's "
            "premise) the intervals of " + ", ".join(counts) + " slopes hold 1.")
  return out


def _logit_sentence(slopes: Sequence[SlopeRow], levels: Sequence[LevelRow]) -> str:
  """Where the premise can hold, under 1/sqrt(d_k): the trained logit variance the softmax
  sees at the smallest and largest d_k of each setting (d_k varied), else its range."""
  varied = {r.sweep for r in slopes}
  rows = [r for r in levels if r.normalised and r.scale == "inv_sqrt_dk"]
  ends: dict[tuple[str, tuple[str, int], str], list[LevelRow]] = {}
  for r in rows:
    if r.sweep in varied:
      ends.setdefault((r.sweep, r.layer, r.setting), []).append(r)
  def trained(r: LevelRow) -> float:
    return t_interval(r.values["final/logit_var_within"])[0]
  exponents = {(r.sweep, r.layer, r.setting): [v - 1.0 for v in r.slopes] for r in slopes
               if r.reading == "trained" and r.slopes}
  parts = []
  for key, group in ends.items():
    lo, hi = min(group, key=lambda r: r.d_k), max(group, key=lambda r: r.d_k)
    power = exponents.get(key, [])
    parts.append(f"{_where(lo)}: {_num(trained(lo))} at d_k {lo.d_k} to {_num(trained(hi))} "
                 f"at d_k {hi.d_k}, as d_k^{_num(t_interval(power)[0])} {_interval(power)}")
  fixed = [r for r in rows if r.sweep not in varied]
  if fixed:
    low, high = min(fixed, key=trained), max(fixed, key=trained)
    parts.append(f"at fixed d_k, {_num(trained(low))} ({_where(low)}) to "
                 f"{_num(trained(high))} ({_where(high)})")
  if not parts:
    return ""
  return ("Under 1/sqrt(d_k) the logit variance goes as d_k to the trained slope minus 1 "
          "(its interval: the slope's, less 1); at the layers whose input is a layer norm's "
          "output, the trained logit variance the softmax sees (mean over seeds) is "
          + "; ".join(parts) + ".")


def _mean_square_sentence(levels: Sequence[LevelRow]) -> str:
  """The ranges of the q, k mean-square product at init and trained, by the layer's input."""
  parts = []
  for normalised, name in ((True, "a layer norm's output"), (False, "the embedding sum")):
    rows = [r for r in levels if r.normalised == normalised]
    if rows:
      init = [t_interval(r.values["init/mean_square"])[0] for r in rows]
      final = {id(r): t_interval(r.values["final/mean_square"])[0] for r in rows}
      low = min(rows, key=lambda r: final[id(r)])
      high = max(rows, key=lambda r: final[id(r)])
      where = ((f" ({_where(low)}, d_k {low.d_k})", f" ({_where(high)}, d_k {high.d_k})")
               if normalised else ("", ""))  # the contrast: ranges alone
      parts.append(f"{_num(min(init))} to {_num(max(init))} at init and "
                   f"{_num(final[id(low)])}{where[0]} to {_num(final[id(high)])}{where[1]} "
                   f"trained where the input is {name}")
  if not parts:
    return ""
  return ("The product of q's and k's mean squares (Var(q.k)/d_k over the alignment; 1 "
          "where the premise's unit variance holds) is " + "; ".join(parts) + ".")


def _sweep_section(sweeps_dir: str, configs_dir: str,
                   name: str) -> tuple[list[str], list[SlopeRow], list[LevelRow]]:
  """One sweep's markdown lines, slope rows and level rows."""
  sweep = grid.load_sweep(str(pathlib.Path(configs_dir) / f"{name}.py"))
  runs = read_runs(str(pathlib.Path(sweeps_dir) / name), sweep)
  if not runs:
    return [f"### {name}", "", "No finished points.", ""], [], []
  reported = reported_runs(runs, sweep)
  slopes, levels = slope_rows(reported, sweep), level_rows(reported, sweep)
  lines = [_title(sweep, runs), ""] + _rates_lines(reported, sweep)
  if slopes:
    lines += ["Slopes of log within-row Var(q.k) (raw, before the attention scale, heads "
              "averaged) against log d_k, fitted per seed across the d_k arms of each setting "
              "(the argument predicts 1):", ""] + _slope_table(slopes) + [""]
  lines += ["Levels, init / trained (mean ± std over seeds; heads averaged, within rows):",
            ""] + _level_table(levels) + [""]
  return lines, slopes, levels


def _read_all(sweeps_dir: str, configs_dir: str, sweeps: Sequence[str]
              ) -> tuple[list[str], list[SlopeRow], list[LevelRow]]:
  """Every sweep's markdown lines, slope rows and level rows, in order."""
  body: list[str] = []
  slopes: list[SlopeRow] = []
  levels: list[LevelRow] = []
  for name in sweeps:
    lines, s, lv = _sweep_section(sweeps_dir, configs_dir, name)
    body += lines
    slopes += s
    levels += lv
  return body, slopes, levels


def _premise_and_contrast(slopes: Sequence[SlopeRow]) -> tuple[list[SlopeRow], list[SlopeRow]]:
  """The slope rows at layers whose input is normalised, and those at the embedding sum."""
  return ([r for r in slopes if r.normalised and r.slopes],
          [r for r in slopes if not r.normalised and r.slopes])


def report(sweeps_dir: str = "docs/sweeps", configs_dir: str = "configs/sweeps",
           sweeps: Sequence[str] = SWEEPS) -> str:
  """A markdown section: Question 5's argument read at the layers whose input is a layer
  norm's output (post-LN layer 0 kept for contrast), from the committed result.json files of
  `sweeps` under sweeps_dir and their sweep files under configs_dir."""
  body, slopes, levels = _read_all(sweeps_dir, configs_dir, sweeps)
  lead = [_slope_sentences(*_premise_and_contrast(slopes)), _logit_sentence(slopes, levels),
          _mean_square_sentence(levels)]
  how = ("Made by `python scripts/findings.py` "
         "(transformer/research/variance_argument.py: how rates and seeds are chosen, and "
         "what each statistic is). Slopes: mean over seeds with a 95% t-interval "
         "(t on seeds - 1 degrees of freedom); 'holds 1' says whether that interval holds 1.")
  return "\n".join(["## The variance argument where its premise holds", "",
                    " ".join(t for t in lead if t), "", how, ""] + body).rstrip() + "\n"


def _summary_slopes(slopes: Sequence[SlopeRow]) -> list[str]:
  """One line per sweep, layer and setting of a swept d_k: the init and trained slopes."""
  lines = ["| sweep | layer: its input | setting | init slope [95%] | trained slope [95%] |",
           "|---|---|---|---|---|"]
  cells: dict[tuple, dict[str, str]] = {}
  for r in slopes:
    if r.reading in ("init", "trained") and r.slopes:
      holds = "" if _holds_one(r) is None else (" (holds 1)" if _holds_one(r) else "")
      key = (r.sweep, r.layer, r.normalised, r.setting)
      cells.setdefault(key, {})[r.reading] = f"{_mean_std(r.slopes)} {_interval(r.slopes)}{holds}"
  for (sweep, layer, normalised, setting), by in sorted(cells.items()):
    where = "layer norm output" if normalised else "embedding sum (the embedding's scale)"
    lines.append(f"| {sweep} | {layer[1]}: {where} | {setting} | {by.get('init', '-')} | "
                 f"{by.get('trained', '-')} |")
  return lines


def _summary_logits(levels: Sequence[LevelRow], sweep: str = "e6_head_dim",
                    layer: int = 1) -> list[str]:
  """The trained logit variance the softmax sees at `layer` of `sweep`, one column per d_k."""
  rows = [r for r in levels if r.sweep == sweep and r.layer[1] == layer]
  d_ks = sorted({r.d_k for r in rows})
  lines = [f"| {sweep}, layer {layer}: setting | " + " | ".join(f"d_k {d}" for d in d_ks) + " |",
           "|---|" + "---|" * len(d_ks)]
  for setting in sorted({r.setting for r in rows}):
    by = {r.d_k: _mean_std(r.values["final/logit_var_within"]) for r in rows
          if r.setting == setting}
    lines.append(f"| {setting} | " + " | ".join(by.get(d, "-") for d in d_ks) + " |")
  return lines


def summary(sweeps_dir: str = "docs/sweeps", configs_dir: str = "configs/sweeps",
            sweeps: Sequence[str] = SWEEPS) -> str:
  """The short form of `report` for the findings page: its lead, the slopes of every sweep
  that varies d_k (init and trained), and E6's layer-1 trained logit variance by d_k."""
  _, slopes, levels = _read_all(sweeps_dir, configs_dir, sweeps)
  return "\n".join([_slope_sentences(*_premise_and_contrast(slopes)), ""]
                   + _summary_slopes(slopes)
                   + ["", "The trained logit variance the softmax sees, mean ± std over seeds:",
                      ""] + _summary_logits(levels)) + "\n"


if __name__ == "__main__":
  print(report(*sys.argv[1:3]), end="")
