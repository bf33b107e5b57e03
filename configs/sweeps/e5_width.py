"""E5: does the no-scale penalty depend on width? The paper's sqrt(d) token scale against no
scale at d_model 32, 64 and 128 (4 heads, d_ff = 4 d_model, 2 layers, 400 steps), each arm
at its own best learning rate (chosen on validation, reported on test), 3 seeds (5 at the
chosen rates). Without the scale the token's share of the input falls like d^-0.5 against the
fixed-size sinusoids, so a penalty that grows with width would support the imbalance account
of Question 1. The widths are the first version's (which measured 0.17, 0.23 and 0.37 nats at
one shared rate); d_model 256 is cut: a point costs about 9 times a d_model-64 one on the 2
cores (about 7 process-hours for its grid). The paper arms double as E6's d_model axis at a
fixed head count (d_k 8, 16, 32, Xavier, 1/sqrt(d_k)): their result.json holds every
first-layer Var(q.k) diagnostic.
  python scripts/sweep.py --sweep=configs/sweeps/e5_width.py --workdir=docs/sweeps/e5_width
"""

from transformer.research.sweeps import Sweep

# Within-row Var(q.k) of the first layer (raw: before any attention scale), heads averaged.
RAW_VAR = "mean:{}/decoder/layer_0/self_attention/head_*/raw_var_within"


def get_sweep() -> Sweep:
  return Sweep(
      name="e5_width",
      question="Test NLL with and without the sqrt(d) token scale at d_model 32, 64, 128, "
               "each at its own best learning rate.",
      base="configs/lm_tiny.py",
      axes=({"model.d_model": [32, 64, 128], "model.d_ff": [128, 256, 512]},
            {"model.embed_scale": ["sqrt_d", "none"]}),
      fixed={"test_fraction": 0.02},
      tune={"learning_rate": [5e-3, 1e-2, 2e-2]},  # E1's optima at d 64: 1e-2 for both
      extend_edges=2,
      confirm_seeds=(3, 4),  # 5 seeds at each chosen rate, where differences are read
      contrast="model.embed_scale",  # no scale against the paper at each width
      metrics=("eval/loss", "test/loss", "final/decoder/embed/ratio",
               "mean:init/decoder/layer_0/self_attention/head_*/qk_var_over_dk_within",
               "mean:final/decoder/layer_0/self_attention/head_*/qk_var_over_dk_within"),
      curves=("eval/loss",),
      # E6's d_model axis (d_k = d_model / 4): slopes across width, each arm at its chosen rate.
      fits=tuple({"x": "model.d_model", "y": y} for y in (RAW_VAR.format("init"),
                                                           RAW_VAR.format("final"),
                                                           RAW_VAR.format("final") + " - "
                                                           + RAW_VAR.format("init"))),
  )
