"""Lines of text in, lines of text out: one output line per input line, in order.

An empty line gives an empty line; too long inputs are truncated with one warning counting
them. scripts/decode.py reads and writes files or stdin/stdout through
`transformer.trained.evaluate.decode_file`, which loads the checkpoint and calls these.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping, Optional, Protocol, Sequence

import jax
import numpy as np
from absl import logging

from transformer import models, storage
from transformer.config import ModelConfig
from transformer.data import corpus_files, fields
from transformer.inference import bleu, decoding
from transformer.inference.decode_config import DecodeConfig
from transformer.data.tokenizer import Tokenizer
from transformer.errors import InferenceError
from transformer.token_ids import EOS_ID, UNK_ID



class Decodable(Protocol):
  """A trained model ready to decode: what these functions read of it. A workdir's checkpoint
  read by `transformer.trained.loading.load` is one; any object with these fields is."""
  model: models.ModelKind
  params: Any  # the model's param tree
  tokenizer: Tokenizer

  @property
  def data(self) -> fields.Data:
    """The data it was trained on (its dataset says how prompts end)."""

  @property
  def model_config(self) -> ModelConfig:
    """Its ModelConfig."""


def prompt_ends_with_eos(data: fields.Data) -> bool:
  """Whether an LM's prompt gets EOS appended: yes when it was trained on a seq2seq dataset
  read as inputs ++ targets (synthetic, parallel text, WMT), where EOS ends the source."""
  dataset = str(data.dataset)
  return dataset in ("synthetic", "parallel_text") or "translate" in dataset


def model_input_limit(loaded: Decodable) -> int:
  """The most input tokens the model takes (its `input_limit`): max_len for a source, one
  less for an LM prompt (so that it can be continued)."""
  return loaded.model.input_limit


def max_input_len(loaded: Decodable) -> int:
  """Input tokens a line may have by default (EOS included), as the model reads its input
  (`input_len`): a source as long as the training rows, a prompt up to `model_input_limit`."""
  return loaded.model.input_len(int(loaded.data.max_len or loaded.model_config.max_len))


def encode_lines(loaded: Decodable, lines: Sequence[str], max_len: Optional[int] = None,
                 prompt_eos: Optional[bool] = None) -> tuple[list[list[int]], int]:
  """(ids of each line, number truncated). Sources end in EOS, as in training (so do LM
  prompts where `prompt_ends_with_eos`); an empty line gives []. A line longer than max_len
  is cut to its first max_len - 1 tokens + EOS (or its first max_len, without EOS)."""
  max_len = max_input_len(loaded) if max_len is None else max_len
  add_eos = loaded.model.input_eos(prompt_ends_with_eos(loaded.data))
  add_eos = add_eos if prompt_eos is None else prompt_eos
  out, truncated, unknown = [], 0, []
  for n, line in enumerate(lines, 1):
    ids = list(loaded.tokenizer.encode(line))
    if UNK_ID in ids:
      unknown.append(n)
    if not ids:
      out.append([])
      continue
    ids = ids + [EOS_ID] if add_eos else ids
    if len(ids) > max_len:
      truncated += 1
      ids = ids[:max_len - 1] + [EOS_ID] if add_eos else ids[:max_len]
    out.append(ids)
  if unknown:
    logging.warning("%d input line(s) held symbols the tokenizer lacks, read as UNK (first: line "
                    "%d); the model never saw them in training.", len(unknown), unknown[0])
  return out, truncated


def decode_lines(loaded: Decodable, lines: Sequence[str], config: DecodeConfig = DecodeConfig(), *,
                 batch_size: int = 64, max_len: Optional[int] = None,
                 prompt_eos: Optional[bool] = None, seed: int = 0) -> list[str]:
  """One output line per input line, in the input's order; an empty line gives an empty line.

  Lines are batched longest first (less padding) and each batch is padded to a multiple of 8
  tokens and to `batch_size` rows (fewer compilations). Too long lines are truncated, with
  one warning counting them. Sampling draws from fold_in(PRNGKey(seed), batch index).
  """
  if batch_size < 1:
    raise InferenceError(f"batch_size={batch_size} must be >= 1.")
  limit = model_input_limit(loaded)
  if max_len is not None and not 1 <= max_len <= limit:
    raise InferenceError(
        f"--max_input_len={max_len} is outside [1, {limit}]: the model's position table "
        f"(max_len={loaded.model_config.max_len}) covers at most {limit} input tokens.")
  cap = max_input_len(loaded) if max_len is None else max_len
  ids, truncated = encode_lines(loaded, lines, cap, prompt_eos)
  if truncated:
    advice = (f"pass --max_input_len up to {limit} to keep more of them" if cap < limit else
              f"the model's position table covers no more (max_len="
              f"{loaded.model_config.max_len})")
    logging.warning("%d of %d input line(s) had more than %d tokens and were truncated; %s.",
                    truncated, len(lines), cap, advice)
  outputs = [""] * len(lines)
  order = sorted((i for i, x in enumerate(ids) if x), key=lambda i: -len(ids[i]))
  rng = jax.random.PRNGKey(seed)
  for b, start in enumerate(range(0, len(order), batch_size)):
    rows = order[start:start + batch_size]
    width = min(-(-len(ids[rows[0]]) // 8) * 8, cap)  # the longest row first
    inputs = np.zeros((batch_size, width), np.int32)
    limit = np.zeros((batch_size,), np.int32)  # padding rows: nothing to decode
    for r, i in enumerate(rows):
      inputs[r, :len(ids[i])] = ids[i]
      limit[r] = len(ids[i]) + config.extra_len
    tokens, _ = decoding.decode(loaded.model, loaded.params, inputs, config,
                                jax.random.fold_in(rng, b), out_limit=limit)
    tokens = np.asarray(tokens)
    for r, i in enumerate(rows):
      outputs[i] = bleu.one_line(loaded.tokenizer.decode(tokens[r]))
  return outputs


def read_lines(path: str, flag: str = "--input") -> list[str]:
  """Lines of a UTF-8 file ('-' = stdin) without their line break; a final line break does
  not add an empty line. Invalid UTF-8 is replaced by U+FFFD with a warning naming the line."""
  if path == "-":
    stream = getattr(sys.stdin, "buffer", None)  # a text stream stand-in has no bytes
    raw = stream.read() if stream is not None else sys.stdin.read().encode("utf-8")
    return corpus_files.split_utf8_lines(raw, "<stdin>")
  try:
    return corpus_files.read_lines(path)
  except OSError as e:
    raise InferenceError(f"Cannot read {flag}={path} ({e.strerror}); pass an existing "
                                 "text file" + (", or '-' for stdin." if flag == "--input"
                                                else ".")) from None


def _same_file(a: str, b: str) -> bool:
  """Whether two paths name one file: by identity (device and inode) where both exist, so a
  hard link, a symlink or another spelling of the same file are all the same."""
  if a == "-" or b == "-":
    return False
  if storage.is_local(a) and storage.is_local(b):
    if os.path.exists(a) and os.path.exists(b):
      return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)
  return a == b


def check_writable(path: str, inputs: Optional[Mapping[str, str]] = None,
                   out_flag: str = "--output") -> None:
  """Raises an InferenceError now, before any work, if `path` ('-' = stdout; given as
  `out_flag`) cannot be written, or is one of `inputs` ({flag: path} of the files read):
  outputs never overwrite inputs."""
  for flag, source in (inputs or {}).items():
    if _same_file(path, source):
      raise InferenceError(f"{out_flag}={path} is also {flag}, which writing it would "
                                   f"overwrite; pass another {out_flag}.")
  if path == "-" or not storage.is_local(path):  # an object store: its write says if not
    return
  folder = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(folder):
    raise InferenceError(f"Cannot write {out_flag}={path}: the directory {folder} does "
                                 "not exist; create it or pass another path.")
  if os.path.isdir(path) or not os.access(folder, os.W_OK) or (
      os.path.exists(path) and not os.access(path, os.W_OK)):
    raise InferenceError(f"Cannot write {out_flag}={path} (a directory, or no write "
                                 "permission); pass another path.")


def write_lines(path: str, lines: Sequence[str]) -> None:
  """One line per string, each ending in a line break ('-' = stdout)."""
  text = "".join(line + "\n" for line in lines)
  if path == "-":
    sys.stdout.write(text)
    sys.stdout.flush()
  else:
    storage.as_path(path).write_text(text, encoding="utf-8")
