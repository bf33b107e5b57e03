"""Sweep plots: one PNG per curve (mean over seeds, min-max band) and file names and units."""

import os

from test_grid import tiny_sweep
from test_stats import fake_result
from transformer.research.sweeps import plots


def test_curve_plots_draw_each_curve_that_has_points(tmp_path):
  sweep = tiny_sweep(curves=("train/loss", "diagnostics/decoder/embed/ratio", "eval/absent",
                             "max:diagnostics/decoder/layer_0/head_*/logit_absmax"))
  groups = {}
  for value in (8, 16):
    for seed in (0, 1):
      r = fake_result(value, seed, {})
      r["curves"] = {"train/loss": [[s, 1.0 / (s + seed + value)] for s in (1, 2, 3)],
                     "diagnostics/decoder/embed/ratio": [[0, 1.4], [2, 1.5 + seed]],
                     **{f"diagnostics/decoder/layer_0/head_{h}/logit_absmax": [[0, h], [2, 2 * h]]
                        for h in (1, 2)}}
      groups.setdefault(r["group"], []).append(r)
  paths = plots.curve_plots(sweep, groups, str(tmp_path))
  assert [os.path.basename(p) for p in paths] == [
      "train_loss.png", "diagnostics_decoder_embed_ratio.png",
      "max_diagnostics_decoder_layer_0_head_all_logit_absmax.png"]  # a reduction over heads
  assert all(os.path.getsize(p) > 1000 for p in paths)  # no PNG for a curve without points


def test_plot_names_and_units():
  assert plots.slug("max:final/a/head_*/x") == "max_final_a_head_all_x"
  assert plots.unit("eval/nll") == "nats" and plots.unit("init/embed/ratio") == "dimensionless"
  assert plots.unit("diagnostics/decoder/embed/token_rms") == "activation units"
  assert plots.unit("final/decoder/layer_0/self_attention/head_0/qk_alignment") == "dimensionless"


def test_a_contrast_gives_the_tuning_plot_one_panel_per_setting(tmp_path, monkeypatch):
  from test_tuning import bowl, tuned_sweep
  from transformer.research.sweeps import tuning
  sweep = tuned_sweep(axes=({"model.embed_scale": ["sqrt_d", "none"]},),
                      contrast="model.embed_scale")
  results = [bowl(s, lr, seed, 2e-3) for s in ("sqrt_d", "none") for lr in (1e-3, 2e-3, 4e-3)
             for seed in (0, 1, 2)]
  panels = []
  real = plots.pyplot()
  monkeypatch.setattr(real, "subplots", lambda *a, _real=real.subplots, **kw: (
      panels.append(a), _real(*a, **kw))[1])
  path = plots.tuning_plot(sweep, tuning.best_per_arm(sweep, results), str(tmp_path))
  assert panels == [(1, 2)] and os.path.getsize(path) > 1000


def test_a_trend_plot_draws_the_extrapolation_only_towards_a_zero(tmp_path, monkeypatch):
  from test_tuning import trend_results, trend_sweep
  from transformer.research.sweeps import tuning
  sweep = trend_sweep()
  dashed, figures = [], []
  real = plots.pyplot()
  monkeypatch.setattr(real, "subplots", lambda *a, _real=real.subplots, **kw: (
      figures.append(_real(*a, **kw)), figures[-1])[1])
  dotted = []
  # The third crosses 0 (0.3, 0.1, -0.1): no power law fits it, and none is drawn; its zero
  # (3162 steps) lies inside the lengths run, so nothing is extrapolated either.
  for i, slope in enumerate((lambda seed: -0.1 + 0.01 * seed, lambda seed: 0.05,
                             lambda seed: -0.2)):
    [t] = tuning.trend(sweep, tuning.best_per_arm(sweep, trend_results(slope)))
    path = plots.trend_plot(sweep, [t], 2048, str(tmp_path / str(i)))
    ax = figures[-1][1]
    dashed.append(any(line.get_linestyle() == "--" for line in ax.get_lines()))
    dotted.append(any(line.get_linestyle() == ":" for line in ax.get_lines()))
    assert ax.get_xlabel() == "tokens seen (num_train_steps x 2048)"
    assert os.path.getsize(path) > 1000
  assert dashed == [True, False, False] and dotted == [True, True, False]  # its zero is inside
