"""Tokenizers: one interface for SentencePiece, raw UTF-8 bytes and the synthetic tasks.

Every tokenizer maps str -> list[int] and back with the project's reserved ids PAD=0, EOS=1,
UNK=2; `encode` never adds EOS (the data pipeline appends it) and `decode` stops at the first
EOS and skips PAD. A workdir holds exactly one tokenizer file, read back by `load_tokenizer`:

  WORKDIR/tokenizer.model   SentencePiece model (text datasets, tokenizer.kind='sentencepiece')
  WORKDIR/tokenizer.json    {"type": "bytes"} or
                            {"type": "synthetic", "task": ..., "vocab_size": ...}

SentencePiece is trained on the training split with identity normalisation, no whitespace
folding and byte fallback, so decode(encode(text)) == text for any UTF-8 text: characters
outside the learned pieces become their UTF-8 bytes (ids 3..258), never UNK.
"""

from __future__ import annotations

import abc
import hashlib
import io
import json
import os
import re
from typing import Any, Iterable, Sequence

import numpy as np
from absl import logging
from etils import epath

from transformer.data import synthetic
from transformer.data.fields import Tokenization
from transformer.errors import ConfigError, MissingFileError, one_line
from transformer.token_ids import EOS_ID, NUM_RESERVED, PAD_ID, UNK_ID

SPM_FILE = "tokenizer.model"
JSON_FILE = "tokenizer.json"
KINDS = ("sentencepiece", "bytes")


class Tokenizer(abc.ABC):
  """str <-> ids with pad 0, eos 1, unk 2; `vocab_size` counts the reserved ids."""
  pad_id, eos_id, unk_id = PAD_ID, EOS_ID, UNK_ID
  file_name: str = JSON_FILE  # the name `save` writes inside a directory

  @property
  @abc.abstractmethod
  def vocab_size(self) -> int:
    """Model vocabulary size (reserved ids included)."""

  @abc.abstractmethod
  def encode(self, text: str) -> list[int]:
    """Ids of `text`, without EOS."""

  @abc.abstractmethod
  def _decode(self, ids: list[int]) -> str:
    """Text of ids that hold no PAD and no EOS."""

  @abc.abstractmethod
  def to_bytes(self) -> bytes:
    """The file content that `load_tokenizer` reads back."""

  def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
    return [self.encode(t) for t in texts]

  def decode(self, ids: Sequence[int] | np.ndarray) -> str:
    """Text of one id sequence [length]: stops at the first EOS, skips PAD."""
    out = []
    for i in np.asarray(ids).reshape(-1).tolist():
      if i == EOS_ID:
        break
      if i != PAD_ID:
        out.append(int(i))
    return self._decode(out)

  def save(self, path: str | os.PathLike) -> str:
    """Writes the tokenizer atomically to `path` (a directory gets `file_name`); returns the
    file."""
    path = epath.Path(path)
    if path.is_dir():
      path = path / self.file_name
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    tmp.write_bytes(self.to_bytes())
    # replace, not rename: readers never see a half-written file, and processes that trained
    # the same tokenizer at once (a shared sweep) overwrite each other instead of failing.
    tmp.replace(path)
    return str(path)


class ByteTokenizer(Tokenizer):
  """UTF-8 bytes: id = byte + 3 (vocabulary 259); the no-training option."""

  @property
  def vocab_size(self) -> int:
    return 256 + 3

  def encode(self, text: str) -> list[int]:
    return [b + 3 for b in text.encode("utf-8")]

  def _decode(self, ids: list[int]) -> str:
    # Invalid sequences (a model's mistakes, UNK) decode as U+FFFD rather than failing.
    return bytes(i - 3 for i in ids if 3 <= i < 259).decode("utf-8", errors="replace")

  def to_bytes(self) -> bytes:
    return json.dumps({"type": "bytes"}).encode()


class SyntheticTokenizer(Tokenizer):
  """The synthetic tasks' symbols: decode is `synthetic.to_text`, encode its inverse."""

  def __init__(self, task: str, symbols: int):
    self.task, self.symbols = task, symbols
    self._vocab = synthetic.vocab_size_for(task, symbols)

  @property
  def vocab_size(self) -> int:
    return self._vocab

  def encode(self, text: str) -> list[int]:
    """'12+9' (addition) or 'a b #60' (other tasks) -> ids; unknown symbols -> UNK."""
    n = NUM_RESERVED
    if self.task == "addition":
      return [n + int(c) if c.isdigit() else n + 10 if c == "+" else UNK_ID
              for c in text if not c.isspace()]
    ids = []
    for tok in text.split():
      k = (synthetic.LETTERS.find(tok) if len(tok) == 1 else
           int(tok[1:]) if tok[:1] == "#" and tok[1:].isdigit() else -1)
      ids.append(n + k if 0 <= k < self.symbols else UNK_ID)
    return ids

  def _decode(self, ids: list[int]) -> str:
    return synthetic.to_text(ids, self.task)

  def to_bytes(self) -> bytes:
    return json.dumps({"type": "synthetic", "task": self.task,
                       "vocab_size": self.symbols}).encode()


class SentencePieceTokenizer(Tokenizer):
  """A SentencePiece model with pad 0, eos 1, unk 2 (and no BOS)."""
  file_name = SPM_FILE

  def __init__(self, model_proto: bytes, origin: str = "<memory>"):
    import sentencepiece as spm
    self._proto = model_proto
    try:
      self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
    except RuntimeError as e:  # sentencepiece's "INTERNAL: ... ParseFromArray"
      raise ConfigError(f"{origin} is not a SentencePiece model ({one_line(e, 120)}); pass the "
                        ".model file a training run wrote (WORKDIR/tokenizer.model), or remove "
                        "tokenizer.path to train one.") from None
    got = (self._sp.pad_id(), self._sp.eos_id(), self._sp.unk_id())
    if got != (PAD_ID, EOS_ID, UNK_ID):
      raise ConfigError(f"SentencePiece model {origin} has pad/eos/unk ids {got}, not (0, 1, 2); "
                       "train it with pad_id=0 eos_id=1 unk_id=2 bos_id=-1, or let the "
                       "pipeline train one (remove tokenizer.path).")

  def __getstate__(self) -> dict[str, Any]:  # the processes that build a token store
    return {"proto": self._proto}

  def __setstate__(self, state: dict[str, Any]) -> None:
    self.__init__(state["proto"])

  @property
  def vocab_size(self) -> int:
    return self._sp.get_piece_size()

  def encode(self, text: str) -> list[int]:
    return self._sp.encode(text)

  def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
    return self._sp.encode(list(texts))  # one call: C++ threads over the list

  def _decode(self, ids: list[int]) -> str:
    return self._sp.decode(ids)

  def to_bytes(self) -> bytes:
    return self._proto


def check_sentencepiece_size(vocab_size: int) -> None:
  """The smallest SentencePiece vocabulary with byte fallback, checked (one line)."""
  if vocab_size < 3 + 256 + 1:
    raise ConfigError(f"tokenizer.vocab_size={vocab_size} is too small for SentencePiece with byte "
                     "fallback (3 reserved ids + 256 bytes + pieces); use at least 300, or "
                     "tokenizer.kind='bytes'.")


def train_sentencepiece(texts: Iterable[str], vocab_size: int, *, model_type: str = "unigram",
                        character_coverage: float = 0.9995,
                        corpus_name: str = "the training split") -> SentencePieceTokenizer:
  """Trains a SentencePiece model in memory on `texts` (each a sentence or a line).

  Raises ConfigError naming `corpus_name` when vocab_size does not fit the corpus.
  """
  import sentencepiece as spm
  check_sentencepiece_size(vocab_size)
  writer = io.BytesIO()
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=writer, vocab_size=vocab_size,
        model_type=model_type, character_coverage=character_coverage,
        pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1, byte_fallback=True,
        # Exact round trip: no Unicode normalisation, no whitespace folding.
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        max_sentence_length=1 << 16, input_sentence_size=0, minloglevel=2,
        num_threads=os.cpu_count() or 1)
  except RuntimeError as e:
    message = str(e)
    most = re.search(r"value <= (\d+)", message)
    if most:
      raise ConfigError(f"tokenizer.vocab_size={vocab_size} is larger than {corpus_name} supports "
                       f"(at most {most.group(1)} pieces); lower tokenizer.vocab_size or add "
                       "text.") from None
    need = re.search(r"required_chars\. \d+ vs (\d+)", message)
    if need:
      raise ConfigError(f"tokenizer.vocab_size={vocab_size} is smaller than the {need.group(1)} "
                       f"characters and reserved pieces of {corpus_name} need; raise "
                       "tokenizer.vocab_size or lower tokenizer.character_coverage.") from None
    if "empty" in message.lower() or "no sentence" in message.lower():
      raise ConfigError(f"{corpus_name} holds no text to train the tokenizer on; add text to "
                       "the data files.") from None
    raise ConfigError(f"Training SentencePiece on {corpus_name} failed ({message}); check the "
                     "tokenizer.* config fields.") from None
  return SentencePieceTokenizer(writer.getvalue())


def tokenizer_file(workdir_or_path: str | os.PathLike) -> epath.Path:
  """The tokenizer file of a workdir (or the path itself if it is a file)."""
  path = epath.Path(workdir_or_path)
  if path.is_dir():
    for name in (SPM_FILE, JSON_FILE):
      if (path / name).exists():
        return path / name
    raise MissingFileError(f"{path} holds no {SPM_FILE} or {JSON_FILE}; pass the workdir of a "
                            "run that has read its data (training writes the tokenizer there) "
                            "or the tokenizer file itself.")
  if not path.exists():
    raise MissingFileError(f"Tokenizer file {path} does not exist; pass a workdir or an existing "
                            f"{SPM_FILE} / {JSON_FILE}.")
  return path


def file_hash(workdir: str | os.PathLike) -> str | None:
  """A hash of the workdir's tokenizer file (what a resumed run must read its data with);
  None when the workdir holds none."""
  try:
    path = tokenizer_file(workdir)
  except MissingFileError:
    return None
  return f"{path.name}:{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"


def load_tokenizer(workdir_or_path: str | os.PathLike) -> Tokenizer:
  """The tokenizer saved in a workdir (tokenizer.model or tokenizer.json), or in that file."""
  path = tokenizer_file(workdir_or_path)
  data = path.read_bytes()
  if path.suffix != ".json":
    return SentencePieceTokenizer(data, origin=str(path))
  try:
    spec: dict[str, Any] = json.loads(data)
    if spec["type"] == "bytes":
      return ByteTokenizer()
    if spec["type"] == "synthetic":
      return SyntheticTokenizer(spec["task"], int(spec["vocab_size"]))
  except (ValueError, KeyError, TypeError):
    pass
  raise ConfigError(f"Tokenizer file {path} is not a tokenizer.json this package wrote; delete it "
                   "and rerun training to write it again.")


def get_tokenizer(cfg: Tokenization, *, workdir: str | None, train_texts: Any,
                  corpus_name: str) -> Tokenizer:
  """The tokenizer of a text dataset: loaded if saved, else made (trained) and saved.

  cfg: the data's tokenizer section (kind, vocab_size, path, model_type, character_coverage).
  Where: cfg.path if set, else WORKDIR/tokenizer.model; a copy always lands in the workdir so
  `load_tokenizer(workdir)` works. train_texts(): an iterable of training sentences, called
  only when a SentencePiece model must be trained. With neither workdir nor path the model is
  trained in memory every time (a warning says so).
  """
  kind = cfg.kind
  if kind not in KINDS:
    raise ConfigError(f"tokenizer.kind={kind!r} is not one of {list(KINDS)}.")
  if kind == "bytes":
    tok: Tokenizer = ByteTokenizer()
    if workdir:
      save_to_workdir(tok, workdir)
    return tok
  own = epath.Path(workdir) / SPM_FILE if workdir else None
  path = epath.Path(cfg.path) if cfg.path else own
  if path is not None and path != own and not path.exists():
    if not path.parent.is_dir():
      raise MissingFileError(f"tokenizer.path={cfg.path}: its directory {path.parent} does not "
                             "exist; pass an existing SentencePiece model, or a path in an "
                             "existing directory to train one there.")
    logging.warning("Tokenizer: tokenizer.path=%s does not exist yet; training a SentencePiece "
                    "model and saving it there.", path)
  if path is not None and path.exists():
    tok = SentencePieceTokenizer(path.read_bytes(), origin=str(path))
    if path == own and tok.vocab_size != cfg.vocab_size:
      # A resumed run must read its data as it was trained: refuse a silent vocabulary change.
      raise ConfigError(f"{path} has {tok.vocab_size} pieces but tokenizer.vocab_size="
                       f"{cfg.vocab_size}; set --config.tokenizer.vocab_size={tok.vocab_size} to "
                       "resume, or use a new --workdir.")
    logging.info("Tokenizer: reusing %s (%d pieces).", path, tok.vocab_size)
  else:
    logging.info("Tokenizer: training SentencePiece (%d pieces) on %s.", cfg.vocab_size,
                 corpus_name)
    tok = train_sentencepiece(train_texts(), cfg.vocab_size, model_type=cfg.model_type,
                              character_coverage=cfg.character_coverage,
                              corpus_name=corpus_name)
    if path is None:
      logging.warning("Tokenizer: no workdir and no tokenizer.path, so the trained model is not "
                      "saved; set tokenizer.path to reuse it.")
    else:
      tok.save(path)
  if own is not None and own != path:
    save_to_workdir(tok, workdir)
  return tok


def save_to_workdir(tok: Tokenizer, workdir: str) -> None:
  """Writes tok into the workdir; refuses to replace a different one (the run's own)."""
  path = epath.Path(workdir) / tok.file_name
  if not path.exists():
    tok.save(path)
    return
  try:
    load_tokenizer(path)
  except ConfigError:
    raise ConfigError(f"{path} is damaged (not a tokenizer this package wrote); delete it and "
                      "rerun: it is written again from the config.") from None
  if path.read_bytes() != tok.to_bytes():
    raise ConfigError(f"{path} holds a different tokenizer than this config gives (dataset or "
                     "tokenizer.* changed); use a new --workdir, or restore the config of this "
                     "run.")
