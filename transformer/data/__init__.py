"""Data: TFDS builders (synthetic tasks, local text), tokenizers, token stores, packing, pipelines.

Token ids: `transformer.token_ids` (pad 0, eos 1, unk 2).
"""

import logging

from transformer.data.local_corpora import LocalTextConfig
from transformer.data.synthetic import SyntheticConfig


class _KnownCustomConfigs(logging.Filter):
  """TFDS warns "Using custom data configuration" for every config its builder class does not
  list; this package makes one per parameter set by design, so the warning says nothing."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not (str(record.msg).startswith("Using custom data configuration") and record.args
                and isinstance(record.args[0], (SyntheticConfig, LocalTextConfig)))


logging.getLogger("absl").addFilter(_KnownCustomConfigs())
