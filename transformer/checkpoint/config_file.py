"""WORKDIR/config.json: the resolved experiment and model config of a run, written atomically."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping

import numpy as np

from transformer.config import ModelConfig
from transformer.errors import ConfigError, MissingFileError

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
  tmp = f"{path}.tmp-{os.getpid()}"
  with open(tmp, "w") as f:
    json.dump(to_json(config), f, indent=2, sort_keys=True)
    f.write("\n")
  os.replace(tmp, path)  # never a half-written config.json
  return path


def read_config(workdir: str) -> dict[str, Any]:
  """Reads `workdir/config.json`."""
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.exists(path):
    raise MissingFileError(
        f"No {CONFIG_FILE} in {workdir!r}: check the path, or train there first "
        f"(scripts/train.py --workdir={workdir}).")
  with open(path) as f:
    return json.load(f)
