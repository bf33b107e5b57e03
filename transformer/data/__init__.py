"""Data: TFDS builders (synthetic tasks) and grain input pipelines; token ids pad=0, eos=1, unk=2."""

from transformer.data.pipeline import SOURCES, Datasets, Sources, get_datasets
from transformer.data.synthetic import (EOS, PAD, TASKS, UNK, build_synthetic, to_text,
                                        vocab_size_for)

__all__ = ["SOURCES", "Datasets", "Sources", "get_datasets", "EOS", "PAD", "TASKS", "UNK",
           "build_synthetic", "to_text", "vocab_size_for"]
