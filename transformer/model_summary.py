"""What a model is: its parameters per module and its analytic FLOPs per token.

`summarize(groups, forward_flops, seq_len)` counts the parameters of a model by the parts its
`parameter_groups` name (each embedding matrix, each stack, an untied output projection; a
tied projection is the embedding, counted once) beside the FLOPs per token of the formula
below (each model's `forward_flops` applies it to its own structure), the one
scripts/benchmark.py divides by step time for MFU. Training logs it at the start and writes it
into config.json.

Model FLOPs per step (the MFU convention of PaLM, Chowdhery et al. 2022: matmul FLOPs of the
model's forward and backward pass, 2 FLOPs per multiply-add, backward = 2 x forward, any
rematerialisation NOT counted), for an encoder-decoder with source length S, target length T,
width d, feed-forward width f, attention width a = heads x head_dim, vocabulary V, per sequence:

  encoder layer   S (8 d a + 4 d f) + 4 S^2 a          q,k,v,o projections, FFN, q.k and p.v
  decoder layer   T (8 d a + 4 d f) + 4 T^2 a           self-attention (full T x T scores)
                  + T 4 d a + S 4 d a + 4 T S a         cross-attention: q,o on T; k,v on S
  output          2 T d V                                logits (tied or not)
  step            3 x (sum of the above) x batch

A decoder-only model is the decoder without cross-attention. Gated FFNs count 6 d f instead of
4 d f. Softmax, norms, dropout and the loss are not matmuls and are not counted.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from transformer.config import ModelConfig


def forward_flops(cfg: ModelConfig, source_len: int, target_len: int, *,
                  with_encoder: bool = True) -> float:
  """Matmul FLOPs of one sequence's forward pass (module docstring); with_encoder=False: the
  decoder alone, without cross-attention."""
  d, f, a, V = cfg.d_model, cfg.d_ff, cfg.num_heads * cfg.qk_dim, cfg.output_vocab_size
  ffn = (6 if cfg.activation in ("geglu", "swiglu") else 4) * d * f
  S, T = source_len, target_len
  decoder = T * (8 * d * a + ffn) + 4 * T * T * a
  total = cfg.num_decoder_layers * decoder + 2 * T * d * V
  if with_encoder:
    encoder = S * (8 * d * a + ffn) + 4 * S * S * a
    cross = T * 4 * d * a + S * 4 * d * a + 4 * T * S * a
    total += cfg.num_encoder_layers * encoder + cfg.num_decoder_layers * cross
  return float(total)


def param_counts(groups: Mapping[str, Sequence[Any]]) -> dict[str, int]:
  """{part: parameters, ..., 'total'}: a model's parameter groups (its `parameter_groups` of
  a param tree of arrays or ShapeDtypeStructs) counted by the part each belongs to, the name
  before '/' (an embedding matrix, a stack, 'output' for an untied projection)."""
  counts: dict[str, int] = {}
  for name, leaves in groups.items():
    part = name.split("/")[0]
    counts[part] = counts.get(part, 0) + sum(math.prod(x.shape) for x in leaves)
  counts["total"] = sum(counts.values())
  return counts


def train_flops(forward_flops: float, batch_size: int) -> float:
  """Forward + backward (3 x forward) over a batch of sequences of `forward_flops` each."""
  return 3.0 * batch_size * forward_flops


def summarize(groups: Mapping[str, Sequence[Any]], forward_flops: float,
              seq_len: int) -> dict[str, Any]:
  """Parameter counts of a model's parameter groups (`param_counts`), and the FLOPs per target
  token of a forward pass over rows of `seq_len` tokens (both sides) costing `forward_flops`
  (`models.row_flops` of seq_len)."""
  forward = forward_flops / seq_len
  return {"params": param_counts(groups),
          "flops_per_token": {"forward": forward, "train": train_flops(forward, 1),
                              "seq_len": seq_len}}


def format_summary(summary: dict[str, Any]) -> str:
  """A few lines for the log: parameters per module, total, FLOPs per token."""
  counts, flops = summary["params"], summary["flops_per_token"]
  width = max(len(k) for k in counts)
  lines = [f"  {name:<{width}}  {n:>12,}" for name, n in counts.items() if name != "total"]
  lines.append(f"  {'total':<{width}}  {counts['total']:>12,}")
  lines.append(f"  FLOPs per token at {flops['seq_len']} tokens a row: forward "
               f"{flops['forward']:.3g}, train step {flops['train']:.3g}")
  return "Model parameters (a tied output projection is the embedding, counted once):\n" + \
      "\n".join(lines)
