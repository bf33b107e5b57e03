"""M9: the headline answers at a larger size. The paper, no scale and pe_down at d_model 256
with 4 layers (4 heads: d_k 64, the paper's; d_ff 1024; 3.67M parameters against the small
model's 0.23M), trained 1200 steps (2.46M tokens, 1.2 epochs of the corpus: three times the
small model's 400 steps), each arm at its own best learning rate. Does each effect shrink,
hold or flip with size?

pe_down at this width scales the sinusoids by 1/16 = 1/sqrt(256) (the small model's 1/8 is
1/sqrt(64)): with no token scale it is then the paper's input divided by 16, the same
relation as at d_model 64.

ratio_matched (added after the other three had run): no scale, the sinusoids scaled by
sqrt(64/256) = 1/2, so that the token/PE ratio at init is no scale's at d_model 64
(sqrt(2/64) = 0.177, against 0.088 with the sinusoids at full size). If the same imbalance
costs the same at every size, its penalty against the paper is d_model 64's (0.1-0.2 nats);
if it costs more at size, near no scale's 0.64 here. Its rates: 1.25e-3 to 2.5e-3 (about no
scale's optimum, one step further at an edge). Its six choosing runs ran on leased H200s in
float32 at JAX_DEFAULT_MATMUL_PRECISION=highest (docs/sweeps/m9_width_256/gpu_2026-11-27_h200/),
its edge and reporting runs on the CPU like the others.

Rates: a sqrt(2) grid of three around 2.5e-3, where E5's optimum lands when carried from
d_model 64 (1e-2) and 128 (5e-3) to 256 (it halved with each doubling); one step further
at an edge. Seeds 0-1 choose the rate on validation; seeds 3-5 run at the chosen rate only and
are the only seeds reported (fresh_report); one data split for every seed (split_seed=0). Each
run stores its test examples' NLL (the intervals' test-set term). About 27 runs of about 25 minutes
each with two sweep processes side by side on a 2-core machine (about 6 hours in all); a
stopped sweep resumes where it stopped, and two processes share the points.
  python scripts/sweep.py --sweep=configs/sweeps/m9_width_256.py --workdir=docs/sweeps/m9_width_256
"""

import math

from transformer.research.sweeps import Sweep, headline_arms

D_MODEL = 256
SMALL_D_MODEL = 64  # the ratio-matched arm's token/PE ratio is no scale's at this width
CENTRE = 2.5e-3
LAYER0 = "mean:{}/decoder/layer_0/self_attention/head_*/logit_var_within"


def get_sweep() -> Sweep:
  return Sweep(
      name="m9_width_256",
      question="Test NLL of the paper, no scale, pe_down and ratio_matched at d_model 256 with "
               "4 layers, 1200 steps (1.2 epochs), each at its own best learning rate.",
      base="configs/lm_tiny.py",
      **headline_arms(D_MODEL, SMALL_D_MODEL),
      seeds=(0, 1),
      confirm_seeds=(3, 4, 5),
      fresh_report=True,
      fixed={"test_fraction": 0.02, "split_seed": 0, "model.d_model": D_MODEL,
             "model.d_ff": 4 * D_MODEL, "model.num_decoder_layers": 4,
             "num_train_steps": 1200, "eval_every_steps": 300, "diagnostics_every_steps": 150,
             "checkpoint_every_steps": 300},
      tune={"learning_rate": [round(CENTRE / math.sqrt(2), 7), CENTRE,
                              round(CENTRE * math.sqrt(2), 7)]},
      arm_values={"ratio_matched": [round(CENTRE / 2, 7), round(CENTRE / math.sqrt(2), 7),
                                    CENTRE]},
      extend_edges=1,
      at_steps=(150,),
      metrics=("eval/loss", "test/loss", "final/decoder/embed/ratio", LAYER0.format("init"),
               LAYER0.format("step_150"), LAYER0.format("final"),
               "max:final/decoder/layer_0/self_attention/head_*/logit_absmax"),
      curves=("eval/loss",),
  )
