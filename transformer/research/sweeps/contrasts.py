"""Contrasts no single sweep's table holds: an interaction (one paired difference minus
another), or arms of two sweeps whose runs of one seed read the same data (E1's tied arms
against E2's untied ones, T1 against T2).

A contrast is a signed sum of terms; a term is an arm of a committed sweep at its own chosen
value, with the test figure its sweep reports, by seed. The sum is taken seed by seed over the
seeds every term reports and summarised by its mean and a 95% t-interval over those seeds
(`tuning.paired`); unlike M8's and M9's own tables, the interval does not add the test set's
sampling error. Terms from different sweeps must have the same data inputs (the corpus, its
split rule and the tokenizer: `runner.data_inputs`), else a seed would pair different test
sets. These contrasts are chosen for the text after the sweeps ran and belong to no sweep's
Holm family; the page says so.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Mapping, Sequence

from transformer import storage
from transformer.errors import ConfigError
from transformer.research.sweeps import tuning
from transformer.research.sweeps.grid import Sweep, expand, load_sweep, point_config
from transformer.research.sweeps.report import grid_results, interval_cell
from transformer.research.sweeps.runner import data_inputs
from transformer.training import experiment

Term = tuple[str, str]  # (sweep name, the arm's name in that sweep's tables)
ArmsBySeed = Mapping[str, Mapping[str, Mapping[int, float]]]  # sweep -> arm -> seed -> value


@dataclasses.dataclass(frozen=True)
class Contrast:
  """sum(plus) - sum(minus), seed by seed."""
  name: str  # what it measures, as the text quotes it
  plus: tuple[Term, ...]
  minus: tuple[Term, ...] = ()

  def __post_init__(self):
    if not self.plus:
      raise ConfigError(f"Contrast {self.name!r} needs at least one plus term.")

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


def table(evaluated: Sequence[tuple[Contrast, tuning.Paired]], command: str) -> str:
  """The markdown page: one row per contrast."""
  lines = ["# Contrasts across arms and sweeps", "",
           f"Made by `{command}` from the committed result.json files of the sweeps named. "
           "Each term is an arm (sweep:arm) at its own chosen learning rate, with the test "
           "figure its sweep reports, by seed; a contrast adds and subtracts them seed by seed "
           "over the seeds every term reports, with a 95% t-interval over those seeds. Terms "
           "of two sweeps read the same data (checked), so one seed is one split. These "
           "were chosen for the text after the sweeps ran: they are in no sweep's Holm family, "
           "and their intervals do not hold the test set's own sampling error.", "",
           "| contrast | terms | difference | 95% interval | seeds | p | verdict |",
           "|---|---|---|---|---|---|---|"]
  for c, p in evaluated:
    p_cell = f"{p.p_value:.2g}" if math.isfinite(p.p_value) else "-"
    lines.append(f"| {c.name} | {_term_cell(c)} | {p.mean:+.4f} | {interval_cell(p.low, p.high)} "
                 f"| {p.seeds} | {p_cell} | {p.verdict} |")
  return "\n".join(lines) + "\n"


def evaluate_file(contrasts_path: str, sweeps_dir: str,
                  configs_dir: str) -> list[tuple[Contrast, tuning.Paired]]:
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
  return [(c, evaluate(c, arms)) for c in contrasts]


def build(contrasts_path: str, sweeps_dir: str, configs_dir: str, command: str) -> str:
  """The page (`table`) of a contrasts file (`evaluate_file`)."""
  return table(evaluate_file(contrasts_path, sweeps_dir, configs_dir), command)
