"""Data: TFDS builders (synthetic tasks, local text), tokenizers, token stores, packing, pipelines.

Token ids: `transformer.token_ids` (pad 0, eos 1, unk 2). Importing this package changes no
logger: the scripts drop TFDS's chatter about this package's configs themselves
(`transformer.cli.known_tfds_chatter`).
"""

from transformer.data.local_corpora import LocalTextConfig
from transformer.data.synthetic import SyntheticConfig

__all__ = ["LocalTextConfig", "SyntheticConfig"]
