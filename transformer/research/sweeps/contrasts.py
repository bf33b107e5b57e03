"""Contrasts no single sweep's table holds: an interaction (one paired difference minus
another), or arms of two sweeps whose seeds share their splits (E1's tied arms against E2's
untied ones, T1 against T2).

A contrast is a signed sum of terms; a term is an arm of a committed sweep at its own chosen
value (the arm's test figures by seed, exactly as that sweep's table reports them). The sum is
taken seed by seed over the seeds every term reports, and summarised by its mean and a 95%
t-interval over seeds (`tuning.paired`). These contrasts are chosen for the text after the
sweeps ran and belong to no sweep's Holm family; the table says so.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Mapping, Sequence

from transformer.errors import ConfigError
from transformer.research.sweeps import tuning
from transformer.research.sweeps.grid import load_sweep
from transformer.research.sweeps.report import grid_results
from transformer.training import experiment

Term = tuple[str, str]  # (sweep name, the arm's name in that sweep's tables)
ArmsBySeed = Mapping[str, Mapping[str, Mapping[int, float]]]  # sweep -> arm -> seed -> value


@dataclasses.dataclass(frozen=True)
class Contrast:
  """sum(plus) - sum(minus), seed by seed."""
  name: str  # what it measures, as the text quotes it
  plus: tuple[Term, ...]
  minus: tuple[Term, ...] = ()


def reported_by_seed(sweep_path: str, workdir: str) -> dict[str, dict[int, float]]:
  """{arm name: {seed: the sweep's report metric}} of each arm at its chosen value, from the
  stored results (an arm with no chosen value yet is left out)."""
  sweep = load_sweep(sweep_path)
  results, _ = grid_results(sweep, workdir)
  if sweep.tune:
    return {b.name: dict(b.report_by_seed) for b in tuning.best_per_arm(sweep, results)
            if b.best is not None}
  return {b.name: dict(b.report_by_seed) for b in tuning.fixed_arms(sweep, results)}


def evaluate(contrast: Contrast, arms: ArmsBySeed) -> tuning.Paired:
  """The contrast's mean and 95% interval over the seeds every term reports."""
  terms = [(+1.0, t) for t in contrast.plus] + [(-1.0, t) for t in contrast.minus]
  by_seed = []
  for _, (sweep, arm) in terms:
    if arm not in arms.get(sweep, {}):
      known = ", ".join(sorted(arms.get(sweep, {}))) or "none"
      raise ConfigError(f"Contrast {contrast.name!r}: sweep {sweep!r} has no arm {arm!r} with a "
                        f"chosen value (its arms: {known}).")
    by_seed.append(arms[sweep][arm])
  seeds = sorted(set.intersection(*(set(s) for s in by_seed)))
  total = {s: sum(sign * values[s] for (sign, _), values in zip(terms, by_seed)) for s in seeds}
  return tuning.paired(contrast.name, "", total, {s: 0.0 for s in seeds})


def load_contrasts(path: str) -> list[Contrast]:
  """get_contrasts() of a contrasts file (configs/contrasts.py)."""
  if not os.path.isfile(path):
    raise ConfigError(f"Contrasts file {path} does not exist.")
  module = experiment.load_module(path)
  if not hasattr(module, "get_contrasts"):
    raise ConfigError(f"{path} has no get_contrasts() function.")
  contrasts = list(module.get_contrasts())
  for c in contrasts:
    if not isinstance(c, Contrast) or not c.plus:
      raise ConfigError(f"{path}: every contrast is a Contrast with at least one plus term: {c!r}.")
  return contrasts


def _term_cell(contrast: Contrast) -> str:
  plus = " + ".join(f"{s}:{a}" for s, a in contrast.plus)
  minus = "".join(f" - {s}:{a}" for s, a in contrast.minus)
  return plus + minus


def table(contrasts: Sequence[Contrast], arms: ArmsBySeed, command: str) -> str:
  """The markdown page: one row per contrast."""
  lines = ["# Contrasts across arms and sweeps", "",
           f"Made by `{command}` from the committed result.json files of the sweeps named. "
           "Each term is an arm (sweep:arm) at its own chosen learning rate, with the test "
           "figure its sweep reports, by seed; a contrast adds and subtracts them seed by seed "
           "over the seeds every term reports, with a 95% t-interval over those seeds. These "
           "were chosen for the text after the sweeps ran: they are in no sweep's Holm family, "
           "and their intervals do not hold the test set's own sampling error.", "",
           "| contrast | terms | difference | 95% interval | seeds | p | verdict |",
           "|---|---|---|---|---|---|---|"]
  for c in contrasts:
    p = evaluate(c, arms)
    p_cell = f"{p.p_value:.2g}" if math.isfinite(p.p_value) else "-"
    lines.append(f"| {c.name} | {_term_cell(c)} | {p.mean:+.4f} | [{p.low:+.4f}, {p.high:+.4f}] "
                 f"| {p.seeds} | {p_cell} | {p.verdict} |")
  return "\n".join(lines) + "\n"


def build(contrasts_path: str, sweeps_dir: str, configs_dir: str, command: str) -> str:
  """The page for a contrasts file: every sweep it names read from sweeps_dir/NAME (results)
  and configs_dir/NAME.py (the sweep file)."""
  contrasts = load_contrasts(contrasts_path)
  names = sorted({s for c in contrasts for s, _ in c.plus + c.minus})
  arms = {n: reported_by_seed(os.path.join(configs_dir, f"{n}.py"), os.path.join(sweeps_dir, n))
          for n in names}
  return table(contrasts, arms, command)
