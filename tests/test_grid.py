"""Sweep grids: expansion of axes and seeds, point configs, one-line errors, shipped sweeps."""

import os

import pytest

from transformer.research import sweeps
from transformer.research.sweeps import Sweep

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = {"num_train_steps": 4, "log_every_steps": 2, "eval_every_steps": 4,
        "checkpoint_every_steps": 4, "diagnostics_every_steps": 2, "synthetic.num_train": 128,
        "synthetic.num_eval": 32, "batch_size": 16, "model.d_model": 32, "model.d_ff": 64,
        "model.num_decoder_layers": 1, "async_checkpoints": False}


def tiny_sweep(**kw) -> Sweep:
  fields = dict(name="t", question="q?", base=os.path.join(REPO, "configs/default.py"),
                axes=({"model.embed_scale": ["sqrt_d", "none"]},), seeds=(0,), fixed=TINY,
                metrics=("eval/nll", "init/decoder/embed/ratio"),
                curves=("eval/nll", "diagnostics/decoder/embed/ratio"))
  fields.update(kw)
  return Sweep(**fields)


def test_expand_zips_within_an_axis_and_crosses_axes():
  sweep = tiny_sweep(axes=({"model.d_model": [32, 64], "model.d_ff": [128, 256]},
                       {"learning_rate": [1e-3, 3e-3, 1e-2]}), seeds=(0, 1))
  points = sweeps.expand(sweep)
  assert len(points) == 2 * 3 * 2
  assert {dict(p.overrides)["model.d_ff"] // dict(p.overrides)["model.d_model"]
          for p in points} == {4}
  assert len({p.name for p in points}) == len(points)
  assert len({p.group for p in points}) == 6
  config = sweeps.point_config(sweep, points[-1])
  assert (config.model.d_model, config.model.d_ff, config.learning_rate, config.seed) == (
      64, 256, 1e-2, 1)
  assert config.num_train_steps == 4  # fixed applied


def test_model_scale_fields_take_numbers():
  sweep = tiny_sweep(axes=({"model.embed_init_std": [1.0, "inv_sqrt_d"]},))
  configs = [sweeps.point_config(sweep, p) for p in sweeps.expand(sweep)]
  assert [c.model.embed_init_std for c in configs] == ["1.0", "inv_sqrt_d"]


@pytest.mark.parametrize("kw, message", [
    (dict(axes=({"model.d_model": [32, 64], "model.d_ff": [128]},)), "equally many"),
    (dict(axes=({"model.no_such_field": [1]},)), "no field 'model.no_such_field'"),
    (dict(fixed={"nope": 1}), "no field 'nope'"),
    (dict(seeds=()), "no seeds"),
    (dict(base="configs/missing.py"), "is not a file"),
    # The point's seed would overwrite them: refused, not run as seed 0 under two names.
    (dict(axes=({"seed": [1, 2]},)), r"seed is set by the sweep's `seeds`.*seeds=\(1, 2\)"),
    (dict(fixed={**TINY, "seed": 3}), "seed is set by the sweep's `seeds`"),
    # A value of the wrong type: one line before any point runs, not ml_collections' TypeError.
    (dict(fixed={**TINY, "batch_size": "abc"}), "The sweep sets batch_size='abc', which does "
                                                "not fit the field"),
    (dict(axes=({"learning_rate": [1e-3, "fast"]},)), "learning_rate='fast'"),
    # One point named learning_rate=0.001,learning_rate=0.002 ran at 0.002 before.
    (dict(axes=({"learning_rate": [1e-3]}, {"learning_rate": [2e-3]})),
     r"^'learning_rate' is on axis 1 and on axis 0: a point can set it once"),
    (dict(axes=({"learning_rate": []},)), r"^Axis 0 of the sweep has no values"),
    # A dict for axes, a scalar for an axis's values: tracebacks once (AttributeError, len()).
    (dict(axes={"learning_rate": [1e-3, 2e-3]}), r"^axes=.* must be a tuple of .* dicts"),
    (dict(axes=({"learning_rate": 1e-3},)), r"^Axis 0 gives 'learning_rate' the value 0.001"),
    # A name over 255 bytes failed at the point's mkdir (ENAMETOOLONG) after the first points.
    (dict(axes=({"data_help": ["x" * 300]},)), r"in 3\d\d bytes, over the 255 a directory"),
    # first_arms, holm_family and itt_missing name the sweep's arms and comparisons.
    (dict(arm_names=("paper", "none"), first_arms=("paper", "paper")), "first_arms=.*distinct"),
    (dict(arm_names=("paper", "none"), first_arms=("mup",)), "first_arms=.*arms are"),
    (dict(arm_names=("paper", "none"), holm_family=(("none", "paper"),)),
     r"holm_family .* \('none', 'paper'\) is not one"),  # untuned, no baseline: no comparison
    (dict(arm_names=("paper", "none"), baseline="embed_scale=sqrt_d",
          holm_family=(("none", "paper"), ("none", "paper"))), "names a comparison twice"),
    # Within a contrast only each arm against its own reference: not across the other axis.
    (dict(axes=({"model.d_model": [32, 64]}, {"model.embed_scale": ["sqrt_d", "none"]}),
          arm_names=("paper@32", "none@32", "paper@64", "none@64"),
          contrast="model.embed_scale", holm_family=(("none@64", "paper@32"),)),
     r"holm_family .* \('none@64', 'paper@32'\) is not one"),
    (dict(itt_missing=float("nan")), "itt_missing=nan must be a finite number"),
    (dict(failure=sweeps.FailureRule(), report="test/bleu"), r"declare .*\(itt_missing\)"),
])
def test_malformed_sweeps_are_one_line_errors(kw, message):
  with pytest.raises(ValueError, match=message):
    sweeps.check_sweep(tiny_sweep(**kw))


def test_load_sweep_errors(tmp_path):
  with pytest.raises(ValueError, match="does not exist"):
    sweeps.load_sweep(str(tmp_path / "none.py"))
  bad = tmp_path / "bad.py"
  bad.write_text("X = 1\n")
  with pytest.raises(ValueError, match="no get_sweep"):
    sweeps.load_sweep(str(bad))
  # A sweep file, or its base config, that does not parse, fails or returns something else:
  # one line naming the file (a SyntaxError or TypeError traceback before).
  bad.write_text("def get_sweep(:\n")
  with pytest.raises(ValueError, match=r"bad.py does not parse \(.* at line 1\); fix it.$"):
    sweeps.load_sweep(str(bad))
  bad.write_text("def get_sweep():\n  return 5\n")
  with pytest.raises(ValueError, match=r"bad.py's get_sweep\(\) returned int 5, not a Sweep.$"):
    sweeps.load_sweep(str(bad))
  base = tmp_path / "base.py"
  bad.write_text(f"from transformer.research.sweeps import Sweep\n"
                 f"def get_sweep():\n  return Sweep(name='b', question='q', base={str(base)!r}, "
                 f"axes=(), seeds=(0,))\n")
  for text, message in (("def get_config(:\n", r"base.py does not parse"),
                        ("def get_config():\n  return 5\n",
                         r"base.py's get_config\(\) returned int 5, not a ConfigDict"),
                        ("def get_config():\n  return undefined\n",
                         r"base.py's get_config\(\) fails \(NameError: .* at line 2\)")):
    base.write_text(text)
    with pytest.raises(ValueError, match=message):
      sweeps.load_sweep(str(bad))


def test_every_shipped_sweep_loads_and_expands():
  folder = os.path.join(REPO, "configs", "sweeps")
  names = sorted(f for f in os.listdir(folder) if f.endswith(".py"))
  assert len(names) >= 7
  cwd = os.getcwd()
  os.chdir(REPO)
  try:
    for name in names:
      sweep = sweeps.load_sweep(os.path.join(folder, name))
      points = sweeps.expand(sweep)
      # At least 3 seeds where results are read (a search may use fewer, its chosen rates more).
      assert len(sweep.seeds) + len(sweep.confirm_seeds) >= 3 and len(points) >= 3
      sweeps.point_config(sweep, points[0])
  finally:
    os.chdir(cwd)
