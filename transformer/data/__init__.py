"""Data: TFDS builders (synthetic tasks, local text), tokenizers, token stores, packing, pipelines.

Token ids: `transformer.token_ids` (pad 0, eos 1, unk 2).
"""

import importlib
import logging
from typing import Any

from transformer.data.synthetic import (TASKS, SyntheticConfig, build_synthetic, to_text,
                                        vocab_size_for)
from transformer.data.local_corpora import LocalTextConfig, build_local
from transformer.data.text import STANDARD, TokenizedSource
from transformer.data.tokenizer import (ByteTokenizer, SentencePieceTokenizer,
                                        SyntheticTokenizer, Tokenizer, load_tokenizer,
                                        train_sentencepiece)

__all__ = ["PACKING_MODES", "TrainBatches", "PadBatch", "TokenStore", "SOURCES", "Datasets", "Sources",
           "get_datasets", "measure_throughput", "planned_vocab_size", "TASKS", "build_synthetic",
           "to_text", "vocab_size_for", "STANDARD", "TokenizedSource", "build_local",
           "ByteTokenizer", "SentencePieceTokenizer", "SyntheticTokenizer", "Tokenizer",
           "load_tokenizer", "train_sentencepiece"]


# Imported when first asked for: grain (and with it jax) stays out of a process that only
# reads configs and checks them (transformer.training.experiment).
_LAZY = {"PACKING_MODES": "settings", "TrainBatches": "packing", "PadBatch": "packing",
         "TokenStore": "token_store",
         "SOURCES": "pipeline", "Datasets": "pipeline", "Sources": "pipeline",
         "get_datasets": "pipeline", "measure_throughput": "pipeline",
         "planned_vocab_size": "settings"}


def __getattr__(name: str) -> Any:
  if name in _LAZY:
    return getattr(importlib.import_module(f"transformer.data.{_LAZY[name]}"), name)
  raise AttributeError(f"module 'transformer.data' has no attribute {name!r}")


class _KnownCustomConfigs(logging.Filter):
  """TFDS warns "Using custom data configuration" for every config its builder class does not
  list; this package makes one per parameter set by design, so the warning says nothing."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not (str(record.msg).startswith("Using custom data configuration") and record.args
                and isinstance(record.args[0], (SyntheticConfig, LocalTextConfig)))


logging.getLogger("absl").addFilter(_KnownCustomConfigs())
