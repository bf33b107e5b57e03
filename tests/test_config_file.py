"""WORKDIR/config.json: JSON-ready copies of configs, one-line errors."""

import json
import pathlib

import ml_collections
import numpy as np
import pytest

from transformer.checkpoint import config_file
from transformer.config import ModelConfig
from transformer.errors import RunError

MODEL = ModelConfig(vocab_size=64, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                    num_decoder_layers=1, max_len=32)


def test_to_json_turns_configs_and_numpy_into_json_types():
  config = ml_collections.ConfigDict({"lr": np.float32(0.5), "steps": np.int64(3),
                                      "shape": (2, 3), "table": np.arange(3)})
  got = config_file.to_json({"model": MODEL, "run": config, "dtype": np.dtype("float32")})
  assert got["model"] == MODEL.to_dict()
  assert got["run"] == {"lr": 0.5, "steps": 3, "shape": [2, 3], "table": [0, 1, 2]}
  assert got["dtype"] == "float32"
  json.dumps(got)  # every value is JSON


def test_write_then_read_round_trips_and_leaves_no_temporary_file(tmp_path):
  path = config_file.write_config(str(tmp_path), {"model": MODEL, "batch_size": 8})
  assert pathlib.Path(path).read_text().startswith("{\n  ")  # pretty, for people
  assert config_file.read_config(str(tmp_path)) == {"model": MODEL.to_dict(), "batch_size": 8}
  assert ModelConfig.from_dict(config_file.read_config(str(tmp_path))["model"]) == MODEL
  assert sorted(p.name for p in tmp_path.iterdir()) == [config_file.CONFIG_FILE]


def test_mistakes_are_one_clear_line(tmp_path):
  with pytest.raises(ValueError, match="needs a 'model' entry"):
    config_file.write_config(str(tmp_path), {"batch_size": 8})
  missing = tmp_path / "no_such_run"
  with pytest.raises(FileNotFoundError) as e:
    config_file.read_config(str(missing))
  assert "\n" not in str(e.value) and "config.json" in str(e.value)
  assert f"--workdir={missing}" in str(e.value)


def test_a_malformed_config_json_is_one_line(tmp_path):
  (tmp_path / config_file.CONFIG_FILE).write_text('{"model": {"d_model": 3')  # cut off
  with pytest.raises(RunError) as e:
    config_file.read_config(str(tmp_path))
  assert "\n" not in str(e.value) and str(e.value).startswith(
      f"{tmp_path / config_file.CONFIG_FILE} is not valid JSON (")
  assert "delete it and rerun training" in str(e.value)
