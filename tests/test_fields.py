"""Every experiment field is declared once (transformer/data/fields.py, training/fields.py):
what validation, a resume, a sweep's identity and its inert handling do with a field follows
from that one line."""

import dataclasses

import pytest

from transformer.config import ModelConfig
from transformer.data import fields as data_fields
from transformer.errors import ConfigError
from transformer.research.sweeps import grid, report
from transformer.training import experiment, fields, workdir_checks
from transformer.training.fields import Role, declare


class _Throwaway:
  """Sections with a field more each, named as the sections they stand in for (an
  Experiment holds each section under its name)."""

  @dataclasses.dataclass(frozen=True)
  class Data(fields.Data):
    corpus_variant: str = declare("a", Role.SOURCE)  # which text: a sweep's identity
    read_hint: str = declare("", Role.INERT)  # advice: never compared

  @dataclasses.dataclass(frozen=True)
  class Loop(fields.Loop):
    watch_every_steps: int = declare(7, Role.RESUMABLE, at_least=1)


@pytest.fixture
def declared(monkeypatch):
  """The sections with a throwaway field in two of them, each declared once."""
  monkeypatch.setattr(fields, "SECTIONS", (_Throwaway.Data, fields.Optimization, fields.Loss,
                                          _Throwaway.Loop))


def _recorded(config):
  return {"experiment": config.to_dict()}


def _changes(saved, config):
  """What a resume of the run `saved` records with `config` changes, by the flag it needs."""
  return workdir_checks.resume_changes(saved, experiment.recorded(config, ModelConfig()), {})


def test_a_field_declared_once_is_a_default_a_bound_a_resume_rule_and_an_identity(declared):
  config = experiment.base_config()
  assert (config.corpus_variant, config.read_hint, config.watch_every_steps) == ("a", "", 7)
  saved = _recorded(config)

  config.watch_every_steps = 0  # validation: its bound
  with pytest.raises(ConfigError, match=r"watch_every_steps=0 must be an integer >= 1"):
    experiment.validate(config)

  config.watch_every_steps = 9  # a resume: resumable, so not a change of what the run computes
  assert _changes(saved, config).settings == []
  config.corpus_variant = "b"  # a data-stream change: refused but under allow_data_change
  assert _changes(saved, config).data == ["corpus_variant 'a' -> 'b'"]
  assert _changes(saved, config).settings == []
  config.read_hint = "get it elsewhere"  # inert: neither
  assert _changes(saved, config).settings == []
  assert grid.data_inputs(config)["corpus_variant"] == "b"  # a sweep's points' identity
  assert "read_hint" not in grid.data_inputs(config)


def test_a_stored_point_that_differs_in_an_inert_field_alone_is_the_same_point(declared):
  sweep = grid.Sweep(name="s", question="q", base="configs/default.py",
                     axes=({"model.d_model": [32]},), seeds=(0,))
  point = grid.expand(sweep)[0]
  stored = grid.point_config(sweep, point).to_dict()
  result = {"name": point.name, "config": {**stored, "read_hint": "elsewhere"}}
  assert report.changed_points(sweep, [result]) == []
  result["config"]["corpus_variant"] = "b"
  assert report.changed_points(sweep, [result]) == [
      f"{point.name} (corpus_variant 'b' -> 'a')"]


def test_a_field_no_section_declares_changes_what_the_run_computes():
  config = experiment.base_config()
  saved = _recorded(config)
  config.my_setting = 1
  assert _changes(saved, config).settings == ["my_setting None -> 1"]


def test_the_experiment_holds_its_sections_typed_and_built_once():
  exp = experiment.parse(experiment.load_config("configs/default.py"))
  assert exp.optimization.learning_rate == exp.config.learning_rate == 2e-3
  assert exp.data.tokenizer.kind == exp.config.tokenizer.kind
  assert exp.data.synthetic["task"] == "reverse" and exp.loop.eval_every_steps == 500
  with pytest.raises(dataclasses.FrozenInstanceError):
    exp.loss.label_smoothing = 0.0  # type: ignore[misc]


def test_a_section_is_built_from_a_mapping_only_and_an_unset_packing_packs_nothing():
  assert data_fields.of({"packing": None}).packing == data_fields.of({}).packing == "none"
  with pytest.raises(TypeError, match="Data is built from a config or a mapping, not list"):
    data_fields.of([("packing", "pack")])


def test_every_role_and_bound_is_declared_in_one_place():
  """The derived lists are what the sections say, and no field is declared twice."""
  names = [f.name for section in fields.SECTIONS for f in dataclasses.fields(section)]
  assert len(names) == len(set(names))
  assert set(names) | {"model"} == set(experiment.base_config().keys())
  assert fields.names(Role.INERT) == ("data_help", "data_threads", "data_prefetch")
  assert fields.paths() == ("tfds_data_dir", "data_files", "eval_files")
  assert fields.bounds()["tokenizer.train_examples"] == 1
