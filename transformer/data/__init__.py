"""Data: TFDS builders (synthetic tasks, local text), tokenizers, packing, grain pipelines.

Token ids: `transformer.token_ids` (pad 0, eos 1, unk 2).
"""

from transformer.data.packing import PACKING_MODES, PackedBatches, PadBatch
from transformer.data.pipeline import (SOURCES, Datasets, Sources, get_datasets,
                                       measure_throughput)
from transformer.data.synthetic import (TASKS, build_synthetic, to_text,
                                        vocab_size_for)
from transformer.data.local_corpora import build_local
from transformer.data.text import STANDARD, TokenizedSource
from transformer.data.tokenizer import (ByteTokenizer, SentencePieceTokenizer,
                                        SyntheticTokenizer, Tokenizer, load_tokenizer,
                                        train_sentencepiece)

__all__ = ["PACKING_MODES", "PackedBatches", "PadBatch", "SOURCES", "Datasets", "Sources",
           "get_datasets", "measure_throughput", "TASKS", "build_synthetic",
           "to_text", "vocab_size_for", "STANDARD", "TokenizedSource", "build_local",
           "ByteTokenizer", "SentencePieceTokenizer", "SyntheticTokenizer", "Tokenizer",
           "load_tokenizer", "train_sentencepiece"]
