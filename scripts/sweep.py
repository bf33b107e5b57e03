"""Runs a sweep (configs/sweeps/*.py) point after point, then tabulates and plots it.

  python scripts/sweep.py --config=configs/sweeps/embed_ratio.py --workdir=/tmp/sweeps/embed_ratio

Finished points (WORKDIR/points/NAME/result.json) are skipped, so rerunning the same command
resumes an interrupted sweep. --print_launch prints one command per unfinished point for a
cluster instead; --aggregate_only rebuilds results.md / results.csv / plots from the stored
results. Every point is an ordinary training run: scripts/analyze.py works on its directory.
The work is `transformer.research.sweeps.run_command`.
"""


from absl import app, flags

from transformer import cli
from transformer.research import sweeps

_CONFIG = flags.DEFINE_string("config", None, "Sweep file (configs/sweeps/NAME.py).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Where the points and the tables go.")
_POINT = flags.DEFINE_multi_string("point", None, "Run only these points (by name).")
_SEEDS = flags.DEFINE_list("seeds", None, "Override the sweep's seeds, e.g. 0,1,2,3,4.")
_AGGREGATE_ONLY = flags.DEFINE_bool("aggregate_only", False, "Only rebuild the tables and plots.")
_PRINT_LAUNCH = flags.DEFINE_bool("print_launch", False,
                                  "Print one launch command per unfinished point and exit.")
_RERUN_CHANGED = flags.DEFINE_bool(
    "rerun_changed", False, "Run again the finished points whose config the sweep file changed.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  print(sweeps.run_command(_CONFIG.value, _WORKDIR.value, points=_POINT.value, seeds=_SEEDS.value,
                           aggregate_only=_AGGREGATE_ONLY.value,
                           print_launch=_PRINT_LAUNCH.value,
                           rerun_changed=_RERUN_CHANGED.value))


if __name__ == "__main__":
  cli.run_script(main)
