"""The data section of an experiment: every field that decides which examples a run reads, how
they are tokenized, cut into rows and ordered, declared once with its default, bounds and role
(`transformer.sections`). The data layer reads a `Data`; `of(config)` builds it from a config
(an experiment's, or a data-only one that sets a few fields: the rest at their defaults).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from transformer.data import synthetic
from transformer.sections import Role, build, declare


@dataclasses.dataclass(frozen=True)
class Tokenization:
  """config.tokenizer: how the text becomes ids (transformer.data.tokenizer)."""
  kind: str = declare("sentencepiece", Role.SOURCE)  # or 'bytes' (no training)
  vocab_size: int = declare(8000, Role.SOURCE)
  path: Optional[str] = declare(None, Role.SOURCE, unset=str)  # None: WORKDIR/tokenizer.model
  model_type: str = declare("unigram", Role.SOURCE)  # SentencePiece's algorithm
  character_coverage: float = declare(0.9995, Role.SOURCE)
  train_examples: int = declare(1_000_000, Role.SOURCE, at_least=1)


@dataclasses.dataclass(frozen=True)
class Data:
  """Which examples a run reads, how they are cut into rows and in what order."""
  model_type: str = declare("seq2seq", Role.STREAM)  # the model kind: how it lays out a row
  dataset: str = declare("synthetic", Role.SOURCE)
  synthetic: Mapping[str, Any] = declare(None, Role.STREAM,
                                         factory=lambda: dict(synthetic.DEFAULTS))
  tfds_data_dir: Optional[str] = declare(None, Role.RESUMABLE, unset=str,
                                          path=True)  # None: ~/tensorflow_datasets
  # Text datasets (transformer/data/text.py): text_files, parallel_text, or a TFDS name.
  data_files: Optional[str] = declare(None, Role.SOURCE, unset=str,
                                       path=True)  # files, globs, dirs; comma-separated
  eval_files: Optional[str] = declare(None, Role.SOURCE, unset=str,
                                       path=True)  # None: hold out eval_fraction
  data_help: str = declare("", Role.INERT)  # how to get a config's default data_files
  eval_fraction: float = declare(0.01, Role.SOURCE)
  # > 0: also hold out this fraction of a local corpus as a test split, scored once at the
  # end of training ('test' records): settings chosen on validation are reported on test.
  test_fraction: float = declare(0.0, Role.SOURCE)
  text_split: str = declare("paragraph", Role.SOURCE)  # documents: 'paragraph' or 'line'
  source_lang: str = declare("de", Role.STREAM)  # translation TFDS datasets (wmtNN_translate/xx-yy)
  target_lang: str = declare("en", Role.STREAM)
  train_split: str = declare("train", Role.STREAM)
  eval_split: Optional[str] = declare(None, Role.COMPUTES, unset=str)  # None: the held-out split
  packing: str = declare("none", Role.STREAM)  # 'none', 'pack', 'concat' (data.packing)
  tokenizer: Tokenization = declare(None, Role.SOURCE, factory=Tokenization)
  data_threads: int = declare(0, Role.INERT, at_least=0)
  data_prefetch: int = declare(4, Role.INERT, at_least=0)
  batch_size: int = declare(64, Role.STREAM, at_least=1)  # global, over all devices and hosts
  max_len: int = declare(32, Role.STREAM, at_least=1)  # tokens per row (inputs and targets)
  seed: int = declare(0, Role.STREAM)  # the data order, the initialisation, the dropout masks
  # The seed that draws a local corpus's validation and test splits; None: `seed`. Fixed
  # across a sweep's seeds, every seed is selected and scored on the same held-out text.
  split_seed: Optional[int] = declare(None, Role.SOURCE, unset=int)

  def __post_init__(self):
    if not self.packing:  # an unset packing (None, '') packs nothing
      object.__setattr__(self, "packing", "none")


def of(config: Any) -> Data:
  """The Data section of a config (a Data is returned as it is). A data-only config that
  leaves model_type unset reads its rows as a seq2seq model does: an LM corpus's config sets
  model_type='lm'."""
  return build(Data, config)
