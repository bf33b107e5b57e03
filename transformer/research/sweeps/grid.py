"""A sweep's grid: the `Sweep` a sweep file defines, its points, and each point's config.

A sweep file (configs/sweeps/*.py) is code: its get_sweep() returns a `Sweep`:
  name, question    what the sweep measures (heads the report)
  base              the experiment config every point starts from (a configs/*.py path)
  fixed             {dotted field: value} applied to every point
  axes              a list of {dotted field: [values]}; fields of one axis move together
                    (zipped), the axes are crossed (product); a value UNSET leaves the field
                    at the base's value and out of the arm's settings and name (a field that
                    only some arms set; None is a value like any other)
  seeds             config.seed of each repeat (initialisation, dropout, data order)
  metrics           what the table shows: result keys, fnmatch patterns allowed;
                    'max:PATTERN' / 'mean:PATTERN' reduce the matching keys (default mean)
  curves            '{split}/{name}' series of metrics.jsonl stored in result.json and plotted
                    over steps per group (fnmatch patterns store every match)
  fits              [{x: dotted field, y: metric}]: slope of log y against log x per seed
  at_steps          optional steps whose diagnostics records join the result as 'step_{S}/*'
                    (beside 'init/*' and 'final/*'): a quantity early in training
  correlations      optional [{x: metric, y: metric}]: Pearson r over seeds, with a 95% Fisher
                    interval, of each arm at its chosen value (every seed run there) and of
                    all those runs pooled over arms
  length_factors    optional: after training, eval loss at these multiples of max_len
  tune              optional {dotted field: [values]}: one numeric field (the learning rate)
                    searched separately for every arm (setting of the axes); see tuning.py
  select, report    the metric a tuned value is chosen on (validation) and the one reported
                    at the chosen value (a held-out test split: config.test_fraction > 0)
  also_report       optional further metrics reported like `report` (each arm at the value
                    chosen on `select`), each with its own paired differences (test/bleu)
  extend_edges      how many grid steps an arm's search may add beyond either end of `tune`
                    when its best value lies on the edge
  baseline          the arm the others are compared with, paired by seed (default: the first;
                    an untuned sweep compares its arms only when baseline or contrast is set)
  contrast          instead of one baseline: an axis field; each arm is compared with the arm
                    of the same settings on the other axes at the first setting of that
                    field's axis (all the fields that move with it)
  arm_names         optional short names of the arms, in grid order, for tables and legends
  confirm_seeds     optional seeds run only at each arm's chosen value once its search is
                    complete: they join the reported figure and the paired differences, while
                    the choice stays on `seeds` (more seeds where effects are small, without
                    running them over the whole grid)
  fresh_report      True: the reported figure and every paired difference use confirm_seeds
                    alone, seeds that did not choose the value (the choice's own seeds would
                    carry its selection into the figure); needs confirm_seeds
  pairs             optional further (arm, baseline) comparisons by arm name, paired by seed
                    like the baseline's (the cells of a factorial design); one that repeats a
                    baseline comparison is reported once
  trend             optional numeric axis field (num_train_steps): the paired differences at
                    each of its values read as one series per comparison, with a line in
                    log10 of the field fitted per seed and where it would reach 0, and a
                    power law beside it (tuning.trend); needs tune, the field alone on its
                    axis and a contrast on another axis
  sensitivity_cap   optional: report each arm's learning-rate sensitivity over `tune`'s grid
                    (tuning.sensitivity), a diverged or worse run counting as this loss
  arm_values        optional {arm name: values of the tuned field} searched for that arm in
                    place of `tune`'s grid (extended at an edge as usual); a single value runs
                    the arm there only, neither searched nor extended (a control at another
                    arm's chosen rate)
  failure           optional FailureRule (training/failure_rule.py), fixed before the runs: a
                    finished run it judges stalled or with a dead layer counts as failed, like
                    a diverged one (never chosen, left out of every mean but the
                    intention-to-treat figures, counted per arm and value in the tables);
                    read again whenever the results are read. Without
                    one, each run is judged once, as it finishes, by the default FailureRule().
                    With one, the report adds the intention-to-treat figure (tuning.py: every
                    reporting run counted, a failed one too) beside the figure over the runs
                    that did not fail, for each arm and each paired difference
  itt_missing       with `failure`: what a reporting run counts as in the intention-to-treat
                    figure when it has no finite `report` (it diverged before its test split
                    was scored; a failed run with a finite one counts at it). Default None:
                    ln of the model's output vocabulary, the uniform model's NLL, where
                    `report` is an NLL (test/loss, test/nll); another metric needs a value
  holm_family       optional (arm, baseline) comparisons by arm name that alone make up the
                    Holm family of each table of paired differences (its size is theirs, a
                    comparison not yet in the table counting as not significant); the
                    table's other comparisons are exploratory, uncorrected, and say so in
                    its Holm column. Default (): every comparison of the table is one family
  first_arms        optional arm names run first, in this order, before any point of the
                    other arms: each one's remaining choosing points, then its confirm_seeds
                    as soon as its own choice is complete. Default (): every arm's choosing
                    points before any arm's confirm_seeds, in grid order (runner.run_order;
                    the dry run lists the points in that order)
Layout: WORKDIR/points/NAME/ holds a point's run and its result.json, written last.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from typing import Any, Mapping, Optional, Sequence

import ml_collections

from transformer import storage
from transformer.config import SCALE_FIELDS
from transformer.errors import ConfigError, one_line
from transformer.records import to_json
from transformer.training import experiment, fields
from transformer.training.failure_rule import FailureRule

POINTS_DIR = "points"
RESULT_FILE = "result.json"
# The reported metrics that are a test split's NLL (with no label smoothing or z-loss, as in
# every language-model sweep here, the loss is the NLL): a test example's NLL sums add up to
# them, and a run without one is counted at the uniform model's NLL by default (itt_missing).
NLL_REPORTS = ("test/loss", "test/nll")


class _Unset:
  """An axis value that leaves its field out of an arm (the base's value, not in the name)."""

  def __repr__(self) -> str:
    return "UNSET"

  def __reduce__(self) -> str:  # a copy or a pickle is the one UNSET
    return "UNSET"


UNSET = _Unset()


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
  at_steps: tuple[int, ...] = ()
  correlations: tuple[dict[str, str], ...] = ()
  length_factors: tuple[float, ...] = ()
  tune: dict[str, list[float]] = dataclasses.field(default_factory=dict)
  select: str = "eval/loss"
  report: str = "test/loss"
  also_report: tuple[str, ...] = ()
  extend_edges: int = 3
  baseline: Optional[str] = None
  contrast: Optional[str] = None
  arm_names: tuple[str, ...] = ()
  confirm_seeds: tuple[int, ...] = ()
  fresh_report: bool = False
  sensitivity_cap: Optional[float] = None
  arm_values: dict[str, list[float]] = dataclasses.field(default_factory=dict)
  pairs: tuple[tuple[str, str], ...] = ()
  trend: Optional[str] = None
  failure: Optional[FailureRule] = None
  itt_missing: Optional[float] = None
  holm_family: tuple[tuple[str, str], ...] = ()
  first_arms: tuple[str, ...] = ()

  @property
  def not_ok(self) -> str:
    """What the tables call a run that did not finish well: 'diverged', or 'failed' with a
    failure rule (diverged, stalled or with a dead layer)."""
    return "failed" if self.failure else "diverged"

  @property
  def tuned_field(self) -> Optional[str]:
    return next(iter(self.tune), None)

  def arm_name(self, arm: "Overrides") -> str:
    """An arm's display name: its arm_names entry, else its label."""
    return dict(zip([arm_label(a) for a in arms(self)], self.arm_names)).get(arm_label(arm),
                                                                          arm_label(arm))

  def tune_values(self, arm: "Overrides") -> list[float]:
    """The tuned field's starting grid for `arm`: its arm_values entry, else tune's."""
    return list(self.arm_values.get(self.arm_name(arm), self.tune[self.tuned_field]))


def headline_arms(d_model: int, small_d_model: int = 64) -> dict[str, Any]:
  """The Sweep fields (axes, arm_names, pairs) of the headline arms at width `d_model`: the
  paper (sqrt(d) on the token), no scale, pe_down (no scale, the sinusoids divided by
  sqrt(d_model): the paper's input divided by sqrt(d), as at every width) and ratio_matched
  (no scale, the sinusoids times sqrt(small_d_model / d_model): the token/PE ratio at init that
  no scale has at `small_d_model`), each also compared with no scale. At d_model ==
  small_d_model ratio_matched is no scale itself and is left out."""
  arms = [("paper", "sqrt_d", 1.0), ("no_scale", "none", 1.0),
          ("pe_down", "none", 1.0 / math.sqrt(d_model)),
          ("ratio_matched", "none", math.sqrt(small_d_model / d_model))]
  if d_model == small_d_model:
    arms = arms[:3]
  return dict(
      axes=({"model.embed_scale": [scale for _, scale, _ in arms],
             "model.posemb_scale": [pe for _, _, pe in arms]},),
      arm_names=tuple(name for name, _, _ in arms),
      pairs=tuple((name, "no_scale") for name, _, _ in arms[2:]))


def load_sweep(path: str) -> Sweep:
  """get_sweep() of a sweep file; one-line errors for a missing or malformed file."""
  if not os.path.isfile(path):
    raise ConfigError(f"Sweep file {path} does not exist; pass one of configs/sweeps/*.py.")
  sweep = experiment.call_get(experiment.load_module(path), "get_sweep", path, Sweep)
  check_sweep(sweep)
  return sweep


def sweep_for_command(path: str, workdir: str, seeds: Optional[Sequence[Any]] = None) -> Sweep:
  """The sweep scripts/sweep.py runs or reports: its file's, with --seeds in place of its own
  seeds where given; one line for a --workdir that is a file or --seeds that are not integers."""
  sweep = load_sweep(path)
  if storage.as_path(workdir).exists() and not storage.as_path(workdir).is_dir():
    raise ConfigError(f"--workdir={workdir} is a file, not a directory; pass a directory for "
                      "the sweep's points and tables.")
  if seeds:
    try:
      values = tuple(int(s) for s in seeds)
    except ValueError:
      raise ConfigError(f"--seeds={','.join(map(str, seeds))} must be integers, e.g. "
                        "--seeds=0,1,2.") from None
    sweep = dataclasses.replace(sweep, seeds=values)
    check_sweep(sweep)  # e.g. --seeds that repeat the sweep's confirm_seeds: one line
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
  """Raises ConfigError with one line for a malformed sweep."""
  _check_shape(sweep)
  _check_tuning(sweep)
  _check_reporting(sweep)
  _check_arms(sweep)
  _check_declared(sweep)
  _check_values(sweep)
  _check_names(sweep)


MAX_NAME_BYTES = 255  # a point's directory name: one path component on every common filesystem


def _check_names(sweep: Sweep) -> None:
  """Every point's name fits a directory name (else the run fails at mkdir, ENAMETOOLONG)."""
  for point in expand(sweep):
    size = len(point.name.encode())
    if size > MAX_NAME_BYTES:
      raise ConfigError(f"Point {point.name[:60]}... is named by its {len(point.overrides)} "
                        f"settings in {size} bytes, over the {MAX_NAME_BYTES} a directory name "
                        "holds: set the fields every point shares in `fixed`, or shorten the "
                        "axis values.")


def _check_shape(sweep: Sweep) -> None:
  """A Sweep, with seeds, a base config file and axes whose fields move together."""
  if not isinstance(sweep, Sweep):
    raise ConfigError("get_sweep() must return a transformer.research.sweeps.Sweep, not "
                      f"{type(sweep)}.")
  if not sweep.seeds:
    raise ConfigError("The sweep has no seeds.")
  seeds = list(sweep.seeds)
  if len(set(seeds)) != len(seeds) or not all(
      isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
    raise ConfigError(f"seeds={seeds} must be distinct integers >= 0 (one run each).")
  if not os.path.isfile(sweep.base):
    raise ConfigError(f"base={sweep.base!r} is not a file (run from the repository root).")
  if not isinstance(sweep.axes, (tuple, list)) or not all(isinstance(a, dict) for a in sweep.axes):
    raise ConfigError(f"axes={sweep.axes!r} must be a tuple of {{field: [values]}} dicts, one an "
                      "axis: axes=({'model.d_model': [32, 64]},).")
  seen: dict[str, int] = {}
  for i, axis in enumerate(sweep.axes):
    for field, values in axis.items():
      if not isinstance(values, (tuple, list)):
        raise ConfigError(f"Axis {i} gives {field!r} the value {values!r}; an axis field takes a "
                          f"list of values ({field!r}: [{values!r}]), or put it in `fixed`.")
    lengths = {len(v) for v in axis.values()}
    if len(lengths) != 1:
      raise ConfigError(f"The fields of one axis move together and need equally many values: "
                       f"{dict(axis)}.")
    if lengths == {0}:
      raise ConfigError(f"Axis {i} of the sweep has no values ({dict(axis)}): give each field "
                        "at least one value, or drop the axis.")
    for field in axis:  # (an axis may override a `fixed` value: the point's name shows it)
      if field in seen:
        raise ConfigError(f"{field!r} is on axis {i} and on axis {seen[field]}: a point can set "
                          "it once; put its values on one axis.")
      seen[field] = i


def _check_tuning(sweep: Sweep) -> None:
  """tune, contrast and trend."""
  if sweep.tune:
    if len(sweep.tune) != 1:
      raise ConfigError(f"tune holds one field (the learning rate), not {list(sweep.tune)}.")
    field, values = next(iter(sweep.tune.items()))
    if field in sweep.fixed or any(field in a for a in sweep.axes):
      raise ConfigError(f"{field!r} is tuned, so it cannot also be fixed or an axis.")
    if len(values) < 2 or not all(isinstance(v, (int, float)) and v > 0 for v in values):
      raise ConfigError(f"tune[{field!r}]={values!r} needs at least two positive numbers.")
  if sweep.contrast is not None and not any(sweep.contrast in a for a in sweep.axes):
    raise ConfigError(f"contrast={sweep.contrast!r} is not a field of the sweep's axes.")
  if sweep.trend is not None:
    axis = next((a for a in sweep.axes if sweep.trend in a), None)
    if (axis is None or len(axis) != 1 or not sweep.tune or sweep.contrast is None
        or sweep.contrast in axis):
      raise ConfigError(f"trend={sweep.trend!r} needs `tune`, an axis of its own and a contrast "
                        "on another axis: it reads each contrast's difference, each arm at its "
                        "own best rate, along that axis.")
    if len(axis[sweep.trend]) < 2 or not all(
        isinstance(v, (int, float)) and v > 0 for v in axis[sweep.trend]):
      raise ConfigError(f"trend={sweep.trend!r} needs at least two positive numbers on its "
                        f"axis, not {axis[sweep.trend]!r}.")


def _check_reporting(sweep: Sweep) -> None:
  """baseline, at_steps, correlations, confirm_seeds, fresh_report, sensitivity."""
  if sweep.baseline is not None and sweep.baseline not in {arm_label(a) for a in arms(sweep)}:
    raise ConfigError(f"baseline={sweep.baseline!r} is not an arm of the sweep; arms are "
                      f"{[arm_label(a) for a in arms(sweep)]}.")
  if not all(isinstance(s, int) and s > 0 for s in sweep.at_steps):
    raise ConfigError(f"at_steps={list(sweep.at_steps)} must be positive integers (steps).")
  if sweep.correlations and not sweep.tune:
    raise ConfigError("correlations read each arm at its chosen value: they need `tune`.")
  if any(set(c) != {"x", "y"} for c in sweep.correlations):
    raise ConfigError(f"correlations holds {{'x': metric, 'y': metric}} entries, not "
                      f"{list(sweep.correlations)}.")
  if sweep.confirm_seeds and not sweep.tune:
    raise ConfigError("confirm_seeds are run at each arm's chosen value: they need `tune`.")
  if sweep.fresh_report and len(sweep.confirm_seeds) < 2:
    raise ConfigError("fresh_report reports on confirm_seeds alone: give at least two (a paired "
                      "interval needs two seeds).")
  if sweep.sensitivity_cap is not None and not sweep.tune:
    raise ConfigError("sensitivity_cap reads the learning-rate curve: it needs `tune`.")
  rule = sweep.failure
  if rule is not None and not (isinstance(rule, FailureRule)
                               and (rule.stall_step is None or rule.stall_step > 0)
                               and 0 <= rule.min_fall < 1 and rule.dead_ratio > 0
                               and rule.min_span >= 1):
    raise ConfigError(f"failure={rule!r} needs a FailureRule with stall_step None or > 0, "
                      "min_fall in [0, 1), dead_ratio > 0 and min_span >= 1.")
  if set(sweep.confirm_seeds) & set(sweep.seeds):
    raise ConfigError(f"confirm_seeds {list(sweep.confirm_seeds)} repeat seeds of "
                      f"{list(sweep.seeds)}; give new ones.")


def _check_arms(sweep: Sweep) -> None:
  """arm_names, pairs and arm_values name the sweep's arms."""
  if sweep.arm_names and (len(sweep.arm_names) != len(arms(sweep))
                          or len(set(sweep.arm_names)) != len(sweep.arm_names)):
    raise ConfigError(f"arm_names needs {len(arms(sweep))} distinct names (one per arm), got "
                      f"{list(sweep.arm_names)}.")
  names = [sweep.arm_name(a) for a in arms(sweep)]
  for pair in sweep.pairs:
    if len(pair) != 2 or not set(pair) <= set(names) or pair[0] == pair[1]:
      raise ConfigError(f"pairs holds (arm, baseline) of two different arms; {pair!r} is not "
                        f"one (arms are {names}).")
  if sweep.arm_values:
    if not sweep.tune:
      raise ConfigError("arm_values replace `tune`'s grid for some arms: they need `tune`.")
    for name, values in sweep.arm_values.items():
      if name not in names:
        raise ConfigError(f"arm_values names {name!r}, which is not an arm; arms are {names}.")
      if not values or not all(isinstance(v, (int, float)) and v > 0 for v in values):
        raise ConfigError(f"arm_values[{name!r}]={values!r} needs positive numbers.")


def _check_declared(sweep: Sweep) -> None:
  """first_arms, holm_family and itt_missing: arms of the sweep, comparisons it makes, a
  value where the reported metric is not an NLL."""
  names = [sweep.arm_name(a) for a in arms(sweep)]
  if len(set(sweep.first_arms)) != len(sweep.first_arms) or not set(sweep.first_arms) <= set(
      names):
    raise ConfigError(f"first_arms={list(sweep.first_arms)} must be distinct arms of the sweep; "
                      f"arms are {names}.")
  base = next((sweep.arm_name(a) for a in arms(sweep) if arm_label(a) == sweep.baseline),
              names[0])
  if sweep.contrast is not None:
    made = {(sweep.arm_name(a), sweep.arm_name(r))
            for a, r in contrast_references(sweep, arms(sweep)).items() if r != a}
  else:
    made = {(n, base) for n in names if n != base} if sweep.tune or sweep.baseline else set()
  made |= {tuple(p) for p in sweep.pairs}
  for pair in sweep.holm_family:
    if tuple(pair) not in made:
      raise ConfigError(f"holm_family holds (arm, baseline) comparisons the sweep makes (against "
                        f"its baseline, within its contrast, or in pairs); {pair!r} is not one.")
  if len(set(map(tuple, sweep.holm_family))) != len(sweep.holm_family):
    raise ConfigError(f"holm_family={list(sweep.holm_family)} names a comparison twice.")
  missing = sweep.itt_missing
  if missing is not None and not (isinstance(missing, (int, float)) and math.isfinite(missing)):
    raise ConfigError(f"itt_missing={missing!r} must be a finite number (the value a run "
                      "without a finite reported metric counts at).")
  if sweep.failure and missing is None and sweep.report not in NLL_REPORTS:
    raise ConfigError(f"A failure rule adds the intention-to-treat figure of {sweep.report}, "
                      "which is not an NLL: declare what a run without a finite one counts at "
                      "(itt_missing).")


def _check_values(sweep: Sweep) -> None:
  """Every value the points will set, on the base config (one line before any point runs)."""
  if "seed" in sweep.fixed or any("seed" in a for a in sweep.axes) or "seed" in sweep.tune:
    raise ConfigError("seed is set by the sweep's `seeds` (every point's repeat), so an axis, "
                      "`fixed` or `tune` entry on it would be overwritten; list the seeds as "
                      "seeds=(1, 2) instead.")
  base = experiment.load_config(sweep.base)
  for field in list(sweep.tune):
    _get_parent(base, field)  # raises on an unknown field
  # Every value the points will set, on a copy of the base: a value of the wrong type is one
  # line now, before any point's directory is made.
  for field, value in list(sweep.fixed.items()) + [(f, v) for a in sweep.axes
                                                   for f, values in a.items() for v in values
                                                   if v is not UNSET]:
    set_field(base, field, value)
  rule = sweep.failure
  if rule and rule.stall_step is not None and (
      rule.stall_step % base.log_every_steps or
      rule.stall_step + rule.min_span > base.num_train_steps):
    raise ConfigError(f"failure.stall_step={rule.stall_step} must be a logged step "
                      f"(a multiple of log_every_steps={base.log_every_steps}) at least "
                      f"min_span={rule.min_span} steps before the last ({base.num_train_steps}): "
                      "the rule reads the train record there and judges a stall over that span.")


Overrides = tuple[tuple[str, Any], ...]


def arms(sweep: Sweep) -> list[Overrides]:
  """The settings of the axes: the product of the axes (each axis zipped), in grid order; a
  field whose value is UNSET is left out (the base's value)."""
  per_axis = []
  for axis in sweep.axes:
    fields = list(axis.keys())
    per_axis.append([tuple(zip(fields, values)) for values in zip(*(axis[f] for f in fields))])
  return [tuple(kv for axis_values in combo for kv in axis_values if kv[1] is not UNSET)
          for combo in itertools.product(*per_axis)]


def contrast_references(sweep: Sweep, settings: Sequence[Overrides]) -> dict[Overrides, Overrides]:
  """{arm: the arm sweep.contrast compares it with} over `settings` (arms of the sweep): the
  one of the same settings on the other axes at the first setting of the contrast field's axis
  (all of that axis's fields, which move together); an arm without one is left out."""
  axis = next(a for a in sweep.axes if sweep.contrast in a)
  first = {f: values[0] for f, values in axis.items()}
  others = lambda arm: tuple(kv for kv in arm if kv[0] not in axis)  # noqa: E731
  refs = {others(a): a for a in settings
          if all(dict(a).get(f, UNSET) == v for f, v in first.items())}
  return {a: refs[others(a)] for a in settings if others(a) in refs}


def axis_fields(sweep: Sweep) -> list[str]:
  return [f for axis in sweep.axes for f in axis]


def arm_of(sweep: Sweep, overrides: Mapping[str, Any]) -> Optional[Overrides]:
  """The arm a result's overrides belong to (its axis settings, in the axes' order), or None
  when they set a field that is neither on an axis nor the tuned one."""
  fields = axis_fields(sweep)
  if not set(overrides) <= {*fields, *sweep.tune}:
    return None
  return tuple((k, overrides[k]) for k in fields if k in overrides)


def arm_label(overrides: Overrides) -> str:
  """An arm's name: its axis settings (a tuned field's value left out)."""
  return ",".join(f"{short_name(k)}={format_value(v)}" for k, v in overrides) or "base"


def expand(sweep: Sweep, tuned: Optional[Mapping[str, Sequence[float]]] = None,
           chosen: Optional[Mapping[str, float]] = None) -> list[Point]:
  """Every point of the grid: arms x tuned values x seeds. A tuned sweep searches
  `tuned[arm label]` for an arm (tuning.searched_values: the grid with its extensions),
  sweep.tune_values(arm) where not given, and runs sweep.confirm_seeds at `chosen[arm label]`
  (an arm's value once its search is complete)."""
  points = []
  for arm in arms(sweep):
    if sweep.tune:
      field = sweep.tuned_field
      values = (tuned or {}).get(arm_label(arm), sweep.tune_values(arm))
      settings = [arm + ((field, v),) for v in values]
    else:
      settings = [arm]
    for overrides in settings:
      points.extend(Point(overrides, int(seed)) for seed in sweep.seeds)
    if sweep.tune and arm_label(arm) in (chosen or {}):
      overrides = arm + ((sweep.tuned_field, chosen[arm_label(arm)]),)
      points.extend(Point(overrides, int(seed)) for seed in sweep.confirm_seeds)
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
  try:
    node[leaf] = value
  except (TypeError, ValueError) as e:  # ml_collections keeps each field's type
    raise ConfigError(f"The sweep sets {field}={value!r}, which does not fit the field "
                      f"({one_line(e, 160)}); give it a value of the field's type.") from None


def point_config(sweep: Sweep, point: Point) -> ml_collections.ConfigDict:
  """The experiment config of `point`: base, then `fixed`, then the point's overrides and seed."""
  config = experiment.load_config(sweep.base)
  for field, value in sweep.fixed.items():
    set_field(config, field, value)
  for field, value in point.overrides:
    set_field(config, field, value)
  config.seed = point.seed
  return config


def named_point_config(path: str, name: Optional[str] = None) -> ml_collections.ConfigDict:
  """The config of the point called `name` of the sweep file at `path` (default: its first
  point); one line naming the points there for a name the sweep does not hold."""
  sweep = load_sweep(path)
  points = expand(sweep)
  if name is None:
    return point_config(sweep, points[0])
  for point in points:
    if point.name == name:
      return point_config(sweep, point)
  raise ConfigError(f"Sweep {sweep.name} has no point {name!r}; its first points: "
                    f"{', '.join(p.name for p in points[:3])} (scripts/sweep.py --dry_run lists "
                    "them all).")


def point_dir(workdir: str, point: Point) -> str:
  return storage.join(workdir, POINTS_DIR, point.name)


def is_finished(workdir: str, point: Point) -> bool:
  return storage.as_path(storage.join(point_dir(workdir, point), RESULT_FILE)).is_file()


def data_inputs(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """What a run's data come from, as plain JSON values: the text it reads, how it is split
  (with the seed, unless split_seed holds the split still) and the SentencePiece model trained
  on it (its Role.SOURCE fields). Two runs of one seed whose data_inputs are equal train on,
  choose on and are scored on the same paragraphs."""
  return to_json({k: config.get(k) for k in fields.names(fields.Role.SOURCE)})
