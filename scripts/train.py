"""Trains a model: python scripts/train.py --config=configs/default.py --workdir=DIR.

Every config field is overridable as --config.FIELD=VALUE (and --config.model.FIELD=VALUE).
Multi-host: JAX detects TPU pod slices and SLURM; elsewhere pass --coordinator_address,
--num_processes and --process_id (see launch/).
"""

import sys

from transformer import extras

extras.require("train")  # first: a core install lacks what the imports below need

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from transformer import cli  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints, logs and config.json go.")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None,
                                   "host:port of process 0, for multi-host runs without "
                                   "auto-detection.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in a multi-host run.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index in a multi-host run.")
_DISTRIBUTED_TIMEOUT = flags.DEFINE_integer(
    "distributed_timeout", 300, "Seconds a multi-host process waits for the others to join.",
    lower_bound=1)
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  # The experiment is checked and made one frozen value before jax starts (experiment imports
  # none), before any process starts, any data or file is written.
  from transformer.training import experiment
  exp = experiment.parse(cli.config_of(_CONFIG))
  import jax
  from transformer.training import loop, sharding

  sharding.initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
                                  _DISTRIBUTED_TIMEOUT.value)
  final = loop.train_and_evaluate(exp, _WORKDIR.value)
  if jax.process_index() == 0:
    print("\n".join(final.lines(_WORKDIR.value)))
  if final.stopped_by == "SIGINT":
    sys.exit(cli.EXIT_INTERRUPTED)


if __name__ == "__main__":
  cli.run_script(main)
