"""Translation quality on a split: decode every example, then BLEU and exact-sequence accuracy.

BLEU is sacrebleu's corpus BLEU with its defaults (13a tokenization, exp smoothing), on
detokenized text: hypotheses and references are the tokenizer's decode of the ids, so the
figure is the one `sacrebleu REFERENCES -i HYPOTHESES` prints for the same lines. Exact match
compares ids up to and including EOS. Line breaks inside a decoded text become spaces, so
each example is one line. Used by the training loop (every `bleu_every_steps`)
and by `scripts/evaluate.py` (through `transformer.trained.evaluate`).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any, Callable, Iterable, NamedTuple, Optional, Sequence

import flax.linen as nn
import numpy as np

from transformer.inference import decoding
from transformer.inference.decode_config import DecodeConfig
from transformer.token_ids import EOS_ID, PAD_ID

Batch = dict[str, Any]
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # what Python's text files split lines on


@dataclasses.dataclass(frozen=True)
class DecodedSplit:
  """Each example of a split once, in order: its text and whether the ids matched exactly."""
  sources: list[str]
  hypotheses: list[str]
  references: list[str]
  exact: list[bool]

  @property
  def exact_match(self) -> float:
    """Fraction of hypotheses equal to their reference, id for id, EOS included."""
    return float(np.mean(self.exact)) if self.exact else 0.0

  @functools.cached_property
  def bleu(self) -> "Bleu":
    return corpus_bleu(self.hypotheses, self.references)

  def metrics(self) -> dict[str, float]:
    """{'bleu', 'exact_match', 'num_examples'}."""
    return {"bleu": self.bleu.score, "exact_match": self.exact_match,
            "num_examples": float(len(self.exact))}

  def examples_markdown(self, count: int) -> str:
    """The first `count` examples as a Markdown table (TensorBoard's text tab renders it)."""
    rows = ["| source | hypothesis | reference |", "|---|---|---|"]
    cell = lambda s: s.replace("|", "\\|")  # noqa: E731
    for src, hyp, ref in list(zip(self.sources, self.hypotheses, self.references))[:count]:
      rows.append(f"| {cell(src)} | {cell(hyp)} | {cell(ref)} |")
    return "\n".join(rows)


class Bleu(NamedTuple):
  score: float  # 0..100, as the sacrebleu command line prints it
  signature: str  # sacrebleu's 'nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:...'


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> Bleu:
  """sacrebleu's corpus BLEU with its defaults, one reference per hypothesis."""
  from sacrebleu.metrics import BLEU  # deferred: only evaluation needs it

  if len(hypotheses) != len(references):
    raise ValueError(f"BLEU needs one hypothesis per reference, got {len(hypotheses)} and "
                     f"{len(references)}.")
  metric = BLEU()
  score = metric.corpus_score(list(hypotheses), [list(references)]).score
  return Bleu(float(score), str(metric.get_signature()))


def one_line(text: str) -> str:
  """Text with its line breaks as spaces: one example is one line of a file, always."""
  return _LINE_BREAK.sub(" ", text)


def until_eos(ids: Any) -> tuple[int, ...]:
  """The ids of one row up to and including its first EOS, without padding."""
  out = []
  for i in np.asarray(ids).reshape(-1).tolist():
    if i == EOS_ID:
      return tuple(out + [i])
    if i != PAD_ID:
      out.append(i)
  return tuple(out)


def decode_split(model: nn.Module, params: Any, batches: Iterable[Batch],
                 decode_ids: Callable[[Any], str], config: DecodeConfig = DecodeConfig(), *,
                 place: Optional[Callable[[Batch], Batch]] = None,
                 fetch: Optional[Callable[[Any], np.ndarray]] = None) -> Optional[DecodedSplit]:
  """Decodes what each batch's decoding starts from (the model's `decoding_source`: a
  seq2seq model's source) and compares the outputs with its 'targets'; None for a model whose
  rows hold nothing to decode from (a language model).

  place: host batch -> model-ready batch (default: as is); fetch: array -> host numpy of the
  whole batch (default np.asarray). All-zero rows (an eval split's padding) are skipped.
  """
  place = place or (lambda b: b)
  fetch = fetch or np.asarray
  out = DecodedSplit([], [], [], [])
  for batch in batches:
    placed = place(batch)
    source = model.decoding_source(placed)
    if source is None:
      return None
    tokens, _ = decoding.decode(model, params, source, config)
    tokens, inputs, targets = (fetch(x) for x in (tokens, source, placed["targets"]))
    for source, hypothesis, reference in zip(inputs, tokens, targets):
      if not reference.any():
        continue
      out.sources.append(one_line(decode_ids(source)))
      out.hypotheses.append(one_line(decode_ids(hypothesis)))
      out.references.append(one_line(decode_ids(reference)))
      out.exact.append(until_eos(hypothesis) == until_eos(reference))
  return out
