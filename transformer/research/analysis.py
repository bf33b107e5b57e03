"""Scale diagnostics of a trained run, restored from a checkpoint: tables, JSON and plots.

  python scripts/analyze.py --workdir=DIR [--step=N]
  python scripts/analyze.py --workdir=DIR --text="a sentence or a prompt"   # attention maps

`analyze` restores the params of a checkpoint (written by any device count) with
`load_params`, runs `transformer.diagnostics` on a few held-out batches of the run's own data,
and writes DIR/plots/: analysis.md, analysis.json and PNG plots (attention entropy per layer
and head, logit variance against d_k, the embedding/PE RMS ratio over training from
metrics.jsonl, loss curves).
"""

from __future__ import annotations

import itertools
import json
import math
import os
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from transformer import checkpoint, diagnostics, storage
from transformer.errors import ConfigError, RunError
from transformer.research.figures import save_figure
from transformer.token_ids import EOS_ID, PAD_ID
from transformer.trained import evaluate, loading
from transformer.training.writers import finite_json, read_metrics

NUM_BATCHES = 4  # held-out batches averaged over
FREQUENCY_BATCHES = 8  # train batches whose token counts define the frequency buckets


def _attention_rows(diag: dict[str, float]) -> dict[str, dict[str, list[float]]]:
  """{'decoder/layer_0/self_attention': {stat: [per head]}} from the flat names, encoder
  first, then by layer, self-attention before cross-attention."""
  rows: dict[tuple, dict[str, dict[int, float]]] = {}
  for name, value in diag.items():
    n = diagnostics.parse_name(name)
    if n.group == "attention":
      key = (n.stack != "encoder", n.layer, n.attention != "self_attention", n.stack, n.attention)
      rows.setdefault(key, {}).setdefault(n.stat, {})[n.head] = value
  return {f"{k[3]}/layer_{k[1]}/{k[4]}": {s: [v[h] for h in sorted(v)] for s, v in stats.items()}
          for k, stats in sorted(rows.items())}


def _short(row: str) -> str:
  """'decoder/layer_0/cross_attention' -> 'decoder L0 cross' (plot tick labels)."""
  n = diagnostics.parse_name(f"{row}/head_0/entropy")
  return f"{n.stack} L{n.layer} {n.attention.split('_')[0]}"


def _mean(values: Sequence[float]) -> float:
  finite = [v for v in values if v is not None and math.isfinite(v)]
  return sum(finite) / len(finite) if finite else float("nan")


def _figure(width: float, height: float, rows: int = 1, cols: int = 1):
  """A matplotlib Figure and its axes, without pyplot's global state (any backend: saved by
  `save_figure` in scripts, shown inline in a notebook)."""
  from matplotlib.figure import Figure

  fig = Figure(figsize=(width, height))
  return fig, fig.subplots(rows, cols, squeeze=False)


def entropy_figure(attention: dict[str, dict[str, list[float]]]) -> Any:
  """Attention entropy of every layer and head (bars) against the entropy of uniform
  attention under the same causal and per-segment masks (black marks): `analyze`'s
  result['attention']."""
  labels = list(attention)
  heads = len(attention[labels[0]]["entropy"])
  fig, axes = _figure(max(6.0, 0.35 * heads * len(labels) + 2), 4.2)
  ax = axes[0][0]
  x, ticks = 0, []
  for r, row in enumerate(labels):
    for h in range(heads):
      ax.bar(x, attention[row]["entropy"][h], color=f"C{r % 10}",
             label=_short(row) if h == 0 else None)
      ax.hlines(attention[row]["entropy_uniform"][h], x - 0.4, x + 0.4, color="k",
                label="uniform over the visible keys" if (r, h) == (0, 0) else None)
      ticks.append((x, f"h{h}"))
      x += 1
    x += 1  # a gap between layers
  ax.set_xticks([t[0] for t in ticks], [t[1] for t in ticks], fontsize=8)
  ax.set_xlabel("attention head, grouped by layer")
  ax.set_ylabel("entropy (nats)")
  ax.set_title("Attention entropy against its uniform reference (same masks)")
  top = max(max(attention[r]["entropy_uniform"] + attention[r]["entropy"]) for r in labels)
  ax.set_ylim(0, 1.35 * top)  # room for the legend above the bars and the marks
  ax.legend(fontsize=8, loc="upper left", ncol=3)
  fig.tight_layout()
  return fig


def logit_variance_figure(attention: dict[str, dict[str, list[float]]], d_k: int) -> Any:
  """Within-row Var(q.k) and Var(logits) per layer (mean over heads) against d_k and 1, the
  values the variance argument predicts for unit-variance, independent q and k."""
  labels = list(attention)
  fig, axes = _figure(max(6.5, 1.1 * len(labels) + 3), 4.5)
  ax = axes[0][0]
  x = np.arange(len(labels))
  for stat, label, marker in (("raw_var_within", "Var(q·k) within rows, before the scale", "o"),
                              ("logit_var_within", "Var(logits) within rows, after it", "s")):
    ax.plot(x, [_mean(attention[r][stat]) for r in labels], marker=marker, label=label)
  ax.axhline(d_k, color="C0", linestyle="--", label=f"d_k = {d_k} (unit-variance q, k)")
  ax.axhline(1.0, color="C1", linestyle=":", label="1 (unit variance)")
  ax.set_yscale("log")
  ax.set_xticks(x, [_short(r) for r in labels], rotation=20, ha="right")
  ax.set_xlabel("layer and attention")
  ax.set_ylabel("variance (mean over heads)")
  ax.set_title(f"Attention logit variance against d_k (d_k = {d_k})")
  ax.legend(fontsize=8)
  fig.tight_layout()
  return fig


def ratio_by_frequency_figure(embedding: dict[str, dict[str, Any]]) -> Any:
  """RMS(scaled token embedding) / RMS(PE) per token-frequency quartile (0 = most frequent),
  one group of bars per stack: `analyze`'s result['embedding']."""
  stacks = [s for s in embedding if embedding[s].get("buckets")]
  fig, axes = _figure(6.0, 4.0)
  ax = axes[0][0]
  width = 0.8 / max(1, len(stacks))
  for i, stack in enumerate(stacks):
    buckets = embedding[stack]["buckets"]
    names = sorted(buckets, key=lambda b: int(b.split("_")[1]))
    ax.bar(np.arange(len(names)) + i * width, [buckets[b].get("ratio", np.nan) for b in names],
           width, label=f"{stack} (all tokens: {embedding[stack].get('ratio', np.nan):.3g})")
    ax.set_xticks(np.arange(len(names)) + width * (len(stacks) - 1) / 2,
                  [f"quartile {b.split('_')[1]}" for b in names])
  ax.set_xlabel("token-frequency quartile (0 = most frequent)")
  ax.set_ylabel("RMS(scaled token emb.) / RMS(PE)")
  ax.set_title("Token / position balance by token frequency")
  ax.legend(fontsize=8)
  fig.tight_layout()
  return fig


def _series(records: list[dict], split: str, key_filter) -> dict[str, list[tuple[int, float]]]:
  out: dict[str, list[tuple[int, float]]] = {}
  for r in records:
    if r["split"] == split:
      for k, v in r.items():
        if key_filter(k) and isinstance(v, (int, float)):
          out.setdefault(k, []).append((r["step"], v))
  return out


def _line_figure(series: dict[str, list[tuple[int, float]]], ylabel: str, title: str,
                 reference: Optional[tuple[float, str]] = None) -> Any:
  fig, axes = _figure(6.0, 4.0)
  ax = axes[0][0]
  for name, pts in series.items():
    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=name)
  if reference is not None:
    ax.axhline(reference[0], color="k", linestyle=":", label=reference[1])
  ax.set_xlabel("training step")
  ax.set_ylabel(ylabel)
  ax.set_title(title)
  ax.legend(fontsize=7)
  fig.tight_layout()
  return fig


def ratio_over_training_figure(records: list[dict]) -> Optional[Any]:
  """The token/PE ratio (all tokens and per frequency quartile) over training, from the
  run's metrics.jsonl diagnostics records; None without any."""
  series = _series(records, "diagnostics", lambda k: k.endswith("embed/ratio")
                   or (k.endswith("/ratio") and "/bucket_" in k))
  if not series:
    return None
  return _line_figure({k.replace("/embed", ""): v for k, v in sorted(series.items())},
                      "RMS(scaled token emb.) / RMS(PE)",
                      "Token embedding to positional encoding ratio")


def log_z_figure(records: list[dict], vocab_size: int) -> Optional[Any]:
  """The output's log Z (log-sum-exp of the logits, mean over valid positions) over training,
  against log V, its value for all-zero logits; None without diagnostics records."""
  series = _series(records, "diagnostics", lambda k: k == "output/log_z")
  if not series:
    return None
  return _line_figure(series, "log Z (nats)", "Output log-partition over training",
                      (math.log(vocab_size), f"log V = {math.log(vocab_size):.2f}"))


def loss_figure(records: list[dict]) -> Optional[Any]:
  """Train and eval loss over training; None without either."""
  series = {split: pts["loss"] for split in ("train", "eval")
            for pts in [_series(records, split, lambda k: k == "loss")] if "loss" in pts}
  if not series:
    return None
  return _line_figure(series, "loss (nats / token)", "Loss curves")


def _plots(plots_dir: str, result: dict[str, Any], records: list[dict]) -> list[str]:
  """Writes the PNGs of `analyze`; returns their file names."""
  attention, model = result["attention"], result["model"]
  figures = {"attention_entropy.png": entropy_figure(attention) if attention else None,
             "logit_variance.png": (logit_variance_figure(attention, result["d_k"])
                                    if attention else None),
             "embed_ratio_by_frequency.png": ratio_by_frequency_figure(result["embedding"]),
             "embed_posemb_ratio.png": ratio_over_training_figure(records),
             "log_z.png": log_z_figure(records, model["target_vocab_size"] or model["vocab_size"]),
             "loss.png": loss_figure(records)}
  written = []
  for name, fig in figures.items():
    if fig is not None:
      save_figure(fig, storage.join(plots_dir, name))
      written.append(name)
  return written


def _markdown(result: dict[str, Any]) -> str:
  lines = [f"# Scale diagnostics of {result['workdir']}", "",
           f"Checkpoint step {result['step']}, mean over {result['num_batches']} held-out "
           "batches (deterministic; valid positions only).", "",
           _data_line(result["data"]), "", "## Embedding", "",
           "| stack | RMS(s·E[tok]) | RMS(PE term) | ratio |", "|---|---|---|---|"]
  for stack, e in result["embedding"].items():
    lines.append(f"| {stack} | {e['token_rms']:.4g} | {e.get('posemb_rms', float('nan')):.4g} | "
                 f"{e.get('ratio', float('nan')):.4g} |")
  lines += ["", "By token-frequency rank quartile (bucket 0 = most frequent; counts from the "
            "run's first train batches):", "", "| stack | bucket | ratio |", "|---|---|---|"]
  for stack, e in result["embedding"].items():
    for b, v in e.get("buckets", {}).items():
      lines.append(f"| {stack} | {b} | {v.get('ratio', float('nan')):.4g} |")
  lines += ["", "## Residual stream RMS", "", "| stack | per layer |", "|---|---|"]
  for stack, v in result["residual_rms"].items():
    lines.append(f"| {stack} | {', '.join(f'{x:.4g}' for x in v)} |")
  lines += ["", "## Attention (mean over heads)", "",
            "Variances pooled over every visible (query, key) pair, and within rows (across one "
            "query's keys: what the softmax sees). The uniform reference is the entropy of "
            "uniform attention under the same causal and per-segment masks.", "",
            "| layer / attention | Var(q·k)/d_k pooled | within rows | Var(logits) within rows | "
            "max abs logit | entropy (nats) | uniform reference | deficit |",
            "|---|---|---|---|---|---|---|---|"]
  for row, s in result["attention"].items():
    lines.append(f"| {row} | {_mean(s['qk_var_over_dk']):.4g} | "
                 f"{_mean(s['qk_var_over_dk_within']):.4g} | {_mean(s['logit_var_within']):.4g} | "
                 f"{max(s['logit_absmax']):.4g} | {_mean(s['entropy']):.4g} | "
                 f"{_mean(s['entropy_uniform']):.4g} | {_mean(s['entropy_deficit']):.4g} |")
  o = result["output"]
  lines += ["", "## Output", "", f"log Z (mean) {o['log_z']:.4g}, max logit (mean) "
            f"{o['max_logit']:.4g}.", "", "## Plots", ""]
  lines += [f"![{p}]({p})" for p in result["plots"]]
  return "\n".join(lines) + "\n"


def _data_line(data: dict[str, Any]) -> str:
  if data["epochs"] is None:
    return f"The train split holds {data['train_tokens']} tokens."
  return (f"The train split holds {data['train_tokens']} tokens; {data['tokens_seen']} were "
          f"consumed by this step: {data['epochs']:.3f} epochs.")


def _check_writable(plots_dir: str) -> None:
  try:
    probe = storage.as_path(plots_dir) / f".write-test-{os.getpid()}"
    probe.parent.mkdir(parents=True, exist_ok=True)
    probe.write_text("")
    probe.unlink()
  except OSError as e:
    raise RunError(f"The analysis is written to {plots_dir}, which cannot be written "
                   f"({e.strerror}); copy the workdir somewhere writable and analyse the "
                   "copy.") from None


def _embedding_and_residual(diag: dict[str, float]):
  """({stack: embedding statistics, per-bucket ones under 'buckets'}, {stack: {layer: the
  residual stream's RMS}}) of the averaged diagnostics."""
  embedding: dict[str, dict] = {}
  residual: dict[str, dict] = {}
  for name, value in diag.items():
    n = diagnostics.parse_name(name)
    if n.group == "embed":
      entry = embedding.setdefault(n.stack, {})
      if n.bucket is not None:
        entry.setdefault("buckets", {}).setdefault(f"bucket_{n.bucket}", {})[n.stat] = value
      else:
        entry[n.stat] = value
    elif n.group == "residual":
      residual.setdefault(n.stack, {})[n.layer] = value
  return embedding, residual


def analyze(workdir: str, step: Optional[int] = None,
            num_batches: int = NUM_BATCHES) -> dict[str, Any]:
  """Runs the analysis of `workdir`; writes WORKDIR/plots/ and returns analysis.json's dict."""
  if num_batches < 1:
    raise ConfigError(f"num_batches={num_batches} must be >= 1.")
  loaded = loading.load(workdir, step)  # the run's own record and tokenizer, checked
  evaluate.check_run_data(loaded)  # before the plots directory is made
  plots_dir = storage.join(workdir, "plots")
  _check_writable(plots_dir)  # before the work, not after it
  params, model_config, step = loaded.params, loaded.model_config, loaded.step
  config, model = loaded.config, loaded.model
  datasets = evaluate.run_datasets(loaded)

  counts = diagnostics.TokenCounts(model_config.target_vocab_size or model_config.vocab_size)
  for batch in itertools.islice(datasets.train_iter(), FREQUENCY_BATCHES):
    counts.add(batch)
  params = jax.device_put(params)
  results = []
  for batch in itertools.islice(iter(datasets.eval_batches()), num_batches):
    batch = {k: jnp.asarray(v) for k, v in batch.items()}
    out = diagnostics.scale_diagnostics(model, params, batch, jnp.asarray(counts.frequency()))
    results.append(jax.device_get(out))
  if not results:
    raise ConfigError(f"The eval split of {workdir} yielded no batches; nothing to analyse.")
  diag = diagnostics.mean_over_batches(results)

  embedding, residual = _embedding_and_residual(diag)
  attention = _attention_rows(diag)

  # How much of the corpus the run has seen: concat packing fills every row with tokens.
  train_tokens = datasets.count_train_tokens()
  seen = step * config.batch_size * config.max_len if datasets.packing == "concat" else None
  data = {"train_tokens": train_tokens, "tokens_seen": seen,
          "epochs": None if seen is None else seen / train_tokens}

  records = read_metrics(workdir)
  result = {
      "workdir": os.path.abspath(workdir) if storage.is_local(workdir) else workdir,
      "step": step, "num_batches": len(results),
      "devices": jax.device_count(), "data": data,
      "model": model_config.to_dict(), "diagnostics": diag,
      "embedding": {s: embedding[s] for s in sorted(embedding, key=lambda s: s != "encoder")},
      "residual_rms": {s: [residual[s][i] for i in sorted(residual[s])]
                       for s in sorted(residual, key=lambda s: s != "encoder")},
      "attention": attention,
      "output": {"log_z": diag["output/log_z"], "max_logit": diag["output/max_logit"]},
  }
  result["d_k"] = model_config.qk_dim
  result["plots"] = _plots(plots_dir, result, records)
  storage.write_atomically(storage.join(plots_dir, "analysis.json"), json.dumps(
      finite_json(checkpoint.to_json(result)), indent=2, allow_nan=False))
  storage.write_atomically(storage.join(plots_dir, "analysis.md"), _markdown(result))
  return result


def _token_label(tokenizer: Any, token: int) -> str:
  if token == EOS_ID:
    return "</s>"
  if token == PAD_ID:
    return "<s>"  # a decoder's first input: shift_right puts 0 before the first token
  return tokenizer.decode([token]).strip() or f"#{token}"


def attention_maps_of_text(workdir: str, text: str,
                           step: Optional[int] = None) -> dict[str, Any]:
  """The attention weights of `text` in every layer and head of a checkpoint: the encoder's
  self-attention of a translation model (text = a source sentence), the decoder's causal
  self-attention of a language model (text = a prompt). Returns {'rows': [(name,
  float[H, L, L])], 'tokens': L labels, 'stack', 'step', 'workdir', 'text'}."""
  loaded = loading.load(workdir, step)
  ids = loaded.tokenizer.encode(text)
  if not ids:
    raise ConfigError(f"--text={text!r} holds no tokens; give a sentence or a prompt.")
  # The text is the model's input (a source ends in EOS, as in training; a prompt as given),
  # shown in the first stack that reads it: a source's encoder, a prompt's decoder (whose
  # input is the prompt shifted right).
  tokens = np.asarray([ids + [EOS_ID] if loaded.model.input_eos(False) else ids], np.int32)
  batch = {k: tokens for k in loaded.model.batch_keys}  # the text in every row the model reads
  stack, (shown, _) = next(iter(loaded.model.stack_inputs(batch).items()))
  labels = [_token_label(loaded.tokenizer, int(t)) for t in np.asarray(shown)[0]]
  if tokens.shape[1] > loaded.model_config.max_len:
    raise ConfigError(f"--text has {tokens.shape[1]} tokens, more than the model's max_len="
                      f"{loaded.model_config.max_len}; shorten it.")
  maps = jax.device_get(diagnostics.attention_maps(loaded.model, loaded.params,
                                                   {k: jnp.asarray(v) for k, v in batch.items()}))
  rows = [(name, w[0]) for name, w in maps.items()
          if name.startswith(f"{stack}/") and name.endswith("/self_attention")]
  return {"rows": rows, "tokens": labels, "stack": stack, "step": loaded.step,
          "workdir": workdir, "text": text}


def attention_maps_figure(maps: dict[str, Any]) -> Any:
  """One panel per layer and head of `attention_maps_of_text`'s weights, tokens on both axes."""
  rows, labels, stack = maps["rows"], maps["tokens"], maps["stack"]
  heads, n = rows[0][1].shape[0], len(labels)
  size = max(2.6, 0.22 * n + 1.2)
  fig, axes = _figure(size * heads + 1.2, size * len(rows), len(rows), heads)
  font = max(4, min(9, int(160 / n)))
  for r, (name, weights) in enumerate(rows):
    layer = diagnostics.parse_name(f"{name}/head_0/entropy").layer
    for h in range(heads):
      ax = axes[r][h]
      image = ax.imshow(weights[h], vmin=0.0, vmax=1.0, cmap="viridis")
      ax.set_title(f"{stack} layer {layer}, head {h}", fontsize=9)
      ax.set_xticks(range(n), labels, rotation=90, fontsize=font)
      ax.set_yticks(range(n), labels, fontsize=font)
      if r == len(rows) - 1:
        ax.set_xlabel("key (attended to)", fontsize=8)
      if h == 0:
        ax.set_ylabel("query", fontsize=8)
  run = os.path.basename(os.path.normpath(maps["workdir"]))
  run = run if len(run) <= 50 else run[:47] + "..."
  fig.suptitle(f"Attention weights, {run} at step {maps['step']}: {maps['text'][:60]!r}",
               fontsize=10)
  fig.colorbar(image, ax=axes, fraction=0.02, label="attention weight")
  return fig


def attention_map_figure(workdir: str, text: str, step: Optional[int] = None,
                         output: Optional[str] = None) -> dict[str, Any]:
  """`attention_maps_figure` of `text`, written to `output` (default
  WORKDIR/plots/attention_maps.png); returns {'path', 'panels', 'tokens'}."""
  maps = attention_maps_of_text(workdir, text, step)
  path = output or storage.join(workdir, "plots", "attention_maps.png")
  storage.as_path(path).parent.mkdir(parents=True, exist_ok=True)
  save_figure(attention_maps_figure(maps), path, bbox_inches="tight")
  return {"path": path, "panels": len(maps["rows"]) * maps["rows"][0][1].shape[0],
          "tokens": maps["tokens"]}


def first_heldout_text(workdir: str, max_tokens: int = 16) -> str:
  """The text of the first held-out example of a run's own data, for `attention_maps_of_text`:
  its source sentence (translation) or its first `max_tokens` tokens (language model)."""
  loaded = loading.load(workdir)
  datasets = evaluate.run_datasets(loaded)
  batch = next(iter(datasets.eval_batches()), None)
  if batch is None:
    raise ConfigError(f"The eval split of {workdir} yielded no batches; pass a text instead.")
  # Eval rows hold one example each: the source the model decodes from, or (a language
  # model, which decodes from none) the text itself.
  source = loaded.model.decoding_source(batch)
  ids = np.asarray(batch["targets"] if source is None else source)[0]
  ids = [int(t) for t in ids if t not in (PAD_ID, EOS_ID)][:max_tokens]
  return datasets.decode_ids(ids)
