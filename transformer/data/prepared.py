"""A TFDS builder prepared once, shared by the synthetic tasks and the local corpora.

TFDS prints "Downloading and preparing dataset ..." on stdout for data generated on this
machine (nothing is downloaded), and its nested progress bars write cursor-moving escape
codes into a log file; here one line of ours says what is prepared and where, and TFDS's
bars show on a terminal only.
"""

from __future__ import annotations

import contextlib
import errno
import io
import sys
from typing import Any, Callable, Mapping, Sequence, TypeVar

import tensorflow_datasets as tfds
from absl import logging

from transformer.errors import ConfigError

Builder = TypeVar("Builder", bound=tfds.core.DatasetBuilder)


def prepared(make: Callable[[], Builder]) -> Builder:
  """The builder `make()` returns, its dataset generated if it is not yet (then reused).

  Hosts sharing a data_dir may race: TFDS renames its temporary directory last, so the
  loser's preparation fails with an OSError and it finds the winner's dataset prepared.
  """
  builder = make()
  if builder.is_prepared():
    return builder
  logging.info("Preparing the dataset %s in %s (once; reused after).",
               builder.builder_config.name, builder.data_dir)
  tfds.display_progress_bar(sys.stderr.isatty())
  try:
    with contextlib.redirect_stdout(io.StringIO()):
      builder.download_and_prepare()
  except OSError as e:
    builder = make()
    if not builder.is_prepared():
      if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        raise ConfigError(
            f"The dataset {builder.builder_config.name} is not prepared in its TFDS directory "
            f"and {e.filename or builder.data_dir} cannot be written ({e.strerror}); pass a "
            "--config.tfds_data_dir you can write to (it is prepared there once).") from None
      raise
  return builder


def read_examples(source: Sequence[Mapping[str, Any]],
                  indices: Sequence[int]) -> list[Mapping[str, Any]]:
  """source[i] for each index, in one bulk read where the source has __getitems__.

  Why bulk: a TFDS array_record source reads ~50x faster through __getitems__ than one
  __getitem__ per example (measured ~4 us vs ~200 us a record here).
  """
  indices = [int(i) for i in indices]
  getitems = getattr(source, "__getitems__", None)
  return list(getitems(indices)) if getitems else [source[i] for i in indices]
