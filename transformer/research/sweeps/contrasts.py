"""Contrasts no single sweep's table holds: an interaction (one paired difference minus
another), or arms of two sweeps whose runs of one seed read the same data (E1's tied arms
against E2's untied ones, T1 against T2).

A contrast is a signed sum of terms; a term is an arm of a committed sweep at its own chosen
value, with the test figure its sweep reports, by seed. The sum is taken seed by seed over the
seeds every term reports and summarised by its mean and a 95% t-interval over those seeds
(`tuning.paired`); unlike M8's and M9's own tables, the interval does not add the test set's
sampling error. Terms from different sweeps must have the same data inputs (the corpus, its
split rule and the tokenizer: `grid.data_inputs`), else a seed would pair different test
sets. A contrast whose name begins "(declared)" was fixed with its sweep before its first
point ran; the others were chosen for the text after the sweeps ran. They are in no sweep's
Holm family; the page says so.

Across model sizes one seed shares only the data (the split and the order of the training
rows), not the initial draws. A contrast whose terms are of different sizes names them in
`sizes`, one group of terms per size; beside the paired interval the page then gives a Welch
interval (`stats.welch`) that takes each size's seed-by-seed sum as an independent sample.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Mapping, Sequence

from transformer import storage
from transformer.errors import ConfigError
from transformer.research.sweeps import tuning
from transformer.research.sweeps.grid import Sweep, data_inputs, expand, load_sweep, point_config
from transformer.research.sweeps.report import grid_results, interval_cell
from transformer.research.sweeps.stats import welch
from transformer.training import experiment

Term = tuple[str, str]  # (sweep name, the arm's name in that sweep's tables)
ArmsBySeed = Mapping[str, Mapping[str, Mapping[int, float]]]  # sweep -> arm -> seed -> value


@dataclasses.dataclass(frozen=True)
class Contrast:
  """sum(plus) - sum(minus), seed by seed."""
  name: str  # what it measures, as the text quotes it
  plus: tuple[Term, ...]
  minus: tuple[Term, ...] = ()
  # Terms of different model sizes: every term in one group per size (not paired across them).
  sizes: tuple[tuple[Term, ...], ...] = ()

  def __post_init__(self):
    if not self.plus:
      raise ConfigError(f"Contrast {self.name!r} needs at least one plus term.")
    if self.sizes:
      grouped = [t for group in self.sizes for t in group]
      if (len(self.sizes) < 2 or len(grouped) != len(set(grouped))
          or set(grouped) != set(self.plus + self.minus)):
        raise ConfigError(f"Contrast {self.name!r}: sizes must put each of its terms in exactly "
                          "one of 2 or more groups.")

  @property
  def signs(self) -> dict[Term, float]:
    """Each term's net sign (+1 in plus, -1 in minus)."""
    out: dict[Term, float] = {}
    for sign, terms in ((1.0, self.plus), (-1.0, self.minus)):
      for t in terms:
        out[t] = out.get(t, 0.0) + sign
    return out

  @property
  def sweeps(self) -> list[str]:
    return sorted({s for s, _ in self.plus + self.minus})


def reported_by_seed(sweep: Sweep, workdir: str) -> dict[str, dict[int, float]]:
  """{arm name: {seed: the sweep's report metric}} of each arm at its chosen value, from the
  stored results (an arm with no chosen value yet is left out)."""
  results, _ = grid_results(sweep, workdir)
  if sweep.tune:
    return {b.name: dict(b.report_by_seed) for b in tuning.best_per_arm(sweep, results)
            if b.best is not None}
  return {b.name: dict(b.report_by_seed) for b in tuning.fixed_arms(sweep, results)}


def evaluate(contrast: Contrast, arms: ArmsBySeed) -> tuning.Paired:
  """The contrast's mean and 95% interval over the seeds every term reports (at least 2)."""
  terms = [(+1.0, t) for t in contrast.plus] + [(-1.0, t) for t in contrast.minus]
  by_seed = []
  for _, (sweep, arm) in terms:
    if arm not in arms.get(sweep, {}):
      known = ", ".join(sorted(arms.get(sweep, {}))) or "none"
      raise ConfigError(f"Contrast {contrast.name!r}: sweep {sweep!r} has no arm {arm!r} with a "
                        f"chosen value (its arms: {known}).")
    by_seed.append(arms[sweep][arm])
  seeds = sorted(set.intersection(*(set(s) for s in by_seed)))
  if len(seeds) < 2:
    raise ConfigError(f"Contrast {contrast.name!r}: its terms share {len(seeds)} seed(s) "
                      f"({seeds}); an interval needs 2 or more.")
  total = {s: sum(sign * values[s] for (sign, _), values in zip(terms, by_seed)) for s in seeds}
  return tuning.paired(contrast.name, "", total, {s: 0.0 for s in seeds})


@dataclasses.dataclass(frozen=True)
class Unpaired:
  """A contrast with its sizes taken as independent samples: Welch's interval (stats.welch)."""
  mean: float
  low: float
  high: float
  df: float  # Welch-Satterthwaite degrees of freedom
  p_value: float
  seeds: int  # the seeds every term reports, as for the paired interval (each size's sample)

  @property
  def verdict(self) -> str:
    return tuning.verdict(self.low, self.high)


def evaluate_unpaired(contrast: Contrast, arms: ArmsBySeed) -> Unpaired | None:
  """The contrast over the same seeds as `evaluate`, each size's terms summed seed by seed and
  the sizes taken as independent samples (Welch); None when it names no sizes."""
  if not contrast.sizes:
    return None
  evaluate(contrast, arms)  # the same checks (arms known, 2 or more common seeds)
  signs = contrast.signs
  seeds = sorted(set.intersection(*(set(arms[s][a]) for s, a in signs)))
  samples = [[sum(signs[t] * arms[t[0]][t[1]][seed] for t in group) for seed in seeds]
             for group in contrast.sizes]
  return Unpaired(*welch(samples), len(seeds))


def check_shared_data(contrast: Contrast, data: Mapping[str, dict[str, Any]]) -> None:
  """One line if the contrast's sweeps read different data (so one seed is not one split)."""
  first, *others = contrast.sweeps
  for other in others:
    differ = sorted(k for k in data[first] if data[first][k] != data[other].get(k))
    if differ:
      raise ConfigError(f"Contrast {contrast.name!r}: sweeps {first!r} and {other!r} differ in "
                        f"{', '.join(differ)}, so a seed does not pair the same test set.")


def load_contrasts(path: str) -> list[Contrast]:
  """get_contrasts() of a contrasts file (configs/contrasts.py)."""
  if not os.path.isfile(path):
    raise ConfigError(f"Contrasts file {path} does not exist.")
  module = experiment.load_module(path)
  if not hasattr(module, "get_contrasts"):
    raise ConfigError(f"{path} has no get_contrasts() function.")
  contrasts = list(module.get_contrasts())
  if not all(isinstance(c, Contrast) for c in contrasts):
    raise ConfigError(f"{path}: get_contrasts() must return Contrast objects.")
  return contrasts


def _term_cell(contrast: Contrast) -> str:
  plus = " + ".join(f"{s}:{a}" for s, a in contrast.plus)
  return plus + "".join(f" - {s}:{a}" for s, a in contrast.minus)


def _p_cell(p: float) -> str:
  return f"{p:.2g}" if math.isfinite(p) else "-"


def table(evaluated: Sequence[tuple[Contrast, tuning.Paired, Unpaired | None]],
          command: str) -> str:
  """The markdown page: one row per contrast."""
  lines = ["# Contrasts across arms and sweeps", "",
           f"Made by `{command}` from the committed result.json files of the sweeps named. "
           "Each term is an arm (sweep:arm) at its own chosen learning rate, with the test "
           "figure its sweep reports, by seed; a contrast adds and subtracts them seed by seed "
           "over the seeds every term reports, with a 95% t-interval over those seeds. Terms "
           "of two sweeps read the same data (checked), so one seed is one split. A contrast "
           "whose name begins \"(declared)\" was fixed with its sweep before its first point "
           "ran; the others were chosen for the text after the sweeps ran. They are in no sweep's "
           "Holm family, and their intervals do not hold the test set's own sampling error.", "",
           "Across model sizes a seed shares only the data (the split and the order of the "
           "training rows), not the initial draws, so pairing by seed is only in part a "
           "pairing. Where a contrast's terms are of different sizes, the last four columns "
           "take each size's terms, summed seed by seed, as an independent sample: Welch's "
           "interval of the same difference over the same seeds, with the Welch-Satterthwaite "
           "degrees of freedom (d.o.f.); '-' where all terms are of one size.", "",
           "| contrast | terms | difference | 95% interval | seeds | p | verdict "
           "| unpaired (Welch) 95% interval | d.o.f. | p | verdict |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
  for c, p, u in evaluated:
    welch_cells = ("- | - | - | -" if u is None else
                   f"{interval_cell(u.low, u.high)} | {u.df:.1f} | {_p_cell(u.p_value)} "
                   f"| {u.verdict}")
    lines.append(f"| {c.name} | {_term_cell(c)} | {p.mean:+.4f} | {interval_cell(p.low, p.high)} "
                 f"| {p.seeds} | {_p_cell(p.p_value)} | {p.verdict} | {welch_cells} |")
  return "\n".join(lines) + "\n"


def evaluate_file(contrasts_path: str, sweeps_dir: str,
                  configs_dir: str) -> list[tuple[Contrast, tuning.Paired, Unpaired | None]]:
  """Every contrast of a contrasts file, each sweep it names read from configs_dir/NAME.py (the
  sweep file) and sweeps_dir/NAME (its stored results)."""
  contrasts = load_contrasts(contrasts_path)
  sweeps = {n: load_sweep(os.path.join(configs_dir, f"{n}.py"))
            for n in sorted({n for c in contrasts for n in c.sweeps})}
  data = {n: data_inputs(point_config(s, expand(s)[0])) for n, s in sweeps.items()}
  for c in contrasts:
    check_shared_data(c, data)
  # The results may be on gs:// (storage paths); the sweep and contrasts files are local code.
  arms = {n: reported_by_seed(s, storage.join(sweeps_dir, n)) for n, s in sweeps.items()}
  return [(c, evaluate(c, arms), evaluate_unpaired(c, arms)) for c in contrasts]


def build(contrasts_path: str, sweeps_dir: str, configs_dir: str, command: str) -> str:
  """The page (`table`) of a contrasts file (`evaluate_file`)."""
  return table(evaluate_file(contrasts_path, sweeps_dir, configs_dir), command)
