"""Benchmarks a config on this machine: train-step tokens/s, compile time, memory, MFU.

  python scripts/benchmark.py --config=configs/base.py --config.batch_size=16 --mode=train

MFU = analytic model FLOPs (transformer/benchmarking.py documents the formula) / step time,
divided by a matmul peak measured in the same run on the same devices and dtype. The batch is
random full-length tokens (no padding), so every counted FLOP is real work. Prints JSON and
writes it to --output when given. Every figure is the median of --repeats timings.
"""

import functools
import json
import statistics
import sys
import time

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.")
_MODE = flags.DEFINE_list("mode", ["train"],
                         "What to measure: train, eval, decode, data, diagnostics.")
_DIAGNOSTICS_EVERY = flags.DEFINE_integer(
    "diagnostics_every", 100, "Mode diagnostics: train steps per diagnostics call.")
_DECODE_BATCH = flags.DEFINE_integer("decode_batch", 1, "Rows decoded at once (mode decode).")
_DECODE_TOKENS = flags.DEFINE_integer("decode_tokens", 256, "Tokens decoded per row (mode decode).")
_STEPS = flags.DEFINE_integer("steps", 3, "Steps per timing.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timings; the median is reported.")
_OUTPUT = flags.DEFINE_string("output", None, "Write the JSON result here too.")
flags.mark_flags_as_required(["config"])


def benchmark(config, modes, steps: int, repeats: int) -> dict:
  import jax
  import jax.numpy as jnp
  import numpy as np

  from transformer import benchmarking
  from transformer.training import experiment, loop, optimizers, sharding
  from transformer.training import steps as steps_lib

  vocab = config.model.vocab_size or 32000
  cfg = experiment.model_config(config, vocab_size=vocab)
  decoder_only = config.model_type == "lm"
  model = loop.build_model(config, cfg)
  tx = optimizers.make_optimizer(config)
  mesh = sharding.make_mesh(jax.local_devices())
  repl, data = sharding.replicated(mesh), sharding.batch_sharding(mesh)
  B, L = config.batch_size, config.max_len
  rng = np.random.default_rng(0)
  host = {k: rng.integers(3, vocab, (B, L)).astype(np.int32)
          for k in (("targets",) if decoder_only else ("inputs", "targets"))}
  batch = sharding.global_batch(host, mesh)
  state = jax.jit(functools.partial(steps_lib.init_state, model, tx), out_shardings=repl)(
      jax.random.PRNGKey(0), batch)
  tokens_per_step = B * L * len(host)
  result = {
      "device": f"{jax.device_count()} x {jax.devices()[0].device_kind}",
      "dtype": cfg.dtype, "batch_size": B, "max_len": L, "d_model": cfg.d_model,
      "layers": [cfg.num_encoder_layers, cfg.num_decoder_layers], "vocab_size": vocab,
      "scan_layers": cfg.scan_layers, "remat": cfg.remat,
      "params": int(sum(x.size for x in jax.tree_util.tree_leaves(state.params))),
      "model_flops_per_token": benchmarking.train_flops_per_step(
          cfg, 1, L, L, decoder_only=decoder_only) / (L * len(host)),
  }
  peak = benchmarking.matmul_peak(cfg.dtype, repeats=repeats)
  result["matmul_peak_tflops"] = peak / 1e12

  if "train" in modes or "diagnostics" in modes:
    lr_fn = optimizers.learning_rate_fn(config)
    step_fn = jax.jit(
        steps_lib.make_train_step(model, tx, lr_fn, label_smoothing=config.label_smoothing,
                                  z_loss=config.z_loss, grad_accum_steps=config.grad_accum_steps,
                                  loss_chunk_size=config.loss_chunk_size),
        in_shardings=(repl, data, repl), out_shardings=(repl, repl), donate_argnums=0)
    key = jax.random.PRNGKey(1)
    start = time.perf_counter()
    compiled = step_fn.lower(state, batch, key).compile()
    result["compile_seconds"] = time.perf_counter() - start
    memory = compiled.memory_analysis()
    if memory is not None:
      result["peak_memory_gib"] = (memory.temp_size_in_bytes + memory.argument_size_in_bytes +
                                   memory.output_size_in_bytes) / 2 ** 30
    holder = {"state": state}

    def run():
      for _ in range(steps):
        holder["state"], metrics = compiled(holder["state"], batch, key)
      return metrics["loss"]

    seconds = statistics.median(benchmarking.time_call(run, repeats)) / steps
    # Peak measured again after the steps; the larger (the conservative MFU) is used.
    peak = max(peak, benchmarking.matmul_peak(cfg.dtype, repeats=repeats))
    result["matmul_peak_tflops"] = peak / 1e12
    flops = benchmarking.train_flops_per_step(cfg, B, L, L, decoder_only=decoder_only)
    result.update(train_step_seconds=seconds, train_tokens_per_sec=tokens_per_step / seconds,
                  train_model_tflops_per_sec=flops / seconds / 1e12, mfu=flops / seconds / peak)
    state = holder["state"]

  if "diagnostics" in modes:  # the training loop's diagnostics every N steps, against none
    from transformer import diagnostics
    every = _DIAGNOSTICS_EVERY.value
    diagnose = diagnostics.make_training_diagnostics(
        model, label_smoothing=config.label_smoothing, z_loss=config.z_loss)
    counts = diagnostics.TokenCounts(vocab)

    def train_steps(with_diagnostics: bool):
      old = jax.tree_util.tree_map(jnp.copy, holder["state"].params) if with_diagnostics else None
      for _ in range(every):
        if with_diagnostics:  # the loop counts tokens on every step when diagnostics are on
          counts.add(host)
        holder["state"], metrics = compiled(holder["state"], batch, key)
      if with_diagnostics:  # (the loop copies just before the diagnosed step; same cost)
        diagnose(old, holder["state"].params, batch, key, 0, counts.frequency())
      return metrics["loss"]

    without = statistics.median(benchmarking.time_call(lambda: train_steps(False), repeats))
    with_diag = statistics.median(benchmarking.time_call(lambda: train_steps(True), repeats))
    result["diagnostics"] = {"every_steps": every, "seconds_without": without,
                             "seconds_with": with_diag,
                             "overhead": with_diag / without - 1.0}
    state = holder["state"]

  if "decode" in modes:  # greedy over the KV cache against re-running the decoder per token
    from transformer import decoding
    result["decode"] = decoding.benchmark_decoding(
        cfg.replace(dropout_rate=0.0), _DECODE_BATCH.value, _DECODE_TOKENS.value,
        repeats=repeats)

  if "data" in modes:  # the host input pipeline alone, on the config's own data
    from transformer.data import pipeline
    result["data"] = pipeline.measure_throughput(config, 10.0)

  if "eval" in modes:
    eval_fn = jax.jit(steps_lib.make_eval_step(model, loss_chunk_size=config.loss_chunk_size),
                      in_shardings=(repl, data),
                      out_shardings=repl)
    seconds = statistics.median(benchmarking.time_call(
        lambda: eval_fn(state.params, batch).loss_sum, repeats))
    result.update(eval_tokens_per_sec=tokens_per_step / seconds)
  return result


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  result = benchmark(_CONFIG.value, _MODE.value, _STEPS.value, _REPEATS.value)
  text = json.dumps(result, indent=2)
  print(text)
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      f.write(text + "\n")


if __name__ == "__main__":
  try:
    app.run(main)
  except (KeyError, AttributeError, ValueError) as e:
    sys.exit(f"error: {e}")
