"""Sweeps: a grid of experiment configs and seeds, run point after point, then tabulated.

  grid.py    the Sweep a sweep file defines, its points and their configs
  runner.py  running points (resumable, a lock per running point), launch lines for a cluster
  stats.py   stored results, means over seeds, log-log fits, correlations over seeds
  tuning.py  a tuned field (the learning rate) searched per arm; paired differences by seed
             (with the test set's own error where stored), a Holm correction (over a declared
             family where given) and, with a failure rule, the intention-to-treat figure
  report.py  results.md, results.csv and the plots (plots.py), from stored results alone
  The reading side (all but runner.py) imports no jax; the runner is loaded on first use.
  contrasts.py  signed sums of arms across a sweep or two, by seed (docs/contrasts.md)
"""

import importlib
from typing import Any

from transformer.research.sweeps.grid import (POINTS_DIR, RESULT_FILE, UNSET, Point, Sweep,
                                              check_sweep, expand, headline_arms, is_finished,
                                              load_sweep, point_config, point_dir, set_field,
                                              sweep_for_command)
from transformer.research.sweeps.report import aggregate, changed_points
from transformer.research.sweeps.stats import (correlation, fit_slopes, load_results,
                                               metric_value)
from transformer.training.failure_rule import FailureRule
from transformer.research.sweeps.tuning import (Paired, best_per_arm, holm, paired,
                                                paired_differences, searched_values, t_interval,
                                                test_set_se)

# The runner trains, so it imports jax: loaded on first use, so that the reading side (this
# package's other modules) is imported and run where jax is not.
_RUNNER = ("LOCK_FILE", "claim", "launch_lines", "length_losses", "run_point", "run_sweep",
           "run_command", "test_rows", "tokenizer_path")


def __getattr__(name: str) -> Any:
  if name in _RUNNER or name == "runner":
    runner = importlib.import_module(f"{__name__}.runner")
    return runner if name == "runner" else getattr(runner, name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["POINTS_DIR", "RESULT_FILE", "UNSET", "FailureRule", "LOCK_FILE", "Point", "Sweep",
           "aggregate", "best_per_arm",
           "check_sweep", "headline_arms", "paired_differences", "searched_values", "t_interval",
           "claim", "expand", "fit_slopes", "is_finished", "launch_lines", "length_losses",
           "load_results", "load_sweep", "metric_value", "point_config", "point_dir",
           "run_command", "run_point", "run_sweep", "set_field", "sweep_for_command",
           "changed_points",
           "tokenizer_path", "test_rows", "correlation", "Paired", "paired", "holm",
           "test_set_se"]
