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
import ml_collections
import numpy as np

from transformer import checkpoint, diagnostics
from transformer.data import pipeline
from transformer.errors import ConfigError, RunError
from transformer.inference import loading
from transformer.token_ids import EOS_ID, PAD_ID
from transformer.training import experiment
from transformer.training.writers import METRICS_FILE, read_metrics

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


def _finite(value: Any) -> Any:
  """JSON has no NaN: non-finite floats (e.g. an empty frequency bucket) become None."""
  if isinstance(value, dict):
    return {k: _finite(v) for k, v in value.items()}
  if isinstance(value, list):
    return [_finite(v) for v in value]
  if isinstance(value, float) and not math.isfinite(value):
    return None
  return value


def _plots(plots_dir: str, attention: dict, records: list[dict], d_k: int) -> list[str]:
  """Writes the PNGs; returns their file names."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  written = []

  def save(fig, name):
    fig.tight_layout()
    fig.savefig(os.path.join(plots_dir, name), dpi=110)
    plt.close(fig)
    written.append(name)

  labels = list(attention)
  if labels:
    entropy = np.array([attention[r]["entropy"] for r in labels], dtype=float)
    fig, ax = plt.subplots(figsize=(3.5 + 0.9 * entropy.shape[1], 1.8 + 0.45 * len(labels)))
    im = ax.imshow(entropy, aspect="auto", cmap="viridis")
    ax.set_xticks(range(entropy.shape[1]), [f"head {h}" for h in range(entropy.shape[1])])
    ax.set_yticks(range(len(labels)), [_short(r) for r in labels])
    for (i, j), v in np.ndenumerate(entropy):
      light = v > np.nanmean(entropy)  # dark text on the light (high) end of viridis
      ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="k" if light else "w", fontsize=8)
    ax.set_xlabel("attention head")
    ax.set_ylabel("layer and attention")
    uniform = np.nanmean([_mean(attention[r]["entropy_uniform"]) for r in labels])
    ax.set_title(f"Attention entropy (nats); uniform under the same masks: {uniform:.2f}")
    fig.colorbar(im, ax=ax, label="entropy (nats)")
    save(fig, "attention_entropy.png")

    fig, ax = plt.subplots(figsize=(max(6.5, 1.1 * len(labels) + 3), 4.5))
    x = np.arange(len(labels))
    for stat, label, marker in (("raw_var", "Var(q·k), before the scale", "o"),
                                ("logit_var", "Var(logits), after the scale", "s")):
      ax.plot(x, [_mean(attention[r][stat]) for r in labels], marker=marker, label=label)
    # What unit-variance q and k would give: Var(q.k) = d_k, and 1 after the paper's d_k^-0.5.
    ax.axhline(d_k, color="C0", linestyle="--", label=f"d_k = {d_k} (unit-variance q, k)")
    ax.axhline(1.0, color="C1", linestyle=":", label="1 (unit variance)")
    ax.set_yscale("log")
    ax.set_xticks(x, [_short(r) for r in labels], rotation=20, ha="right")
    ax.set_xlabel("layer and attention")
    ax.set_ylabel("variance (logit units², mean over heads)")
    ax.set_title(f"Attention logit variance against d_k (d_k = {d_k})")
    ax.legend(fontsize=8)
    save(fig, "logit_variance.png")

  diag_records = [r for r in records if r["split"] == "diagnostics"]
  ratio_keys = sorted({k for r in diag_records for k in r if k.endswith("embed/ratio")
                       or (k.endswith("/ratio") and "/bucket_" in k)})
  if ratio_keys:
    fig, ax = plt.subplots(figsize=(6, 4))
    for k in ratio_keys:
      pts = [(r["step"], r[k]) for r in diag_records if r.get(k) is not None]
      ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=k.replace("/embed", ""))
    ax.set_xlabel("training step")
    ax.set_ylabel("RMS(scaled token emb.) / RMS(PE)")
    ax.set_title("Token embedding to positional encoding ratio")
    ax.legend(fontsize=7)
    save(fig, "embed_posemb_ratio.png")

  train = [(r["step"], r["loss"]) for r in records
           if r["split"] == "train" and r.get("loss") is not None]
  evals = [(r["step"], r["loss"]) for r in records
           if r["split"] == "eval" and r.get("loss") is not None]
  if train or evals:
    fig, ax = plt.subplots(figsize=(6, 4))
    for pts, label, marker in ((train, "train", None), (evals, "eval", "o")):
      if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=label)
    ax.set_xlabel("training step")
    ax.set_ylabel("loss (nats / token)")
    ax.set_title("Loss curves")
    ax.legend()
    save(fig, "loss.png")
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


def analyze(workdir: str, step: Optional[int] = None,
            num_batches: int = NUM_BATCHES) -> dict[str, Any]:
  """Runs the analysis of `workdir`; writes WORKDIR/plots/ and returns analysis.json's dict."""
  if num_batches < 1:
    raise ConfigError(f"num_batches={num_batches} must be >= 1.")
  loaded = checkpoint.load_params(workdir, step)
  plots_dir = os.path.join(workdir, "plots")
  try:  # checked before the work, not after it
    os.makedirs(plots_dir, exist_ok=True)
    probe = os.path.join(plots_dir, f".write-test-{os.getpid()}")
    open(probe, "w").close()
    os.remove(probe)
  except OSError as e:
    raise RunError(f"The analysis is written to {plots_dir}, which cannot be written "
                   f"({e.strerror}); copy the workdir somewhere writable and analyse the "
                   "copy.") from None
  (params, model_config), step = loaded, loaded.step
  config = ml_collections.ConfigDict(checkpoint.read_config(workdir)["experiment"])
  model = experiment.build_model(config, model_config)
  datasets = pipeline.get_datasets(config, workdir=workdir)

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

  embedding, residual = {}, {}
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
  attention = _attention_rows(diag)

  # How much of the corpus the run has seen: concat packing fills every row with tokens.
  train_tokens = datasets.count_train_tokens()
  seen = step * config.batch_size * config.max_len if datasets.packing == "concat" else None
  data = {"train_tokens": train_tokens, "tokens_seen": seen,
          "epochs": None if seen is None else seen / train_tokens}

  records = read_metrics(workdir) if os.path.exists(os.path.join(workdir, METRICS_FILE)) else []
  result = {
      "workdir": os.path.abspath(workdir), "step": step, "num_batches": len(results),
      "devices": jax.device_count(), "data": data,
      "model": model_config.to_dict(), "diagnostics": diag,
      "embedding": {s: embedding[s] for s in sorted(embedding, key=lambda s: s != "encoder")},
      "residual_rms": {s: [residual[s][i] for i in sorted(residual[s])]
                       for s in sorted(residual, key=lambda s: s != "encoder")},
      "attention": attention,
      "output": {"log_z": diag["output/log_z"], "max_logit": diag["output/max_logit"]},
  }
  result["plots"] = _plots(plots_dir, attention, records, model_config.qk_dim)
  with open(os.path.join(plots_dir, "analysis.json"), "w") as f:
    json.dump(_finite(checkpoint.to_json(result)), f, indent=2, allow_nan=False)
  with open(os.path.join(plots_dir, "analysis.md"), "w") as f:
    f.write(_markdown(result))
  return result


def _token_label(tokenizer: Any, token: int) -> str:
  if token == EOS_ID:
    return "</s>"
  if token == PAD_ID:
    return "<s>"  # a decoder's first input: shift_right puts 0 before the first token
  return tokenizer.decode([token]).strip() or f"#{token}"


def attention_map_figure(workdir: str, text: str, step: Optional[int] = None,
                         output: Optional[str] = None) -> dict[str, Any]:
  """One figure of the attention weights of `text` in every layer and head (tokens on both
  axes): the encoder's self-attention of a translation model (text = a source sentence), the
  decoder's causal self-attention of a language model (text = a prompt). Written to `output`
  (default WORKDIR/plots/attention_maps.png); returns {'path', 'panels', 'tokens'}."""
  loaded = loading.load(workdir, step)
  ids = loaded.tokenizer.encode(text)
  if not ids:
    raise ConfigError(f"--text={text!r} holds no tokens; give a sentence or a prompt.")
  if loaded.is_lm:
    tokens = np.asarray([ids], np.int32)
    batch, stack = {"targets": tokens}, "decoder"
    labels = [_token_label(loaded.tokenizer, t) for t in [PAD_ID] + ids[:-1]]
  else:
    tokens = np.asarray([ids + [EOS_ID]], np.int32)
    batch, stack = {"inputs": tokens, "targets": np.asarray([[EOS_ID]], np.int32)}, "encoder"
    labels = [_token_label(loaded.tokenizer, t) for t in ids + [EOS_ID]]
  if tokens.shape[1] > loaded.model_config.max_len:
    raise ConfigError(f"--text has {tokens.shape[1]} tokens, more than the model's max_len="
                      f"{loaded.model_config.max_len}; shorten it.")
  maps = jax.device_get(diagnostics.attention_maps(loaded.model, loaded.params,
                                                   {k: jnp.asarray(v) for k, v in batch.items()}))
  rows = [(name, w[0]) for name, w in maps.items()
          if name.startswith(f"{stack}/") and name.endswith("/self_attention")]
  path = output or os.path.join(workdir, "plots", "attention_maps.png")
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  heads, n = rows[0][1].shape[0], len(labels)
  size = max(2.6, 0.22 * n + 1.2)
  fig, axes = plt.subplots(len(rows), heads, figsize=(size * heads + 1.2, size * len(rows)),
                           squeeze=False)
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
  run = os.path.basename(os.path.normpath(workdir))
  run = run if len(run) <= 50 else run[:47] + "..."
  fig.suptitle(f"Attention weights, {run} at step {loaded.step}: {text[:60]!r}", fontsize=10)
  fig.colorbar(image, ax=axes, fraction=0.02, label="attention weight")
  fig.savefig(path, dpi=110, bbox_inches="tight")
  plt.close(fig)
  return {"path": path, "panels": len(rows) * heads, "tokens": labels}
