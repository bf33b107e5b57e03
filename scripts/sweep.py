"""Runs a sweep (configs/sweeps/*.py) point after point, then tabulates and plots it.

  python scripts/sweep.py --sweep=configs/sweeps/embed_ratio.py --workdir=/tmp/sweeps/embed_ratio

Finished points (WORKDIR/points/NAME/result.json) are skipped, so rerunning the same command
resumes an interrupted sweep. --print_launch prints one command per unfinished point for a
cluster instead; --aggregate_only rebuilds results.md / results.csv / plots from the stored
results; --dry_run prints the plan (points in order, each with its expected time; with
--lease_seconds=S, how many calls of --time_budget=S it needs); --time_budget=SECONDS ends the
run between points; --compilation_cache=DIR keeps compiled
programs across points and runs. Every point is an ordinary training run: scripts/analyze.py
works on its directory. The work is `transformer.research.sweeps.run_command`.
"""


from transformer import extras

extras.require("train", "analysis")  # first: a core install lacks what the imports below need

from absl import app, flags  # noqa: E402

from transformer import cli  # noqa: E402
from transformer.research import sweeps  # noqa: E402

# --sweep, not --config: the other scripts' --config is an experiment config taking --config.x
# overrides; a sweep file takes none.
_SWEEP = flags.DEFINE_string("sweep", None, "Sweep file (configs/sweeps/NAME.py).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Where the points and the tables go.")
_POINT = flags.DEFINE_multi_string("point", None, "Run only these points (by name).")
_SEEDS = flags.DEFINE_list("seeds", None, "Override the sweep's seeds, e.g. 0,1,2,3,4.")
_AGGREGATE_ONLY = flags.DEFINE_bool("aggregate_only", False, "Only rebuild the tables and plots.")
_PRINT_LAUNCH = flags.DEFINE_bool("print_launch", False,
                                  "Print one launch command per unfinished point and exit.")
_RERUN_CHANGED = flags.DEFINE_bool(
    "rerun_changed", False, "Run again the finished points whose config the sweep file changed.")
_TIME_BUDGET = flags.DEFINE_float(
    "time_budget", None, "Seconds within which the call should end: a point after the first "
    "starts only if it would end within them by the longest point so far (a leased machine's "
    "call ends between whole points; the same command goes on later).")
_DRY_RUN = flags.DEFINE_bool(
    "dry_run", False, "Print the points still to run, in order, each with the time it should "
    "take at the train step time measured here by the benchmark (or at --pace_from's), and "
    "exit.")
_PACE_FROM = flags.DEFINE_list(
    "pace_from", None, "With --dry_run: sweep workdirs whose finished points give the pace "
    "(their seconds a step as they ran, by model size) instead of a benchmark here.")
_LEASE_SECONDS = flags.DEFINE_float(
    "lease_seconds", None, "With --dry_run: the usable seconds of one leased machine (the "
    "--time_budget its calls get); the plan says how many such leases its points need.")
_COMPILATION_CACHE = flags.DEFINE_string(
    "compilation_cache", None, "JAX's persistent compilation cache in this directory: the "
    "points of an arm (and a rerun) read their programs from it instead of compiling them "
    "(without it every point compiles its own).")
flags.mark_flags_as_required(["sweep", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  if _AGGREGATE_ONLY.value and not (_PRINT_LAUNCH.value or _DRY_RUN.value):
    # The reading side alone: a report is rebuilt where jax is not even imported.
    sweep = sweeps.sweep_for_command(_SWEEP.value, _WORKDIR.value, _SEEDS.value)
    print(sweeps.report.rebuild(sweep, _SWEEP.value, _WORKDIR.value, bool(_SEEDS.value)))
    return
  print(sweeps.run_command(_SWEEP.value, _WORKDIR.value, points=_POINT.value, seeds=_SEEDS.value,
                           aggregate_only=_AGGREGATE_ONLY.value,
                           print_launch=_PRINT_LAUNCH.value,
                           rerun_changed=_RERUN_CHANGED.value, time_budget=_TIME_BUDGET.value,
                           dry_run=_DRY_RUN.value, compilation_cache=_COMPILATION_CACHE.value,
                           pace_from=_PACE_FROM.value, lease_seconds=_LEASE_SECONDS.value))


if __name__ == "__main__":
  cli.run_script(main)
