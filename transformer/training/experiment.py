"""The experiment config: the fields every configs/*.py shares, and the ModelConfig it names.

`base_config()` lays out the defaults that `fields` declares (each field once, with its
bounds and role, in a typed section); configs/*.py start from it and override. `config.model`
holds a recipe name plus an override slot for every ModelConfig field (None = the recipe's
value), so `--config.model.FIELD=VALUE` works for every knob.

`parse(config)` checks it and makes the one value a run is built from: an `Experiment`, frozen,
whose `model` is the typed ModelConfig (scale modes parsed, built once) and whose `data`,
`optimization`, `loss` and `loop` are the typed sections of the other fields. Nothing here imports
jax, so the command line says a mistake before jax, a workdir or any data exists.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import traceback
import types
import typing
from typing import Any

import ml_collections
from ml_collections import config_dict

from transformer import model_kinds, storage
from transformer.config import SCALE_FIELDS, ModelConfig
from transformer.data import settings
from transformer.errors import (ConfigError, MissingFileError, TrainingError, UserError,
                               one_line)
from transformer.token_ids import NUM_RESERVED
from transformer.training import fields



def _placeholder_type(field: dataclasses.Field) -> type:
  hint = typing.get_type_hints(ModelConfig)[field.name]
  if field.name in SCALE_FIELDS:
    return str  # 'sqrt_d' or '2.5': numbers are parsed in model_config()
  for t in (bool, int, float, str):
    if hint is t or t in typing.get_args(hint):
      return t
  return str


def model_fields(recipe: str = "vaswani2017", **overrides: Any) -> ml_collections.ConfigDict:
  """{'recipe': name, FIELD: None (the recipe's value) or an override, ...}."""
  slots = {"recipe": recipe}
  for f in dataclasses.fields(ModelConfig):
    slots[f.name] = config_dict.placeholder(_placeholder_type(f))
  model = ml_collections.ConfigDict(slots)
  for k, v in overrides.items():
    if k not in model:
      raise ConfigError(f"ModelConfig has no field {k!r}.")
    model[k] = str(v) if k in SCALE_FIELDS else v
  return model


def base_config() -> ml_collections.ConfigDict:
  """Defaults shared by every experiment config, as `fields` declares them; configs/*.py
  override them."""
  c = ml_collections.ConfigDict({"model": model_fields()})
  for section in fields.SECTIONS:
    for name, value in _config_fields(section).items():
      c[name] = value
  return c


def _config_fields(section: type) -> dict[str, Any]:
  """A section's fields in ml_collections form: a None default a typed placeholder, a nested
  section or a mapping a sub-config."""
  out: dict[str, Any] = {}
  for f in dataclasses.fields(section):
    value = fields.default(f)
    if fields.nested(f) is not None:
      value = ml_collections.ConfigDict(_config_fields(fields.nested(f)))
    elif isinstance(value, dict):
      value = ml_collections.ConfigDict(value)
    elif value is None and f.metadata["unset"] is not None:
      value = config_dict.placeholder(f.metadata["unset"])
    out[f.name] = value
  return out


def with_defaults(recorded: dict[str, Any]) -> ml_collections.ConfigDict:
  """A recorded experiment (a checkpoint's, a sweep point's), with the fields it predates
  set to `base_config`'s defaults: a run recorded before a field existed reads as it ran."""
  config = ml_collections.ConfigDict(recorded)
  for name, value in base_config().items():
    if name not in config:
      config[name] = value
  return config


@dataclasses.dataclass(frozen=True)
class Experiment:
  """An experiment, checked and frozen: what a run is built from (`training.run`'s constructors)."""
  config: ml_collections.FrozenConfigDict  # every field, as given (read-only)
  model: ModelConfig  # recipe + overrides; its vocabulary as the config's data plans it
  vocab_from: str  # 'model.vocab_size' when set, else where the data's planned vocabulary is
  # The typed sections of `config` (transformer.training.fields), built once from it.
  data: fields.Data = dataclasses.field(init=False)
  optimization: fields.Optimization = dataclasses.field(init=False)
  loss: fields.Loss = dataclasses.field(init=False)
  loop: fields.Loop = dataclasses.field(init=False)

  def __post_init__(self):
    for section in fields.SECTIONS:
      object.__setattr__(self, section.__name__.lower(), fields.build(section, self.config))


class OfExperiment:
  """What is built from an experiment (a Run, a loaded checkpoint) reads its fields as
  `config`, its typed ModelConfig as `model_config` and its data section as `data`."""
  experiment: Experiment

  @property
  def config(self) -> ml_collections.FrozenConfigDict:
    return self.experiment.config

  @property
  def model_config(self) -> ModelConfig:
    return self.experiment.model

  @property
  def data(self) -> fields.Data:
    return self.experiment.data


def parse(config: ml_collections.ConfigDict | Experiment) -> Experiment:
  """The Experiment of a config, after every check that needs no data (`validate`); an
  Experiment is returned as it is."""
  if isinstance(config, Experiment):
    return config
  model, vocab_from = validate(config)
  return Experiment(_frozen(config), model, vocab_from)


def recorded(config: ml_collections.ConfigDict, model: ModelConfig) -> Experiment:
  """The Experiment a checkpoint recorded (its fields, read by `with_defaults`, and its
  ModelConfig): read as it ran, not checked again (its data may be gone, its paths moved)."""
  return Experiment(_frozen(config), model, "the checkpoint's record")


def changed(exp: Experiment, **fields_: Any) -> Experiment:
  """The experiment with top-level fields changed (an evaluation's batch size and data
  directory, a benchmark's loop settings), its ModelConfig kept; not checked again."""
  config = exp.config.as_configdict()
  config.update(fields_)
  return Experiment(_frozen(config), exp.model, exp.vocab_from)


def _frozen(config: ml_collections.ConfigDict) -> ml_collections.FrozenConfigDict:
  """The config, read-only; a field FrozenConfigDict cannot hold (a dict inside a list) is
  one line."""
  try:
    return ml_collections.FrozenConfigDict(config)
  except ValueError as e:
    raise ConfigError(f"The experiment config cannot be frozen ({one_line(e, 200)}); hold "
                      "nested settings in a sub-config, not in a list.") from None


def check_data_vocab(exp: Experiment, data_vocab_size: int) -> None:
  """The prepared data's vocabulary against the one the model was built with: the same, or
  smaller than an explicit model.vocab_size."""
  if exp.config.model.vocab_size is None and exp.model.vocab_size != data_vocab_size:
    raise TrainingError(f"The data gave a vocabulary of {data_vocab_size} where {exp.vocab_from} "
                      f"gives {exp.model.vocab_size}; set "
                      f"--config.model.vocab_size={data_vocab_size}.")
  _check_vocab_floor(exp.model.vocab_size, data_vocab_size)


def _check_vocab_floor(model_vocab_size: int, data_vocab_size: int) -> None:
  if model_vocab_size < data_vocab_size:
    raise ConfigError(f"model.vocab_size={model_vocab_size} is smaller than the dataset's "
                      f"vocabulary ({data_vocab_size}); leave it unset to use the dataset's.")


def parse_scale(value: Any) -> Any:
  """A scale field's value from text: '2.5' -> 2.5, 'sqrt_d' -> 'sqrt_d', numbers as they are.

  Config files and command lines carry scale fields as strings (a mode or a number).
  """
  if isinstance(value, str):
    try:
      return float(value)
    except ValueError:
      return value
  return value


def model_config(config: ml_collections.ConfigDict, vocab_size: int) -> ModelConfig:
  """The ModelConfig of an experiment: recipe, then overrides; vocab and max_len from the data."""
  given = {k: parse_scale(v) for k, v in config.model.items()
           if k != "recipe" and v is not None}
  given.setdefault("vocab_size", vocab_size)
  given.setdefault("max_len", config.max_len)
  _check_vocab_floor(given["vocab_size"], vocab_size)
  return ModelConfig.from_recipe(config.model.recipe, **given)


def validate(config: ml_collections.ConfigDict) -> tuple[ModelConfig, str]:
  """Checks every setting that needs no data: a mistake ends a run before it writes anything.
  Returns (the ModelConfig, where its vocabulary size came from): model.vocab_size when set,
  else the vocabulary the config's data plans (`data.settings.planned_vocab_size`: nothing is
  prepared).

  What depends on the data (the corpus) is checked when it is read.
  """
  for name, low in fields.bounds().items():
    value = config
    for part in name.split("."):
      value = value.get(part) if value is not None else None
    if value is None and "." in name:
      continue  # an optional sub-config this experiment does not have
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
      raise ConfigError(f"{name}={value!r} must be an integer >= {low}"
                        f"{' (0 = off)' if low == 0 else ''}.")
  _check_seeds(config)
  vocab_size = config.model.get("vocab_size")
  if vocab_size is not None and vocab_size <= NUM_RESERVED:
    raise ConfigError(f"model.vocab_size={vocab_size} leaves no room for tokens beside the "
                      f"{NUM_RESERVED} reserved ids (pad, eos, unk); leave it unset to use the "
                      "dataset's vocabulary.")
  test_fraction = config.test_fraction
  if not 0.0 <= test_fraction < 1.0:
    raise ConfigError(f"test_fraction={test_fraction} must be in [0, 1); e.g. 0.02, or 0 for no "
                      "test split.")
  _check_kind(config)
  check_paths_reachable(config)
  settings.check_data_config(config)  # before any data is prepared or tokenizer trained
  for section in (fields.Optimization, fields.Loss, fields.Loop):  # each checks itself
    fields.build(section, config).check()
  vocab_size, vocab_from = ((int(config.model.vocab_size), "model.vocab_size")
                            if config.model.get("vocab_size") else
                            settings.planned_vocab_size(config))
  model = model_config(config, vocab_size)  # the model's own checks
  if model.dtype == "float16":
    raise ConfigError("model.dtype='float16' needs loss scaling, which training does not do; "
                      "use model.dtype='bfloat16' (float32 range, no scaling needed).")
  if config.max_len > model.max_len and model.has_position_table:
    raise ConfigError(f"Rows of max_len={config.max_len} tokens exceed the model's position "
                      f"table (model.max_len={model.max_len}); raise model.max_len or lower "
                      "max_len.")
  return model, vocab_from


def check_paths_reachable(config: ml_collections.ConfigDict, prefix: str = "--config.") -> None:
  """A gs:// path among the config's data paths (`fields.paths`) without gcsfs, or a
  tfds_data_dir that is a file: one line naming the field (`storage.check_reachable`), before
  any data is read."""
  storage.check_all_reachable({f"{prefix}{k}": config.get(k) for k in fields.paths()})
  settings.check_tfds_data_dir(config.get("tfds_data_dir"), f"{prefix}tfds_data_dir")


def _check_kind(config: ml_collections.ConfigDict) -> None:
  """The model kind, checked when it is named: it exists, a class of one's own answers every
  question of ModelKind, and BLEU during training has a source to decode from."""
  kind = model_kinds.get(config.model_type)
  if not kind.built_in:  # a class of one's own: its module has imported jax already
    from transformer import models  # pylint: disable=import-outside-toplevel
    models.check_answers(model_kinds.import_class(kind.name), kind.name)
  if config.bleu_every_steps:
    kind.check_has_source(f"bleu_every_steps={config.bleu_every_steps}")


def _check_seeds(config: ml_collections.ConfigDict) -> None:
  seed = config.seed
  if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
    raise ConfigError(f"seed={seed!r} must be an integer in [0, 2**32) (the data order and "
                      "initialisation take it as an unsigned 32-bit seed).")
  split_seed = config.split_seed
  if split_seed is not None and (isinstance(split_seed, bool) or not 0 <= split_seed < 2**32):
    raise ConfigError(f"split_seed={split_seed!r} must be None (the run's seed) or an integer "
                      "in [0, 2**32).")


def load_module(path: str) -> types.ModuleType:
  """The Python file `path` run as a module (configs and sweep files are code); a file that
  does not parse or fails as it runs is one line naming the file, the line and the error."""
  spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except UserError:
    raise  # already one line, said on purpose
  except SyntaxError as e:  # in the file, or in a file it imports: e.filename says which
    raise ConfigError(f"{e.filename or path} does not parse ({e.msg} at line {e.lineno}); "
                      "fix it.") from None
  except Exception as e:  # noqa: BLE001  (the file's own code: the user's to fix)
    raise ConfigError(f"{path} fails as it is loaded ({type(e).__name__}: {one_line(e, 200)}"
                      f"{_line_in(e, path)}); fix it.") from None
  return module


def _line_in(e: BaseException, path: str) -> str:
  """' at line N': the line of `path` where `e` was raised, as its traceback says ('' where
  it was raised elsewhere, in a module the file imports)."""
  lines = [frame.lineno for frame in traceback.extract_tb(e.__traceback__)
           if os.path.abspath(frame.filename) == os.path.abspath(path)]
  return f" at line {lines[-1]}" if lines else ""


def call_get(module: types.ModuleType, name: str, path: str, want: type, *args: Any) -> Any:
  """`module.name(*args)` of a config or sweep file, checked: it exists, it runs, and it
  returns a `want`; otherwise one line naming the file."""
  function = getattr(module, name, None)
  if not callable(function):
    raise ConfigError(f"{path} has no {name}() function.")
  try:
    value = function(*args)
  except UserError:
    raise  # already one line, said on purpose (configs/lm.py:NAME of an unknown recipe)
  except Exception as e:  # noqa: BLE001  (the file's own code)
    raise ConfigError(f"{path}'s {name}() fails ({type(e).__name__}: {one_line(e, 200)}"
                      f"{_line_in(e, path)}); fix it.") from None
  if not isinstance(value, want):
    raise ConfigError(f"{path}'s {name}() returned {type(value).__name__} {value!r:.60}, not a "
                      f"{want.__name__}.")
  return value


def load_config(path: str) -> ml_collections.ConfigDict:
  """get_config() of a config file (as --config=PATH does), or get_config(ARG) for PATH:ARG
  (as --config=PATH:ARG does), for tests, sweeps and notebooks."""
  path, colon, arg = path.partition(":")
  if not os.path.isfile(path):
    raise MissingFileError(f"Config file {path} does not exist; pass a path like "
                           "configs/default.py.")
  return call_get(load_module(path), "get_config", path, ml_collections.ConfigDict,
                  *([arg] if colon else []))
