"""Compiles the train step for an accelerator that is not attached and reports its memory,
FLOPs, HBM traffic, collectives and roofline estimates (transformer/research/compile_report.py):

  python scripts/compile.py --config=configs/big.py --target=v5e:4x4 --config.model.dtype=bfloat16

--table=DIR compiles every row of docs/accelerators/table.md missing from DIR (one JSON a row) and
writes DIR/table.md; with --aggregate_only it only rebuilds table.md from the JSON files.
Needs libtpu for TPU targets (pip install -e '.[train,tpu]') and jax's CUDA plugin for h100:N and
h200:N (docs/speed.md).
"""

import json
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the target is compiled for, not run on

from transformer import extras  # noqa: E402

extras.require("train")  # first: a core install lacks what the imports below need

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from transformer import cli, errors, storage  # noqa: E402
from transformer.inference import lines  # noqa: E402
from transformer.research import compile_report  # noqa: E402
from transformer.training import experiment  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.")
_TARGET = flags.DEFINE_string(
    "target", "v5e:4x4", "A TPU topology (v5e:4x4, v4:2x2x1, ...), or h100:N or h200:N (N GPUs "
    "in one host).")
_OUTPUT = flags.DEFINE_string("output", None, "Write the JSON report here too.")
_TABLE = flags.DEFINE_string("table", None,
                             "Build docs/accelerators/table.md's rows in this directory.")
_AGGREGATE_ONLY = flags.DEFINE_bool("aggregate_only", False, "With --table: no compiling.")
_ONLY = flags.DEFINE_string("only", "", "With --table: compile only rows whose name holds this "
                            "(e.g. big_v4), to share the rows between processes.")


def table(directory: str, aggregate_only: bool, only: str = "") -> None:
  os.makedirs(directory, exist_ok=True)
  rows = {}
  for path in compile_report.TABLE_CONFIGS:
    for target in compile_report.TABLE_TARGETS:
      for layout, fsdp in compile_report.TABLE_LAYOUTS.items():
        name = compile_report.table_row_name(path, target, layout)
        out = os.path.join(directory, name + ".json")
        if not os.path.exists(out) and not aggregate_only and only in name:
          config = experiment.load_config(path)
          config.model.dtype, config.fsdp = "bfloat16", fsdp
          try:
            report = compile_report.compile_report(experiment.parse(config), target)
          except errors.ConfigError as e:  # no compiler for this target here: the others go on
            print(f"{name}: skipped ({e})", flush=True)
            continue
          print(compile_report.format_report(report), flush=True)
          with open(out, "w") as f:
            json.dump(report, f, indent=1, sort_keys=True)
        if os.path.exists(out):
          with open(out) as f:
            rows[name] = json.load(f)
  with open(os.path.join(directory, "table.md"), "w") as f:
    f.write(compile_report.table_markdown(rows))
  print(f"{len(rows)} rows -> {os.path.join(directory, 'table.md')}")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  if _TABLE.value:
    return table(_TABLE.value, _AGGREGATE_ONLY.value, _ONLY.value)
  if _CONFIG.value is None:
    raise app.UsageError("Pass --config=configs/X.py (or --table=DIR).")
  if _OUTPUT.value:  # before compiling, not after it
    storage.check_reachable(_OUTPUT.value, "--output")
    lines.check_writable(_OUTPUT.value)
  report = compile_report.compile_report(experiment.parse(cli.config_of(_CONFIG)),
                                         _TARGET.value)
  print(compile_report.format_report(report))
  if _OUTPUT.value:
    storage.write_atomically(_OUTPUT.value, json.dumps(report, indent=1, sort_keys=True))


if __name__ == "__main__":
  cli.run_script(main)
