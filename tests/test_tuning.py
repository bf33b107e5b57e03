"""Tuned sweeps: each arm's learning-rate search (with edge extension), its choice on validation
reported on test, and paired differences with t-intervals, on stored results made by hand."""

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from test_grid import tiny_sweep
from transformer.research import sweeps
from transformer.research.sweeps import Point

LR = "learning_rate"


def tuned_sweep(**kw):
  fields = dict(axes=({"model.embed_scale": ["sqrt_d", "none"]},), seeds=(0, 1, 2),
                tune={LR: [1e-3, 2e-3, 4e-3]}, select="eval/loss", report="test/loss",
                extend_edges=2)
  fields.update(kw)
  return tiny_sweep(**fields)


def result(scale, lr, seed, val, test=None, status="ok"):
  point = Point((("model.embed_scale", scale), (LR, lr)), seed)
  metrics = {} if status != "ok" else {"eval/loss": val, "test/loss": val if test is None else test}
  return {"name": point.name, "group": point.group, "overrides": dict(point.overrides),
          "seed": seed, "status": status, "metrics": metrics, "curves": {}}


def bowl(scale, lr, seed, best_lr, test_shift=0.0):
  """A loss with its minimum at best_lr (quadratic in log2 lr), plus a small seed offset."""
  val = 3.0 + 0.1 * math.log2(lr / best_lr) ** 2 + 0.01 * seed
  return result(scale, lr, seed, val, val + test_shift)


def test_an_interior_optimum_is_not_extended():
  sweep = tuned_sweep()
  results = [bowl(s, lr, seed, 2e-3) for s in ("sqrt_d", "none") for lr in (1e-3, 2e-3, 4e-3)
             for seed in (0, 1, 2)]
  assert sweeps.searched_values(sweep, results) == {"embed_scale=sqrt_d": [1e-3, 2e-3, 4e-3],
                                                    "embed_scale=none": [1e-3, 2e-3, 4e-3]}
  bests = sweeps.best_per_arm(sweep, results)
  assert [b.best for b in bests] == [2e-3, 2e-3] and not any(b.on_edge for b in bests)


def test_an_optimum_on_the_edge_extends_the_grid_one_step_at_a_time():
  sweep = tuned_sweep()
  results = [bowl("sqrt_d", lr, seed, 2e-3) for lr in (1e-3, 2e-3, 4e-3) for seed in (0, 1, 2)]
  results += [bowl("none", lr, seed, 1.6e-2) for lr in (1e-3, 2e-3, 4e-3) for seed in (0, 1, 2)]
  assert sweeps.searched_values(sweep, results)["embed_scale=none"] == [1e-3, 2e-3, 4e-3, 8e-3]
  names = {p.name for p in sweeps.tuning.points(sweep, results)}
  assert "embed_scale=none,learning_rate=0.008,seed=2" in names
  assert "embed_scale=sqrt_d,learning_rate=0.008,seed=0" not in names
  # Two seeds of the new value are in: the arm waits for the third before deciding again.
  results += [bowl("none", 8e-3, seed, 1.6e-2) for seed in (0, 1)]
  assert sweeps.searched_values(sweep, results)["embed_scale=none"][-1] == 8e-3
  results.append(bowl("none", 8e-3, 2, 1.6e-2))
  assert sweeps.searched_values(sweep, results)["embed_scale=none"][-1] == 1.6e-2
  results += [bowl("none", 1.6e-2, seed, 1.6e-2) for seed in (0, 1, 2)]
  # 1.6e-2 is best and on the edge, but extend_edges=2 steps are used up: marked, not extended.
  best = sweeps.best_per_arm(sweep, results)[1]
  assert best.searched == (1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2)
  assert best.best == 1.6e-2 and best.on_edge and best.complete


def test_a_low_edge_extends_downwards():
  sweep = tuned_sweep(axes=({"model.embed_scale": ["sqrt_d"]},))
  results = [bowl("sqrt_d", lr, seed, 2.5e-4) for lr in (1e-3, 2e-3, 4e-3) for seed in (0, 1, 2)]
  assert sweeps.searched_values(sweep, results)["embed_scale=sqrt_d"] == [5e-4, 1e-3, 2e-3, 4e-3]


def test_a_rate_where_a_seed_diverged_is_never_chosen_nor_extended_past():
  sweep = tuned_sweep(axes=({"model.embed_scale": ["sqrt_d"]},))
  results = [bowl("sqrt_d", lr, seed, 1e-1) for lr in (1e-3, 2e-3) for seed in (0, 1, 2)]
  # 4e-3 would be best, but seed 1 diverged there.
  results += [bowl("sqrt_d", 4e-3, s, 1e-1) for s in (0, 2)]
  results.append(result("sqrt_d", 4e-3, 1, None, status="diverged"))
  best = sweeps.best_per_arm(sweep, results)[0]
  assert best.best == 2e-3 and best.complete and best.searched == (1e-3, 2e-3, 4e-3)
  assert dict((v, dead) for v, *_, dead in best.curve)[4e-3] == 1


def test_the_choice_is_made_on_validation_and_reported_on_test():
  sweep = tuned_sweep(axes=({"model.embed_scale": ["sqrt_d"]},))
  results = []
  for seed in (0, 1, 2):
    results += [result("sqrt_d", 1e-3, seed, 3.0, test=2.0),  # test would prefer this one
                result("sqrt_d", 2e-3, seed, 2.9, test=2.5 + 0.1 * seed),
                result("sqrt_d", 4e-3, seed, 3.1, test=2.2)]
  best = sweeps.best_per_arm(sweep, results)[0]
  assert best.best == 2e-3
  assert best.select[0] == pytest.approx(2.9)
  assert best.report[0] == pytest.approx(2.6) and best.report[1] == pytest.approx(0.1)
  assert best.report_by_seed == pytest.approx({0: 2.5, 1: 2.6, 2: 2.7})


def test_t_interval_against_a_hand_computation():
  # diffs 0.1, 0.2, 0.3: mean 0.2, sd 0.1, t(0.975, 2 dof) = 4.302653,
  # half = 4.302653 * 0.1 / sqrt(3).
  mean, low, high = sweeps.t_interval([0.1, 0.2, 0.3])
  half = 4.302653 * 0.1 / math.sqrt(3)
  assert mean == pytest.approx(0.2)
  assert (low, high) == pytest.approx((0.2 - half, 0.2 + half), rel=1e-6)
  assert math.isnan(sweeps.t_interval([0.5])[1])


def test_paired_differences_each_arm_at_its_own_best():
  sweep = tuned_sweep()
  results = []
  for seed in (0, 1, 2):
    for lr in (1e-3, 2e-3, 4e-3):
      # The paper's arm is best at 2e-3, the other at 4e-3, where it is 0.05 +- 0.01 worse.
      results.append(result("sqrt_d", lr, seed, 3.0 + abs(math.log2(lr / 2e-3)),
                            test=3.0 + 0.1 * seed))
      results.append(result("none", lr, seed, 3.0 + abs(math.log2(lr / 4e-3)),
                            test=3.05 + 0.1 * seed + 0.01 * (seed - 1)))
  bests = sweeps.best_per_arm(sweep, results)
  assert [b.best for b in bests] == [2e-3, 4e-3]
  # 4e-3 is the top of the grid: 8e-3 is to be searched before the choice is final.
  assert bests[1].searched[-1] == 8e-3 and not bests[1].complete and not bests[1].on_edge
  (paired,) = sweeps.paired_differences(sweep, bests)
  assert paired.arm == "embed_scale=none" and paired.baseline == "embed_scale=sqrt_d"
  assert paired.mean == pytest.approx(0.05) and paired.seeds == 3
  half = 4.302653 * 0.01 / math.sqrt(3)
  assert (paired.low, paired.high) == pytest.approx((0.05 - half, 0.05 + half), rel=1e-5)
  assert paired.verdict == "higher"


def test_paired_difference_inside_its_interval_is_not_settled():
  sweep = tuned_sweep(baseline="embed_scale=none")
  results = []
  for seed, (a, b) in enumerate([(3.0, 3.1), (3.2, 3.1), (3.1, 3.1)]):
    for lr in (1e-3, 2e-3, 4e-3):
      far = abs(math.log2(lr / 2e-3))
      results.append(result("sqrt_d", lr, seed, 3.0 + far, test=a))
      results.append(result("none", lr, seed, 3.0 + far, test=b))
  (paired,) = sweeps.paired_differences(sweep, sweeps.best_per_arm(sweep, results))
  assert paired.arm == "embed_scale=sqrt_d" and paired.baseline == "embed_scale=none"
  assert paired.verdict == "not settled"


def test_a_tuned_sweep_is_validated():
  with pytest.raises(ValueError, match="one field"):
    sweeps.check_sweep(tuned_sweep(tune={LR: [1e-3, 2e-3], "warmup_steps": [1, 2]}))
  with pytest.raises(ValueError, match="at least two positive"):
    sweeps.check_sweep(tuned_sweep(tune={LR: [1e-3]}))
  with pytest.raises(ValueError, match="cannot also be"):
    sweeps.check_sweep(tuned_sweep(fixed={LR: 1e-3}))
  with pytest.raises(ValueError, match="not an arm"):
    sweeps.check_sweep(tuned_sweep(baseline="embed_scale=bogus"))


def test_a_contrast_compares_within_each_setting_of_the_other_axes():
  """contrast='model.embed_scale': at each width, 'none' against 'sqrt_d' of that width."""
  sweep = tuned_sweep(axes=({"model.d_model": [32, 64]}, {"model.embed_scale": ["sqrt_d", "none"]}),
                      contrast="model.embed_scale")
  results = []
  for d, gap in ((32, 0.1), (64, 0.3)):
    for scale in ("sqrt_d", "none"):
      for lr in (1e-3, 2e-3, 4e-3):
        for seed in (0, 1, 2):
          point = Point((("model.d_model", d), ("model.embed_scale", scale), (LR, lr)), seed)
          loss = 3.0 + abs(math.log2(lr / 2e-3)) + (gap + 0.01 * seed if scale == "none" else 0)
          results.append({"name": point.name, "group": point.group,
                          "overrides": dict(point.overrides), "seed": seed, "status": "ok",
                          "metrics": {"eval/loss": loss, "test/loss": loss}, "curves": {}})
  paired = sweeps.paired_differences(sweep, sweeps.best_per_arm(sweep, results))
  assert [(p.arm, p.baseline) for p in paired] == [
      ("d_model=32,embed_scale=none", "d_model=32,embed_scale=sqrt_d"),
      ("d_model=64,embed_scale=none", "d_model=64,embed_scale=sqrt_d")]
  assert [p.mean for p in paired] == pytest.approx([0.11, 0.31])
  with pytest.raises(ValueError, match="contrast"):
    sweeps.check_sweep(tuned_sweep(contrast="model.d_model"))


def test_a_contrast_on_a_zipped_axis_compares_with_its_first_setting():
  """E3's case: the axis {embed_scale, embed_norm} moves together (none/False, sqrt_d/False,
  none/True); each setting is compared with none/False at the same d_model, not with itself."""
  sweep = tuned_sweep(axes=({"model.d_model": [32, 64]},
                            {"model.embed_scale": ["none", "sqrt_d", "none"],
                             "model.embed_norm": [False, False, True]}),
                      contrast="model.embed_scale")
  results = []
  for d in (32, 64):
    for scale, norm, gap in (("none", False, 0.0), ("sqrt_d", False, -0.2), ("none", True, 0.1)):
      for lr in (1e-3, 2e-3, 4e-3):
        for seed in (0, 1, 2):
          point = Point((("model.d_model", d), ("model.embed_scale", scale),
                         ("model.embed_norm", norm), (LR, lr)), seed)
          loss = 3.0 + abs(math.log2(lr / 2e-3)) + gap + (0.001 * seed if gap else 0)
          results.append({"name": point.name, "group": point.group,
                          "overrides": dict(point.overrides), "seed": seed, "status": "ok",
                          "metrics": {"eval/loss": loss, "test/loss": loss}, "curves": {}})
  paired = sweeps.paired_differences(sweep, sweeps.best_per_arm(sweep, results))
  base = "d_model={d},embed_scale=none,embed_norm=False"
  assert [(p.arm, p.baseline) for p in paired] == [
      (f"d_model={d},embed_scale={s},embed_norm={n}", base.format(d=d))
      for d in (32, 64) for s, n in (("sqrt_d", False), ("none", True))]
  assert [p.mean for p in paired] == pytest.approx([-0.199, 0.101] * 2)


def test_arm_names_label_tables_and_differences():
  sweep = tuned_sweep(arm_names=("paper", "none"))
  results = [bowl(s, lr, seed, 2e-3) for s in ("sqrt_d", "none") for lr in (1e-3, 2e-3, 4e-3)
             for seed in (0, 1, 2)]
  bests = sweeps.best_per_arm(sweep, results)
  assert [(b.name, b.arm) for b in bests] == [("paper", "embed_scale=sqrt_d"),
                                              ("none", "embed_scale=none")]
  (paired,) = sweeps.paired_differences(sweep, bests)
  assert (paired.arm, paired.baseline) == ("none", "paper")
  with pytest.raises(ValueError, match="arm_names"):
    sweeps.check_sweep(tuned_sweep(arm_names=("one",)))


def test_confirm_seeds_run_at_the_chosen_value_only_and_join_the_report():
  sweep = tuned_sweep(confirm_seeds=(3, 4))
  results = [bowl(s, lr, seed, 2e-3) for s in ("sqrt_d", "none") for lr in (1e-3, 2e-3, 4e-3)
             for seed in (0, 1, 2)]
  # sqrt_d's search is complete (interior best 2e-3); none's misses a seed: not confirmed yet.
  results = [r for r in results if r["name"] != "embed_scale=none,learning_rate=0.004,seed=2"]
  extra = {p.name for p in sweeps.tuning.points(sweep, results)} - {r["name"] for r in results}
  assert extra == {"embed_scale=sqrt_d,learning_rate=0.002,seed=3",
                   "embed_scale=sqrt_d,learning_rate=0.002,seed=4",
                   "embed_scale=none,learning_rate=0.004,seed=2"}
  results.append(bowl("none", 4e-3, 2, 2e-3))
  # Confirming results with a much lower loss at a rate that was not chosen are ignored.
  results += [result("sqrt_d", 1e-3, 3, 0.5), result("sqrt_d", 1e-3, 4, 0.5)]
  for scale, shift in (("sqrt_d", 0.0), ("none", 0.2)):
    results += [bowl(scale, 2e-3, seed, 2e-3, test_shift=shift) for seed in (3, 4)]
  bests = sweeps.best_per_arm(sweep, results)
  assert [b.best for b in bests] == [2e-3, 2e-3]
  # Chosen on the three selection seeds, reported over five: 3.0 + 0.01 * seed.
  assert bests[0].select[2] == 3 and bests[0].select[0] == pytest.approx(3.01)
  assert bests[0].report[2] == 5 and bests[0].report[0] == pytest.approx(3.02)
  paired = sweeps.tuning.paired_differences(sweep, bests)[0]
  # none - sqrt_d: 0 on seeds 0-2 and 0.2 on seeds 3, 4: mean 0.08 over five pairs.
  assert paired.seeds == 5 and paired.mean == pytest.approx(0.08)
  diffs = [0, 0, 0, 0.2, 0.2]
  assert (paired.low, paired.high) == pytest.approx(sweeps.tuning.t_interval(diffs)[1:])
  with pytest.raises(ValueError, match="repeat seeds"):
    sweeps.check_sweep(tuned_sweep(confirm_seeds=(2, 3)))
  with pytest.raises(ValueError, match="need `tune`"):
    sweeps.check_sweep(tiny_sweep(confirm_seeds=(3,)))


def test_arm_values_give_an_arm_its_own_grid_and_one_value_is_a_fixed_control():
  sweep = tuned_sweep(arm_names=("paper", "none"), arm_values={"none": [2e-3]})
  results = [bowl("sqrt_d", lr, seed, 2e-3) for lr in (1e-3, 2e-3, 4e-3) for seed in (0, 1, 2)]
  names = {p.name for p in sweeps.tuning.points(sweep, results)} - {r["name"] for r in results}
  assert names == {f"embed_scale=none,learning_rate=0.002,seed={s}" for s in (0, 1, 2)}
  # Its best would lie far below, but one given value is never extended nor called an edge.
  results += [bowl("none", 2e-3, seed, 1e-4, test_shift=0.5) for seed in (0, 1, 2)]
  paper, none = sweeps.best_per_arm(sweep, results)
  assert none.searched == (2e-3,) and none.best == 2e-3 and none.complete and not none.on_edge
  assert paper.searched == (1e-3, 2e-3, 4e-3)
  (paired,) = sweeps.paired_differences(sweep, [paper, none])
  assert paired.seeds == 3 and paired.mean == pytest.approx(0.1 * math.log2(20) ** 2 + 0.5)
  lines = sweeps.report._tuning_lines(sweep, [paper, none], [paired])
  assert "| none | 0.002 | 0.002 (fixed) |" in "\n".join(lines)
  # Two values: searched and extended past an edge like tune's grid.
  two = tuned_sweep(arm_values={"embed_scale=none": [2e-3, 4e-3]}, extend_edges=1)
  results = [bowl("none", lr, seed, 1e-4) for lr in (2e-3, 4e-3) for seed in (0, 1, 2)]
  assert sweeps.searched_values(two, results)["embed_scale=none"] == [1e-3, 2e-3, 4e-3]
  with pytest.raises(ValueError, match="not an arm"):
    sweeps.check_sweep(tuned_sweep(arm_values={"bogus": [1e-3]}))
  with pytest.raises(ValueError, match="positive numbers"):
    sweeps.check_sweep(tuned_sweep(arm_values={"embed_scale=none": []}))
  with pytest.raises(ValueError, match="need `tune`"):
    sweeps.check_sweep(tiny_sweep(arm_values={"embed_scale=none": [1e-3]}))


def test_pairs_add_comparisons_between_arms_other_than_the_baseline():
  """A 2 x 2 design's other contrasts: each pair at the two arms' own best rates, by seed."""
  scales = ["sqrt_d", "none", "inv_sqrt_d"]
  sweep = tuned_sweep(axes=({"model.embed_scale": scales},), arm_names=("a", "b", "c"),
                      pairs=(("c", "b"),))
  best_lr = {"sqrt_d": 2e-3, "none": 2e-3, "inv_sqrt_d": 4e-3}
  shift = {"sqrt_d": 0.0, "none": 0.3, "inv_sqrt_d": 0.5}
  results = []
  for s in scales:
    for lr in (1e-3, 2e-3, 4e-3, 8e-3):
      for seed in (0, 1, 2):
        r = bowl(s, lr, seed, best_lr[s], test_shift=shift[s] + 0.01 * seed * (s == "inv_sqrt_d"))
        results.append(r)
  bests = sweeps.best_per_arm(sweep, results)
  assert [b.best for b in bests] == [2e-3, 2e-3, 4e-3]
  paired = sweeps.paired_differences(sweep, bests)
  assert [(p.arm, p.baseline) for p in paired] == [("b", "a"), ("c", "a"), ("c", "b")]
  # c - b by seed: 0.2 + 0.01 * seed (each at its own rate: the bowls' minima are equal).
  assert paired[2].mean == pytest.approx(0.21)
  assert (paired[2].low, paired[2].high) == pytest.approx(
      sweeps.t_interval([0.2, 0.21, 0.22])[1:])
  # A pair that repeats a baseline comparison, or itself, is reported once.
  again = dataclasses.replace(sweep, pairs=(("c", "b"), ("b", "a"), ("c", "b")))
  assert [(p.arm, p.baseline) for p in sweeps.paired_differences(again, bests)] == [
      ("b", "a"), ("c", "a"), ("c", "b")]
  # An untuned sweep with pairs only: those pairs, no comparison with the first arm.
  fixed = tiny_sweep(axes=({"model.embed_scale": scales},), arm_names=("a", "b", "c"),
                     seeds=(0, 1), pairs=(("c", "b"),), report="eval/nll")
  untuned = [{"name": f"{s},{seed}", "overrides": {"model.embed_scale": s}, "seed": seed,
              "status": "ok", "metrics": {"eval/nll": shift[s] + seed}} for s in scales
             for seed in (0, 1)]
  (only,) = sweeps.paired_differences(fixed, sweeps.tuning.fixed_arms(fixed, untuned))
  assert (only.arm, only.baseline, only.mean) == ("c", "b", pytest.approx(0.2))
  for bad in ((("c", "c"),), (("c", "z"),)):
    with pytest.raises(ValueError, match="pairs holds"):
      sweeps.check_sweep(tuned_sweep(axes=({"model.embed_scale": scales},),
                                     arm_names=("a", "b", "c"), pairs=bad))


def test_stored_results_match_their_arm_whatever_the_key_order():
  """result.json stores overrides with sorted keys; arms whose axes are not in alphabetical
  order (here embed_scale before d_model) must still find their results."""
  import json
  sweep = tuned_sweep(axes=({"model.embed_scale": ["sqrt_d", "none"]}, {"model.d_model": [32]}))
  results = []
  for scale in ("sqrt_d", "none"):
    for lr in (1e-3, 2e-3, 4e-3):
      for seed in (0, 1, 2):
        point = Point((("model.embed_scale", scale), ("model.d_model", 32), (LR, lr)), seed)
        loss = 3.0 + 0.1 * math.log2(lr / 2e-3) ** 2
        results.append(json.loads(json.dumps(
            {"name": point.name, "group": point.group, "overrides": dict(point.overrides),
             "seed": seed, "status": "ok", "metrics": {"eval/loss": loss, "test/loss": loss},
             "curves": {}}, sort_keys=True)))
  assert list(results[0]["overrides"]) == ["learning_rate", "model.d_model", "model.embed_scale"]
  bests = sweeps.best_per_arm(sweep, results)
  assert [(b.best, b.complete) for b in bests] == [(2e-3, True), (2e-3, True)]
  assert not (set(p.name for p in sweeps.tuning.points(sweep, results))
              - {r["name"] for r in results})


def test_at_chosen_values_keeps_each_arm_at_its_own_best_rate_without_the_rate():
  sweep = tuned_sweep()
  results = [bowl("sqrt_d", lr, seed, 2e-3) for lr in (1e-3, 2e-3, 4e-3) for seed in (0, 1, 2)]
  results += [bowl("none", lr, seed, 4e-3) for lr in (1e-3, 2e-3, 4e-3, 8e-3) for seed in (0, 1, 2)]
  bests = sweeps.best_per_arm(sweep, results)
  kept = sweeps.tuning.at_chosen_values(sweep, results, bests)
  assert sorted((r["overrides"]["model.embed_scale"], r["seed"]) for r in kept) == [
      ("none", 0), ("none", 1), ("none", 2), ("sqrt_d", 0), ("sqrt_d", 1), ("sqrt_d", 2)]
  assert all(LR not in r["overrides"] for r in kept)
  assert {r["name"].split(",")[1] for r in kept} == {"learning_rate=0.002", "learning_rate=0.004"}


def test_fresh_report_uses_only_seeds_that_did_not_choose_the_value():
  sweep = tuned_sweep(confirm_seeds=(3, 4, 5), fresh_report=True)
  # The choosing seeds' test figures are poisoned: a report that read them would show it.
  results = [bowl(s, lr, seed, 2e-3, test_shift=100.0) for s in ("sqrt_d", "none")
             for lr in (1e-3, 2e-3, 4e-3) for seed in (0, 1, 2)]
  results += [bowl(s, 2e-3, seed, 2e-3, test_shift=shift) for s, shift in
              (("sqrt_d", 0.0), ("none", 0.05 * 1)) for seed in (3, 4, 5)]
  results[-1]["metrics"]["test/loss"] += 0.03  # none, seed 5: the differences vary by seed
  bests = sweeps.best_per_arm(sweep, results)
  assert [b.best for b in bests] == [2e-3, 2e-3]
  for b in bests:
    assert set(b.report_by_seed) == {3, 4, 5} and b.report[2] == 3
    assert b.select[2] == 3  # the choice is still made on seeds 0-2
  assert bests[0].report[0] == pytest.approx(3.04)
  paired = sweeps.tuning.paired_differences(sweep, bests)[0]
  assert paired.seeds == 3
  assert (paired.mean, paired.low, paired.high) == pytest.approx(
      sweeps.tuning.t_interval([0.05, 0.05, 0.08]))
  # Before an arm's confirming seeds are in, it reports nothing rather than its choosing seeds.
  partial = sweeps.best_per_arm(sweep, results[:-3])
  assert partial[1].report_by_seed == {} and partial[1].report[2] == 0
  with pytest.raises(ValueError, match="at least two"):
    sweeps.check_sweep(tuned_sweep(confirm_seeds=(3,), fresh_report=True))


def test_sensitivity_is_the_mean_loss_above_the_best_over_the_grid_by_seed():
  sweep = tuned_sweep(seeds=(0, 1), arm_names=("sqrt_d", "none"))
  cap = 5.0
  losses = {("sqrt_d", 0): [3.3, 3.0, 3.2], ("sqrt_d", 1): [3.4, 3.1, 3.1],
            ("none", 0): [3.0, 3.5, None], ("none", 1): [3.2, 3.1, 9.0]}  # None: diverged
  results = []
  for (scale, seed), row in losses.items():
    for lr, loss in zip((1e-3, 2e-3, 4e-3), row):
      results.append(result(scale, lr, seed, 0.0, status="diverged") if loss is None
                     else result(scale, lr, seed, loss))
  results.append(result("sqrt_d", 8e-3, 0, 99.0))  # an extension: not part of the grid
  got = sweeps.tuning.sensitivity(sweep, results, cap)
  hand = {"sqrt_d": {0: (0.3 + 0 + 0.2) / 3, 1: (0.3 + 0 + 0) / 3},
          # diverged and above-cap runs count as the cap
          "none": {0: (0 + 0.5 + 2.0) / 3, 1: (0.1 + 0 + (5.0 - 3.1)) / 3}}
  assert got.keys() == hand.keys()
  for arm in hand:
    assert got[arm] == pytest.approx(hand[arm])
  # A seed missing a value of the grid has no figure yet.
  assert set(sweeps.tuning.sensitivity(sweep, results[1:], cap)["sqrt_d"]) == {1}
  with pytest.raises(ValueError, match="needs `tune`"):
    sweeps.check_sweep(tiny_sweep(sensitivity_cap=5.0))


def trend_results(slope_by_seed=lambda seed: -0.1 + 0.01 * seed):
  """Three lengths x {sqrt_d, none} x three rates x seeds 0-2: 'none' is worse at the best rate
  by 0.3 + b_seed log10(steps / 100), so each seed's line is a_seed + b_seed log10(steps) with
  a_seed = 0.3 - 2 b_seed."""
  out = []
  for steps in (100, 1000, 10000):
    for scale in ("sqrt_d", "none"):
      for lr in (1e-3, 2e-3, 4e-3):
        for seed in (0, 1, 2):
          loss = 3.0 + abs(math.log2(lr / 2e-3)) + 0.001 * seed
          if scale == "none":
            loss += 0.3 + slope_by_seed(seed) * math.log10(steps / 100)
          point = Point((("num_train_steps", steps), ("model.embed_scale", scale), (LR, lr)), seed)
          out.append({"name": point.name, "group": point.group,
                      "overrides": dict(point.overrides), "seed": seed, "status": "ok",
                      "metrics": {"eval/loss": loss, "test/loss": loss}, "curves": {}})
  return out


def trend_sweep(**kw):
  fields = dict(axes=({"num_train_steps": [100, 1000, 10000]},
                      {"model.embed_scale": ["sqrt_d", "none"]}),
                contrast="model.embed_scale", trend="num_train_steps")
  return tuned_sweep(**{**fields, **kw})


def test_a_trend_fits_each_seeds_difference_against_log_steps_and_finds_its_zero():
  sweep = trend_sweep()
  [t] = sweeps.tuning.trend(sweep, sweeps.best_per_arm(sweep, trend_results()))
  assert (t.arm, t.baseline) == ("embed_scale=none", "embed_scale=sqrt_d")
  assert t.xs == [100, 1000, 10000] and sorted(t.by_seed) == [0, 1, 2]
  assert t.by_seed[1][10000] == pytest.approx(0.3 + 2 * -0.09)
  # slopes -0.10, -0.09, -0.08 per tenfold; intercepts 0.5, 0.48, 0.46
  mean, low, high = sweeps.tuning.t_interval([-0.10, -0.09, -0.08])
  assert t.slope[:3] == pytest.approx((mean, low, high)) and t.slope[3] == 3
  assert t.intercept == pytest.approx(0.48)
  # zero: log10(x) = -a / b: 5, 5.333 (the mean line's too), 5.75
  assert [math.log10(t.zero_by_seed[s]) for s in (0, 1, 2)] == pytest.approx([5, 0.48 / 0.09, 5.75])
  assert math.log10(t.zero) == pytest.approx(0.48 / 0.09)
  # The power law: per seed (log10 d at 10000 - at 100) / 2 over d = 0.3 -> 0.1, 0.12, 0.14
  assert t.power[0] == pytest.approx(
      sum(math.log10(d / 0.3) / 2 for d in (0.1, 0.12, 0.14)) / 3) and t.power[3] == 3
  # The mean differences (0.3, 0.21, 0.12) lie on the line; the power law fitted to them is
  # 10^(-0.7072 - 0.19897 (log10 x - 3)): 0.3103, 0.1963, 0.1241 at 100, 1000, 10000.
  assert t.residual_line == pytest.approx(0.0, abs=1e-9)
  assert t.residual_power == pytest.approx(
      math.sqrt(((0.3 - 0.3103) ** 2 + (0.21 - 0.1963) ** 2 + (0.12 - 0.1241) ** 2) / 3), rel=0.02)


def test_a_trend_that_moves_away_from_zero_has_no_zero_and_a_seed_missing_a_length_is_left_out():
  sweep = trend_sweep()
  bests = sweeps.best_per_arm(sweep, trend_results(lambda seed: 0.05))  # grows with length
  assert bests[1].arm == "num_train_steps=100,embed_scale=none"
  bests[1] = dataclasses.replace(bests[1], report_by_seed={0: bests[1].report_by_seed[0],
                                                           1: bests[1].report_by_seed[1]})
  [t] = sweeps.tuning.trend(sweep, bests)
  assert sorted(t.by_seed) == [0, 1]  # seed 2 has no difference at 100 steps
  assert math.isnan(t.zero) and all(math.isnan(z) for z in t.zero_by_seed.values())
  assert t.slope[0] == pytest.approx(0.05)
  # 0.3 + 0.05 log10(steps / 100) = 0.05 log10(steps / 1.6e-4): a zero lies behind the lengths
  # run, not ahead, so there is none; a nearly flat line's zero is past float range.
  for slope, zero in ((0.05, math.nan), (-1e-4, math.inf)):
    [t] = sweeps.tuning.trend(sweep, sweeps.best_per_arm(sweep, trend_results(lambda s: slope)))
    assert t.zero == zero or (math.isnan(zero) and math.isnan(t.zero))
  # Differences that cross 0 (0.3, 0.1, -0.1) have no power law: no seed's, none on the means.
  [t] = sweeps.tuning.trend(sweep, sweeps.best_per_arm(sweep, trend_results(lambda s: -0.2)))
  assert t.power[3] == 0 and all(math.isnan(v) for v in (*t.power[:3], *t.power_fit,
                                                         t.residual_power))
  assert t.residual_line == pytest.approx(0.0, abs=1e-9)


def test_a_trend_is_validated():
  two_axes = {"model.embed_scale": ["sqrt_d", "none"]}
  for kw in (dict(trend="model.embed_scale"), dict(contrast=None), dict(tune={}),
             dict(axes=({"num_train_steps": [100, 1000], "warmup_steps": [1, 2]}, two_axes))):
    with pytest.raises(ValueError, match="trend=.*needs `tune`, an axis of its own"):
      sweeps.check_sweep(trend_sweep(**kw))
  with pytest.raises(ValueError, match="trend=.*two positive numbers"):
    sweeps.check_sweep(trend_sweep(axes=({"num_train_steps": [100]}, two_axes)))


def test_test_set_error_matches_a_paired_bootstrap_over_test_examples():
  """The first-order s.e. against 4,000 bootstrap resamples of the examples (the same examples
  for both arms and every seed), the difference a ratio of sums averaged over seeds."""
  rng = np.random.default_rng(0)
  rows, seeds = 300, 3
  tokens = rng.integers(5, 60, rows).astype(float)
  per_token = rng.gamma(4.0, 1.0, rows)  # examples differ in difficulty
  arm = [np.stack([tokens * (per_token + rng.normal(0.05, 0.3, rows)), tokens], 1)
         for _ in range(seeds)]
  base = [np.stack([tokens * (per_token + rng.normal(0.0, 0.3, rows)), tokens], 1)
          for _ in range(seeds)]
  se = sweeps.test_set_se(arm, base)

  def difference(idx):
    return np.mean([a[idx, 0].sum() / a[idx, 1].sum() - b[idx, 0].sum() / b[idx, 1].sum()
                    for a, b in zip(arm, base)])

  boot = [difference(rng.integers(0, rows, rows)) for _ in range(4000)]
  assert se == pytest.approx(np.std(boot), rel=0.08)
  # Runs not scored on one test set (another example count or other token counts): no term.
  assert math.isnan(sweeps.test_set_se(arm, [b[:-1] for b in base]))
  shifted = [np.stack([b[:, 0], b[:, 1] + 1], 1) for b in base]
  assert math.isnan(sweeps.test_set_se(arm, shifted))


def test_the_test_set_term_widens_the_interval_and_drives_the_verdict():
  """Seeds agree (s.e. 0.006) but the test set is small: the difference is 'higher' over seeds
  and 'not settled' once the test set's own error is in."""
  rows = {s: [[10.0 + s, 10.0], [12.0, 10.0]] for s in range(3)}
  noisy = {s: [[14.0 + s + 0.01 * s, 10.0], [8.0 + 0.01, 10.0]] for s in range(3)}
  paired = sweeps.paired("a", "b", {s: 1.1 + 0.01 * s for s in range(3)},
                         {s: 1.0 for s in range(3)}, noisy, rows)
  assert paired.low > 0 and paired.test_se > 0.1
  low, high = paired.interval
  assert low < 0 < high and paired.verdict == "not settled"
  half = 4.302653 * math.hypot(paired.seed_se, paired.test_se)
  assert (low, high) == pytest.approx((paired.mean - half, paired.mean + half), rel=1e-5)
  without = sweeps.paired("a", "b", {s: 1.1 + 0.01 * s for s in range(3)},
                          {s: 1.0 for s in range(3)})
  assert math.isnan(without.test_se) and without.interval == (without.low, without.high)
  assert without.verdict == "higher"


def test_holm_keeps_comparisons_in_order_of_p_until_the_first_that_fails():
  def with_p(p):  # a Paired whose t statistic gives p on 2 d.o.f. (3 seeds)
    t = scipy_stats.t.isf(p / 2, 2)
    half = scipy_stats.t.ppf(0.975, 2) / t
    return sweeps.Paired("a", "b", 1.0, 1.0 - half, 1.0 + half, 3)

  paired = [with_p(p) for p in (0.04, 0.001, 0.02, 0.3)]
  assert [x.p_value for x in paired] == pytest.approx([0.04, 0.001, 0.02, 0.3], rel=1e-6)
  # Sorted: 0.001 <= 0.05/4 kept; 0.02 > 0.05/3: stop, so 0.02, 0.04 and 0.3 are not kept.
  assert sweeps.holm(paired) == [False, True, False, False]
  assert sweeps.holm([with_p(0.001), with_p(0.02)]) == [True, True]  # 0.02 <= 0.05/1
