"""W1 (configs/sweeps/w1_d64.py): its rows change the width alone, and its
d_model 256 row is M9's committed points, config for config."""

import dataclasses
import os

from transformer import records
from transformer.research.sweeps import expand, point_config, report, tuning
from transformer.training.experiment import load_module

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
W1 = load_module(os.path.join(REPO, "configs", "sweeps", "w1_d64.py"))


def test_m9s_points_are_the_d_model_256_row():
  m9 = load_module(os.path.join(REPO, "configs", "sweeps", "m9_width_256.py")).get_sweep()
  results = report.load_results(os.path.join(REPO, "docs", "sweeps", "m9_width_256"))
  # M9 searched ratio_matched one grid step lower; with its values, W1 at 256 is M9 whole.
  sweep = dataclasses.replace(W1.width_sweep(256, "m9_width_256"), arm_values=m9.arm_values)
  grid = {p.name for p in tuning.points(sweep, results)}
  assert len(results) == 40 and {r["name"] for r in results} <= grid
  assert report.changed_points(sweep, results) == []
  assert sweep.arm_names == m9.arm_names and sweep.pairs == m9.pairs
  for metric in ("init/decoder/embed/ratio", "final/decoder/embed/ratio"):
    assert all(metric in r["metrics"] for r in results)
  # Read by W1's rule one of M9's choosing runs fails, at a rate no arm chose: nothing moves.
  judged = report.load_results(os.path.join(REPO, "docs", "sweeps", "m9_width_256"),
                               W1.DECLARED_RULE)
  assert [r["name"] for r in judged if r["status"] != "ok"] == [
      "embed_scale=none,posemb_scale=1,learning_rate=0.0035355,seed=0"]
  bests = lambda rs: [(b.name, b.best, b.report) for b in tuning.best_per_arm(sweep, rs)]  # noqa: E731
  assert bests(judged) == bests(results)


def test_the_rows_differ_in_the_width_and_what_follows_it_only():
  def flat(d_model, arm):
    sweep = W1.width_sweep(d_model, f"w1_d{d_model}")
    point = next(p for p in expand(sweep) if p.seed == 0 and sweep.arm_name(
        tuple(kv for kv in p.overrides if kv[0] != "learning_rate")) == arm)
    return records.flat_fields(point_config(sweep, point).to_dict())

  moved = {"model.d_model", "model.num_heads", "model.d_ff", "model.posemb_scale",
           "learning_rate"}
  for arm in ("paper", "no_scale", "pe_down"):
    small, wide = flat(64, arm), flat(128, arm)
    assert {k for k in small if small[k] != wide.get(k)} <= moved
    assert small["model.num_decoder_layers"] == wide["model.num_decoder_layers"] == 4
    assert small["model.d_model"] // small["model.num_heads"] == 64
  assert "ratio_matched" not in W1.width_sweep(64, "w1_d64").arm_names  # no scale itself
  assert W1.width_sweep(128, "w1_d128").tune["learning_rate"][1] == 5e-3
