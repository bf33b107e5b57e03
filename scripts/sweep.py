"""Runs a sweep (configs/sweeps/*.py) point after point, then tabulates and plots it.

  python scripts/sweep.py --config=configs/sweeps/embed_ratio.py --workdir=/tmp/sweeps/embed_ratio

Finished points (WORKDIR/points/NAME/result.json) are skipped, so rerunning the same command
resumes an interrupted sweep. --print_launch prints one command per unfinished point for a
cluster instead; --aggregate_only rebuilds results.md / results.csv / plots from the stored
results. Every point is an ordinary training run: scripts/analyze.py works on its directory.
"""

import dataclasses
import sys

from absl import app, flags, logging

_CONFIG = flags.DEFINE_string("config", None, "Sweep file (configs/sweeps/NAME.py).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Where the points and the tables go.")
_POINT = flags.DEFINE_multi_string("point", None, "Run only these points (by name).")
_SEEDS = flags.DEFINE_list("seeds", None, "Override the sweep's seeds, e.g. 0,1,2,3,4.")
_AGGREGATE_ONLY = flags.DEFINE_bool("aggregate_only", False, "Only rebuild the tables and plots.")
_PRINT_LAUNCH = flags.DEFINE_bool("print_launch", False,
                                  "Print one launch command per unfinished point and exit.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  from transformer import sweeps

  sweep = sweeps.load_sweep(_CONFIG.value)
  if _SEEDS.value:
    sweep = dataclasses.replace(sweep, seeds=tuple(int(s) for s in _SEEDS.value))
  command = f"python scripts/sweep.py --config={_CONFIG.value} --workdir=WORKDIR"
  if _PRINT_LAUNCH.value:
    print("\n".join(sweeps.launch_lines(sweep, _CONFIG.value, _WORKDIR.value)))
    return
  if not _AGGREGATE_ONLY.value:
    sweeps.run_sweep(sweep, _WORKDIR.value, only=_POINT.value)
  summary = sweeps.aggregate(sweep, _WORKDIR.value, command=command)
  logging.info("%d of %d points finished; tables in %s/results.md", summary["points"],
               summary["expected"], _WORKDIR.value)
  print(open(f"{_WORKDIR.value}/results.md").read())


if __name__ == "__main__":
  try:
    app.run(main)
  except ValueError as e:
    sys.exit(f"error: {e}")
