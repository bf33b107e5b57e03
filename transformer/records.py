"""Run records as plain JSON values: the form in which configs are stored (config.json, a
checkpoint's record, a sweep point's result.json) and compared (a resume's changes, a sweep's
changed points). Imports no jax, so that stored results are read where jax is not loaded."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from transformer.config import ModelConfig


def to_json(value: Any) -> Any:
  """A JSON-ready copy: ModelConfig/dataclasses/ConfigDicts to dicts, numpy to Python."""
  if isinstance(value, ModelConfig):
    return to_json(value.to_dict())
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    return to_json(dataclasses.asdict(value))
  if hasattr(value, "to_dict") and callable(value.to_dict):  # a ConfigDict
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


def flat_fields(fields: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
  """{'synthetic': {'seed': 0}} -> {'synthetic.seed': 0}: a nested field's change is named."""
  flat: dict[str, Any] = {}
  for key, value in fields.items():
    if hasattr(value, "to_dict"):  # a ConfigDict
      value = value.to_dict()
    if isinstance(value, Mapping):
      flat.update(flat_fields(value, f"{prefix}{key}."))
    else:
      flat[f"{prefix}{key}"] = value
  return flat
