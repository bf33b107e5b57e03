"""Data: TFDS builders (synthetic tasks, local text), tokenizers, token stores, packing, pipelines.

Token ids: `transformer.token_ids` (pad 0, eos 1, unk 2).
"""

import logging

from transformer.data.local_corpora import LocalTextConfig
from transformer.data.synthetic import SyntheticConfig


class _KnownTfdsChatter(logging.Filter):
  """TFDS warns "Using custom data configuration" for every config its builder class does not
  list, and this package makes one per parameter set by design; and "Variant folder ... has no
  dataset_info.json" when it looks for a prepared version of a dataset that a first run has
  not prepared yet (`data.prepared` then prepares it). Neither says anything to act on."""

  def filter(self, record: logging.LogRecord) -> bool:
    message = str(record.msg)
    return not ((message.startswith("Using custom data configuration") and record.args
                 and isinstance(record.args[0], (SyntheticConfig, LocalTextConfig)))
                or message.startswith("Variant folder %s has no"))


logging.getLogger("absl").addFilter(_KnownTfdsChatter())
