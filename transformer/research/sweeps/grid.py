"""A sweep's grid: the `Sweep` a sweep file defines, its points, and each point's config.

A sweep file (configs/sweeps/*.py) is code: its get_sweep() returns a `Sweep`:
  name, question    what the sweep measures (heads the report)
  base              the experiment config every point starts from (a configs/*.py path)
  fixed             {dotted field: value} applied to every point
  axes              a list of {dotted field: [values]}; fields of one axis move together
                    (zipped), the axes are crossed (product)
  seeds             config.seed of each repeat (initialisation, dropout, data order)
  metrics           what the table shows: result keys, fnmatch patterns allowed;
                    'max:PATTERN' / 'mean:PATTERN' reduce the matching keys (default mean)
  curves            '{split}/{name}' series of metrics.jsonl plotted over steps per group
  fits              [{x: dotted field, y: metric}]: slope of log y against log x per seed
  length_factors    optional: after training, eval loss at these multiples of max_len
Layout: WORKDIR/points/NAME/ holds a point's run and its result.json, written last.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from typing import Any

import ml_collections

from transformer.config import SCALE_FIELDS
from transformer.errors import ConfigError
from transformer.training import experiment

POINTS_DIR = "points"
RESULT_FILE = "result.json"


@dataclasses.dataclass(frozen=True)
class Sweep:
  """A grid of experiment configs (fields documented in the module docstring)."""

  name: str
  question: str
  base: str
  axes: tuple[dict[str, list[Any]], ...]
  seeds: tuple[int, ...] = (0, 1, 2)
  fixed: dict[str, Any] = dataclasses.field(default_factory=dict)
  metrics: tuple[str, ...] = ("eval/loss",)
  curves: tuple[str, ...] = ("eval/loss",)
  fits: tuple[dict[str, str], ...] = ()
  length_factors: tuple[float, ...] = ()


def load_sweep(path: str) -> Sweep:
  """get_sweep() of a sweep file; one-line errors for a missing or malformed file."""
  if not os.path.isfile(path):
    raise ConfigError(f"Sweep file {path} does not exist; pass one of configs/sweeps/*.py.")
  module = experiment.load_module(path)
  if not hasattr(module, "get_sweep"):
    raise ConfigError(f"{path} has no get_sweep() function.")
  sweep = module.get_sweep()
  check_sweep(sweep)
  return sweep


@dataclasses.dataclass(frozen=True)
class Point:
  """One run of a sweep: overrides {dotted field: value}, seed included."""

  overrides: tuple[tuple[str, Any], ...]
  seed: int

  @property
  def group(self) -> str:
    """The name without the seed: points differing only in seed share it."""
    return ",".join(f"{short_name(k)}={format_value(v)}" for k, v in self.overrides) or "base"

  @property
  def name(self) -> str:
    return f"{self.group},seed={self.seed}".replace("/", "_")


def short_name(field: str) -> str:
  return field.rsplit(".", 1)[-1]


def format_value(value: Any) -> str:
  return f"{value:g}" if isinstance(value, float) else str(value)


def check_sweep(sweep: Sweep) -> None:
  """Raises ValueError with one line for a malformed sweep."""
  if not isinstance(sweep, Sweep):
    raise ConfigError(f"get_sweep() must return a transformer.research.sweeps.Sweep, not {type(sweep)}.")
  if not sweep.seeds:
    raise ConfigError("The sweep has no seeds.")
  if not os.path.isfile(sweep.base):
    raise ConfigError(f"base={sweep.base!r} is not a file (run from the repository root).")
  for axis in sweep.axes:
    lengths = {len(v) for v in axis.values()}
    if len(lengths) != 1:
      raise ConfigError(f"The fields of one axis move together and need equally many values: "
                       f"{dict(axis)}.")
  base = experiment.load_config(sweep.base)
  for field in list(sweep.fixed.keys()) + [f for a in sweep.axes for f in a]:
    _get_parent(base, field)  # raises on an unknown field


def expand(sweep: Sweep) -> list[Point]:
  """Every point of the grid: the product of the axes (each axis zipped), times the seeds."""
  per_axis = []
  for axis in sweep.axes:
    fields = list(axis.keys())
    per_axis.append([tuple(zip(fields, values)) for values in zip(*(axis[f] for f in fields))])
  points = []
  for combo in itertools.product(*per_axis):
    overrides = tuple(kv for axis_values in combo for kv in axis_values)
    points.extend(Point(overrides, int(seed)) for seed in sweep.seeds)
  names = [p.name for p in points]
  if len(set(names)) != len(names):
    raise ConfigError("Two points of the sweep have the same name; give axes distinct values.")
  return points


def _get_parent(config: ml_collections.ConfigDict, field: str):
  *path, leaf = field.split(".")
  node = config
  for part in path:
    if part not in node:
      raise ConfigError(f"The experiment config has no field {field!r}.")
    node = node[part]
  if leaf not in node:
    raise ConfigError(f"The experiment config has no field {field!r}.")
  return node, leaf


def set_field(config: ml_collections.ConfigDict, field: str, value: Any) -> None:
  """config.a.b = value for field 'a.b' (model scale fields take numbers as strings)."""
  node, leaf = _get_parent(config, field)
  if field.startswith("model.") and leaf in SCALE_FIELDS and value is not None:
    value = str(value)
  node[leaf] = value


def point_config(sweep: Sweep, point: Point) -> ml_collections.ConfigDict:
  """The experiment config of `point`: base, then `fixed`, then the point's overrides and seed."""
  config = experiment.load_config(sweep.base)
  for field, value in sweep.fixed.items():
    set_field(config, field, value)
  for field, value in point.overrides:
    set_field(config, field, value)
  config.seed = point.seed
  return config


def point_dir(workdir: str, point: Point) -> str:
  return os.path.join(workdir, POINTS_DIR, point.name)


def is_finished(workdir: str, point: Point) -> bool:
  return os.path.isfile(os.path.join(point_dir(workdir, point), RESULT_FILE))
