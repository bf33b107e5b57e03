"""WORKDIR/config.json: the resolved experiment and model config of a run, written atomically."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping

import numpy as np

from transformer.config import ModelConfig
from transformer.errors import ConfigError, MissingFileError, RunError

CONFIG_FILE = "config.json"


def to_json(value: Any) -> Any:
  """A JSON-ready copy: ModelConfig/dataclasses/ConfigDicts to dicts, numpy to Python."""
  if isinstance(value, ModelConfig):
    return to_json(value.to_dict())
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    return to_json(dataclasses.asdict(value))
  if hasattr(value, "to_dict") and callable(value.to_dict):  # ml_collections.ConfigDict
    return to_json(value.to_dict())
  if isinstance(value, Mapping):
    return {str(k): to_json(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [to_json(v) for v in value]
  if isinstance(value, np.ndarray):
    return value.tolist()
  if isinstance(value, np.generic):
    return value.item()
  if value is None or isinstance(value, (bool, int, float, str)):
    return value
  return str(value)  # e.g. a dtype or a callable: recorded, not round-tripped


def write_config(workdir: str, config: Mapping[str, Any]) -> str:
  """Writes `workdir/config.json` (pretty, atomically); returns its path."""
  if "model" not in config:
    raise ConfigError("write_config: the config needs a 'model' entry (ModelConfig.to_dict()).")
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, CONFIG_FILE)
  write_atomically(path, json.dumps(to_json(config), indent=2, sort_keys=True) + "\n")
  return path


def write_atomically(path: str, text: str) -> None:
  """Writes `text` to `path` through a temporary file renamed over it: readers never see a
  half-written file, and a failed write (a full disk) leaves neither the file changed nor the
  temporary file behind."""
  tmp = f"{path}.tmp-{os.getpid()}"
  try:
    with open(tmp, "w") as f:
      f.write(text)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def read_config(workdir: str) -> dict[str, Any]:
  """Reads `workdir/config.json`."""
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.exists(path):
    raise MissingFileError(
        f"No {CONFIG_FILE} in {workdir!r}: check the path, or train there first "
        f"(scripts/train.py --workdir={workdir}).")
  with open(path) as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise RunError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}); restore it, or "
                     "delete it and rerun training, which writes it again from the newest "
                     "checkpoint's config.") from None
