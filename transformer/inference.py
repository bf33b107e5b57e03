"""A trained workdir as a translator or text generator: load it, decode lines, evaluate it.

  loaded = load(workdir)                         # newest readable checkpoint, its tokenizer
  texts = decode_lines(loaded, ["a b c", ""])    # one output line per input line, in order
  results = evaluate(workdir)                    # perplexity; BLEU + exact match (seq2seq)

The tokenizer is the workdir's own (`transformer.data.tokenizer.load_tokenizer`); a synthetic
run from before tokenizers were saved gets the synthetic task's. scripts/decode.py and
scripts/evaluate.py are thin absl wrappers around this module.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional, Sequence

import flax.linen as nn
import jax
import ml_collections
import numpy as np
from absl import logging
from etils import epath

from transformer import checkpoint, decoding, evaluation
from transformer.config import ModelConfig
from transformer.data import pipeline
from transformer.data import tokenizer as tokenizers
from transformer.decoding import EOS_ID, DecodeConfig
from transformer.models import DecoderOnly
from transformer.training import loop, sharding, steps

EVAL_DIR = "eval"  # WORKDIR/eval/<step>/: results.json, hypotheses.txt, references.txt


class InferenceError(ValueError):
  """A mistake the user can fix (workdir, checkpoint, tokenizer); one sentence with the fix."""


@dataclasses.dataclass(frozen=True)
class Loaded:
  """One checkpoint of a workdir, ready to decode."""
  workdir: str
  step: int
  model: nn.Module
  params: Any
  model_config: ModelConfig
  experiment: ml_collections.ConfigDict
  tokenizer: Any  # encode(str) -> list[int] (no EOS), decode(ids) -> str, vocab_size

  @property
  def is_lm(self) -> bool:
    return isinstance(self.model, DecoderOnly)


def load(workdir: str, step: Optional[int] = None, tokenizer: Optional[str] = None) -> Loaded:
  """The params of `step` (default: the newest readable checkpoint), model and tokenizer.

  tokenizer: a tokenizer file or workdir to use instead of the workdir's own.
  """
  try:
    saved = checkpoint.read_config(workdir)
    step, (params, model_config) = _load_params(workdir, step)
  except FileNotFoundError as e:
    raise InferenceError(_one_line(e)) from None
  if "experiment" not in saved:
    raise InferenceError(f"{workdir}/config.json has no 'experiment' entry, so it was not "
                         "written by scripts/train.py; pass the workdir of a training run.")
  experiment = ml_collections.ConfigDict(saved["experiment"])
  tok = _tokenizer(workdir, experiment, tokenizer)
  _check_vocab(tok, model_config, experiment, tokenizer or workdir)
  model = loop.build_model(experiment, model_config)
  return Loaded(workdir, step, model, params, model_config, experiment, tok)


def _load_params(workdir: str, step: Optional[int]) -> tuple[int, tuple[Any, ModelConfig]]:
  """(step, load_params(...)): newest first, skipping damaged checkpoints as load_params does."""
  if step is not None:
    return step, checkpoint.load_params(workdir, step)
  found = checkpoint._finished_steps(epath.Path(workdir) / checkpoint.CHECKPOINT_DIR)
  if not found:
    checkpoint.load_params(workdir)  # raises its one-line FileNotFoundError
  for s in reversed(found[1:]):
    try:
      return s, checkpoint.load_params(workdir, s)
    except Exception as e:  # noqa: BLE001  (damaged: fall back, as load_params does)
      logging.warning("Skipping damaged checkpoint %d of %s (%s); trying an older one.", s,
                      workdir, _one_line(e))
  return found[0], checkpoint.load_params(workdir, found[0])


def _tokenizer(workdir: str, experiment: ml_collections.ConfigDict, path: Optional[str]):
  try:
    return tokenizers.load_tokenizer(path or workdir)
  except FileNotFoundError as e:
    if path is None and experiment.get("dataset") == "synthetic":
      s = experiment.synthetic  # a run from before workdirs held their tokenizer
      return tokenizers.SyntheticTokenizer(s.task, s.vocab_size)
    raise InferenceError(_one_line(e)) from None


def _check_vocab(tok: Any, model_config: ModelConfig, experiment: ml_collections.ConfigDict,
                 where: str) -> None:
  """The tokenizer must be the one the model was trained with: the same vocabulary size
  (or, where model.vocab_size was set by hand, one that fits in it)."""
  size, want = int(tok.vocab_size), model_config.vocab_size
  set_by_hand = (experiment.get("model") or {}).get("vocab_size") is not None
  if size > want or (size != want and not set_by_hand):
    raise InferenceError(
        f"The tokenizer of {where} has {size} ids but the checkpoint's model has "
        f"vocab_size={want}: they were not trained together; use the workdir's own tokenizer "
        "(drop --tokenizer) or the workdir whose checkpoints it was trained with.")


def _one_line(e: BaseException) -> str:
  return " ".join(str(e).strip("'\"").split())


# ---------------------------------------------------------------------------------------
# Lines of text in, lines of text out.
# ---------------------------------------------------------------------------------------
def prompt_ends_with_eos(experiment: ml_collections.ConfigDict) -> bool:
  """Whether an LM's prompt gets EOS appended: yes when it was trained on a seq2seq dataset
  read as inputs ++ targets (synthetic, parallel text, WMT), where EOS ends the source."""
  dataset = str(experiment.get("dataset"))
  return dataset in ("synthetic", "parallel_text") or "translate" in dataset


def max_input_len(loaded: Loaded) -> int:
  """Input tokens a line may have (EOS included): the training rows' length for a source;
  one less than max_len for an LM prompt, so that it can be continued."""
  limit = min(int(loaded.experiment.get("max_len") or loaded.model_config.max_len),
              loaded.model_config.max_len)
  return loaded.model_config.max_len - 1 if loaded.is_lm else limit


def encode_lines(loaded: Loaded, lines: Sequence[str], max_len: Optional[int] = None,
                 prompt_eos: Optional[bool] = None) -> tuple[list[list[int]], int]:
  """(ids of each line, number truncated). Sources end in EOS, as in training (so do LM
  prompts where `prompt_ends_with_eos`); an empty line gives []. A line longer than max_len
  is cut to its first max_len - 1 tokens + EOS (or its first max_len, without EOS)."""
  max_len = max_input_len(loaded) if max_len is None else max_len
  add_eos = prompt_ends_with_eos(loaded.experiment) if loaded.is_lm else True
  add_eos = add_eos if prompt_eos is None else prompt_eos
  out, truncated = [], 0
  for line in lines:
    ids = list(loaded.tokenizer.encode(line))
    if not ids:
      out.append([])
      continue
    ids = ids + [EOS_ID] if add_eos else ids
    if len(ids) > max_len:
      truncated += 1
      ids = ids[:max_len - 1] + [EOS_ID] if add_eos else ids[:max_len]
    out.append(ids)
  return out, truncated


def decode_lines(loaded: Loaded, lines: Sequence[str], config: DecodeConfig = DecodeConfig(), *,
                 batch_size: int = 64, max_len: Optional[int] = None,
                 prompt_eos: Optional[bool] = None, seed: int = 0) -> list[str]:
  """One output line per input line, in the input's order; an empty line gives an empty line.

  Lines are batched longest first (less padding) and each batch is padded to a multiple of 8
  tokens and to `batch_size` rows (fewer compilations). Too long lines are truncated, with
  one warning counting them. Sampling draws from fold_in(PRNGKey(seed), batch index).
  """
  if batch_size < 1:
    raise InferenceError(f"batch_size={batch_size} must be >= 1.")
  cap = max_input_len(loaded) if max_len is None else max_len
  ids, truncated = encode_lines(loaded, lines, cap, prompt_eos)
  if truncated:
    logging.warning("%d of %d input line(s) had more than %d tokens and were truncated; pass a "
                    "larger --max_input_len to keep them whole (training rows held %d).",
                    truncated, len(lines), cap, max_input_len(loaded))
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


# ---------------------------------------------------------------------------------------
# Evaluation of a workdir.
# ---------------------------------------------------------------------------------------
def evaluate(workdir: str, *, step: Optional[int] = None, config: DecodeConfig = DecodeConfig(),
             batch_size: Optional[int] = None, tfds_data_dir: Optional[str] = None,
             decode: bool = True) -> dict[str, Any]:
  """Loss, perplexity and token accuracy on the eval split; for a seq2seq model also BLEU and
  exact-sequence accuracy of `config`'s decoding. Writes WORKDIR/eval/<step>/results.json,
  and hypotheses.txt / references.txt / sources.txt (one example a line) that
  `sacrebleu references.txt -i hypotheses.txt` scores as `results['bleu']`."""
  loaded = load(workdir, step)
  exp = ml_collections.ConfigDict(loaded.experiment.to_dict())
  if tfds_data_dir:
    exp.tfds_data_dir = tfds_data_dir
  mesh = sharding.make_mesh()
  devices = mesh.devices.size
  exp.batch_size = -(-(batch_size or exp.batch_size) // devices) * devices  # splits evenly
  try:
    datasets = pipeline.get_datasets(exp, workdir=workdir)
  except (ValueError, FileNotFoundError) as e:
    raise InferenceError(f"The eval data of {workdir} cannot be read ({_one_line(e)}).") from None
  params = jax.device_put(loaded.params, sharding.replicated(mesh))
  eval_step = jax.jit(steps.make_eval_step(loaded.model, label_smoothing=exp.label_smoothing,
                                           z_loss=exp.z_loss))
  results: dict[str, Any] = {"workdir": workdir, "step": loaded.step, "split": "eval"}
  results.update(loop.evaluate(eval_step, params, datasets, mesh))
  out_dir = os.path.join(workdir, EVAL_DIR, str(loaded.step))
  os.makedirs(out_dir, exist_ok=True)
  if decode and not loaded.is_lm:
    decoded = evaluation.decode_eval_split(loaded.model, params, datasets, mesh, config)
    results.update(decoded.metrics())
    results["bleu_signature"] = decoded.bleu.signature
    results["decode"] = dataclasses.asdict(config)
    for name, texts in (("hypotheses", decoded.hypotheses), ("references", decoded.references),
                        ("sources", decoded.sources)):
      _write_lines(os.path.join(out_dir, f"{name}.txt"), texts)
  path = os.path.join(out_dir, "results.json")
  with open(path + ".tmp", "w") as f:
    json.dump(results, f, indent=2, sort_keys=True)
    f.write("\n")
  os.replace(path + ".tmp", path)
  results["results_file"] = path
  return results


def _write_lines(path: str, lines: Sequence[str]) -> None:
  with open(path, "w", encoding="utf-8") as f:
    f.writelines(line + "\n" for line in lines)


def define_decode_flags(default_method: str = "beam"):
  """Defines --method, --beam_size, --alpha, --temperature, --top_k, --top_p, --extra_len
  (absl, for scripts); returns a function that builds the DecodeConfig from their values."""
  from absl import flags

  d = DecodeConfig()
  defined = dict(
      method=flags.DEFINE_enum("method", default_method, decoding.METHODS, "Decoding method."),
      beam_size=flags.DEFINE_integer("beam_size", d.beam_size, "Beam search: beams."),
      alpha=flags.DEFINE_float("alpha", d.alpha, "Beam search: GNMT length penalty exponent."),
      temperature=flags.DEFINE_float("temperature", d.temperature, "Sampling: temperature."),
      top_k=flags.DEFINE_integer("top_k", d.top_k, "Sampling: keep the k likeliest (0 = all)."),
      top_p=flags.DEFINE_float("top_p", d.top_p, "Sampling: nucleus mass (1 = all)."),
      extra_len=flags.DEFINE_integer("extra_len", d.extra_len,
                                     "Output tokens allowed beyond the input's length."),
  )
  return lambda: DecodeConfig(**{name: flag.value for name, flag in defined.items()})
