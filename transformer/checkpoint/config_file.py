"""WORKDIR/config.json: the resolved experiment and model config of a run, written atomically."""

from __future__ import annotations

import json
from typing import Any, Mapping


from transformer import storage
from transformer.records import to_json  # re-exported: checkpoint.to_json
from transformer.errors import ConfigError, MissingFileError, RunError

CONFIG_FILE = "config.json"
# The entry of config.json (and of each checkpoint's config) that holds the run's identity:
# what its data and vocabulary were beyond the config fields (training.workdir_checks).
IDENTITY_KEY = "identity"


def write_config(workdir: str, config: Mapping[str, Any]) -> str:
  """Writes `workdir/config.json` (pretty, atomically); returns its path."""
  if "model" not in config:
    raise ConfigError("write_config: the config needs a 'model' entry (ModelConfig.to_dict()).")
  storage.as_path(workdir).mkdir(parents=True, exist_ok=True)
  path = storage.join(workdir, CONFIG_FILE)
  storage.write_atomically(path, json.dumps(to_json(config), indent=2, sort_keys=True) + "\n")
  return path


def read_config(workdir: str) -> dict[str, Any]:
  """Reads `workdir/config.json`."""
  path = storage.join(workdir, CONFIG_FILE)
  if not storage.as_path(path).exists():
    raise MissingFileError(
        f"No {CONFIG_FILE} in {workdir!r}: check the path, or train there first "
        f"(scripts/train.py --workdir={workdir}).")
  try:
    config = json.loads(storage.as_path(path).read_text())
  except json.JSONDecodeError as e:
    raise RunError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}); restore it, or "
                   "delete it and rerun training, which writes it again from the newest "
                   "checkpoint's config.") from None
  # write_config always writes a model config: one without (emptied, or another file) would
  # compare as a model whose every field changed.
  if not (isinstance(config, dict) and all(isinstance(config.get(k, {}), dict)
                                           for k in ("experiment", "model"))
          and config.get("model")):
    raise RunError(f"{path} is not a config this package wrote (it holds "
                   f"{type(config).__name__} {json.dumps(config)[:60]}); restore it, or delete "
                   "it and rerun training, which writes it again from the newest checkpoint's "
                   "config.")
  return config
