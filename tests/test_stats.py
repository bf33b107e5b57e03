"""Sweep statistics: metric patterns, means over seeds, log-log slopes, table cells."""

import math

import pytest

from test_grid import tiny_sweep
from transformer.research import sweeps
from transformer.research.sweeps import Point, stats


def test_metric_value_patterns():
  m = {"final/a/head_0/x": 1.0, "final/a/head_1/x": 3.0, "final/b": float("nan")}
  assert sweeps.metric_value(m, "final/a/head_*/x") == 2.0
  assert sweeps.metric_value(m, "max:final/a/head_*/x") == 3.0
  assert math.isnan(sweeps.metric_value(m, "final/b"))
  assert math.isnan(sweeps.metric_value(m, "missing"))


def fake_result(group_value, seed, metrics, status="ok"):
  point = Point((("model.head_dim", group_value),), seed)
  return {"name": point.name, "group": point.group, "overrides": dict(point.overrides),
          "seed": seed, "status": status, "metrics": metrics, "curves": {}}


def test_fit_slopes_recovers_a_power_law():
  sweep = tiny_sweep(axes=({"model.head_dim": [8, 16, 32]},), seeds=(0, 1))
  results = [fake_result(x, s, {"y": (1 + 0.1 * s) * x ** 2}) for x in (8, 16, 32) for s in (0, 1)]
  slopes = sweeps.fit_slopes(sweep, results, "model.head_dim", "y")
  mean, std, n = slopes["all"]
  assert n == 2 and mean == pytest.approx(2.0) and std == pytest.approx(0.0, abs=1e-9)


def test_a_fit_leaves_out_and_counts_points_it_cannot_use():
  sweep = tiny_sweep(axes=({"model.head_dim": [8, 16, 32]},), seeds=(0,))
  ys = {8: 8.0, 16: -1.0, 32: math.inf}  # y <= 0 (a difference spec) and inf are unusable
  results = [fake_result(x, 0, {"y": y}) for x, y in ys.items()]
  results += [fake_result(8, 1, {}), fake_result(16, 1, {"y": 2.0}, status="diverged")]
  assert sweeps.stats.fit_points(sweep, results, "model.head_dim", "y") == {
      ("all", 0): [(8.0, 8.0)]}
  # The missing y counts; the diverged point is not a finished one.
  assert sweeps.stats.fit_left_out(results, "model.head_dim", "y") == 3


def test_a_difference_spec_subtracts_two_metrics():
  m = {"final/head_0/v": 5.0, "final/head_1/v": 7.0, "init/head_0/v": 1.0, "init/head_1/v": 2.0}
  assert sweeps.metric_value(m, "mean:final/head_*/v - mean:init/head_*/v") == 6.0 - 1.5
  assert math.isnan(sweeps.metric_value(m, "final/head_0/v - missing"))


def test_fields_moving_with_x_belong_to_x_not_to_the_other_settings():
  """Heads and head_dim zipped on one axis (d_k = d_model / heads): one fit over the head
  dims per setting of the other axis, not one group per head count."""
  sweep = tiny_sweep(axes=({"model.num_heads": [4, 2, 1], "model.head_dim": [8, 16, 32]},
                           {"model.embed_scale": ["sqrt_d", "none"]}), seeds=(0,))
  results = []
  for heads, dk in ((4, 8), (2, 16), (1, 32)):
    for scale, power in (("sqrt_d", 1.0), ("none", 0.5)):
      point = Point((("model.num_heads", heads), ("model.head_dim", dk),
                     ("model.embed_scale", scale)), 0)
      results.append({"name": point.name, "group": point.group, "overrides": dict(point.overrides),
                      "seed": 0, "status": "ok", "metrics": {"y": 3.0 * dk ** power}})
  slopes = sweeps.fit_slopes(sweep, results, "model.head_dim", "y")
  assert set(slopes) == {"embed_scale=sqrt_d", "embed_scale=none"}
  assert slopes["embed_scale=sqrt_d"][0] == pytest.approx(1.0)
  assert slopes["embed_scale=none"][0] == pytest.approx(0.5)


def test_mean_std_ignores_diverged_values_and_cells_keep_significant_digits():
  assert stats.mean_std([1.0, 3.0, float("nan"), float("inf")]) == (
      2.0, math.sqrt(2), 2)  # sample std
  assert stats.cell(*stats.mean_std([])) == "-"
  assert stats.cell(2.0, 1.0, 2) == "2.000 ± 1.000" and stats.cell(2.0, 0.0, 1) == "2.000"
  assert stats.cell(0.00123, 0.0001, 3) == "1.23e-03 ± 1.00e-04"
  assert stats.cell(1234.5, 2.0, 2) == "1234.5 ± 2.0"


def test_spike_stats_against_hand_counts():
  # Windows of 10 steps, warmup 10: window means 4.0, 3.5, 3.0, 2.8; worst steps 5.0 (warmup,
  # not counted), 3.9 (3.9/4.0 - 1 < 0.2), 4.5 (4.5/3.5 - 1 = 0.286: a spike), 3.1.
  # Gradient norms at window ends 1, 1, 2, 1 (median after warmup 1); worst steps 9 (warmup),
  # 1.5, 5 (a spike: 5x), 1.
  series = {"train/loss": [[10, 4.0], [20, 3.5], [30, 3.0], [40, 2.8]],
            "train/loss_step_max": [[10, 5.0], [20, 3.9], [30, 4.5], [40, 3.1]],
            "train/grad_norm": [[10, 1.0], [20, 1.0], [30, 2.0], [40, 1.0]],
            "train/grad_norm_step_max": [[10, 9.0], [20, 1.5], [30, 5.0], [40, 1.0]]}
  out = stats.spike_stats(series, after_step=10)
  assert out["spikes/loss"] == 1 and out["spikes/loss_max_jump"] == pytest.approx(4.5 / 3.5 - 1)
  assert out["spikes/grad_norm"] == 1 and out["spikes/grad_norm_max_ratio"] == pytest.approx(5.0)
  assert stats.spike_stats({"train/loss": [[10, 1.0]]}, 0) == {}


def test_ordered_groups_keep_a_groups_first_place_in_the_grid():
  """A tuned sweep's confirm_seeds repeat a group after the whole grid; its rows stay in place."""
  points = [Point((("model.head_dim", h),), s) for h in (8, 16) for s in (0, 1)]
  points += [Point((("model.head_dim", 8),), 3)]  # a confirming seed of the first group
  results = [fake_result(h, s, {}) for h, s in ((16, 0), (8, 3), (8, 0))]
  assert list(stats.ordered_groups(points, results)) == ["head_dim=8", "head_dim=16"]


def test_curve_values_reduce_the_matching_series_at_their_common_steps():
  from transformer.research.sweeps.stats import curve_pattern, curve_values
  curves = {"d/layer_0/head_0/v": [[0, 1.0], [50, 4.0], [100, 9.0]],
            "d/layer_0/head_1/v": [[0, 3.0], [50, 2.0]],  # no step 100: left out of the mean
            "d/layer_1/head_0/v": [[0, 100.0], [50, 100.0]]}
  assert curve_values(curves, "d/layer_0/head_0/v") == {0: 1.0, 50: 4.0, 100: 9.0}
  assert curve_values(curves, "mean:d/layer_0/head_*/v") == {0: 2.0, 50: 3.0}
  assert curve_values(curves, "d/layer_0/head_*/v") == {0: 2.0, 50: 3.0}  # mean by default
  assert curve_values(curves, "max:d/layer_0/head_*/v") == {0: 3.0, 50: 4.0}
  assert curve_values(curves, "d/layer_9/*") == {}
  assert curve_pattern("max:d/layer_0/head_*/v") == "d/layer_0/head_*/v"


def test_correlation_and_its_fisher_interval_against_a_hand_computation():
  xs, ys = [1.0, 2.0, 3.0, 4.0, 5.0, float("nan")], [2.1, 3.9, 6.2, 7.8, 10.1, 1.0]
  r, low, high, n = stats.correlation(xs, ys)
  x, y = xs[:5], ys[:5]  # the NaN pair left out
  mx, my = sum(x) / 5, sum(y) / 5
  hand = (sum((a - mx) * (b - my) for a, b in zip(x, y))
          / math.sqrt(sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y)))
  assert n == 5 and r == pytest.approx(hand)
  half = 1.959964 / math.sqrt(5 - 3)
  assert (low, high) == pytest.approx((math.tanh(math.atanh(hand) - half),
                                       math.tanh(math.atanh(hand) + half)), rel=1e-5)
  assert math.isnan(stats.correlation([1, 2, 3], [1, 3, 2])[1])  # 3 pairs: no interval
  assert math.isnan(stats.correlation([1, 1, 1, 1], [1, 2, 3, 4])[0])  # x constant


def test_welch_sums_independent_means_with_satterthwaites_degrees_of_freedom():
  from scipy import stats as scipy_stats
  a, b, c = [1.0, 2.0, 4.0], [-0.5, -0.7, -0.2, -0.6], [0.3, 0.1]
  # By hand: s^2/n of each sample (squared deviations 14/3, 0.14, 0.02), their sum, and the
  # Welch-Satterthwaite d.o.f.
  va, vb, vc = 7 / 3 / 3, (0.14 / 3) / 4, 0.02 / 2
  var = va + vb + vc
  df = var ** 2 / (va ** 2 / 2 + vb ** 2 / 3 + vc ** 2 / 1)
  est = 7 / 3 - 0.5 + 0.2
  half = scipy_stats.t.ppf(0.975, df) * math.sqrt(var)
  got = stats.welch([a, b, c])
  assert got[:4] == pytest.approx((est, est - half, est + half, df))
  assert got[4] == pytest.approx(2 * scipy_stats.t.sf(est / math.sqrt(var), df))
  # A sample of one value, or no spread anywhere: no interval.
  assert all(math.isnan(x) for x in stats.welch([a, [1.0]])[1:])
  assert all(math.isnan(x) for x in stats.welch([[1.0, 1.0], [2.0, 2.0]])[1:])
