"""Lines of text in, lines of text out: one output line per input line, in order.

An empty line gives an empty line; too long inputs are truncated with one warning counting
them. scripts/decode.py reads and writes files or stdin/stdout through `decode_file`.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping, Optional, Sequence

import jax
import ml_collections
import numpy as np
from absl import logging

from transformer import storage
from transformer.data import corpus_files
from transformer.inference import decoding, evaluation, loading
from transformer.inference.decoding import DecodeConfig
from transformer.token_ids import EOS_ID, UNK_ID


def prompt_ends_with_eos(experiment: ml_collections.ConfigDict) -> bool:
  """Whether an LM's prompt gets EOS appended: yes when it was trained on a seq2seq dataset
  read as inputs ++ targets (synthetic, parallel text, WMT), where EOS ends the source."""
  dataset = str(experiment.get("dataset"))
  return dataset in ("synthetic", "parallel_text") or "translate" in dataset


def model_input_limit(loaded: loading.Loaded) -> int:
  """The most input tokens the model takes (its `input_limit`): max_len for a source, one
  less for an LM prompt (so that it can be continued)."""
  return loaded.model.input_limit


def max_input_len(loaded: loading.Loaded) -> int:
  """Input tokens a line may have by default (EOS included): the training rows' length for a
  source, within what the model covers; `model_input_limit` for a prompt."""
  if not loaded.reads_source:
    return model_input_limit(loaded)
  return min(int(loaded.experiment.get("max_len") or loaded.model_config.max_len),
             model_input_limit(loaded))


def encode_lines(loaded: loading.Loaded, lines: Sequence[str], max_len: Optional[int] = None,
                 prompt_eos: Optional[bool] = None) -> tuple[list[list[int]], int]:
  """(ids of each line, number truncated). Sources end in EOS, as in training (so do LM
  prompts where `prompt_ends_with_eos`); an empty line gives []. A line longer than max_len
  is cut to its first max_len - 1 tokens + EOS (or its first max_len, without EOS)."""
  max_len = max_input_len(loaded) if max_len is None else max_len
  add_eos = loaded.model.input_eos(prompt_ends_with_eos(loaded.experiment))
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


def decode_lines(loaded: loading.Loaded, lines: Sequence[str], config: DecodeConfig = DecodeConfig(), *,
                 batch_size: int = 64, max_len: Optional[int] = None,
                 prompt_eos: Optional[bool] = None, seed: int = 0) -> list[str]:
  """One output line per input line, in the input's order; an empty line gives an empty line.

  Lines are batched longest first (less padding) and each batch is padded to a multiple of 8
  tokens and to `batch_size` rows (fewer compilations). Too long lines are truncated, with
  one warning counting them. Sampling draws from fold_in(PRNGKey(seed), batch index).
  """
  if batch_size < 1:
    raise loading.InferenceError(f"batch_size={batch_size} must be >= 1.")
  limit = model_input_limit(loaded)
  if max_len is not None and not 1 <= max_len <= limit:
    raise loading.InferenceError(
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
      outputs[i] = evaluation.one_line(loaded.tokenizer.decode(tokens[r]))
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
    raise loading.InferenceError(f"Cannot read {flag}={path} ({e.strerror}); pass an existing "
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
      raise loading.InferenceError(f"{out_flag}={path} is also {flag}, which writing it would "
                                   f"overwrite; pass another {out_flag}.")
  if path == "-" or not storage.is_local(path):  # an object store: its write says if not
    return
  folder = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(folder):
    raise loading.InferenceError(f"Cannot write {out_flag}={path}: the directory {folder} does "
                                 "not exist; create it or pass another path.")
  if os.path.isdir(path) or not os.access(folder, os.W_OK) or (
      os.path.exists(path) and not os.access(path, os.W_OK)):
    raise loading.InferenceError(f"Cannot write {out_flag}={path} (a directory, or no write "
                                 "permission); pass another path.")


def write_lines(path: str, lines: Sequence[str]) -> None:
  """One line per string, each ending in a line break ('-' = stdout)."""
  text = "".join(line + "\n" for line in lines)
  if path == "-":
    sys.stdout.write(text)
    sys.stdout.flush()
  else:
    storage.as_path(path).write_text(text, encoding="utf-8")


def decode_file(workdir: str, input_path: str = "-", output_path: str = "-", *,
                config: DecodeConfig = DecodeConfig(), step: Optional[int] = None,
                tokenizer: Optional[str] = None, batch_size: int = 64,
                max_len: Optional[int] = None, prompt_eos: Optional[bool] = None,
                seed: int = 0) -> dict[str, Any]:
  """Decodes each line of `input_path` with the workdir's checkpoint into `output_path`;
  returns what it did: {'workdir', 'step' (the checkpoint loaded), 'lines', 'output'}."""
  storage.check_all_reachable({"--input": input_path, "--output": output_path})
  check_writable(output_path, {"--input": input_path})
  lines = read_lines(input_path)
  loaded = loading.load(workdir, step, tokenizer)
  outputs = decode_lines(loaded, lines, config, batch_size=batch_size, max_len=max_len,
                         prompt_eos=prompt_eos, seed=seed)
  write_lines(output_path, outputs)
  return {"workdir": workdir, "step": loaded.step, "lines": len(lines), "output": output_path}


def score_file(workdir: str, input_path: str, reference_path: str,
               output_path: Optional[str] = None, *, config: DecodeConfig = DecodeConfig(),
               step: Optional[int] = None, batch_size: int = 64, seed: int = 0) -> dict[str, Any]:
  """Decodes each line of `input_path` (a named test set's sources) and scores the outputs
  against `reference_path` (one reference a line) with sacrebleu's corpus BLEU, the figure
  `sacrebleu REFERENCE -i HYPOTHESES` prints; writes the hypotheses to `output_path` if given.
  Returns {'workdir', 'step', 'num_examples', 'bleu', 'bleu_signature', 'exact_match', ...}."""
  storage.check_all_reachable({"--input": input_path, "--reference": reference_path,
                               "--output": output_path})
  if output_path is not None:
    check_writable(output_path, {"--input": input_path, "--reference": reference_path})
  sources = read_lines(input_path)
  references = read_lines(reference_path, "--reference")
  if not sources:
    raise loading.InferenceError(f"--input={input_path} holds no line: there is nothing to "
                                 "score; pass a test set of at least one line.")
  if len(sources) != len(references):
    raise loading.InferenceError(
        f"--input={input_path} has {len(sources)} lines but --reference={reference_path} has "
        f"{len(references)}; pass one reference line per input line.")
  loaded = loading.load(workdir, step)
  hypotheses = decode_lines(loaded, sources, config, batch_size=batch_size, seed=seed)
  if output_path is not None:
    write_lines(output_path, hypotheses)
  bleu = evaluation.corpus_bleu(hypotheses, references)
  return {"workdir": workdir, "step": loaded.step, "input": input_path,
          "reference": reference_path, "hypotheses_file": output_path,
          "num_examples": len(sources), "bleu": bleu.score, "bleu_signature": bleu.signature,
          "exact_match": float(np.mean([h == r for h, r in zip(hypotheses, references)]))
          if sources else 0.0}
