"""Speed measured against the chip's limit: analytic model FLOPs, step timing, MFU, and
`benchmark`, the body of scripts/benchmark.py:

  python scripts/benchmark.py --config=configs/base.py --config.batch_size=16 --mode=train

MFU = analytic model FLOPs / step time / the chips' published peak for the dtype the matmuls
run in (`chips.CHIPS`; TF32 for float32 on an NVIDIA GPU). A chip without a published peak
here (a CPU) is divided by a matmul peak measured in the same run instead, and the result
says which denominator it used. A measured matmul figure is reported beside it either way.

Model FLOPs: `transformer.model_summary` (the one formula, also in every run's summary).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
import statistics
import tempfile
import time
from typing import Any, Callable, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer import diagnostics, models
from transformer.attention import step_kernel
from transformer.config import ModelConfig
from transformer.data import fields, pipeline
from transformer.errors import ConfigError
from transformer.inference import decoding
from transformer.model_summary import train_flops
from transformer.research import chips
from transformer.token_ids import EOS_ID
from transformer.training import experiment, loop, run, sharding, writers
from transformer.inference.decode_config import DecodeConfig

MODES = ("train", "eval", "decode", "data", "loop", "diagnostics")
# The held-out batches the loop's scale diagnostics average over (the experiment default).
DIAGNOSTICS_BATCHES = experiment.base_config().diagnostics_batches


def time_call(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> list[float]:
  """Wall seconds of `fn()` (blocked until its outputs are ready), `repeats` times after
  `warmup`."""
  for _ in range(warmup):
    jax.block_until_ready(fn())
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return times


def matmul_peak(dtype: str = "float32", n: Optional[int] = None, repeats: int = 5,
                devices: Any = None) -> float:
  """Measured FLOP/s of a large square matmul on `devices` (all local devices, data-parallel).

  n: the matrix size; by default 8192 on an accelerator (large enough to be compute-bound:
  a 2048 chain measures launch latency on a GPU) and on a CPU 2048 over the cube root of the
  device count (where 8192 takes minutes; forced host devices share one CPU's cores, so the
  products of all of them together are the work of one 2048 product).
  """
  devices = jax.local_devices() if devices is None else devices
  if n is None:
    n = 8192 if devices[0].platform != "cpu" else 2048 // round(len(devices) ** (1 / 3))
  mesh = jax.sharding.Mesh(np.asarray(devices), ("data",))
  split = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
  k = len(devices)
  x = jax.device_put(jnp.ones((k, n, n), dtype), split)
  y = jax.device_put(jnp.ones((k, n, n), dtype), split)
  # Several chained products per call hide the dispatch cost.
  chain = 4

  @functools.partial(jax.jit, out_shardings=split)
  def f(x, y):
    for _ in range(chain):
      x = jnp.einsum("kij,kjl->kil", x, y, preferred_element_type=jnp.float32).astype(dtype) * 1e-3
    return x

  seconds = statistics.median(time_call(lambda: f(x, y), repeats))
  return chain * k * 2.0 * n ** 3 / seconds


def mfu_figures(model_flops_per_sec: float, device_kind: str, num_devices: int, dtype: str,
                measured_peak: float) -> dict[str, Any]:
  """MFU and its denominator: the published peak of `num_devices` chips of `device_kind` for
  `dtype` (`chips.chip_of`), or `measured_peak` where the table has no such chip.

  An MFU above 1 cannot be: it would mean the denominator or the FLOP count is wrong. Then
  no MFU is given (None) and `mfu_note` says so, rather than a figure that cannot be true.
  """
  chip = chips.chip_of(device_kind)
  if chip is None:
    peak = measured_peak
    source = f"measured matmul peak ({device_kind} has no published peak in chips.CHIPS)"
  else:
    peak = num_devices * chip.matmul_flops(dtype)
    source = f"published peak of {num_devices} x {chip.name}, {dtype} matmuls: {chip.source}"
  result = {"mfu_peak_tflops": peak / 1e12, "mfu_peak_source": source,
            "mfu": model_flops_per_sec / peak}
  if result["mfu"] > 1.0:
    result["mfu_note"] = (f"the model's {model_flops_per_sec / 1e12:.3g} TFLOP/s exceed the "
                          f"peak {peak / 1e12:.3g}: the peak or the FLOP count is wrong, so no MFU")
    result["mfu"] = None
  return result


@dataclasses.dataclass
class _Bench:
  """What every mode times: the Run, one random full-length batch and the state (the train
  modes carry it forward), and the settings of the timings."""
  data: fields.Data
  run: run.Run
  host: dict[str, np.ndarray]
  batch: Any  # a training batch (packed rows where the config packs)
  state: Any
  steps: int
  repeats: int
  peak: float  # measured matmul FLOP/s

  @property
  def eval_batch(self) -> Any:
    """The batch as evaluation reads it: one example a row (never packed)."""
    return {k: self.batch[k] for k in self.run.model.batch_keys}

  @property
  def tokens_per_step(self) -> int:
    return self.data.batch_size * self.data.max_len * len(self.run.model.batch_keys)


def check_request(modes: Sequence[str], steps: int, repeats: int) -> None:
  """One line for an unknown or missing mode, or a count below 1 (before any config is read)."""
  unknown = sorted(set(modes) - set(MODES))
  if unknown or not modes:
    raise ConfigError(f"Unknown benchmark mode(s) {unknown}; use any of {list(MODES)}."
                      if unknown else f"No benchmark mode given; use any of {list(MODES)}.")
  if min(steps, repeats) < 1:
    raise ConfigError(f"steps={steps} and repeats={repeats} must each be >= 1.")


def benchmark(exp: experiment.Experiment, modes: Sequence[str], steps: int = 3,
              repeats: int = 3, *, diagnostics_every: int = 100, decode_batch: int = 1,
              decode_tokens: int = 256, profile_dir: Optional[str] = None,
              loop_steps: int = 200) -> dict[str, Any]:
  """The figures of `modes` ('train', 'eval', 'decode', 'data', 'loop', 'diagnostics') for an
  experiment on this machine's local devices (module docstring); a JSON-ready dict.

  Every timing is the median of `repeats`, after compilation; a train timing runs `steps`
  steps. The batch is random full-length tokens, so every counted FLOP is real work. With
  `profile_dir`, `steps` more train steps run after the timings under jax.profiler, traced
  into that directory (TensorBoard's profile plugin or Perfetto open it). 'loop' runs the
  training loop itself for `loop_steps` steps (`loop_figures`) beside the train step's timing.
  """
  check_request(modes, steps, repeats)
  if set(modes) == {"data"}:  # the host's pipeline alone: no model to build
    return {"device": "the host's CPU", "data": pipeline.measure_throughput(exp.data, 10.0)}
  bench, result = _setup(exp, steps, repeats)
  compiled = None
  if {"train", "diagnostics", "loop"} & set(modes):
    compiled = _train(bench, result, profile_dir)
  if "diagnostics" in modes:  # the training loop's diagnostics every N steps, against none
    result["diagnostics"] = _diagnostics(bench, compiled, diagnostics_every)
  if "decode" in modes:  # greedy over the KV cache against re-running the decoder per token
    result["decode"] = benchmark_decoding(bench.run.model_config.replace(dropout_rate=0.0),
                                          decode_batch, decode_tokens, repeats=repeats,
                                          model_type=exp.data.model_type)
  if "data" in modes:  # the host input pipeline alone, on the config's own data
    result["data"] = pipeline.measure_throughput(exp.data, 10.0)
  if "loop" in modes:  # the real loop beside the step
    result["loop"] = loop_figures(exp, loop_steps, result["train_step_seconds"])
  if "eval" in modes:
    eval_fn = bench.run.steps.eval
    seconds = statistics.median(time_call(
        lambda: eval_fn(bench.state.params, bench.eval_batch).loss_sum, repeats))
    result.update(eval_tokens_per_sec=bench.tokens_per_step / seconds)
  return result


def _setup(exp: experiment.Experiment, steps: int,
           repeats: int) -> tuple[_Bench, dict[str, Any]]:
  """The Run on the local devices, its random batch and fresh state, and the figures every
  mode shares (device, sizes, parameters, FLOPs per token, matmul peak)."""
  r = run.fresh(exp, run.device_mesh(exp, jax.local_devices()))
  cfg, model = r.model_config, r.model
  B, L = exp.data.batch_size, exp.data.max_len
  rng = np.random.default_rng(0)
  host = {k: rng.integers(3, cfg.vocab_size, (B, L)).astype(np.int32) for k in model.batch_keys}
  if exp.data.packing != "none":
    host.update(packed_rows(model.batch_keys, B, L))
  peak = matmul_peak(cfg.dtype, repeats=repeats)
  bench = _Bench(exp.data, r, host, sharding.global_batch(host, r.mesh), r.state, steps, repeats,
                 peak)
  result = {
      "device": f"{jax.local_device_count()} x {jax.local_devices()[0].device_kind}",
      "dtype": cfg.dtype, "batch_size": B, "max_len": L, "d_model": cfg.d_model,
      "layers": [cfg.num_encoder_layers, cfg.num_decoder_layers], "vocab_size": cfg.vocab_size,
      "vocab_from": r.experiment.vocab_from,
      "scan_layers": cfg.scan_layers, "remat": cfg.remat,
      "params": int(sum(x.size for x in jax.tree_util.tree_leaves(r.state.params))),
      "model_flops_per_token": _train_flops(bench, 1) / (L * len(model.batch_keys)),
      "matmul_peak_tflops": peak / 1e12,
  }
  return bench, result


def packed_rows(keys: Sequence[str], batch_size: int, length: int,
                segments: int = 4) -> dict[str, np.ndarray]:
  """KEY_segmentation and KEY_position of rows packed with `segments` examples each, full: a
  packed config's train step takes these (its attention masks by segment), so the benchmark
  times the program the loop runs."""
  piece = max(length // segments, 1)
  segmentation = np.minimum(np.arange(length) // piece, segments - 1) + 1
  position = np.arange(length) - (segmentation - 1) * piece
  rows = lambda row: np.broadcast_to(row, (batch_size, length)).astype(np.int32)  # noqa: E731
  return {f"{k}_{name}": rows(row) for k in keys
          for name, row in (("segmentation", segmentation), ("position", position))}


def _train_flops(bench: _Bench, batch_size: int) -> float:
  return train_flops(models.row_flops(bench.run.model, bench.data.max_len), batch_size)


def _train(bench: _Bench, result: dict[str, Any], profile_dir: Optional[str]) -> Any:
  """Compiles and times the train step (and profiles it); returns the compiled step."""
  cfg, key, train = bench.run.model_config, jax.random.PRNGKey(1), bench.run.steps.train
  start = time.perf_counter()
  compiled = train.lower(bench.state, bench.batch, key).compile()
  result["compile_seconds"] = time.perf_counter() - start
  memory = compiled.memory_analysis()
  if memory is not None:
    result["peak_memory_gib"] = (memory.temp_size_in_bytes + memory.argument_size_in_bytes +
                                 memory.output_size_in_bytes) / 2 ** 30

  def run():
    for _ in range(bench.steps):
      bench.state, metrics = compiled(bench.state, bench.batch, key, *train.bound)
    return metrics["loss_sum"]

  seconds = statistics.median(time_call(run, bench.repeats)) / bench.steps
  # Peak measured again after the steps; the larger (the conservative MFU) is used.
  bench.peak = max(bench.peak, matmul_peak(cfg.dtype, repeats=bench.repeats))
  result["matmul_peak_tflops"] = bench.peak / 1e12
  flops = _train_flops(bench, bench.data.batch_size)
  result.update(train_step_seconds=seconds, train_tokens_per_sec=bench.tokens_per_step / seconds,
                train_model_tflops_per_sec=flops / seconds / 1e12,
                attention_kernel=attention_kernel(cfg, bench.run.mesh,
                                                  bench.data.max_len),
                **mfu_figures(flops / seconds, jax.local_devices()[0].device_kind,
                              jax.local_device_count(), cfg.dtype, bench.peak))
  if profile_dir:  # after the timings, so tracing does not perturb them
    jax.profiler.start_trace(profile_dir)
    try:
      jax.block_until_ready(run())
    finally:
      jax.profiler.stop_trace()
    result["profile_dir"] = profile_dir
  return compiled


def loop_figures(exp: experiment.Experiment, steps: int,
                 step_seconds: float) -> dict[str, float]:
  """The training loop itself (`loop.train_and_evaluate`: the config's data through its
  pipeline, the real step, a log line every loop.log_every_steps) for `steps` steps in a
  temporary workdir, on the local devices, against the train step alone (`step_seconds`).

  Evaluation, diagnostics and checkpoints are off until the last step (their time is not
  training's). The loop's pace is read from its train records after the first window (the
  one that compiles): steps_per_sec, beside the step's own (1 / step_seconds), their ratio
  (1.0: the loop runs at the step's pace), and the host's time per step inside the loop
  (`host_ms_per_step`) and the part of it waiting for batches (`input_ms_per_step`).
  """
  every = min(exp.loop.log_every_steps, max(steps // 4, 1))
  if steps < 2 * every:
    raise ConfigError(f"--loop_steps={steps} leaves no window after the first (which compiles); "
                      f"run at least {2 * every} steps.")
  exp = experiment.changed(exp, num_train_steps=steps, log_every_steps=every,
                           eval_every_steps=steps, checkpoint_every_steps=steps,
                           diagnostics_every_steps=0, bleu_every_steps=0, profile_steps="")
  with tempfile.TemporaryDirectory(prefix="benchmark-loop-") as workdir:
    loop.train_and_evaluate(exp, workdir, devices=jax.local_devices())
    records = writers.read_metrics(workdir, "train")[1:]
  counts = [r["step"] - r["first_step"] + 1 for r in records]
  seconds = sum(n / r["steps_per_sec"] for n, r in zip(counts, records))
  steps_per_sec = sum(counts) / seconds

  def mean(field: str) -> float:
    return sum(n * r[field] for n, r in zip(counts, records)) / sum(counts)

  return {"steps": steps, "log_every_steps": every, "timed_steps": sum(counts),
          "steps_per_sec": steps_per_sec, "step_alone_steps_per_sec": 1.0 / step_seconds,
          "ratio": steps_per_sec * step_seconds, "host_ms_per_step": mean("host_ms_per_step"),
          "input_ms_per_step": mean("input_ms_per_step")}


def _diagnostics(bench: _Bench, compiled: Any, every: int) -> dict[str, float]:
  """`every` train steps with the loop's diagnostics at their end, against the same steps
  without: the diagnostics' overhead."""
  model, key, train = bench.run.model, jax.random.PRNGKey(1), bench.run.steps.train
  counts = diagnostics.TokenCounts(bench.run.model_config.vocab_size)

  def train_steps(with_diagnostics: bool):
    old = jax.tree_util.tree_map(jnp.copy, bench.state.params) if with_diagnostics else None
    for _ in range(every):
      if with_diagnostics:  # the loop counts tokens on every step when diagnostics are on
        counts.add(bench.host)
      bench.state, metrics = compiled(bench.state, bench.batch, key, *train.bound)
    if with_diagnostics:  # (the loop copies just before the diagnosed step; same cost)
      grads = bench.run.steps.grads(old, bench.batch, jax.random.fold_in(key, 0))
      diagnostics.training_diagnostics(model, old, bench.state.params, grads,
                                       [bench.eval_batch] * DIAGNOSTICS_BATCHES,
                                       counts.frequency())
    return metrics["loss_sum"]

  without = statistics.median(time_call(lambda: train_steps(False), bench.repeats))
  with_diag = statistics.median(time_call(lambda: train_steps(True), bench.repeats))
  return {"every_steps": every, "seconds_without": without, "seconds_with": with_diag,
          "overhead": with_diag / without - 1.0}


def attention_kernel(cfg: ModelConfig, mesh: jax.sharding.Mesh, length: int) -> str:
  """The attention kernel a step on `mesh` runs on rows of `length` tokens
  (`attention.step_kernel` for its chips)."""
  with jax.set_mesh(mesh):
    return step_kernel(cfg, length)


def _uncached_greedy(model: nn.Module, params: Any, inputs: jax.Array, num_tokens: int,
                     bucket: int) -> tuple[Callable[[], None], Callable[[], np.ndarray]]:
  """(compile, run) of greedy decoding without a cache: each step re-runs the model over the
  whole output so far (`prefix_logits`), a prompt included; a source is encoded once.

  The output is padded up to a multiple of `bucket`, one compilation per width; `compile`
  compiles every width, `run` returns the int[B, num_tokens] new tokens.
  """
  def begin(params, inputs):  # the decoding start less its cache (XLA then never makes it)
    state, prefix, prefix_len = model.start_decoding(params, inputs, 1, 1)
    return {k: v for k, v in state.items() if k != "cache"}, prefix, prefix_len

  start, full = jax.jit(begin), jax.jit(model.prefix_logits)
  # Outputs go after the prefix: a prompt's tokens, or none (a source's output starts empty).
  # The benchmark's rows hold no padding, so every row's prefix is as long.
  first = int(start(params, inputs)[2][0])
  total = first + num_tokens

  def width_at(t: int) -> int:
    return min(-(-(first + t + 1) // bucket) * bucket, total)

  def run() -> np.ndarray:
    state, prefix, _ = start(params, inputs)
    tokens = np.zeros((inputs.shape[0], total), np.int32)
    tokens[:, :first] = np.asarray(prefix)[:, :first]
    for t in range(first, total):
      tokens[:, t] = EOS_ID  # any non-pad id: position t must be unmasked; its value is unused
      logits = full(params, state, jnp.asarray(tokens[:, :width_at(t - first)]))
      tokens[:, t] = np.asarray(decoding.first_argmax(logits[:, t, 1:])) + 1  # never PAD
    return tokens[:, first:]

  def compile_widths() -> None:
    state = start(params, inputs)[0]
    for width in sorted({width_at(t) for t in range(num_tokens)}):
      full(params, state, jnp.ones((inputs.shape[0], width), jnp.int32)).block_until_ready()

  return compile_widths, run


def _alternating_medians(paths: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
  """Median wall seconds of each path, the paths timed in turn `repeats` times (so that a slow
  spell of a shared machine falls on all of them)."""
  runs = {name: [] for name in paths}
  for _ in range(repeats):
    for name, fn in paths.items():
      runs[name] += time_call(fn, 1, warmup=0)
  return {name: statistics.median(seconds) for name, seconds in runs.items()}


def benchmark_decoding(model_config: ModelConfig, batch_size: int, num_tokens: int, *,
                       model_type: str = "seq2seq", source_len: int = 32, bucket: int = 32,
                       seed: int = 0, repeats: int = 1) -> dict[str, float]:
  """Greedy tokens/s with the KV cache and without it, for a random-init model of
  `model_type` (`run.random_model`).

  Both produce exactly `num_tokens` new tokens per row (EOS ignored) from a random source (or
  prompt) of `source_len` tokens; a source is encoded once in both. Without the cache every
  step re-runs the model over the whole output so far (`prefix_logits`: the decoder, a
  prompt included), padded up to a multiple of `bucket` (one compilation per bucket, as an
  uncached decoder must either pad or recompile). Compilation is excluded (each path is
  compiled before it is timed). Each path is timed `repeats` times, the two alternating (so
  that a slow spell of a shared machine falls on both); each figure is the median:
  cached_tokens_per_sec, uncached_tokens_per_sec, speedup (the ratio of the medians).
  """
  rng = np.random.default_rng(seed)
  inputs = jnp.asarray(rng.integers(3, model_config.vocab_size, (batch_size, source_len)),
                       jnp.int32)
  # The position table covers the source and the output; a prompt shares it with its
  # continuation, which the model's decoding lengths say (room for fewer than num_tokens).
  longest = max(num_tokens, source_len, model_config.max_len)
  model, params = run.random_model(model_type, model_config.replace(max_len=longest), seed)
  if int(jnp.min(model.decoding_lengths(inputs, num_tokens)[1])) < num_tokens:
    model, params = run.random_model(model_type, model_config.replace(
        max_len=max(source_len + num_tokens, model_config.max_len)), seed)
  config = DecodeConfig(method="greedy", eos_id=-1, extra_len=num_tokens)
  limit = jnp.full((batch_size,), num_tokens, jnp.int32)

  def cached() -> jax.Array:
    return decoding.decode(model, params, inputs, config, jax.random.PRNGKey(0),
                           out_limit=limit)[0].block_until_ready()

  compile_uncached, uncached = _uncached_greedy(model, params, inputs, num_tokens, bucket)
  cached()
  compile_uncached()
  timings = _alternating_medians({"cached": cached, "uncached": uncached}, repeats)
  tokens = batch_size * num_tokens
  return {"cached_tokens_per_sec": tokens / timings["cached"],
          "uncached_tokens_per_sec": tokens / timings["uncached"],
          "speedup": timings["uncached"] / timings["cached"]}


def comparison_table(folder: str) -> list[str]:
  """A Markdown table of a folder of benchmark results named PASS/CONFIG_CODE.json (what
  scripts/benchmark.py --output wrote for each pass, config and tree, as in docs/gpu-runs/):
  a row each, passes and configs in name order, 'before' ahead of 'after'; a config and tree
  that one pass has and another lacks is a 'not run' row."""
  root = pathlib.Path(folder)
  found = {(p.parent.name, *p.stem.rsplit("_", 1)): p for p in root.glob("*/*_*.json")}
  if not found:
    raise ConfigError(f"{folder} holds no PASS/CONFIG_CODE.json benchmark results.")
  order = {"before": 0, "after": 1}
  codes = sorted({c for _, _, c in found}, key=lambda c: (order.get(c, 2), c))
  rows = ["| pass | config | code | step | tokens/s | model TFLOP/s | MFU | peak memory | "
          "attention |", "|---|---|---|---|---|---|---|---|---|"]
  for run_name in sorted({r for r, _, _ in found}):
    for config in sorted({c for _, c, _ in found}):
      for code in codes:
        path = found.get((run_name, config, code))
        if path is None:
          rows.append(f"| {run_name} | {config} | {code} | not run | | | | | |")
          continue
        d = _train_result(path)
        rows.append(f"| {run_name} | {config} | {code} | {d['train_step_seconds'] * 1e3:.1f} ms | "
                    f"{d['train_tokens_per_sec'] / 1e6:.3f} M | "
                    f"{d['train_model_tflops_per_sec']:.0f} | {d['mfu']:.1%} | "
                    f"{d['peak_memory_gib']:.2f} GiB | {d['attention_kernel']} |")
  return rows


_TABLE_FIELDS = ("train_step_seconds", "train_tokens_per_sec", "train_model_tflops_per_sec",
                 "mfu", "peak_memory_gib", "attention_kernel")


def _train_result(path: pathlib.Path) -> dict[str, Any]:
  """A train benchmark's JSON result; one line for a file that is none."""
  try:
    d = json.loads(path.read_text())
  except ValueError:
    d = None
  if not isinstance(d, dict) or not all(k in d for k in _TABLE_FIELDS):
    raise ConfigError(f"{path} is not a result of scripts/benchmark.py --mode=train (it needs "
                      f"{', '.join(_TABLE_FIELDS)}).")
  return d
