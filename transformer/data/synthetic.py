"""Synthetic seq2seq tasks as a TFDS dataset (array_record, no TensorFlow needed).

Tasks (each example: {'inputs': int32[n], 'targets': int32[m]}, both ending with EOS):
  copy      target = input symbols
  reverse   target = input symbols reversed
  sort      target = input symbols sorted ascending (by id)
  addition  input = digits of a, '+', digits of b; target = digits of a + b (no leading zeros)

Token ids: PAD=0, EOS=1, UNK=2 are reserved. Symbols of copy/reverse/sort are 3..3+vocab_size-1,
so the model needs `vocab_size_for(task, vocab_size)` = vocab_size + 3 ids. Addition uses digits
'0'..'9' -> 3..12 and '+' -> 13 (model vocabulary 14).

Sampling: lengths (min_len..max_len, counted before EOS) are uniform, then symbols uniform; for
addition each operand first draws its number of digits (1..digits) uniformly, then a value
with that many digits. Everything comes from one numpy Generator seeded by `seed`, so the
same parameters always give the same dataset.

Held-out split 'validation': its inputs are distinct from each other, and train never holds
an input equal to a validation input (exact match of the input sequence, kept in a hash
set; train draws that hit it are redrawn, length included). Train inputs may repeat among
themselves. The task space must hold at least twice num_eval distinct inputs, else a
ValueError. Redrawing skews train slightly away from the shortest lengths when validation
covers them. Note sort: two train/validation inputs that differ only in order share a target.
"""

from __future__ import annotations

import dataclasses
import os
import string
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import tensorflow_datasets as tfds

from transformer.data.prepared import prepared
from transformer.errors import ConfigError
from transformer.token_ids import EOS_ID, NUM_RESERVED, PAD_ID, UNK_ID

TASKS = ("copy", "reverse", "sort", "addition")
# The one home of the synthetic tasks' defaults (the experiment config's `synthetic` fields).
DEFAULTS = dict(task="reverse", vocab_size=32, min_len=4, max_len=16, digits=3, num_train=20000,
                num_eval=1000, seed=0)
_PLUS = NUM_RESERVED + 10  # '+' after the ten digits
_ADDITION_VOCAB = _PLUS + 1
_MAX_DRAWS = 1000  # redraws per example before the space is declared exhausted
LETTERS = string.ascii_lowercase + string.ascii_uppercase


def vocab_size_for(task: str, vocab_size: int) -> int:
  """Model vocabulary (reserved ids included) needed by `task` with `vocab_size` symbols."""
  _check_task(task)
  return _ADDITION_VOCAB if task == "addition" else vocab_size + NUM_RESERVED


def to_text(ids: Sequence[int] | np.ndarray, task: str) -> str:
  """Human-readable rendering for logs: '12+345' for addition, 'a b c' otherwise.

  Stops at the first EOS, skips PAD; UNK renders as '<unk>', ids out of range as '<id>'.
  Symbols beyond 52 letters render as '#k' (symbol index k).
  """
  out: list[str] = []
  for i in np.asarray(ids).reshape(-1).tolist():
    if i == EOS_ID:
      break
    if i == PAD_ID:
      continue
    if i == UNK_ID:
      out.append("<unk>")
    elif task == "addition":
      out.append(str(i - NUM_RESERVED) if NUM_RESERVED <= i < _PLUS else "+" if i == _PLUS
                 else f"<{i}>")
    elif i >= NUM_RESERVED:
      k = i - NUM_RESERVED
      out.append(LETTERS[k] if k < len(LETTERS) else f"#{k}")
    else:
      out.append(f"<{i}>")
  return "".join(out) if task == "addition" else " ".join(out)


def dataset_config(fields: Mapping[str, Any]) -> "SyntheticConfig":
  """The dataset an experiment's `synthetic` sub-config names, its fields checked (one line
  for a bad one): what `build_synthetic` prepares, named before anything is."""
  return SyntheticConfig.make(**{k: fields[k] for k in DEFAULTS if k in fields})


def _check_task(task: str) -> None:
  if task not in TASKS:
    raise ConfigError(f"Unknown synthetic task {task!r}; use one of {', '.join(TASKS)}.")


@dataclasses.dataclass(eq=False)
class SyntheticConfig(tfds.core.BuilderConfig):
  """One synthetic dataset; build with `SyntheticConfig.make` so the name encodes every field."""
  task: str = DEFAULTS["task"]
  vocab_size: int = DEFAULTS["vocab_size"]
  min_len: int = DEFAULTS["min_len"]
  max_len: int = DEFAULTS["max_len"]
  digits: int = DEFAULTS["digits"]
  num_train: int = DEFAULTS["num_train"]
  num_eval: int = DEFAULTS["num_eval"]
  seed: int = DEFAULTS["seed"]

  @classmethod
  def make(cls, *, task: str, vocab_size: int = DEFAULTS["vocab_size"],
           min_len: int = DEFAULTS["min_len"], max_len: int = DEFAULTS["max_len"],
           digits: int = DEFAULTS["digits"], num_train: int = DEFAULTS["num_train"],
           num_eval: int = DEFAULTS["num_eval"], seed: int = DEFAULTS["seed"]) -> "SyntheticConfig":
    _check_task(task)
    for field, value, low in (("vocab_size", vocab_size, 1), ("min_len", min_len, 1),
                              ("digits", digits, 1), ("num_train", num_train, 1),
                              ("num_eval", num_eval, 1), ("seed", seed, 0)):
      if int(value) != value or value < low:
        raise ConfigError(f"Synthetic {field}={value!r} must be an integer >= {low}.")
    if max_len < min_len:
      raise ConfigError(f"Synthetic max_len={max_len} is below min_len={min_len}; raise max_len.")
    if digits > 18:  # operands and sums stay exact in int64
      raise ConfigError(f"Synthetic digits={digits} exceeds 18; use at most 18 digits.")
    if task == "addition":
      # Fields addition ignores are normalised, so one name always means one dataset.
      vocab_size, min_len, max_len = 10, 1, 2 * digits + 1
      name = f"addition-d{digits}-n{num_train}_{num_eval}-s{seed}"
    else:
      digits = 0
      name = f"{task}-v{vocab_size}-l{min_len}_{max_len}-n{num_train}_{num_eval}-s{seed}"
    return cls(name=name, task=task, vocab_size=vocab_size, min_len=min_len, max_len=max_len,
               digits=digits, num_train=num_train, num_eval=num_eval, seed=seed,
               description=f"Synthetic {task} task ({name}).")

  def space_size(self) -> int:
    """Number of distinct inputs the task can draw."""
    if self.task == "addition":
      return (10 ** self.digits) ** 2
    return sum(self.vocab_size ** n for n in range(self.min_len, self.max_len + 1))


def _draw_operand(rng: np.random.Generator, digits: int) -> int:
  nd = int(rng.integers(1, digits + 1))
  return int(rng.integers(0 if nd == 1 else 10 ** (nd - 1), 10 ** nd))


def _digit_ids(n: int) -> list[int]:
  return [NUM_RESERVED + int(c) for c in str(n)]


def _draw(rng: np.random.Generator, cfg: SyntheticConfig) -> tuple[np.ndarray, np.ndarray]:
  """One (inputs, targets) pair without EOS."""
  if cfg.task == "addition":
    a, b = _draw_operand(rng, cfg.digits), _draw_operand(rng, cfg.digits)
    return (np.array(_digit_ids(a) + [_PLUS] + _digit_ids(b), np.int32),
            np.array(_digit_ids(a + b), np.int32))
  n = int(rng.integers(cfg.min_len, cfg.max_len + 1))
  x = rng.integers(NUM_RESERVED, NUM_RESERVED + cfg.vocab_size, size=n, dtype=np.int32)
  y = x if cfg.task == "copy" else x[::-1] if cfg.task == "reverse" else np.sort(x)
  return x, np.ascontiguousarray(y)


def generate(cfg: SyntheticConfig) -> dict[str, list[dict[str, np.ndarray]]]:
  """All examples of both splits, EOS appended: {'train': [...], 'validation': [...]}."""
  if cfg.space_size() < 2 * cfg.num_eval:
    raise ConfigError(
        f"Synthetic task {cfg.name} has only {cfg.space_size()} distinct inputs, too few for "
        f"num_eval={cfg.num_eval} held-out inputs kept out of train; lower num_eval or widen "
        "the task (vocab_size, max_len, digits).")
  rng = np.random.default_rng(cfg.seed)
  eos = np.array([EOS_ID], np.int32)
  held_out: set[bytes] = set()  # input bytes identify the input (int32, so length too)

  def sample(n: int, is_eval: bool) -> list[dict[str, np.ndarray]]:
    out = []
    for _ in range(n):
      for _ in range(_MAX_DRAWS):
        x, y = _draw(rng, cfg)
        key = x.tobytes()
        if key not in held_out:
          break
      else:
        raise ConfigError(f"Synthetic task {cfg.name}: no unseen input after {_MAX_DRAWS} draws; "
                         "lower num_eval or widen the task (vocab_size, max_len, digits).")
      if is_eval:
        held_out.add(key)
      out.append({"inputs": np.concatenate([x, eos]), "targets": np.concatenate([y, eos])})
    return out

  validation = sample(cfg.num_eval, True)  # first, so train can exclude it
  return {"train": sample(cfg.num_train, False), "validation": validation}


class SyntheticSeq2Seq(tfds.core.GeneratorBasedBuilder):
  """TFDS builder of the synthetic tasks; configs are made on the fly by `build_synthetic`."""
  name = "synthetic_seq2seq"
  VERSION = tfds.core.Version("1.0.0")  # bump whenever generated data would change
  BUILDER_CONFIGS = [SyntheticConfig.make(task="copy")]

  def _info(self) -> tfds.core.DatasetInfo:
    # Not dataset_info_from_configs: that reads metadata files beside a packaged builder.
    seq = tfds.features.Tensor(shape=(None,), dtype=np.int32)
    return tfds.core.DatasetInfo(
        builder=self, description=__doc__.split("\n")[0],
        features=tfds.features.FeaturesDict({"inputs": seq, "targets": seq}))

  def _split_generators(self, dl_manager):
    del dl_manager  # nothing to download
    splits = generate(self.builder_config)
    return {name: self._generate_examples(examples) for name, examples in splits.items()}

  def _generate_examples(self, examples: list[dict[str, np.ndarray]]
                         ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    yield from enumerate(examples)


def build_synthetic(data_dir: str | os.PathLike | None, *, task: str,
                    **params: int) -> SyntheticSeq2Seq:
  """The prepared builder for `SyntheticConfig.make(task=task, **params)` (the rest at
  DEFAULTS), generated once, reused from data_dir after.

  data_dir None = TFDS's default (~/tensorflow_datasets unless TFDS_DATA_DIR is set).
  Read it with `builder.as_data_source('train' | 'validation')`.
  """
  cfg = SyntheticConfig.make(task=task, **params)
  return prepared(lambda: SyntheticSeq2Seq(config=cfg, data_dir=data_dir,
                                           file_format="array_record"))
