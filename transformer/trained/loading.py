"""A trained workdir, ready to decode: its newest readable checkpoint, model and tokenizer.

  loaded = load(workdir)                         # newest readable checkpoint, its tokenizer
  texts = lines.decode_lines(loaded, ["a b c"])  # transformer.inference.lines

The tokenizer is the workdir's own (`transformer.data.tokenizer.load_tokenizer`); a synthetic
run from before tokenizers were saved gets the synthetic task's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from absl import logging

from transformer import checkpoint, models
from transformer.data import synthetic, tokenizer as tokenizers
from transformer.data.fields import Data
from transformer.errors import InferenceError, MissingFileError, RunError, one_line
from transformer.training import run
from transformer.training.experiment import Experiment, OfExperiment, recorded, with_defaults


@dataclasses.dataclass(frozen=True)
class Loaded(OfExperiment):
  """One checkpoint of a workdir, ready to decode."""
  workdir: str
  step: int
  model: models.ModelKind
  params: Any  # the model's param tree (host arrays)
  experiment: Experiment  # the experiment and ModelConfig recorded with the checkpoint
  tokenizer: tokenizers.Tokenizer
  # What the run read beyond its config (training.workdir_checks.run_identity).
  identity: dict[str, Any] = dataclasses.field(default_factory=dict)

  def as_run(self, exp: Optional[Experiment] = None) -> run.Run:
    """The `run.Run` of these params on every device (`exp`: the recorded experiment, or one
    with eval-time changes such as the batch size, `experiment.changed`): mesh, steps and the
    params placed."""
    return run.for_reading(exp or self.experiment, self.params)


def load(workdir: str, step: Optional[int] = None, tokenizer: Optional[str] = None) -> Loaded:
  """The params of `step` (default: the newest readable checkpoint), model and tokenizer.

  The experiment (data, split, seeds, tokenizer settings) is the one recorded with that
  checkpoint, as training's resume reads it: an edited config.json changes nothing here.
  tokenizer: a tokenizer file or workdir to use instead of the workdir's own.
  """
  try:
    loaded = checkpoint.load_params(workdir, step)
  except (MissingFileError, RunError) as e:  # no checkpoint, or none readable
    raise InferenceError(one_line(e, limit=1000)) from None
  (params, model_config), step, record = loaded, loaded.step, loaded.record
  if not isinstance(record.get("experiment"), dict) or not record["experiment"]:
    raise InferenceError(f"Checkpoint {step} of {workdir} has no experiment config in its "
                         "record, so it was not written by scripts/train.py; pass the workdir "
                         "of a training run.")
  exp = recorded(with_defaults(record["experiment"]), model_config)
  _say_if_config_file_differs(workdir, step, record)
  if tokenizer is None:  # before reading it: a file not the run's own may not parse at all
    _check_own_tokenizer(workdir, record)
  tok = _tokenizer(workdir, exp.data, tokenizer)
  _check_vocab(tok, exp, tokenizer or workdir)
  model = run.build_model(exp.data.model_type, model_config)
  return Loaded(workdir, step, model, params, exp, tok,
                dict(record.get(checkpoint.IDENTITY_KEY) or {}))


def _say_if_config_file_differs(workdir: str, step: int, record: dict[str, Any]) -> None:
  """A warning naming the fields where config.json's experiment is not the loaded
  checkpoint's record: the record is what is used (a user who edited the file learns that the
  edit did nothing; a run resumed with more steps since shows num_train_steps)."""
  try:
    written = checkpoint.read_config(workdir).get("experiment") or {}
  except MissingFileError:
    return  # the record stands alone
  except RunError as e:
    logging.warning("%s; the record of checkpoint %d is used.", str(e).split(";")[0], step)
    return
  recorded = checkpoint.to_json(record["experiment"])
  fields = sorted(k for k in set(written) | set(recorded) if written.get(k) != recorded.get(k))
  if fields:
    more = f" and {len(fields) - 3} more" if len(fields) > 3 else ""
    logging.warning("%s/config.json differs from the record of checkpoint %d in %s%s; the record "
                    "is used (config.json is a copy for reading, never an input).", workdir,
                    step, ", ".join(fields[:3]), more)


def _tokenizer(workdir: str, data: Data, path: Optional[str]) -> tokenizers.Tokenizer:
  try:
    return tokenizers.load_tokenizer(path or workdir)
  except MissingFileError as e:
    if path is None and data.dataset == "synthetic":
      # A run from before workdirs held their tokenizer.
      s = {**synthetic.DEFAULTS, **data.synthetic}
      return tokenizers.SyntheticTokenizer(s["task"], s["vocab_size"])
    raise InferenceError(one_line(e, limit=1000)) from None


def _check_own_tokenizer(workdir: str, reference: dict[str, Any]) -> None:
  """The workdir's tokenizer file must be the one its run recorded (a copied-in file of the
  same size would read every id as another piece)."""
  recorded = reference.get(checkpoint.IDENTITY_KEY, {}).get("tokenizer")
  now = tokenizers.file_hash(workdir)
  if recorded and now and recorded != now:
    raise InferenceError(f"{workdir}'s tokenizer file is not the one its run was trained with "
                         f"({recorded} -> {now}); restore the run's own file (decode.py also takes "
                         "--tokenizer=FILE).")


def _check_vocab(tok: Any, exp: Experiment, where: str) -> None:
  """The tokenizer must be the one the model was trained with: the same vocabulary size
  (or, where model.vocab_size was set by hand, one that fits in it)."""
  size, want = int(tok.vocab_size), exp.model.vocab_size
  set_by_hand = (exp.config.get("model") or {}).get("vocab_size") is not None
  if size > want or (size != want and not set_by_hand):
    raise InferenceError(
        f"The tokenizer of {where} has {size} ids but the checkpoint's model has "
        f"vocab_size={want}: they were not trained together; use the workdir's own tokenizer "
        "(drop --tokenizer) or the workdir whose checkpoints it was trained with.")
