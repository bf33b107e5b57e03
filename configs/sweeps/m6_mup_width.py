"""M6: does muP's best learning rate stay put across width where the standard one moves?

E5 searched the paper's parameterisation at d_model 32, 64 and 128 (4 heads, d_ff = 4
d_model, 2 layers, 400 steps) and found its best rate fall with width (2e-2, 1e-2, 5e-3 for
the paper's arm). Here the same widths run the `mup` recipe (pre-LN, N(0, 1) input embedding,
a 1/d readout, 1/d_k attention) with muP's Adam rule for the layers' weight matrices,
hidden_lr_scale = 64 / d_model (base width 64), so the searched rate is the base model's.
If muP transfers here, every width's best rate is the same grid value. The control runs the
same recipe at d_model 32 and 128 with one global rate (hidden_lr_scale 1), so that a rate
that stays put can be credited to muP's Adam rule rather than to the recipe's other parts
(pre-LN, the 1/d readout). Rates 2.5e-3 to 4e-2 in factor-2 steps, two more at an edge;
seeds 0-2 choose, seeds 3-5 report (fresh_report); one data split for every seed
(split_seed=0). The arms run in order, so a partial run holds whole arms. 78 runs, about
70 minutes of both cores on the 2-core machine (per point, two at a time: about 70 s at
d_model 32, 90 s at 64, 135 s at 128).
  python scripts/sweep.py --sweep=configs/sweeps/m6_mup_width.py --workdir=docs/sweeps/m6_mup_width
"""

from transformer.research.sweeps import Sweep


def get_sweep() -> Sweep:
  return Sweep(
      name="m6_mup_width",
      question="The best learning rate of the mup recipe (with muP's Adam rule) at d_model 32, "
               "64 and 128: does it stay put across width?",
      base="configs/lm_tiny.py",
      # The last two arms are the control: the same recipe at d_model 32 and 128 with one
      # global rate (hidden_lr_scale 1; at the base width 64 the two are one arm).
      axes=({"model.d_model": [32, 64, 128, 32, 128],
             "model.d_ff": [128, 256, 512, 128, 512],
             "hidden_lr_scale": [2.0, 1.0, 0.5, 1.0, 1.0]},),
      arm_names=("d32", "d64", "d128", "d32_global_rate", "d128_global_rate"),
      pairs=(("d32_global_rate", "d32"), ("d128_global_rate", "d128")),
      fixed={"model.recipe": "mup", "test_fraction": 0.02, "split_seed": 0},
      seeds=(0, 1, 2),
      confirm_seeds=(3, 4, 5),
      fresh_report=True,
      tune={"learning_rate": [2.5e-3, 5e-3, 1e-2, 2e-2, 4e-2]},
      # A cut (budget): d32 and d64 lost 6.04 at 2.5e-3, over 1.9 nats above their best, so the
      # later arms start higher; an edge still extends.
      arm_values={"d128": [5e-3, 1e-2, 2e-2, 4e-2],
                  "d32_global_rate": [1e-2, 2e-2, 4e-2],
                  "d128_global_rate": [1e-2, 2e-2, 4e-2]},
      extend_edges=2,
      metrics=("eval/loss", "test/loss"),
      curves=("eval/loss",),
  )
