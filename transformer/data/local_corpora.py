"""Local corpora as TFDS builders, prepared once into a data_dir as array_record.

  text_files     language modelling from plain-text files or globs; features {'text', 'origin'}.
  parallel_text  translation from TSV files or two line-aligned files; features
                 {'source', 'target', 'origin'}.
A prepared dataset is named by a fingerprint of the files' paths, their contents (size and a
hash of every byte: `corpus_files.content_fingerprint`) and the options, so files
holding other text give a new dataset. Both hold out a deterministic validation split
(`corpus_files.hold_out`), or read it from eval_files when given; with test_fraction > 0 they
first hold out a test split as well (for reporting a result whose settings were chosen on
validation).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Sequence

import tensorflow_datasets as tfds

from transformer.data import corpus_files
from transformer.data.prepared import prepared
from transformer.errors import ConfigError

_VERSION = "1.0.0"  # bump whenever the documents a builder writes would change


@dataclasses.dataclass(eq=False)
class LocalTextConfig(tfds.core.BuilderConfig):
  """One local corpus: its files, how to cut and hold out documents (name = fingerprint)."""
  files: tuple[str, ...] = ()
  eval_files: tuple[str, ...] = ()
  text_split: str = "paragraph"
  eval_fraction: float = 0.01
  test_fraction: float = 0.0
  seed: int = 0


class _LocalText(tfds.core.GeneratorBasedBuilder):
  VERSION = tfds.core.Version(_VERSION)
  BUILDER_CONFIGS = [LocalTextConfig(name="default")]
  FIELDS: tuple[str, ...] = ()

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self, description=self.__doc__,
        features=tfds.features.FeaturesDict({f: tfds.features.Text() for f in self.FIELDS}))

  def _documents(self, files: Sequence[str]) -> list[tuple[str, ...]]:
    raise NotImplementedError

  def _split_generators(self, dl_manager):
    del dl_manager  # local files only
    cfg = self.builder_config
    docs = self._documents(cfg.files)
    name = corpus_files.describe(cfg.files)
    splits = {}
    if cfg.test_fraction:  # a seed of its own: the test split is not the validation split's
      docs, test = corpus_files.hold_out(docs, lambda d: d[0], cfg.test_fraction,
                                         cfg.seed + 1_000_003, name)
      splits["test"] = self._generate_examples(test)
    if cfg.eval_files:
      train, validation = docs, self._documents(cfg.eval_files)
    else:
      train, validation = corpus_files.hold_out(docs, lambda d: d[0], cfg.eval_fraction,
                                                cfg.seed, name)
    if not train or not validation:
      raise ConfigError(f"{name} gave {len(train)} train and {len(validation)} validation "
                       "documents; add text to the files.")
    return {"train": self._generate_examples(train),
            "validation": self._generate_examples(validation), **splits}

  def _generate_examples(self, docs: list[tuple[str, ...]]) -> Iterator[tuple[int, dict]]:
    for i, doc in enumerate(docs):
      yield i, dict(zip(self.FIELDS, doc))


class TextFiles(_LocalText):
  """Language-modelling documents from local plain-text files."""
  name = "text_files"
  FIELDS = ("text", "origin")

  def _documents(self, files):
    split = self.builder_config.text_split
    return [d for f in files for d in corpus_files.documents(f, split)]


class ParallelText(_LocalText):
  """Translation pairs from a local TSV or two line-aligned files."""
  name = "parallel_text"
  FIELDS = ("source", "target", "origin")

  def _documents(self, files):
    return corpus_files.parallel_pairs(files)


_BUILDERS = {"text_files": TextFiles, "parallel_text": ParallelText}
LOCAL = tuple(_BUILDERS)


def build_local(name: str, data_dir: str | None, *, data_files: Any, eval_files: Any = None,
                text_split: str = "paragraph", eval_fraction: float = 0.01,
                test_fraction: float = 0.0, seed: int = 0) -> tfds.core.DatasetBuilder:
  """The prepared text_files / parallel_text builder of these files (built once per fingerprint)."""
  files = corpus_files.resolve_files(data_files, "data_files")
  held = corpus_files.resolve_files(eval_files, "eval_files") if eval_files else []
  options = dict(text_split=text_split if name == "text_files" else "-",
                 eval_fraction=None if held else eval_fraction, seed=None if held else seed,
                 version=_VERSION)
  if test_fraction:  # only then: the datasets prepared before test splits keep their names
    options.update(test_fraction=test_fraction, seed=seed)
  key = corpus_files.fingerprint(files + held, **options)
  cfg = LocalTextConfig(name=f"{name}-{key}", files=tuple(files), eval_files=tuple(held),
                        text_split=text_split, eval_fraction=eval_fraction,
                        test_fraction=test_fraction, seed=seed,
                        description=f"{name} of {corpus_files.describe(files)}")
  return prepared(lambda: _BUILDERS[name](config=cfg, data_dir=data_dir,
                                          file_format="array_record"))
