"""Benchmarks a config on this machine: train-step tokens/s, compile time, memory, MFU; the
input pipeline alone; the training loop beside the step.

  python scripts/benchmark.py --config=configs/base.py --config.batch_size=16 --mode=train
  python scripts/benchmark.py --config=configs/default.py --mode=loop --loop_steps=400
  python scripts/benchmark.py --sweep=configs/sweeps/p1_paper_size.py \
      --mode=data   # its first point
  python scripts/benchmark.py --table=docs/gpu-runs/2026-11-27-h200-run   # a folder's table

Prints the figures as JSON (and writes them to --output); --table prints the Markdown table of
a folder of such results (PASS/CONFIG_CODE.json) instead. What each mode measures and how:
transformer/research/benchmarking.py.
"""

import json

from transformer import extras

extras.require("train", "analysis")  # first: a core install lacks what the imports below need

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from transformer import cli, storage  # noqa: E402
from transformer.errors import ConfigError  # noqa: E402
from transformer.inference import lines  # noqa: E402
from transformer.research import benchmarking  # noqa: E402
from transformer.research.sweeps import grid  # noqa: E402
from transformer.training import experiment  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.")
_MODE = flags.DEFINE_list("mode", ["train"], f"What to measure: {', '.join(benchmarking.MODES)}.")
_DIAGNOSTICS_EVERY = flags.DEFINE_integer(
    "diagnostics_every", 100, "Mode diagnostics: train steps per diagnostics call.",
    lower_bound=1)
_DECODE_BATCH = flags.DEFINE_integer("decode_batch", 1, "Rows decoded at once (mode decode).",
                                     lower_bound=1)
_DECODE_TOKENS = flags.DEFINE_integer("decode_tokens", 256, "Tokens decoded per row (mode decode).",
                                      lower_bound=1)
_STEPS = flags.DEFINE_integer("steps", 3, "Steps per timing.", lower_bound=1)
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timings; the median is reported.", lower_bound=1)
_LOOP_STEPS = flags.DEFINE_integer(
    "loop_steps", 200, "Mode loop: steps the training loop runs (the first log window, which "
    "compiles, is not timed).", lower_bound=2)
_SWEEP = flags.DEFINE_string(
    "sweep", None, "Benchmark a sweep file's point (--point, default its first) instead of "
    "--config.")
_POINT = flags.DEFINE_string("point", None, "With --sweep: the point's name (scripts/sweep.py "
                             "--dry_run lists them).")
_OUTPUT = flags.DEFINE_string("output", None, "Write the JSON result here too.")
_PROFILE = flags.DEFINE_string(
    "profile", None, "Trace the measured train step with jax.profiler into this directory.")
_TABLE = flags.DEFINE_string(
    "table", None, "Print the table of a folder of results (PASS/CONFIG_CODE.json) and stop.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  given = [f"--{f.name}" for f in (_CONFIG, _SWEEP, _TABLE) if f.value is not None]
  if len(given) != 1:  # here, not in a flags validator: absl's message prints every value
    raise ConfigError("Pass one of --config or --sweep (to benchmark it) or --table (to "
                      f"tabulate a folder of results), not {' and '.join(given) or 'none'}.")
  if _TABLE.value:
    print("\n".join(benchmarking.comparison_table(_TABLE.value)))
    return
  benchmarking.check_request(_MODE.value, _STEPS.value, _REPEATS.value)
  if _OUTPUT.value:  # before the benchmark, not after it
    storage.check_reachable(_OUTPUT.value, "--output")
    lines.check_writable(_OUTPUT.value)
  config = grid.named_point_config(_SWEEP.value, _POINT.value) if _SWEEP.value else \
      cli.config_of(_CONFIG)
  result = benchmarking.benchmark(
      experiment.parse(config), _MODE.value, _STEPS.value, _REPEATS.value,
      diagnostics_every=_DIAGNOSTICS_EVERY.value, decode_batch=_DECODE_BATCH.value,
      decode_tokens=_DECODE_TOKENS.value, profile_dir=_PROFILE.value,
      loop_steps=_LOOP_STEPS.value)
  text = json.dumps(result, indent=2)
  print(text)
  if _OUTPUT.value:
    storage.write_atomically(_OUTPUT.value, text + "\n")


if __name__ == "__main__":
  cli.run_script(main)
