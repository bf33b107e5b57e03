"""Prints this folder's table from its JSON files: python docs/gpu-runs/2026-11-27-h200-run/table.py"""
import json
import pathlib

HERE = pathlib.Path(__file__).parent
print("| pass | config | code | step | tokens/s | model TFLOP/s | MFU | peak memory | attention |")
print("|---|---|---|---|---|---|---|---|---|")
for run in ("pass1", "pass2"):
  for config in ("base", "big"):
    for code in ("before", "after"):
      path = HERE / run / f"{config}_{code}.json"
      if not path.exists():
        print(f"| {run} | {config} | {code} | not run (the lease ended) | | | | | |")
        continue
      d = json.loads(path.read_text())
      print(f"| {run} | {config} | {code} | {d['train_step_seconds'] * 1e3:.1f} ms | "
            f"{d['train_tokens_per_sec'] / 1e6:.3f} M | {d['train_model_tflops_per_sec']:.0f} | "
            f"{d['mfu']:.1%} | {d['peak_memory_gib']:.2f} GiB | {d['attention_kernel']} |")
